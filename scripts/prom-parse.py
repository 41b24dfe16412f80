#!/usr/bin/env python3
"""An exposition file parsed by prometheus_client (the Prometheus project's Python client): one
JSON line per sample, [name, {labels}, value], value as a string ("NaN", "+Inf" where not
finite). The independent reader src/load/scrape.rs's parser is held against."""
import json
import math
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    sys.exit("prometheus_client is missing: scripts/test.sh installs it under ~/.cache/tokscope/pylib "
             "(python3 -m pip install --target ~/.cache/tokscope/pylib prometheus_client)")


def shown(v):
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


with open(sys.argv[1], encoding="utf-8") as f:
    text = f.read()
for family in text_string_to_metric_families(text):
    for s in family.samples:
        print(json.dumps([s.name, dict(sorted(s.labels.items())), shown(s.value)]))
