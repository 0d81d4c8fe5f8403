"""Renders chat templates with Hugging Face transformers' own renderer.

The reference for host/engine/tests/chat_template.rs. Usage:
    chat_ref.py CASES.json OUT.json
CASES.json is a list of {"template" or "template_gguf" (a GGUF path whose
tokenizer.chat_template is read here with the gguf package), "bos_token",
"eos_token", "messages" (objects, or [role, content] pairs that become
{"role", "content"} in that key order), "add_generation_prompt", and
optionally "tools"}; OUT.json gets, per case, {"ok": text} or {"error":
message, "line": the template line for syntax errors} when the template
raised or failed.
"""

import json
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

# `render_jinja_template` is what `PreTrainedTokenizerBase.apply_chat_template`
# calls with the tokenizer's special tokens as keyword arguments.
from transformers.utils.chat_template_utils import render_jinja_template  # noqa: E402


def gguf_template(path):
    import gguf

    field = gguf.GGUFReader(path).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def render(case, templates):
    if "template_gguf" in case:
        path = case["template_gguf"]
        if path not in templates:
            templates[path] = gguf_template(path)
        case["template"] = templates[path]
    try:
        messages = [
            {"role": m[0], "content": m[1]} if isinstance(m, list) else m
            for m in case["messages"]
        ]
        rendered, _ = render_jinja_template(
            conversations=[messages],
            tools=case.get("tools"),
            chat_template=case["template"],
            add_generation_prompt=case["add_generation_prompt"],
            bos_token=case["bos_token"],
            eos_token=case["eos_token"],
        )
        return {"ok": rendered[0]}
    except Exception as e:  # the template's raise_exception, or a failure
        return {"error": f"{type(e).__name__}: {e}", "line": getattr(e, "lineno", None)}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    templates = {}
    out = [render(case, templates) for case in cases]
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
