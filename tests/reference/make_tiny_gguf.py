"""Writes tiny random GGUF models with the `gguf` package, for
host/engine/tests/synthetic_gguf.rs.

Usage: make_tiny_gguf.py OUT. Writes into OUT:
  qwen2.gguf  qwen2, q/k/v biases, untied output.weight, explicit key_length
              (2 query heads of 64 over 1 KV head, hidden 256)
  llama.gguf  llama, tied embedding (no output.weight), partial rotary
              (rope.dimension_count 32 of head_dim 64), rope_freqs factors
  qwen3.gguf  qwen3, no biases, QK-norm (blk.N.attn_q_norm / attn_k_norm
              gains of [head_dim]; attn_q and attn_k values 4x larger, so
              that the norm matters), untied output.weight, explicit
              key_length and value_length (4 query heads of 64 over 2 KV)
  llama3.gguf llama, Llama 3.x rope scaling as llama.cpp's converter stores
              it: rope_freqs.weight [32] from the "llama3" formula (factor 8,
              low_freq_factor 1, high_freq_factor 4, original context 64,
              rope.freq_base 500000), no rope.scaling.type; 8 query heads of
              64 over 2 KV heads with key_length 64, so heads * head_dim =
              512 != hidden 256 (attn_q [out 512, in 256], attn_output
              [out 256, in 512]), and no rope.dimension_count (it defaults
              to key_length, not to hidden / heads = 32); untied output.weight
  phi3.gguf   phi3, fused blk.N.attn_qkv [out q + k + v, in hidden] (q rows
              first, then k, then v) and fused blk.N.ffn_up [out 2 * ffn, in
              hidden] (gate rows first, then up), no biases, untied
              output.weight, 4 heads and 4 KV heads of 64 (no key_length:
              hidden / heads), rope.dimension_count 64, LongRoPE:
              rope_factors_long.weight in [1, 4] and rope_factors_short.weight
              in [1, 1.5], each [32], rope.scaling.original_context_length
              256 < context_length 512 (so the long factors apply),
              rope.scaling.attn_factor sqrt(1 + ln 2 / ln 256)
and files each loader must refuse: gpt2.gguf (architecture), iq2xxs.gguf
(an IQ2_XXS tensor), missing.gguf (no blk.1.ffn_up.weight), shape.gguf (attn_k
with the wrong output width), zero_heads.gguf (attention.head_count 0),
arctic.gguf (architecture; made as gpt2.gguf is), experts.gguf (a
`qwen2` file with qwen2.expert_count 8: `qwen2`'s layer has no mixture;
Qwen2-MoE files are `qwen2moe`), then yarn.gguf, a file that runs: `llama`
with YaRN (rope.scaling.type "yarn", factor 4 from an original context of
128, yarn_beta_fast 16, and rope.scaling.attn_factor 0.9 on top of YaRN's
own magnitude).
The files after
zero_heads.gguf are written last, so the earlier files do not change.
Then the Gemma files:
  gemma3.gguf gemma3, tied embedding, 4 query heads of 64 over 2 KV heads
              (key_length 64), QK-norm (attn_q and attn_k values 4x
              larger), post_attention_norm and post_ffw_norm, sliding window
              5 with attention.sliding_window_pattern 2 (layer 0 local,
              layer 1 global), linear rope scaling 4 (global layers only)
  gemma2.gguf gemma2, tied embedding, 2 query heads of 64 over 1 KV head,
              post-block norms, sliding window 5 on layer 0 (the default
              pattern), attn_logit_softcapping 1.5 (attn_q and attn_k 4x
              larger, so the cap bites) and final_logit_softcapping 4
Then the mixtures of experts, each expert a SwiGLU MLP, routed by an F32
blk.N.ffn_gate_inp [out experts, in hidden]:
  mixtral.gguf  llama with llama.expert_count 4, expert_used_count 2 (as
                Mixtral's files are), experts FFN wide; layer 0 stacked as
                llama.cpp writes them now (ffn_gate_exps, ffn_up_exps
                [experts, FFN, hidden], ffn_down_exps [experts, hidden,
                FFN]), layer 1 one tensor per expert as older conversions
                did (ffn_gate.E, ffn_up.E, ffn_down.E); tied embedding
  qwen3moe.gguf qwen3moe, 8 experts of which 3 are used, each
                expert_feed_forward_length 128 wide (feed_forward_length
                stays 256), QK-norm, untied output.weight
  qwen2moe.gguf qwen2moe, q/k/v biases, 4 experts of 128 of which 2 are
                used (weights not renormalized), a shared expert 192 wide
                (expert_shared_feed_forward_length) scaled by the sigmoid
                of blk.N.ffn_gate_inp_shexp, [hidden] on layer 0 and
                [hidden, 1] on layer 1 (both as converters write it)
Then Granite:
  granite.gguf    granite, tied embedding, 4 query heads over 2 KV heads,
                  embedding_scale 12, attention.scale 0.05 (not 1/8),
                  residual_scale 0.22, logit_scale 8
  granitemoe.gguf granitemoe with the same multipliers, 4 experts FFN
                  wide of which 2 are used, and an ungated shared expert
                  128 wide (expert_shared_feed_forward_length)
Then smollm3.gguf (smollm3, 4 layers, the fourth without rotary) and
olmo2.gguf (olmo2: no attn_norm or ffn_norm, post_attention_norm and
post_ffw_norm, attn_q_norm [heads * head_dim] and attn_k_norm [kv_heads *
head_dim], attn_q and attn_k 4x larger so that the norms matter),
qwen2moe_defaults.gguf is qwen2moe.gguf's shape without the width keys
(experts FFN / 2 = 128 wide, the shared expert FFN),
and the mixtures each loader must refuse, qwen3moe.gguf's shape with
metadata that lies: moe_used.gguf (expert_used_count 9 of 8 experts),
moe_width.gguf (expert_feed_forward_length 64 for experts 128 wide),
moe_count.gguf (no expert_count) and moe_fewer.gguf (expert_count 4 for
stacks of 8); and, after Granite's, olmo3.gguf (`olmo2` with
attention.sliding_window 4, as OLMo 3 is written; it runs), scaling.gguf
(rope.scaling.type "dynamic") and llama_shexp.gguf (a `llama` mixture with
shared experts). Then lowbits.gguf: `llama`, untied, every matrix Q2_K,
Q3_K, IQ4_NL or IQ4_XS (each type on both layers), as Q2_K, Q3_K_M and
IQ4_XS files hold them. Last, gpt_oss.gguf: `gpt-oss`, untied, 4 query
heads of 64 over 2 KV heads, q/k/v and attn_output biases, attn_sinks
[heads] (N(0, 1): about the scores' size), the MLP's norm named
post_attention_norm (no ffn_norm), sliding window 5 on layer 0 (the default
pattern 2), YaRN (factor 4 from an original context of 128), and 4 experts
128 wide of which 2 are used, stacked, in MXFP4 (layer 1's down in Q8_0),
with a router bias [experts] and expert biases ffn_{gate,up}_exps.bias
[experts, 128] and ffn_down_exps.bias [experts, hidden]; the gate and up
values scaled by 8 so that the SwiGLU's clamp at 7 bites. After it,
glm4.gguf (`glm4`: q/k/v biases, post_attention_norm and post_ffw_norm
after the blocks, one fused ffn_up [2 * FFN, hidden], rotary on 32 of 64
dims), glm4_fused.gguf (the same with a fused attn_qkv and its one bias,
tied) and glm4moe.gguf (`glm4moe`: block_count 4 with
nextn_predict_layers 1, the fourth block's tensors and its nextn.*
tensors present and unread; layer 0 dense (leading_dense_block_count 1);
8 experts 128 wide of which 3 are used, sigmoid-scored
(expert_gating_func 2) with exp_probs_b.bias [experts], renormalized and
scaled by 2.5, one ungated shared expert 128 wide (expert_shared_count
1); QK-norm, q/k/v biases, the MLP's norm named post_attention_norm).

After LFM2's, tiny_qwen35.py's Qwen3.5 and Qwen3-Next hybrids (qwen35.gguf,
qwen35moe.gguf, qwen3next.gguf), tiny_mamba2.py's Granite 4.0-H hybrids
(granite_hybrid.gguf, granite_hybrid_moe.gguf), then minimax_m2.gguf (`minimax-m2`: q and
k normed across all heads, rotary on 32 of 64 dims, 8 sigmoid-scored
experts of 128 with exp_probs_b, 2 a token, renormalized, times 1.5).
The Q/K rows are random, so they need no converter permutation: a `llama`
file's rows are simply taken as already permuted for the interleaved-pair
rotary, which is how llama.cpp and forward_ref.py read them.

Weights use every type the engine loads: F32, F16, BF16, Q8_0, Q4_0, Q4_1,
Q5_0, Q5_1 through `gguf.quants.quantize`, and Q2_K, Q3_K, Q4_K, Q5_K,
Q6_K, IQ4_NL and IQ4_XS (which the package does not quantize) as random
valid blocks with small random f16 scales. Rows of 64 or 128 elements (not multiples of 256) use legacy types,
as llama.cpp's fallback does.
"""
import math
import pathlib
import sys

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter, quant_shape_to_byte_shape
from gguf.quants import quantize

import tiny_mamba2
import tiny_qwen35

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
    elif qtype == Q.Q6_K:  # d is the last two bytes
        blocks[:, :, 208:210] = f16(3e-5, 1e-4)
    elif qtype == Q.Q2_K:  # d and dmin are the last four bytes
        blocks[:, :, 80:82] = f16(3e-3, 6e-3)
        blocks[:, :, 82:84] = f16(3e-3, 6e-3)
    elif qtype == Q.Q3_K:  # d is the last two bytes
        blocks[:, :, 108:110] = f16(1e-3, 2e-3)
    else:  # IQ4_XS: d first
        blocks[:, :, 0:2] = f16(3e-5, 6e-5)
    return data


def iq4_nl_blocks(rows, cols):
    """Random IQ4_NL blocks (the `gguf` package has no quantizer for it)
    with each block's f16 scale set small."""
    shape = quant_shape_to_byte_shape((rows, cols), Q.IQ4_NL)
    data = rng.integers(0, 256, size=shape, dtype=np.uint8)
    blocks = data.reshape(rows, cols // 32, -1)
    d = rng.uniform(5e-4, 1e-3, size=(rows, cols // 32)).astype(np.float16)
    blocks[:, :, 0:2] = d.view(np.uint8).reshape(rows, cols // 32, 2)
    return data


def add(w, name, values, qtype):
    """values: numpy [out, in] (or [n], or a stack [experts, out, in])
    float32, written as qtype."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if qtype == Q.F32:
        w.add_tensor(name, values)
    elif qtype == Q.F16:
        w.add_tensor(name, values.astype(np.float16))
    elif qtype == Q.MXFP4:
        # The package quantizes MXFP4 (round to the nearest of the
        # scaled values), as the converter stores gpt-oss's experts.
        data = quantize(values.reshape(-1, values.shape[-1]), qtype)
        data = data.reshape(values.shape[:-1] + (-1,))
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)
    elif qtype in (Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_XS, Q.IQ4_NL):
        cols = values.shape[-1]
        if qtype == Q.IQ4_NL:
            data = iq4_nl_blocks(values.size // cols, cols)
        else:
            data = kquant_blocks(values.size // cols, cols, qtype)
        data = data.reshape(values.shape[:-1] + (-1,))
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)
    else:
        data = quantize(values, qtype)
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)


def matrix(out, inp):
    return rng.normal(0.0, 1.0 / np.sqrt(inp), size=(out, inp))


def gain(n):
    return 1.0 + rng.normal(0.0, 0.1, size=n)


def write(path, arch, heads, kv_heads, *, biases, tied, rope_dim=None,
          key_length=False, types, skip=(), meta_heads=None, eps=None,
          base=None, qk_norm=False, qk_scale=1.0, fused=False, meta=None, extra=(),
          post_norms=False, experts=None, claimed=None, shared=0, shared_gate=True,
          layers=LAYERS, width_keys=True, ffn_length=True):
    """experts: (count, used, width, stacked layers): a mixture in place of
    each MLP (stacked tensors on those layers, one per expert elsewhere);
    claimed: the (count, used, width) the metadata says, where it lies
    (a count of None: no expert_count key); shared: a shared expert's
    width (0: none), shared_gate: with ffn_gate_inp_shexp;
    qk_norm: per-layer attn_q_norm / attn_k_norm gains [HEAD_DIM] (or,
    "full", over every head: [heads * HEAD_DIM] and [kv_heads * HEAD_DIM];
    "heads", a row per head: [heads, HEAD_DIM] and [kv_heads, HEAD_DIM]);
    layers: how many (their types repeat every two); width_keys: the
    experts' and shared expert's widths written as metadata (else left to
    the loader's defaults); ffn_length: feed_forward_length written;
    qk_scale: attn_q and attn_k values scaled by it (legacy and float types);
    fused: phi3's attn_qkv and gate+up ffn_up instead of separate matrices;
    meta: a function adding more metadata; extra: (name, values, type)
    tensors appended last."""
    w = GGUFWriter(str(path), arch)
    w.add_block_count(layers)
    w.add_context_length(512)
    w.add_embedding_length(HIDDEN)
    if ffn_length:
        w.add_feed_forward_length(FFN)
    w.add_head_count(heads if meta_heads is None else meta_heads)
    # A list: one per layer (LFM2's, 0 on its convolution layers).
    w.add_head_count_kv(kv_heads)
    if isinstance(kv_heads, list):
        kv_heads = max(kv_heads)
    if eps is None:
        eps = 1e-5 if arch == "llama" else 1e-6
    if arch in ("command-r", "cohere2"):
        w.add_layer_norm_eps(eps)  # Cohere's LayerNorms
    else:
        w.add_layer_norm_rms_eps(eps)
    if base is None:
        base = 10000.0 if arch == "llama" else 1000000.0
    w.add_rope_freq_base(base)
    if key_length:
        w.add_key_length(HEAD_DIM)
        w.add_value_length(HEAD_DIM)
    if rope_dim is not None:
        w.add_rope_dimension_count(rope_dim)
    if experts is not None:
        count, used, width = claimed or experts[:3]
        if count is not None:
            w.add_expert_count(count)
        w.add_expert_used_count(used)
        if width != FFN and width_keys:
            w.add_expert_feed_forward_length(width)
        if shared and width_keys:
            w.add_expert_shared_feed_forward_length(shared)
    if meta is not None:
        meta(w)
    q, kv = heads * HEAD_DIM, kv_heads * HEAD_DIM
    tensors = [("token_embd.weight", rng.normal(0.0, 1.0, size=(VOCAB, HIDDEN)), types["embed"])]
    for i in range(layers):
        p = f"blk.{i}."
        t = types["layers"][i % 2]
        if fused:
            tensors += [
                (p + "attn_norm.weight", gain(HIDDEN), Q.F32),
                (p + "attn_qkv.weight", matrix(q + 2 * kv, HIDDEN), t["qkv"]),
                (p + "attn_output.weight", matrix(HIDDEN, q), t["o"]),
                (p + "ffn_norm.weight", gain(HIDDEN), Q.F32),
                (p + "ffn_up.weight", matrix(2 * FFN, HIDDEN), t["up"]),
                (p + "ffn_down.weight", matrix(HIDDEN, FFN), t["down"]),
            ]
        else:
            tensors += [
                (p + "attn_norm.weight", gain(HIDDEN), Q.F32),
                (p + "attn_q.weight", matrix(q, HIDDEN) * qk_scale, t["q"]),
                (p + "attn_k.weight", matrix(kv, HIDDEN) * qk_scale, t["k"]),
                (p + "attn_v.weight", matrix(kv, HIDDEN), t["v"]),
                (p + "attn_output.weight", matrix(HIDDEN, q), t["o"]),
                (p + "ffn_norm.weight", gain(HIDDEN), Q.F32),
            ]
            if experts is None:
                tensors += [
                    (p + "ffn_gate.weight", matrix(FFN, HIDDEN), t["gate"]),
                    (p + "ffn_up.weight", matrix(FFN, HIDDEN), t["up"]),
                    (p + "ffn_down.weight", matrix(HIDDEN, FFN), t["down"]),
                ]
            else:
                tensors += expert_tensors(p, t, experts, i in experts[3])
            if shared:
                gate_shape = (HIDDEN,) if i == 0 else (1, HIDDEN)
                if shared_gate:
                    tensors.append((p + "ffn_gate_inp_shexp.weight",
                                    rng.normal(0.0, 0.2, size=gate_shape), Q.F32))
                tensors += [
                    (p + "ffn_gate_shexp.weight", matrix(shared, HIDDEN), t["gate"]),
                    (p + "ffn_up_shexp.weight", matrix(shared, HIDDEN), t["up"]),
                    (p + "ffn_down_shexp.weight", matrix(HIDDEN, shared), t["q"]),
                ]
        if post_norms:
            tensors += [
                (p + "post_attention_norm.weight", gain(HIDDEN), Q.F32),
                (p + "post_ffw_norm.weight", gain(HIDDEN), Q.F32),
            ]
        if qk_norm == "full":
            tensors += [
                (p + "attn_q_norm.weight", gain(q), Q.F32),
                (p + "attn_k_norm.weight", gain(kv), Q.F32),
            ]
        elif qk_norm == "heads":
            tensors += [
                (p + "attn_q_norm.weight", gain(q).reshape(heads, HEAD_DIM), Q.F32),
                (p + "attn_k_norm.weight", gain(kv).reshape(kv_heads, HEAD_DIM), Q.F32),
            ]
        elif qk_norm:
            tensors += [
                (p + "attn_q_norm.weight", gain(HEAD_DIM), Q.F32),
                (p + "attn_k_norm.weight", gain(HEAD_DIM), Q.F32),
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
    # `skip` leaves out the writer's own tensors, which `extra` may replace.
    tensors = [x for x in tensors if x[0] not in skip] + list(extra)
    for name, values, qtype in tensors:
        if callable(qtype):
            qtype(w, name, values)
        else:
            add(w, name, values, qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def expert_tensors(p, t, experts, stacked):
    """Layer prefix p's router and experts: stacked [experts, out, in]
    tensors, or one [out, in] tensor per expert."""
    count, _, width, _ = experts
    tensors = [(p + "ffn_gate_inp.weight", matrix(count, HIDDEN), Q.F32)]
    gate = np.stack([matrix(width, HIDDEN) for _ in range(count)])
    up = np.stack([matrix(width, HIDDEN) for _ in range(count)])
    down = np.stack([matrix(HIDDEN, width) for _ in range(count)])
    if stacked:
        return tensors + [
            (p + "ffn_gate_exps.weight", gate, t["gate"]),
            (p + "ffn_up_exps.weight", up, t["up"]),
            (p + "ffn_down_exps.weight", down, t["down"]),
        ]
    for e in range(count):
        tensors += [
            (p + f"ffn_gate.{e}.weight", gate[e], t["gate"]),
            (p + f"ffn_up.{e}.weight", up[e], t["up"]),
            (p + f"ffn_down.{e}.weight", down[e], t["down"]),
        ]
    return tensors


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

# qwen3's attn_q / attn_k are scaled up (qk_scale) so that the QK-norm
# matters: no K-quant there, whose random blocks would ignore the scale.
QWEN3_TYPES = {
    "embed": Q.Q5_K,
    "output": Q.Q8_0,
    "layers": [
        dict(q=Q.Q5_1, k=Q.Q8_0, v=Q.Q6_K, o=Q.Q4_K, gate=Q.Q5_0, up=Q.BF16, down=Q.Q4_1),
        dict(q=Q.Q4_0, k=Q.F16, v=Q.Q5_K, o=Q.Q6_K, gate=Q.BF16, up=Q.Q8_0, down=Q.F32),
    ],
}
# attn_output's rows here are 512 wide (8 heads of 64). The random Q4_K and
# Q5_K blocks have a nonzero mean, which on attn_q and attn_k of one layer
# would saturate the attention; they stay off such pairs.
LLAMA3_TYPES = {
    "embed": Q.Q5_K,
    "output": Q.Q6_K,
    "layers": [
        dict(q=Q.Q6_K, k=Q.Q5_0, v=Q.Q4_K, o=Q.Q8_0, gate=Q.F16, up=Q.Q4_1, down=Q.Q5_K),
        dict(q=Q.BF16, k=Q.Q6_K, v=Q.Q5_1, o=Q.Q4_K, gate=Q.Q4_0, up=Q.Q6_K, down=Q.Q8_0),
    ],
}
PHI3_TYPES = {
    "embed": Q.Q8_0,
    "output": Q.Q6_K,
    "layers": [
        dict(qkv=Q.Q6_K, o=Q.F16, up=Q.Q5_K, down=Q.BF16),
        dict(qkv=Q.Q8_0, o=Q.Q4_K, up=Q.Q5_1, down=Q.Q4_0),
    ],
}

# Gemma's q/k are scaled up (qk_scale): no K-quant on them, as for qwen3.
GEMMA3_TYPES = {
    "embed": Q.Q8_0,
    "layers": [
        dict(q=Q.Q5_0, k=Q.Q8_0, v=Q.Q6_K, o=Q.Q4_K, gate=Q.Q5_0, up=Q.Q4_K, down=Q.Q6_K),
        dict(q=Q.F16, k=Q.Q5_1, v=Q.Q8_0, o=Q.Q6_K, gate=Q.BF16, up=Q.Q5_K, down=Q.Q4_0),
    ],
}
GEMMA2_TYPES = {
    "embed": Q.Q6_K,
    "layers": [
        dict(q=Q.Q8_0, k=Q.Q5_0, v=Q.Q4_K, o=Q.F16, gate=Q.Q4_1, up=Q.Q6_K, down=Q.Q8_0),
        dict(q=Q.Q4_0, k=Q.BF16, v=Q.Q5_K, o=Q.Q8_0, gate=Q.Q5_K, up=Q.F32, down=Q.Q6_K),
    ],
}

# Experts' types: gate, up and down of every expert of a layer share one.
MIXTRAL_TYPES = {
    "embed": Q.Q6_K,
    "layers": [
        dict(q=Q.Q8_0, k=Q.Q5_0, v=Q.Q4_1, o=Q.F16, gate=Q.Q4_K, up=Q.Q8_0, down=Q.Q6_K),
        dict(q=Q.Q5_1, k=Q.Q4_0, v=Q.Q8_0, o=Q.Q5_K, gate=Q.Q4_0, up=Q.Q5_K, down=Q.BF16),
    ],
}
QWEN3MOE_TYPES = {
    "embed": Q.Q8_0,
    "output": Q.Q6_K,
    "layers": [
        dict(q=Q.Q8_0, k=Q.F16, v=Q.Q4_K, o=Q.Q6_K, gate=Q.Q5_K, up=Q.Q4_1, down=Q.Q4_0),
        dict(q=Q.Q5_0, k=Q.Q8_0, v=Q.Q5_K, o=Q.Q4_K, gate=Q.Q6_K, up=Q.Q8_0, down=Q.Q5_1),
    ],
}

# The shared expert's down product (rows of 192) takes the layer's q type.
# The low-bit types of Q2_K, Q3_K and IQ4_XS files, every one on both
# layers. Random Q2_K blocks have a nonzero mean (their minimums), so they
# stay off attn_q and attn_k (see LLAMA3_TYPES).
LOWBIT_TYPES = {
    "embed": Q.IQ4_XS,
    "output": Q.Q2_K,
    "layers": [
        dict(q=Q.IQ4_NL, k=Q.Q3_K, v=Q.Q2_K, o=Q.IQ4_XS, gate=Q.Q2_K, up=Q.Q3_K, down=Q.IQ4_NL),
        dict(q=Q.Q3_K, k=Q.IQ4_XS, v=Q.IQ4_NL, o=Q.Q2_K, gate=Q.IQ4_XS, up=Q.IQ4_NL, down=Q.Q3_K),
    ],
}

QWEN2MOE_TYPES = {
    "embed": Q.Q6_K,
    "output": Q.Q8_0,
    "layers": [
        dict(q=Q.Q8_0, k=Q.Q5_1, v=Q.Q6_K, o=Q.Q4_K, gate=Q.Q4_K, up=Q.Q5_0, down=Q.Q8_0),
        dict(q=Q.Q4_0, k=Q.F16, v=Q.Q8_0, o=Q.Q5_K, gate=Q.Q6_K, up=Q.Q4_1, down=Q.Q5_0),
    ],
}


# gpt-oss's experts ship in MXFP4, the rest of its matrices in 8 or 16 bits.
GPT_OSS_TYPES = {
    "embed": Q.Q8_0,
    "output": Q.Q8_0,
    "layers": [
        dict(q=Q.F16, k=Q.Q8_0, v=Q.BF16, o=Q.Q8_0, gate=Q.MXFP4, up=Q.MXFP4, down=Q.MXFP4),
        dict(q=Q.Q8_0, k=Q.BF16, v=Q.F16, o=Q.F16, gate=Q.MXFP4, up=Q.MXFP4, down=Q.Q8_0),
    ],
}


def llama3_rope_freqs(head_dim, base, factor, low_freq_factor, high_freq_factor, old_context_len):
    """The divisors llama.cpp's convert_hf_to_gguf.py (LlamaModel) stores as
    rope_freqs.weight for HF's rope_scaling {"rope_type": "llama3", ...}:
    1 for high frequencies, `factor` for low ones, and in between
    1 / ((1 - smooth) / factor + smooth) (HF's _compute_llama3_parameters
    divides inv_freq by exactly these)."""
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    factors = []
    for freq in base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim):
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            factors.append(1.0)
        elif wavelen > low_freq_wavelen:
            factors.append(factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            factors.append(1.0 / ((1.0 - smooth) / factor + smooth))
    return np.array(factors)


def iq2xxs(w, name, values):
    """An IQ2_XXS tensor, a type the loader does not take. The generator
    draws the bytes of the Q2_K tensor this file once held and keeps the
    first IQ2_XXS's worth, so every later file stays as it was."""
    rows, cols = values.shape
    drawn = rng.integers(0, 256, size=quant_shape_to_byte_shape((rows, cols), Q.Q2_K), dtype=np.uint8)
    shape = quant_shape_to_byte_shape((rows, cols), Q.IQ2_XXS)
    data = np.ascontiguousarray(drawn[:, : shape[1]])
    w.add_tensor(name, data, raw_shape=shape, raw_dtype=Q.IQ2_XXS)


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    qwen = dict(biases=True, tied=False, key_length=True, types=QWEN_TYPES)
    write(out / "qwen2.gguf", "qwen2", 2, 1, **qwen)
    write(out / "llama.gguf", "llama", 4, 2, biases=False, tied=True, rope_dim=32, types=LLAMA_TYPES)
    write(out / "gpt2.gguf", "gpt2", 2, 1, **qwen)
    iq2_types = {**QWEN_TYPES, "layers": [dict(QWEN_TYPES["layers"][0], gate=iq2xxs), QWEN_TYPES["layers"][1]]}
    write(out / "iq2xxs.gguf", "qwen2", 2, 1, **dict(qwen, types=iq2_types))
    write(out / "missing.gguf", "qwen2", 2, 1, skip={"blk.1.ffn_up.weight"}, **qwen)
    # attn_k written 2 KV heads wide while the metadata says 1.
    def wide_k(w, name, values):
        add(w, name, matrix(2 * HEAD_DIM, HIDDEN), Q.F16)
    shape_types = {**QWEN_TYPES, "layers": [dict(QWEN_TYPES["layers"][0], k=wide_k), QWEN_TYPES["layers"][1]]}
    write(out / "shape.gguf", "qwen2", 2, 1, **dict(qwen, types=shape_types))
    write(out / "zero_heads.gguf", "qwen2", 2, 1, meta_heads=0, **qwen)
    # The newer files, written after the ones above so that those stay the
    # same (one random generator for all).
    write(out / "qwen3.gguf", "qwen3", 4, 2, biases=False, tied=False, key_length=True,
          qk_norm=True, qk_scale=4.0, types=QWEN3_TYPES)
    llama3_base = 500000.0
    freqs = llama3_rope_freqs(HEAD_DIM, llama3_base, 8.0, 1.0, 4.0, 64)
    write(out / "llama3.gguf", "llama", 8, 2, biases=False, tied=False, key_length=True,
          base=llama3_base, types=LLAMA3_TYPES, extra=[("rope_freqs.weight", freqs, Q.F32)])
    long = rng.uniform(1.0, 4.0, size=HEAD_DIM // 2)
    short = rng.uniform(1.0, 1.5, size=HEAD_DIM // 2)
    orig_ctx = 256
    def longrope(w):
        w.add_rope_scaling_orig_ctx_len(orig_ctx)
        w.add_rope_scaling_attn_factors(math.sqrt(1.0 + math.log(512 / orig_ctx) / math.log(orig_ctx)))
    write(out / "phi3.gguf", "phi3", 4, 4, biases=False, tied=False, rope_dim=HEAD_DIM,
          eps=1e-5, base=10000.0, fused=True, meta=longrope, types=PHI3_TYPES,
          extra=[("rope_factors_long.weight", long, Q.F32),
                 ("rope_factors_short.weight", short, Q.F32)])
    write(out / "arctic.gguf", "arctic", 2, 1, **qwen)
    # An architecture the engine runs with a feature it does not build: a
    # mixture of experts under `qwen2` (whose layer has none; Qwen2-MoE
    # files are `qwen2moe`), and a RoPE scaling other than linear (YaRN).
    write(out / "experts.gguf", "qwen2", 4, 2, biases=False, tied=True, types=LLAMA_TYPES,
          meta=lambda w: w.add_expert_count(8))
    write(out / "yarn.gguf", "llama", 4, 2, biases=False, tied=True, types=LLAMA_TYPES,
          meta=lambda w: (w.add_string("llama.rope.scaling.type", "yarn"),
                          w.add_float32("llama.rope.scaling.factor", 4.0),
                          w.add_uint32("llama.rope.scaling.original_context_length", 128),
                          w.add_float32("llama.rope.scaling.yarn_beta_fast", 16.0),
                          w.add_float32("llama.rope.scaling.attn_factor", 0.9)))
    def gemma3(w):
        w.add_sliding_window(5)
        w.add_sliding_window_pattern(2)
        w.add_string("gemma3.rope.scaling.type", "linear")
        w.add_float32("gemma3.rope.scaling.factor", 4.0)
    write(out / "gemma3.gguf", "gemma3", 4, 2, biases=False, tied=True, key_length=True,
          qk_norm=True, qk_scale=4.0, post_norms=True, meta=gemma3, types=GEMMA3_TYPES)
    def gemma2(w):
        w.add_sliding_window(5)
        w.add_attn_logit_softcapping(1.5)
        w.add_final_logit_softcapping(4.0)
    write(out / "gemma2.gguf", "gemma2", 2, 1, biases=False, tied=True, key_length=True,
          qk_scale=4.0, post_norms=True, base=10000.0, meta=gemma2, types=GEMMA2_TYPES)
    write(out / "mixtral.gguf", "llama", 4, 2, biases=False, tied=True, types=MIXTRAL_TYPES,
          experts=(4, 2, FFN, {0}))
    write(out / "qwen3moe.gguf", "qwen3moe", 4, 2, biases=False, tied=False, key_length=True,
          qk_norm=True, qk_scale=4.0, types=QWEN3MOE_TYPES, experts=(8, 3, 128, {0, 1}))
    write(out / "qwen2moe.gguf", "qwen2moe", 4, 2, biases=True, tied=False, key_length=True,
          types=QWEN2MOE_TYPES, experts=(4, 2, 128, {0, 1}), shared=192)
    moe = dict(biases=False, tied=False, key_length=True, qk_norm=True, types=QWEN3MOE_TYPES,
               experts=(8, 3, 128, {0, 1}))
    for name, claimed in [("moe_used", (8, 9, 128)), ("moe_width", (8, 3, 64)),
                          ("moe_count", (None, 3, 128)), ("moe_fewer", (4, 3, 128))]:
        write(out / f"{name}.gguf", "qwen3moe", 4, 2, claimed=claimed, **moe)
    def granite(arch):
        def meta(w):
            w.add_float32(f"{arch}.embedding_scale", 12.0)
            w.add_float32(f"{arch}.attention.scale", 0.05)
            w.add_float32(f"{arch}.residual_scale", 0.22)
            w.add_float32(f"{arch}.logit_scale", 8.0)
        return meta
    write(out / "granite.gguf", "granite", 4, 2, biases=False, tied=True, base=10000.0,
          meta=granite("granite"), types=LLAMA3_TYPES)
    write(out / "granitemoe.gguf", "granitemoe", 4, 2, biases=False, tied=True, base=10000.0,
          meta=granite("granitemoe"), types=MIXTRAL_TYPES, experts=(4, 2, FFN, {0, 1}),
          shared=128, shared_gate=False)
    # SmolLM3 with its fourth layer unrotated, and OLMo 2 (post-norms only,
    # q and k normed over every head), neither with pre-norm gains.
    write(out / "smollm3.gguf", "smollm3", 4, 2, biases=False, tied=True, base=10000.0,
          types=LLAMA3_TYPES, layers=4)
    no_pre_norms = {f"blk.{i}.{n}.weight" for i in range(LAYERS) for n in ("attn_norm", "ffn_norm")}
    write(out / "olmo2.gguf", "olmo2", 4, 2, biases=False, tied=False, key_length=True,
          qk_norm="full", qk_scale=4.0, post_norms=True, skip=no_pre_norms, types=QWEN3_TYPES)
    # OLMo 3, written as `olmo2` with sliding-window layers (no pattern:
    # both layers local).
    write(out / "olmo3.gguf", "olmo2", 4, 2, biases=False, tied=False, key_length=True,
          qk_norm="full", post_norms=True, skip=no_pre_norms, types=QWEN3_TYPES,
          meta=lambda w: w.add_sliding_window(4))
    # Qwen2-MoE without its width keys: experts feed_forward_length /
    # expert_used_count wide (128), the shared expert feed_forward_length.
    write(out / "qwen2moe_defaults.gguf", "qwen2moe", 4, 2, biases=True, tied=False,
          key_length=True, types=QWEN2MOE_TYPES, experts=(4, 2, 128, {0, 1}), shared=FFN,
          width_keys=False)
    # A RoPE scaling that is not built.
    write(out / "scaling.gguf", "llama", 4, 2, biases=False, tied=True, types=LLAMA_TYPES,
          meta=lambda w: w.add_string("llama.rope.scaling.type", "dynamic"))
    # A `llama` mixture with shared experts, which llama.cpp's llama
    # loader takes and Pagoda's refuses by name.
    write(out / "llama_shexp.gguf", "llama", 4, 2, biases=False, tied=True, types=MIXTRAL_TYPES,
          experts=(4, 2, FFN, {0, 1}), shared=128, shared_gate=False)
    # Q2_K, Q3_K, IQ4_NL and IQ4_XS matrices, as Q2_K, Q3_K_M and IQ4_XS
    # files hold them.
    write(out / "lowbits.gguf", "llama", 4, 2, biases=False, tied=False, types=LOWBIT_TYPES)
    # gpt-oss: every projection biased, sinks, alternating windows, YaRN,
    # and a mixture with biases gated by the clamped SwiGLU.
    count, width = 4, 128
    oss = []
    for i in range(LAYERS):
        p = f"blk.{i}."
        oss += [
            (p + "post_attention_norm.weight", gain(HIDDEN), Q.F32),
            (p + "attn_output.bias", rng.normal(0.0, 0.5, size=HIDDEN), Q.F32),
            (p + "attn_sinks.weight", rng.normal(0.0, 1.0, size=4), Q.F32),
            (p + "ffn_gate_inp.bias", rng.normal(0.0, 0.5, size=count), Q.F32),
            (p + "ffn_gate_exps.bias", rng.normal(0.0, 0.5, size=(count, width)), Q.F32),
            (p + "ffn_up_exps.bias", rng.normal(0.0, 0.5, size=(count, width)), Q.F32),
            (p + "ffn_down_exps.bias", rng.normal(0.0, 0.5, size=(count, HIDDEN)), Q.F32),
        ]
    def gpt_oss(w):
        w.add_sliding_window(5)
        w.add_string("gpt-oss.rope.scaling.type", "yarn")
        w.add_float32("gpt-oss.rope.scaling.factor", 4.0)
        w.add_uint32("gpt-oss.rope.scaling.original_context_length", 128)
    def scaled(qtype):
        # Gate and up values 8x larger, so that the clamp at 7 matters.
        return lambda w, name, values: add(w, name, values * 8.0, qtype)
    oss_types = {**GPT_OSS_TYPES, "layers": [
        dict(t, gate=scaled(t["gate"]), up=scaled(t["up"])) for t in GPT_OSS_TYPES["layers"]]}
    no_ffn_norms = {f"blk.{i}.ffn_norm.weight" for i in range(LAYERS)}
    write(out / "gpt_oss.gguf", "gpt-oss", 4, 2, biases=True, tied=False, key_length=True,
          eps=1e-5, base=150000.0, meta=gpt_oss, types=oss_types, experts=(count, 2, width, {0, 1}),
          skip=no_ffn_norms, extra=oss)
    # GLM-4: q/k/v biases, norms after both blocks, one fused ffn_up
    # (gate rows, then up), interleaved rotary on half of each head; then
    # the same with the projections fused too (attn_qkv and its bias).
    def fused_up(qtype):
        # ffn_up written twice as tall: the gate's rows, then the up's.
        return lambda w, name, values: add(w, name, matrix(2 * FFN, HIDDEN), qtype)
    glm4_types = {**GLM4_TYPES, "layers": [dict(t, up=fused_up(t["up"])) for t in GLM4_TYPES["layers"]]}
    write(out / "glm4.gguf", "glm4", 4, 2, biases=True, tied=False, key_length=True, rope_dim=32,
          post_norms=True, types=glm4_types, skip={f"blk.{i}.ffn_gate.weight" for i in range(LAYERS)})
    qkv_bias = [(f"blk.{i}.attn_qkv.bias", rng.normal(0.0, 0.5, size=(4 + 2 * 2) * HEAD_DIM), Q.F32)
                for i in range(LAYERS)]
    write(out / "glm4_fused.gguf", "glm4", 4, 2, biases=False, tied=True, key_length=True,
          rope_dim=32, post_norms=True, fused=True, types=PHI3_TYPES, extra=qkv_bias)
    # GLM-4.5: three trunk layers and a multi-token-prediction block after
    # them (nextn_predict_layers 1, its tensors present and unread); layer
    # 0 dense, the others 8 experts 128 wide of which 3 are used, scored
    # by sigmoids and chosen with exp_probs_b added, renormalized and
    # scaled by 2.5, plus one ungated shared expert; QK-norm, NeoX rotary
    # on half of each head, the MLP's norm named post_attention_norm.
    count, glm_layers = 8, 4
    def glm4moe(w):
        w.add_uint32("glm4moe.nextn_predict_layers", 1)
        w.add_uint32("glm4moe.leading_dense_block_count", 1)
        w.add_uint32("glm4moe.expert_shared_count", 1)
        w.add_float32("glm4moe.expert_weights_scale", 2.5)
        w.add_bool("glm4moe.expert_weights_norm", True)
        w.add_uint32("glm4moe.expert_gating_func", 2)
    layer0_experts = {"blk.0." + n for n in ("ffn_gate_inp.weight", "ffn_gate_exps.weight",
                                             "ffn_up_exps.weight", "ffn_down_exps.weight",
                                             "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
                                             "ffn_down_shexp.weight")}
    norms = {f"blk.{i}.ffn_norm.weight" for i in range(glm_layers)}
    t0 = GLM4MOE_TYPES["layers"][0]
    moe_extra = [("blk.0.ffn_gate.weight", matrix(FFN, HIDDEN), t0["gate"]),
                 ("blk.0.ffn_up.weight", matrix(FFN, HIDDEN), t0["up"]),
                 ("blk.0.ffn_down.weight", matrix(HIDDEN, FFN), t0["down"])]
    for i in range(glm_layers):
        moe_extra.append((f"blk.{i}.post_attention_norm.weight", gain(HIDDEN), Q.F32))
        if i > 0:
            moe_extra.append((f"blk.{i}.exp_probs_b.bias", rng.normal(0.0, 0.3, size=count), Q.F32))
    last = f"blk.{glm_layers - 1}.nextn."
    moe_extra += [(last + "eh_proj.weight", matrix(HIDDEN, 2 * HIDDEN), Q.F16),
                  (last + "enorm.weight", gain(HIDDEN), Q.F32),
                  (last + "hnorm.weight", gain(HIDDEN), Q.F32),
                  (last + "shared_head_norm.weight", gain(HIDDEN), Q.F32)]
    write(out / "glm4moe.gguf", "glm4moe", 4, 2, biases=True, tied=False, key_length=True,
          rope_dim=32, qk_norm=True, qk_scale=4.0, types=GLM4MOE_TYPES,
          experts=(count, 3, 128, set(range(glm_layers))), shared=128, shared_gate=False,
          layers=glm_layers, meta=glm4moe, skip=layer0_experts | norms, extra=moe_extra)
    write_deepseek2_files(out)
    write_vl_and_ernie_files(out)
    # Seed-OSS: q/k/v and output biases, the MLP's norm named
    # post_attention_norm, the scores scaled by attention.scale.
    no_ffn_norms = {f"blk.{i}.ffn_norm.weight" for i in range(LAYERS)}
    seed_extra = [(f"blk.{i}.{name}", rng.normal(0.0, 0.5, size=HIDDEN) if name.endswith("bias")
                   else gain(HIDDEN), Q.F32)
                  for i in range(LAYERS) for name in ("attn_output.bias", "post_attention_norm.weight")]
    write(out / "seed_oss.gguf", "seed_oss", 4, 2, biases=True, tied=False, key_length=True,
          base=10000000.0, types=QWEN_TYPES, skip=no_ffn_norms, extra=seed_extra,
          meta=lambda w: w.add_float32("seed_oss.attention.scale", 0.09))
    # OLMoE: q and k normed across all their heads, 8 experts as wide as
    # feed_forward_length (no width key), 3 a token, not renormalized.
    write(out / "olmoe.gguf", "olmoe", 4, 2, biases=False, tied=False, key_length=True,
          qk_norm="full", qk_scale=4.0, types=QWEN3MOE_TYPES, experts=(8, 3, FFN, {0, 1}))
    # EXAONE 3.5: the llama layer, NeoX rotary with rope_freqs factors.
    write(out / "exaone.gguf", "exaone", 4, 2, biases=False, tied=False, types=LLAMA3_TYPES,
          extra=[("rope_freqs.weight", rng.uniform(1.0, 4.0, size=HEAD_DIM // 2), Q.F32)])
    # EXAONE 4: post-norms only, q and k normed per head; the hybrid file
    # with a 5-token window on layers 0-2 and layer 3 global and unrotated,
    # the other (1.2B's shape) rotating every layer over the whole context.
    def exaone4(w):
        w.add_sliding_window(5)
        w.add_sliding_window_pattern([True, True, True, False])
    no_pre_norms4 = {f"blk.{i}.{n}.weight" for i in range(4) for n in ("attn_norm", "ffn_norm")}
    write(out / "exaone4.gguf", "exaone4", 4, 2, biases=False, tied=True, key_length=True,
          qk_norm=True, qk_scale=4.0, post_norms=True, skip=no_pre_norms4, types=QWEN3_TYPES,
          layers=4, meta=exaone4)
    write(out / "exaone4_full.gguf", "exaone4", 4, 2, biases=False, tied=True, key_length=True,
          qk_norm=True, qk_scale=4.0, post_norms=True, skip=no_pre_norms, types=QWEN3_TYPES)
    # Ministral 3: YaRN over an original context of 8 with mscale_all_dim
    # 0.5, and the attention temperature, which the 40-token prompt's
    # positions from 8 on feel; an output bias.
    def mistral3(w):
        w.add_string("mistral3.rope.scaling.type", "yarn")
        w.add_float32("mistral3.rope.scaling.factor", 4.0)
        w.add_uint32("mistral3.rope.scaling.original_context_length", 8)
        w.add_float32("mistral3.rope.scaling.yarn_beta_fast", 16.0)
        w.add_float32("mistral3.rope.scaling.yarn_log_multiplier", 0.5)
        w.add_float32("mistral3.attention.temperature_scale", 0.3)
    out_bias = [(f"blk.{i}.attn_output.bias", rng.normal(0.0, 0.5, size=HIDDEN), Q.F32)
                for i in range(LAYERS)]
    write(out / "mistral3.gguf", "mistral3", 4, 2, biases=False, tied=True, types=LLAMA_TYPES,
          base=1000000.0, meta=mistral3, extra=out_bias)
    # Hunyuan dense: QK-norm after the rotary, NTK alpha on the base.
    write(out / "hunyuan_dense.gguf", "hunyuan-dense", 4, 2, biases=False, tied=True,
          key_length=True, qk_norm=True, qk_scale=4.0, base=10000.0, types=QWEN3_TYPES,
          meta=lambda w: w.add_float32("hunyuan-dense.rope.scaling.alpha", 3.0))
    write_cohere_files(out)
    write_olmo3_file(out)
    write_lfm2_files(out)
    tiny_qwen35.write_files(out, sys.modules[__name__])
    tiny_mamba2.write_files(out, sys.modules[__name__])
    # MiniMax-M2: q and k normed across all their heads, NeoX rotary on 32
    # of 64 dims, 8 sigmoid-scored experts of 128 (2 a token) chosen with
    # exp_probs_b, renormalized (always, as llama.cpp builds it) and times 1.5.
    def minimax_m2(w):
        w.add_uint32("minimax-m2.expert_gating_func", 2)
        w.add_float32("minimax-m2.expert_weights_scale", 1.5)
    bias = [(f"blk.{i}.exp_probs_b.bias", rng.normal(0.0, 0.3, size=8), Q.F32) for i in range(LAYERS)]
    write(out / "minimax_m2.gguf", "minimax-m2", 4, 2, biases=False, tied=False, key_length=True,
          rope_dim=32, qk_norm="full", qk_scale=4.0, types=QWEN3MOE_TYPES,
          experts=(8, 2, 128, {0, 1}), meta=minimax_m2, extra=bias)

def write_deepseek2(path, *, q_rank, legacy, yarn, router, types):
    """A `deepseek2` file: 4 heads of latent attention (a 512-wide latent
    and 64 rotary dims cached, key parts of 64, values of 64), layer 0 a
    dense MLP, layers 1 and 2 a mixture of 8 experts 128 wide of which 3
    are used, plus one ungated shared expert. q_rank: the low-rank query's
    width (0: attn_q); legacy: one attn_kv_b and the old key lengths in
    place of attn_k_b / attn_v_b; yarn: (factor, original context,
    yarn_log_multiplier) or None; router: metadata (gating function,
    normalization, scale, groups) and whether exp_probs_b is present."""
    a, heads, rank, rope, nope, v, count, width = "deepseek2", 4, 512, 64, 64, 64, 8, 128
    w = GGUFWriter(str(path), a)
    w.add_block_count(3)
    w.add_context_length(512)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(heads)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(rope)
    w.add_uint32(f"{a}.attention.kv_lora_rank", rank)
    if q_rank:
        w.add_uint32(f"{a}.attention.q_lora_rank", q_rank)
    if legacy:
        # The converter before the split: a decompressed head's lengths.
        w.add_head_count_kv(heads)
        w.add_key_length(nope + rope)
        w.add_value_length(v)
    else:
        w.add_head_count_kv(1)
        w.add_key_length(rank + rope)
        w.add_value_length(rank)
        w.add_uint32(f"{a}.attention.key_length_mla", nope + rope)
        w.add_uint32(f"{a}.attention.value_length_mla", v)
    w.add_uint32(f"{a}.leading_dense_block_count", 1)
    w.add_expert_count(count)
    w.add_expert_used_count(3)
    w.add_expert_feed_forward_length(width)
    w.add_uint32(f"{a}.expert_shared_count", 1)
    for key, value in router["meta"].items():
        if isinstance(value, bool):
            w.add_bool(f"{a}.{key}", value)
        elif isinstance(value, float):
            w.add_float32(f"{a}.{key}", value)
        else:
            w.add_uint32(f"{a}.{key}", value)
    if yarn is not None:
        factor, original, log_mul = yarn
        w.add_string(f"{a}.rope.scaling.type", "yarn")
        w.add_float32(f"{a}.rope.scaling.factor", factor)
        w.add_uint32(f"{a}.rope.scaling.original_context_length", original)
        w.add_float32(f"{a}.rope.scaling.yarn_log_multiplier", log_mul)
    tensors = [("token_embd.weight", rng.normal(0.0, 1.0, size=(VOCAB, HIDDEN)), types["embed"])]
    for i in range(3):
        p, t = f"blk.{i}.", types["layers"][i % 2]
        tensors.append((p + "attn_norm.weight", gain(HIDDEN), Q.F32))
        if q_rank:
            tensors += [(p + "attn_q_a.weight", matrix(q_rank, HIDDEN), t["q"]),
                        (p + "attn_q_a_norm.weight", gain(q_rank), Q.F32),
                        (p + "attn_q_b.weight", matrix(heads * (nope + rope), q_rank), t["qb"])]
        else:
            tensors.append((p + "attn_q.weight", matrix(heads * (nope + rope), HIDDEN), t["q"]))
        tensors += [(p + "attn_kv_a_mqa.weight", matrix(rank + rope, HIDDEN), t["kv"]),
                    (p + "attn_kv_a_norm.weight", gain(rank), Q.F32)]
        kv_b = matrix(heads * (nope + v), rank).reshape(heads, nope + v, rank)
        if legacy:
            tensors.append((p + "attn_kv_b.weight", kv_b.reshape(-1, rank), t["kb"]))
        else:
            # As the converter splits it: the key rows transposed.
            k_b = np.ascontiguousarray(kv_b[:, :nope, :].transpose(0, 2, 1))
            tensors += [(p + "attn_k_b.weight", k_b, t["kb"]),
                        (p + "attn_v_b.weight", np.ascontiguousarray(kv_b[:, nope:, :]), t["vb"])]
        tensors += [(p + "attn_output.weight", matrix(HIDDEN, heads * v), t["o"]),
                    (p + "ffn_norm.weight", gain(HIDDEN), Q.F32)]
        if i == 0:
            tensors += [(p + "ffn_gate.weight", matrix(FFN, HIDDEN), t["gate"]),
                        (p + "ffn_up.weight", matrix(FFN, HIDDEN), t["up"]),
                        (p + "ffn_down.weight", matrix(HIDDEN, FFN), t["down"])]
            continue
        tensors += expert_tensors(p, t, (count, 3, width, None), True)
        if router["bias"]:
            tensors.append((p + "exp_probs_b.bias", rng.normal(0.0, 0.3, size=count), Q.F32))
        tensors += [(p + "ffn_gate_shexp.weight", matrix(width, HIDDEN), t["gate"]),
                    (p + "ffn_up_shexp.weight", matrix(width, HIDDEN), t["up"]),
                    (p + "ffn_down_shexp.weight", matrix(HIDDEN, width), t["kb"])]
    tensors += [("output_norm.weight", gain(HIDDEN), Q.F32),
                ("output.weight", matrix(VOCAB, HIDDEN), types["output"])]
    for name, values, qtype in tensors:
        add(w, name, values, qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# DeepSeek's: rows of 64 (attn_k_b, kb) and 128 (attn_q_b's, qb; the
# experts' down) take legacy types; attn_v_b's (512) and the rest any.
DEEPSEEK2_TYPES = {
    "embed": Q.Q8_0,
    "output": Q.Q6_K,
    "layers": [
        dict(q=Q.Q8_0, qb=Q.Q8_0, kv=Q.F16, kb=Q.Q8_0, vb=Q.Q6_K, o=Q.Q4_K,
             gate=Q.Q5_K, up=Q.Q4_0, down=Q.Q8_0),
        dict(q=Q.BF16, qb=Q.Q5_0, kv=Q.Q8_0, kb=Q.F16, vb=Q.Q8_0, o=Q.Q6_K,
             gate=Q.Q4_K, up=Q.Q6_K, down=Q.Q5_1),
    ],
}


def write_deepseek2_files(out):
    """deepseek2_lite.gguf (V2-Lite's: attn_q, softmax routing, weights not
    renormalized, YaRN with V2's mscale_all_dim 0.707), deepseek2_v3.gguf
    (V3's: low-rank queries, sigmoids with exp_probs_b, 4 groups of which 2
    are used, renormalized, scaled by 2.5, no rope scaling) and
    deepseek2_legacy.gguf (the lite file's shape with one attn_kv_b)."""
    softmax = dict(meta={}, bias=False)
    write_deepseek2(out / "deepseek2_lite.gguf", q_rank=0, legacy=False, yarn=(4.0, 128, 0.0707),
                    router=softmax, types=DEEPSEEK2_TYPES)
    v3 = dict(meta={"expert_gating_func": 2, "expert_weights_norm": True,
                    "expert_weights_scale": 2.5, "expert_group_count": 4,
                    "expert_group_used_count": 2}, bias=True)
    write_deepseek2(out / "deepseek2_v3.gguf", q_rank=128, legacy=False, yarn=None,
                    router=v3, types=DEEPSEEK2_TYPES)
    write_deepseek2(out / "deepseek2_legacy.gguf", q_rank=0, legacy=True, yarn=None,
                    router=softmax, types=DEEPSEEK2_TYPES)


def write_vl_and_ernie_files(out):
    """The text models of Qwen2-VL (qwen2vl.gguf: M-RoPE sections) and
    Qwen3-VL (qwen3vl.gguf, qwen3vlmoe.gguf: interleaved sections and two
    DeepStack layers), and ERNIE 4.5: dense (ernie4_5.gguf: interleaved
    rotary, q/k/v and output biases) and a mixture (ernie4_5_moe.gguf:
    four layers, the first dense, then experts on every second layer,
    softmax routing with exp_probs_b on one of its mixtures, renormalized,
    one ungated shared MLP)."""
    def sections(arch, values, deepstack=0):
        def meta(w):
            w.add_rope_dimension_sections(values)
            if deepstack:
                w.add_uint32(f"{arch}.n_deepstack_layers", deepstack)
        return meta
    write(out / "qwen2vl.gguf", "qwen2vl", 4, 2, biases=True, tied=False, key_length=True,
          types=QWEN_TYPES, meta=sections("qwen2vl", [8, 12, 12, 0]))
    write(out / "qwen3vl.gguf", "qwen3vl", 4, 2, biases=False, tied=True, key_length=True,
          qk_norm=True, qk_scale=4.0, types=QWEN3_TYPES,
          meta=sections("qwen3vl", [12, 10, 10, 0], deepstack=2))
    write(out / "qwen3vlmoe.gguf", "qwen3vlmoe", 4, 2, biases=False, tied=False, key_length=True,
          qk_norm=True, qk_scale=4.0, types=QWEN3MOE_TYPES, experts=(8, 2, 128, {0, 1}),
          meta=sections("qwen3vlmoe", [12, 10, 10, 0], deepstack=1))
    output_biases = [(f"blk.{i}.attn_output.bias", rng.normal(0.0, 0.5, size=HIDDEN), Q.F32)
                     for i in range(LAYERS)]
    write(out / "ernie4_5.gguf", "ernie4_5", 4, 2, biases=True, tied=True, base=500000.0,
          types=LLAMA_TYPES, extra=output_biases)
    count, layers = 8, 4
    def ernie_moe(w):
        w.add_uint32("ernie4_5-moe.leading_dense_block_count", 1)
        w.add_uint32("ernie4_5-moe.interleave_moe_layer_step", 2)
    dense = [0, 2]
    mixture_names = ("ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
                     "ffn_down_exps.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
                     "ffn_down_shexp.weight")
    skip = {f"blk.{i}.{n}" for i in dense for n in mixture_names}
    extra = []
    for i in dense:
        t = QWEN3MOE_TYPES["layers"][i % 2]
        extra += [(f"blk.{i}.ffn_gate.weight", matrix(FFN, HIDDEN), t["gate"]),
                  (f"blk.{i}.ffn_up.weight", matrix(FFN, HIDDEN), t["up"]),
                  (f"blk.{i}.ffn_down.weight", matrix(HIDDEN, FFN), t["down"])]
    extra.append(("blk.1.exp_probs_b.bias", rng.normal(0.0, 0.3, size=count), Q.F32))
    write(out / "ernie4_5_moe.gguf", "ernie4_5-moe", 4, 2, biases=False, tied=False,
          base=500000.0, types=QWEN3MOE_TYPES, experts=(count, 3, 128, set(range(layers))),
          shared=128, shared_gate=False, layers=layers, meta=ernie_moe, skip=skip, extra=extra)


def write_cohere_files(out):
    """Cohere's parallel layers, one LayerNorm before both blocks (no
    ffn_norm), the logits times logit_scale (0.3, not a power of two):
    command_r.gguf (Command R+'s shape: q and k LayerNormed per head, each
    head by gains of its own) and cohere2.gguf (Command R7B's: four layers,
    a 5-token window with rotary positions on the first three, the fourth
    over the whole context without; the default pattern)."""
    def cohere(arch, window=0):
        def meta(w):
            w.add_float32(f"{arch}.logit_scale", 0.3)
            if window:
                w.add_sliding_window(window)
        return meta
    ffn_norms = {f"blk.{i}.ffn_norm.weight" for i in range(4)}
    write(out / "command_r.gguf", "command-r", 4, 2, biases=False, tied=True, qk_norm="heads",
          qk_scale=4.0, base=8000000.0, types=QWEN3_TYPES, skip=ffn_norms, meta=cohere("command-r"))
    write(out / "cohere2.gguf", "cohere2", 4, 2, biases=False, tied=True, base=50000.0,
          types=LLAMA_TYPES, skip=ffn_norms, layers=4, meta=cohere("cohere2", 5))


def write_lfm2_files(out):
    """LFM2's hybrids: lfm2.gguf (four layers: convolutions on 0, 1 and 3,
    attention on 2, as attention.head_count_kv [0, 0, 2, 0] says; 3 taps,
    q and k normed per head, the final norm named token_embd_norm, a tied
    head) and lfm2moe.gguf (attention on layer 1 only; layer 0 dense, then
    8 experts of 128 of which 2 are used, sigmoid scores, a selection bias,
    renormalized, times 1.5; 4 taps)."""
    def hybrid(path, arch, kv_heads, taps, experts=None, lead=0):
        conv_layers = [i for i, k in enumerate(kv_heads) if k == 0]
        attention_names = ("attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm")
        skip = {f"blk.{i}.{n}.weight" for i in conv_layers for n in attention_names}
        skip.add("output_norm.weight")
        extra = []
        for i in conv_layers:
            t = QWEN3_TYPES["layers"][i % 2]
            p = f"blk.{i}.shortconv."
            extra += [(p + "in_proj.weight", matrix(3 * HIDDEN, HIDDEN), t["gate"]),
                      (p + "conv.weight", rng.normal(0.0, 0.5, size=(HIDDEN, taps)), Q.F32),
                      (p + "out_proj.weight", matrix(HIDDEN, HIDDEN), t["o"])]
        if experts is not None:
            names = ("ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
                     "ffn_down_exps.weight")
            skip |= {f"blk.{i}.{n}" for i in range(lead) for n in names}
            for i in range(len(kv_heads)):
                if i < lead:
                    t = QWEN3_TYPES["layers"][i % 2]
                    extra += [(f"blk.{i}.ffn_gate.weight", matrix(FFN, HIDDEN), t["gate"]),
                              (f"blk.{i}.ffn_up.weight", matrix(FFN, HIDDEN), t["up"]),
                              (f"blk.{i}.ffn_down.weight", matrix(HIDDEN, FFN), t["down"])]
                else:
                    extra.append((f"blk.{i}.exp_probs_b.bias", rng.normal(0.0, 0.3, size=experts[0]), Q.F32))
        extra.append(("token_embd_norm.weight", gain(HIDDEN), Q.F32))
        def meta(w):
            w.add_uint32(f"{arch}.shortconv.l_cache", taps)
            if experts is not None:
                w.add_uint32(f"{arch}.leading_dense_block_count", lead)
                w.add_uint32(f"{arch}.expert_gating_func", 2)
                w.add_float32(f"{arch}.expert_weights_scale", 1.5)
        write(path, arch, 4, kv_heads, biases=False, tied=True, key_length=True, qk_norm=True,
              qk_scale=4.0, types=QWEN3_TYPES, layers=len(kv_heads), skip=skip, extra=extra,
              meta=meta, experts=None if experts is None else experts + (set(range(4)),))
    hybrid(out / "lfm2.gguf", "lfm2", [0, 0, 2, 0], 3)
    hybrid(out / "lfm2moe.gguf", "lfm2moe", [0, 2, 0, 0], 4, experts=(8, 2, 128), lead=1)


def write_olmo3_file(out):
    """olmo3_yarn.gguf: OLMo 3 as its converter writes it, `olmo2` with a
    5-token window on the layers its pattern marks (0-2; layer 3 global)
    and YaRN (factor 4 over an original context of 16) that only the
    global layer takes, the local ones rotating by rope.freq_base_swa."""
    def olmo3(w):
        w.add_sliding_window(5)
        w.add_sliding_window_pattern([True, True, True, False])
        w.add_string("olmo2.rope.scaling.type", "yarn")
        w.add_float32("olmo2.rope.scaling.factor", 4.0)
        w.add_uint32("olmo2.rope.scaling.original_context_length", 16)
        w.add_float32("olmo2.rope.freq_base_swa", 20000.0)
    no_pre_norms = {f"blk.{i}.{n}.weight" for i in range(4) for n in ("attn_norm", "ffn_norm")}
    write(out / "olmo3_yarn.gguf", "olmo2", 4, 2, biases=False, tied=False, key_length=True,
          qk_norm="full", qk_scale=4.0, post_norms=True, skip=no_pre_norms, types=QWEN3_TYPES,
          layers=4, meta=olmo3)


# GLM-4's fused ffn_up rows are 256 wide: any type; its q/k take K-quants
# on one layer only (see LLAMA3_TYPES).
GLM4_TYPES = {
    "embed": Q.Q6_K,
    "output": Q.Q5_K,
    "layers": [
        dict(q=Q.Q8_0, k=Q.Q5_1, v=Q.Q4_K, o=Q.Q6_K, gate=Q.F32, up=Q.Q4_K, down=Q.Q8_0),
        dict(q=Q.Q5_K, k=Q.F16, v=Q.Q8_0, o=Q.Q4_0, gate=Q.F32, up=Q.Q6_K, down=Q.Q5_0),
    ],
}
# GLM-4.5's q and k are scaled up for the QK-norm: no K-quant there.
GLM4MOE_TYPES = {
    "embed": Q.Q8_0,
    "output": Q.Q6_K,
    "layers": [
        dict(q=Q.Q8_0, k=Q.Q5_0, v=Q.Q6_K, o=Q.Q4_K, gate=Q.Q5_K, up=Q.Q4_0, down=Q.Q8_0),
        dict(q=Q.F16, k=Q.Q4_1, v=Q.Q5_K, o=Q.Q8_0, gate=Q.Q4_K, up=Q.Q6_K, down=Q.Q5_1),
    ],
}


if __name__ == "__main__":
    main()
