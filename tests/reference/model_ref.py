"""Reads a GGUF model with the `gguf` package, for core/tests/gguf_model.rs.

Usage: model_ref.py MODEL OUT NAME:ROWS... Writes OUT/tensors.tsv (one line
per tensor: name, GGML type name, dimensions row-length first, absolute data
offset) and, for each NAME:ROWS, OUT/NAME.f32: the first ROWS rows of that
tensor as `gguf.quants.dequantize` computes them (little-endian f32).
"""
import pathlib
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main() -> None:
    reader = GGUFReader(sys.argv[1])
    out = pathlib.Path(sys.argv[2])
    wanted = dict(arg.rsplit(":", 1) for arg in sys.argv[3:])
    with open(out / "tensors.tsv", "w") as f:
        for t in reader.tensors:
            dims = ",".join(str(int(d)) for d in t.shape)
            f.write(f"{t.name}\t{t.tensor_type.name}\t{dims}\t{int(t.data_offset)}\n")
            if t.name in wanted:
                rows = int(wanted.pop(t.name))
                data = t.data if t.data.ndim > 1 else t.data.reshape(1, -1)
                values = dequantize(data[:rows], t.tensor_type)
                np.asarray(values, dtype=np.float32).astype("<f4").tofile(out / f"{t.name}.f32")
    if wanted:
        sys.exit(f"tensors not in the file: {sorted(wanted)}")


if __name__ == "__main__":
    main()
