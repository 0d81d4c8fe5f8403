"""Writes tiny random GGUF models with the `gguf` package, for
host/engine/tests/synthetic_gguf.rs.

Usage: make_tiny_gguf.py OUT. Writes into OUT:
  qwen2.gguf  qwen2, q/k/v biases, untied output.weight, explicit key_length
              (2 query heads of 64 over 1 KV head, hidden 256)
  llama.gguf  llama, tied embedding (no output.weight), partial rotary
              (rope.dimension_count 32 of head_dim 64), rope_freqs factors
and files each loader must refuse: gpt2.gguf (architecture), q2k.gguf (a
Q2_K tensor), missing.gguf (no blk.1.ffn_up.weight), shape.gguf (attn_k
with the wrong output width), zero_heads.gguf (attention.head_count 0).

Weights use every type the engine loads: F32, F16, BF16, Q8_0, Q4_0, Q4_1,
Q5_0, Q5_1 through `gguf.quants.quantize`, and Q4_K, Q5_K, Q6_K (which the
package does not quantize) as random valid blocks with a small random f16
scale. Rows of 64 or 128 elements (not multiples of 256) use legacy types,
as llama.cpp's fallback does.
"""
import pathlib
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter, quant_shape_to_byte_shape
from gguf.quants import quantize

HIDDEN, FFN, LAYERS, VOCAB, HEAD_DIM = 256, 256, 2, 256, 64

rng = np.random.default_rng(20261123)


def kquant_blocks(rows, cols, qtype):
    """Random bytes in K-quant layout with each block's f16 scales set small."""
    shape = quant_shape_to_byte_shape((rows, cols), qtype)
    data = rng.integers(0, 256, size=shape, dtype=np.uint8)
    blocks = data.reshape(rows, cols // 256, -1)
    def f16(lo, hi):
        v = rng.uniform(lo, hi, size=(rows, cols // 256)).astype(np.float16)
        return v.view(np.uint8).reshape(rows, cols // 256, 2)
    if qtype in (Q.Q4_K, Q.Q5_K):
        blocks[:, :, 0:2] = f16(2e-4, 5e-4)  # d
        blocks[:, :, 2:4] = f16(2e-4, 5e-4)  # dmin
    else:  # Q6_K: d is the last two bytes
        blocks[:, :, 208:210] = f16(3e-5, 1e-4)
    return data


def add(w, name, values, qtype):
    """values: numpy [out, in] (or [n]) float32, written as qtype."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if qtype == Q.F32:
        w.add_tensor(name, values)
    elif qtype == Q.F16:
        w.add_tensor(name, values.astype(np.float16))
    elif qtype in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        rows, cols = values.shape
        data = kquant_blocks(rows, cols, qtype)
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)
    else:
        data = quantize(values, qtype)
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)


def matrix(out, inp):
    return rng.normal(0.0, 1.0 / np.sqrt(inp), size=(out, inp))


def gain(n):
    return 1.0 + rng.normal(0.0, 0.1, size=n)


def write(path, arch, heads, kv_heads, *, biases, tied, rope_dim=None,
          key_length=False, types, skip=(), meta_heads=None):
    w = GGUFWriter(str(path), arch)
    w.add_block_count(LAYERS)
    w.add_context_length(512)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(heads if meta_heads is None else meta_heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5 if arch == "llama" else 1e-6)
    w.add_rope_freq_base(10000.0 if arch == "llama" else 1000000.0)
    if key_length:
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
    if rope_dim is not None:
        w.add_rope_dimension_count(rope_dim)
    q, kv = heads * HEAD_DIM, kv_heads * HEAD_DIM
    tensors = [("token_embd.weight", rng.normal(0.0, 1.0, size=(VOCAB, HIDDEN)), types["embed"])]
    for i in range(LAYERS):
        p = f"blk.{i}."
        t = types["layers"][i]
        tensors += [
            (p + "attn_norm.weight", gain(HIDDEN), Q.F32),
            (p + "attn_q.weight", matrix(q, HIDDEN), t["q"]),
            (p + "attn_k.weight", matrix(kv, HIDDEN), t["k"]),
            (p + "attn_v.weight", matrix(kv, HIDDEN), t["v"]),
            (p + "attn_output.weight", matrix(HIDDEN, q), t["o"]),
            (p + "ffn_norm.weight", gain(HIDDEN), Q.F32),
            (p + "ffn_gate.weight", matrix(FFN, HIDDEN), t["gate"]),
            (p + "ffn_up.weight", matrix(FFN, HIDDEN), t["up"]),
            (p + "ffn_down.weight", matrix(HIDDEN, FFN), t["down"]),
        ]
        if biases:
            tensors += [
                (p + "attn_q.bias", rng.normal(0.0, 0.5, size=q), Q.F32),
                (p + "attn_k.bias", rng.normal(0.0, 0.5, size=kv), Q.F32),
                (p + "attn_v.bias", rng.normal(0.0, 0.5, size=kv), Q.F32),
            ]
    tensors.append(("output_norm.weight", gain(HIDDEN), Q.F32))
    if not tied:
        tensors.append(("output.weight", matrix(VOCAB, HIDDEN), types["output"]))
    if arch == "llama" and rope_dim is not None:
        tensors.append(("rope_freqs.weight", rng.uniform(1.0, 4.0, size=rope_dim // 2), Q.F32))
    for name, values, qtype in tensors:
        if name in skip:
            continue
        if callable(qtype):
            qtype(w, name, values)
        else:
            add(w, name, values, qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


QWEN_TYPES = {
    "embed": Q.Q8_0,
    "output": Q.Q6_K,
    "layers": [
        dict(q=Q.F16, k=Q.BF16, v=Q.Q8_0, o=Q.Q5_0, gate=Q.Q4_K, up=Q.Q5_K, down=Q.Q6_K),
        dict(q=Q.Q4_0, k=Q.Q4_1, v=Q.Q5_1, o=Q.F32, gate=Q.Q5_K, up=Q.Q6_K, down=Q.Q4_K),
    ],
}
LLAMA_TYPES = {
    "embed": Q.Q4_K,
    "layers": [
        dict(q=Q.Q8_0, k=Q.Q5_1, v=Q.Q4_1, o=Q.Q4_K, gate=Q.Q6_K, up=Q.BF16, down=Q.Q5_K),
        dict(q=Q.Q5_K, k=Q.Q6_K, v=Q.F16, o=Q.Q4_0, gate=Q.Q8_0, up=Q.Q5_0, down=Q.Q4_K),
    ],
}


def q2k(w, name, values):
    rows, cols = values.shape
    shape = quant_shape_to_byte_shape((rows, cols), Q.Q2_K)
    data = rng.integers(0, 256, size=shape, dtype=np.uint8)
    w.add_tensor(name, data, raw_shape=shape, raw_dtype=Q.Q2_K)


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    qwen = dict(biases=True, tied=False, key_length=True, types=QWEN_TYPES)
    write(out / "qwen2.gguf", "qwen2", 2, 1, **qwen)
    write(out / "llama.gguf", "llama", 4, 2, biases=False, tied=True, rope_dim=32, types=LLAMA_TYPES)
    write(out / "gpt2.gguf", "gpt2", 2, 1, **qwen)
    q2_types = {**QWEN_TYPES, "layers": [dict(QWEN_TYPES["layers"][0], gate=q2k), QWEN_TYPES["layers"][1]]}
    write(out / "q2k.gguf", "qwen2", 2, 1, **dict(qwen, types=q2_types))
    write(out / "missing.gguf", "qwen2", 2, 1, skip={"blk.1.ffn_up.weight"}, **qwen)
    # attn_k written 2 KV heads wide while the metadata says 1.
    def wide_k(w, name, values):
        add(w, name, matrix(2 * HEAD_DIM, HIDDEN), Q.F16)
    shape_types = {**QWEN_TYPES, "layers": [dict(QWEN_TYPES["layers"][0], k=wide_k), QWEN_TYPES["layers"][1]]}
    write(out / "shape.gguf", "qwen2", 2, 1, **dict(qwen, types=shape_types))
    write(out / "zero_heads.gguf", "qwen2", 2, 1, meta_heads=0, **qwen)


if __name__ == "__main__":
    main()
