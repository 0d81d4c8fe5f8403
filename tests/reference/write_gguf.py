"""Writes a GGUF file with the `gguf` package, for core/tests/gguf_reference.rs.

Usage: write_gguf.py OUT. Every metadata value type (nested arrays too), a
custom alignment, and one small tensor per weight type the reader knows;
the Rust test checks it reads back these exact values.
"""
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter, quant_shape_to_byte_shape


def main() -> None:
    w = GGUFWriter(sys.argv[1], "llama")
    w.add_custom_alignment(64)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 0.375)
    w.add_uint64("t.u64", 2**64 - 4)
    w.add_int64("t.i64", -(2**63) + 5)
    w.add_float64("t.f64", 2.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo, 世界 🙂")
    w.add_array("t.arr_i32", [-1, 7, 9])
    w.add_array("t.arr_f32", [0.25, -3.0])
    w.add_array("t.arr_str", ["a", "", "ccc"])
    w.add_array("t.nested", [["x", "yz"], ["w"]])
    rng = np.random.default_rng(7)
    for name in ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4"]:
        qtype = Q[name]
        shape = quant_shape_to_byte_shape((3, 512), qtype)
        data = rng.integers(0, 256, size=shape, dtype=np.uint8)
        w.add_tensor(f"w.{name}", data, raw_shape=shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
