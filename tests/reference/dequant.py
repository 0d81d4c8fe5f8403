"""Dequantizes blocks with the `gguf` package, for core/tests/quant_reference.rs.

Usage: dequant.py DIR. For every DIR/<TYPE>.bin (raw blocks of the GGML type
named TYPE), writes DIR/<TYPE>.f32: the little-endian f32 values that
`gguf.quants.dequantize` computes.
"""
import pathlib
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize


def main() -> None:
    root = pathlib.Path(sys.argv[1])
    for path in sorted(root.glob("*.bin")):
        qtype = GGMLQuantizationType[path.stem]
        raw = np.fromfile(path, dtype=np.uint8)
        values = np.asarray(dequantize(raw, qtype), dtype=np.float32).reshape(-1)
        values.astype("<f4").tofile(path.with_suffix(".f32"))


if __name__ == "__main__":
    main()
