"""Qwen3.5's tiny hybrids for make_tiny_gguf.py, in the layout llama.cpp's
converter writes (value heads tiled, norm gains stored as 1 + w):
  qwen35.gguf     qwen35, four layers: delta nets on 0-2 and attention on
                  3, as the default full_attention_interval 4 makes them;
                  delta nets of 4 taps, 2 query/key heads of 32 and 4
                  value heads of 64 (so each key head serves two value
                  heads, and key and value widths differ); attention of 4
                  query heads of 64 over 2 KV heads, attn_q [2 * 256,
                  hidden] with each head's query then gate, rotary on 16
                  of 64 dims (rope.dimension_sections [3, 3, 2, 0]), QK
                  norm; dense MLPs, a tied head
  qwen35moe.gguf  qwen35moe, attention.recurrent_layers [true, false,
                  true, true] (attention on layer 1), 8 experts 128 wide of
                  which 2 are used, renormalized, and a shared expert 128
                  wide gated by ffn_gate_inp_shexp; no feed_forward_length
                  (only expert_feed_forward_length); untied
  qwen3next.gguf  qwen3next: qwen35moe.gguf's mixture, attention on layer 3
                  (the default interval), value heads grouped by key head,
                  beta and alpha from one ssm_beta_alpha [2 * 4, hidden]
                  (each key head's two betas then its two alphas), no rope
                  sections; tied
"""
import numpy as np
from gguf import GGMLQuantizationType as Q

TAPS, KEY_HEADS, VALUE_HEADS, KEY_DIM, VALUE_DIM = 4, 2, 4, 32, 64


def write_files(out, t):
    """t: the make_tiny_gguf module (its writer, sizes and generator)."""
    rng, matrix, gain = t.rng, t.matrix, t.gain
    h, d = t.HIDDEN, t.HEAD_DIM
    kw, vw = KEY_HEADS * KEY_DIM, VALUE_HEADS * VALUE_DIM
    conv = 2 * kw + vw

    def hybrid(path, arch, recurrent, experts=None, flags=False, tied=True):
        fused = arch == "qwen3next"
        layers = len(recurrent)
        names = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm")
        skip = {f"blk.{i}.{n}.weight" for i in range(layers) for n in names}
        extra = []
        for i, recurs in enumerate(recurrent):
            ty = t.QWEN3_TYPES["layers"][i % 2]
            p = f"blk.{i}."
            extra.append((p + "post_attention_norm.weight", gain(h), Q.F32))
            if recurs:
                extra += [
                    (p + "attn_qkv.weight", matrix(conv, h), ty["q"]),
                    (p + "attn_gate.weight", matrix(vw, h), ty["gate"]),
                ]
                if fused:
                    extra.append((p + "ssm_beta_alpha.weight", matrix(2 * VALUE_HEADS, h) * 2.0, Q.F32))
                else:
                    extra += [
                        (p + "ssm_beta.weight", matrix(VALUE_HEADS, h) * 2.0, Q.F32),
                        (p + "ssm_alpha.weight", matrix(VALUE_HEADS, h), Q.F16),
                    ]
                extra += [
                    (p + "ssm_conv1d.weight", rng.normal(0.0, 0.5, size=(conv, TAPS)), Q.F32),
                    (p + "ssm_dt.bias", rng.normal(0.0, 1.0, size=VALUE_HEADS), Q.F32),
                    # -exp(A_log), A in [0.5, 4): states that keep a few
                    # tokens' worth.
                    (p + "ssm_a", -rng.uniform(0.5, 4.0, size=VALUE_HEADS), Q.F32),
                    (p + "ssm_norm.weight", gain(VALUE_DIM), Q.F32),
                    (p + "ssm_out.weight", matrix(h, vw), ty["o"]),
                ]
            else:
                q = 4 * d
                extra += [
                    (p + "attn_q.weight", matrix(2 * q, h) * 4.0, ty["q"]),
                    (p + "attn_k.weight", matrix(2 * d, h) * 4.0, ty["k"]),
                    (p + "attn_v.weight", matrix(2 * d, h), ty["v"]),
                    (p + "attn_output.weight", matrix(h, q), ty["o"]),
                    (p + "attn_q_norm.weight", gain(d), Q.F32),
                    (p + "attn_k_norm.weight", gain(d), Q.F32),
                ]

        def meta(w):
            w.add_uint32(f"{arch}.ssm.conv_kernel", TAPS)
            w.add_uint32(f"{arch}.ssm.state_size", KEY_DIM)
            w.add_uint32(f"{arch}.ssm.group_count", KEY_HEADS)
            w.add_uint32(f"{arch}.ssm.time_step_rank", VALUE_HEADS)
            w.add_uint32(f"{arch}.ssm.inner_size", vw)
            if not fused:
                w.add_array(f"{arch}.rope.dimension_sections", [3, 3, 2, 0])
            if flags:
                w.add_array(f"{arch}.attention.recurrent_layers", recurrent)
        stacked = None if experts is None else experts + (set(range(layers)),)
        t.write(path, arch, 4, 2, biases=False, tied=tied, key_length=True, rope_dim=16,
                types=t.QWEN3_TYPES, layers=layers, skip=skip, extra=extra, meta=meta,
                experts=stacked, shared=128 if experts else 0, ffn_length=experts is None)

    hybrid(out / "qwen35.gguf", "qwen35", [True, True, True, False])
    hybrid(out / "qwen35moe.gguf", "qwen35moe", [True, False, True, True], experts=(8, 2, 128),
           flags=True, tied=False)
    hybrid(out / "qwen3next.gguf", "qwen3next", [True, True, True, False], experts=(8, 2, 128))
