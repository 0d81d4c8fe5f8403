"""Checks a file `pagoda synth` wrote, with the `gguf` package's reader (an
independent parser): prints a JSON summary the Rust test compares with the
shape it asked for.

Usage: synth_check.py FILE [--no-values]  (--no-values: types and shapes only)
"""
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

reader = GGUFReader(sys.argv[1])
values = "--no-values" not in sys.argv[2:]


def field(name):
    f = reader.fields[name]
    value = f.contents()
    return value


tensors = {}
for t in reader.tensors:
    entry = {"type": t.tensor_type.name, "shape": [int(d) for d in t.shape]}
    if values:
        w = dequantize(t.data, t.tensor_type)
        entry["finite"] = bool(np.isfinite(w).all())
        entry["mean_abs"] = float(np.abs(w).mean())
    tensors[t.name] = entry

# Every metadata value but the tokenizer's lists.
scalars = {k: field(k) for k, f in reader.fields.items()
           if not k.startswith("GGUF.") and len(f.data) == 1}
summary = {
    "metadata": scalars,
    "tokens": len(field("tokenizer.ggml.tokens")),
    "byte_tokens": field("tokenizer.ggml.tokens")[:256],
    "tensors": tensors,
}
print(json.dumps(summary))
