"""The tiny hybrids of Mamba-2 and attention for make_tiny_gguf.py, in the
layout llama.cpp's converter writes (ssm_a as -exp(A_log) [heads, 1],
ssm_d [heads, 1], ssm_norm [groups, inner / groups], ssm_conv1d [channels,
taps]):
  granite_hybrid.gguf      granitehybrid (Bamba's kind), four layers:
                           Mamba-2 mixers on 0, 1 and 3 (head_count_kv 0)
                           and attention on 2 with the interleaved
                           rotary; mixers of 8 heads of 64 (inner 512),
                           2 groups of state 32, 4 taps with a conv bias;
                           Granite's muP multipliers; dense MLPs; tied
  granite_hybrid_moe.gguf  granitehybrid as Granite 4.0-H-Tiny: attention
                           on layer 1 without rotary positions
                           (rope.scaling.finetuned false), one group, no
                           conv bias, 8 experts 128 wide of which 2 are
                           used, renormalized, and an ungated shared
                           expert 128 wide; untied
  nemotron_h.gguf          nemotron_h, five layers (pattern M-M*-): mixers
                           on 0 and 2 (8 heads of 64, 2 groups of state
                           32, a conv bias), attention without rotary on
                           3, ungated relu^2 MLPs on 1 (256 wide) and 4
                           (192: feed_forward_length per layer); tied
  nemotron_h_moe.gguf      nemotron_h_moe, pattern ME*ME: one group, the
                           MLPs 8 ungated relu^2 experts 128 wide (2 a
                           token) scored by sigmoids, chosen with
                           exp_probs_b, renormalized and times 2.5, plus
                           an ungated shared expert 192 wide; untied
"""
import numpy as np
from gguf import GGMLQuantizationType as Q

TAPS, HEADS, HEAD_DIM, STATE = 4, 8, 64, 32


def write_files(out, t):
    """t: the make_tiny_gguf module (its writer, sizes and generator)."""
    rng, matrix, gain = t.rng, t.matrix, t.gain
    h = t.HIDDEN
    inner = HEADS * HEAD_DIM

    def hybrid(path, mixes, groups, experts=None, rotary=True, conv_bias=True, tied=True):
        layers = len(mixes)
        width = inner + 2 * groups * STATE
        names = ("attn_q", "attn_k", "attn_v", "attn_output")
        skip = {f"blk.{i}.{n}.weight" for i, m in enumerate(mixes) if m for n in names}
        extra = []
        for i, mixer in enumerate(mixes):
            if not mixer:
                continue
            ty = t.LLAMA3_TYPES["layers"][i % 2]
            p = f"blk.{i}."
            extra += [
                (p + "ssm_in.weight", matrix(inner + width + HEADS, h), ty["q"]),
                (p + "ssm_conv1d.weight", rng.normal(0.0, 0.5, size=(width, TAPS)), Q.F32),
                (p + "ssm_dt.bias", rng.normal(0.0, 1.0, size=HEADS), Q.F32),
                # -exp(A_log), A in [0.5, 4): states that keep a few
                # tokens' worth.
                (p + "ssm_a", -rng.uniform(0.5, 4.0, size=(HEADS, 1)), Q.F32),
                (p + "ssm_d", rng.normal(0.0, 1.0, size=(HEADS, 1)), Q.F32),
                (p + "ssm_norm.weight", gain(inner).reshape(groups, inner // groups), Q.F32),
                (p + "ssm_out.weight", matrix(h, inner), ty["o"]),
            ]
            if conv_bias:
                extra.append((p + "ssm_conv1d.bias", rng.normal(0.0, 0.5, size=width), Q.F32))

        def meta(w):
            arch = "granitehybrid"
            w.add_float32(f"{arch}.embedding_scale", 12.0)
            w.add_float32(f"{arch}.attention.scale", 0.05)
            w.add_float32(f"{arch}.residual_scale", 0.22)
            w.add_float32(f"{arch}.logit_scale", 8.0)
            w.add_uint32(f"{arch}.ssm.conv_kernel", TAPS)
            w.add_uint32(f"{arch}.ssm.state_size", STATE)
            w.add_uint32(f"{arch}.ssm.group_count", groups)
            w.add_uint32(f"{arch}.ssm.time_step_rank", HEADS)
            w.add_uint32(f"{arch}.ssm.inner_size", inner)
            w.add_bool(f"{arch}.rope.scaling.finetuned", rotary)
        stacked = None if experts is None else experts + (set(range(layers)),)
        kv = [0 if m else 2 for m in mixes]
        t.write(path, "granitehybrid", 4, kv, biases=False, tied=tied, base=10000.0,
                types=t.QWEN3MOE_TYPES if experts else t.LLAMA3_TYPES, layers=layers,
                skip=skip, extra=extra, meta=meta, experts=stacked,
                shared=128 if experts else 0, shared_gate=False)

    def mixer_tensors(p, groups, ty, conv_bias=True):
        width = inner + 2 * groups * STATE
        tensors = [
            (p + "ssm_in.weight", matrix(inner + width + HEADS, h), ty),
            (p + "ssm_conv1d.weight", rng.normal(0.0, 0.5, size=(width, TAPS)), Q.F32),
            (p + "ssm_dt.bias", rng.normal(0.0, 1.0, size=HEADS), Q.F32),
            (p + "ssm_a", -rng.uniform(0.5, 4.0, size=(HEADS, 1)), Q.F32),
            (p + "ssm_d", rng.normal(0.0, 1.0, size=(HEADS, 1)), Q.F32),
            (p + "ssm_norm.weight", gain(inner).reshape(groups, inner // groups), Q.F32),
            (p + "ssm_out.weight", matrix(h, inner), Q.Q8_0),
        ]
        if conv_bias:
            tensors.append((p + "ssm_conv1d.bias", rng.normal(0.0, 0.5, size=width), Q.F32))
        return tensors

    def nemotron(path, arch, pattern, groups, widths, experts=None, tied=True):
        """pattern: M (mixer), * (attention), - (an MLP of widths[i])."""
        layers = len(pattern)
        own = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
        skip = {f"blk.{i}.{n}.weight" for i, kind in enumerate(pattern) for n in own
                if kind != "*" or n.startswith("ffn")}
        extra = []
        for i, kind in enumerate(pattern):
            p = f"blk.{i}."
            if kind == "M":
                extra += mixer_tensors(p, groups, [Q.Q8_0, Q.Q4_K][i % 2])
            elif kind == "-" and experts is None:
                extra += [
                    (p + "ffn_up.weight", matrix(widths[i], h), [Q.Q4_0, Q.Q6_K][i % 2]),
                    (p + "ffn_down.weight", matrix(h, widths[i]), Q.Q8_0),
                ]
            elif kind == "-":
                count, _, width, shared = experts
                extra += [
                    (p + "ffn_gate_inp.weight", matrix(count, h) * 4.0, Q.F32),
                    (p + "exp_probs_b.bias", rng.normal(0.0, 0.3, size=count), Q.F32),
                    (p + "ffn_up_exps.weight",
                     np.stack([matrix(width, h) for _ in range(count)]), Q.Q8_0),
                    (p + "ffn_down_exps.weight",
                     np.stack([matrix(h, width) for _ in range(count)]), Q.Q4_0),
                    (p + "ffn_up_shexp.weight", matrix(shared, h), Q.Q5_0),
                    (p + "ffn_down_shexp.weight", matrix(h, shared), Q.Q8_0),
                ]

        def meta(w):
            w.add_uint32(f"{arch}.ssm.conv_kernel", TAPS)
            w.add_uint32(f"{arch}.ssm.state_size", STATE)
            w.add_uint32(f"{arch}.ssm.group_count", groups)
            w.add_uint32(f"{arch}.ssm.time_step_rank", HEADS)
            w.add_uint32(f"{arch}.ssm.inner_size", inner)
            w.add_array(f"{arch}.feed_forward_length", [widths[i] if k == "-" else 0
                                                       for i, k in enumerate(pattern)])
            if experts is not None:
                count, used, width, shared = experts
                w.add_uint32(f"{arch}.expert_count", count)
                w.add_uint32(f"{arch}.expert_used_count", used)
                w.add_uint32(f"{arch}.expert_feed_forward_length", width)
                w.add_uint32(f"{arch}.expert_shared_feed_forward_length", shared)
                w.add_bool(f"{arch}.expert_weights_norm", True)
                w.add_float32(f"{arch}.expert_weights_scale", 2.5)
        kv = [2 if k == "*" else 0 for k in pattern]
        t.write(path, arch, 4, kv, biases=False, tied=tied, key_length=True, types=t.QWEN3MOE_TYPES,
                layers=layers, skip=skip, extra=extra, meta=meta, ffn_length=False)

    nemotron(out / "nemotron_h.gguf", "nemotron_h", "M-M*-", groups=2,
             widths=[0, 256, 0, 0, 192])
    nemotron(out / "nemotron_h_moe.gguf", "nemotron_h_moe", "ME*ME".replace("E", "-"), groups=1,
             widths=[0, 128, 0, 0, 128], experts=(8, 2, 128, 192), tied=False)
    hybrid(out / "granite_hybrid.gguf", [True, True, False, True], groups=2)
    hybrid(out / "granite_hybrid_moe.gguf", [True, False, True, True], groups=1,
           experts=(8, 2, 128), rotary=False, conv_bias=False, tied=False)
