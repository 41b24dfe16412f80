#!/usr/bin/env bash
# placeholder, replaced below
exec "$(dirname "$(readlink -f "$0")")/../libexec/tokscope" "$@"
