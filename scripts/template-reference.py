#!/usr/bin/env python3
"""The reference renderer of chat templates: Hugging Face transformers' own
`render_jinja_template` (what `tokenizer.apply_chat_template` calls), Python jinja2.

Reads a JSON array of cases on stdin, each
  {"name": str, "template": str, "bos_token": str, "eos_token": str,
   "messages": [{"role": ..., "content": ...}, ...], "add_generation_prompt": bool}
and writes a JSON array of {"name": str, "prompt": str} or {"name": str, "error": str}
in the same order. tests/template_matrix.rs holds tokscope's renderer against it byte for
byte. Needs transformers and jinja2 (scripts/test.sh installs them from PyPI into the cache
dir; TOKSCOPE_TRANSFORMERS_PYLIB points at it).
"""
import json
import sys
import warnings

warnings.filterwarnings("ignore")

from transformers.utils.chat_template_utils import render_jinja_template  # noqa: E402


def render(case):
    out = render_jinja_template(
        conversations=[case["messages"]],
        chat_template=case["template"],
        add_generation_prompt=case.get("add_generation_prompt", True),
        bos_token=case.get("bos_token", ""),
        eos_token=case.get("eos_token", ""),
    )
    # transformers returns (rendered conversations, generation indices).
    rendered = out[0] if isinstance(out, tuple) else out
    return rendered[0]


def main():
    cases = json.load(sys.stdin)
    results = []
    for case in cases:
        try:
            results.append({"name": case["name"], "prompt": render(case)})
        except Exception as e:  # the template's own exception is a result too
            results.append({"name": case["name"], "error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
