"""An independent forward pass of a `llama` (Mixtral's mixture of experts
included), `qwen2`, `qwen2moe`, `qwen3`, `qwen3moe`, `phi3`, `gemma2`, `gemma3`,
`granite`, `granitemoe`, `smollm3`, `olmo2`, `gpt-oss`, `glm4`, `glm4moe`,
`deepseek2`, `qwen2vl`, `qwen3vl`, `qwen3vlmoe` (their text models),
`ernie4_5`, `ernie4_5-moe`, `seed_oss`, `olmoe`, `exaone`, `exaone4`,
`mistral3`, `hunyuan-dense`, `command-r`, `cohere2`, `lfm2`, `lfm2moe`,
`qwen35`, `qwen35moe`, `qwen3next`, `minimax-m2`, `granitehybrid`, `nemotron_h` or
`nemotron_h_moe` GGUF model in NumPy (float64), for
host/engine/tests/real_model.rs, gemma_model.rs, synthetic_gguf.rs and
experts_gguf.rs.

Written from the architectures' definitions (and llama.cpp's reading of
the GGUF files) over the tensors that `gguf.quants.dequantize` gives, not
from the Rust engine:

    x = embed[tokens]
    per layer:  h = rmsnorm(x) * attn_norm
                q, k, v = h @ Wq.T (+ bq), h @ Wk.T (+ bk), h @ Wv.T (+ bv)
                qwen3: q, k = rmsnorm(each head of q) * attn_q_norm,
                              rmsnorm(each head of k) * attn_k_norm
                rotary on q and k (first rope.dimension_count dims of a head)
                x += softmax(q k^T / sqrt(head_dim), causal) v  @ Wo.T
                h = rmsnorm(x) * ffn_norm
                x += (silu(h @ Wg.T) * (h @ Wu.T)) @ Wd.T
    logits = (rmsnorm(x) * output_norm) @ (output or token_embd).T

head_dim is attention.key_length (default hidden / heads), so heads *
head_dim may differ from hidden (Wq [heads * head_dim, hidden], Wo [hidden,
heads * head_dim]); query head h reads KV head h // (heads / kv_heads).
Every rmsnorm uses attention.layer_norm_rms_epsilon: x / sqrt(mean(x^2) +
eps), the mean over the hidden size, or over head_dim for qwen3's
attn_q_norm / attn_k_norm (each [head_dim], applied after the projection,
before rotary). qwen3 has no q/k/v biases; qwen2 has them.

phi3 fuses the projections: blk.N.attn_qkv [q_dim + 2 kv_dim, hidden] gives
q, k, v as its rows in that order (q = its first heads * head_dim outputs,
then k, then v), and blk.N.ffn_up [2 ffn, hidden] gives gate (the first ffn
outputs) and up (the last ffn): x += (silu(gate) * up) @ Wd.T, llama.cpp's
LLM_FFN_SWIGLU over the fused output (ggml_swiglu: silu of the first half
times the second half, as HF's Phi3MLP chunks gate_up_proj). No biases.

Rotary: `llama` files hold Q/K rows as llama.cpp's converter permuted them
for its interleaved-pair mode, so pairs are (2j, 2j+1), applied to the
file's rows as they are; `qwen2`, `qwen3` and `phi3` use the NeoX mode,
pairs (j, j + n/2). Angle j at position p is p * base^(-2j/n) / factor[j],
factor being rope_freqs.weight where the file has it (Llama 3's scaling,
stored by the converter as these divisors), else LongRoPE's
rope_factors_long.weight when context_length > rope.scaling.
original_context_length and rope_factors_short.weight otherwise (phi3;
llama.cpp chooses by its context size, here the trained one), else 1.
cos and sin are both multiplied by rope.scaling.attn_factor (default 1;
phi3's LongRoPE scale), as llama.cpp's rope does with its attn_factor.

gemma2 and gemma3, from Google's Gemma 2 / Gemma 3 definitions (HF's
Gemma2/Gemma3 decoder layers) as llama.cpp's files hold them:

    x = embed[tokens] * sqrt(hidden)
    per layer:  h = rmsnorm(x) * attn_norm
                q, k, v = h @ Wq.T, h @ Wk.T, h @ Wv.T
                gemma3: q, k = per-head rmsnorm * attn_q_norm / attn_k_norm
                rotary (NeoX) on q and k
                s = q k^T * query_pre_attn_scalar^-0.5
                gemma2: s = cap * tanh(s / cap), cap attn_logit_softcapping
                causal; on local layers also key j >= query i - window + 1
                x += rmsnorm(softmax(s) v @ Wo.T) * post_attention_norm
                h = rmsnorm(x) * ffn_norm
                x += rmsnorm((gelu_tanh(h @ Wg.T) * (h @ Wu.T)) @ Wd.T)
                     * post_ffw_norm
    logits = (rmsnorm(x) * output_norm) @ token_embd.T
    gemma2: logits = cap * tanh(logits / cap), cap final_logit_softcapping

A mixture of experts (llama with {arch}.expert_count > 0, as Mixtral's
files are, qwen2moe and qwen3moe), from HF's MixtralSparseMoeBlock,
Qwen2MoeSparseMoeBlock and Qwen3MoeSparseMoeBlock (norm_topk_prob true, as
Qwen3-30B-A3B's config has it; false, Qwen2-MoE's default, for
qwen2moe), replaces the MLP:
    p = softmax(h @ ffn_gate_inp.T)                 each row, over experts
    top = the expert_used_count largest of p; w = p[top] / sum(p[top])
          (w = p[top] without the renormalization)
    x += sum over e in top of w_e * ((silu(h @ Wg_e.T) * (h @ Wu_e.T)) @ Wd_e.T)
    qwen2moe: x += sigmoid(h @ ffn_gate_inp_shexp) * swiglu(h) of the
          shared expert (ffn_{gate,up,down}_shexp); granitemoe's shared
          expert has no gate (factor 1)
granite and granitemoe, from HF's GraniteModel: the llama layer (its
interleaved rotary) with muP's multipliers, x = embed * embedding_scale,
the scores scaled by attention.scale (key_length^-0.5 without it), each
block's output times residual_scale before it is added, and the logits
divided by logit_scale; granitemoe's experts renormalized.
smollm3, from HF's SmolLM3Model: the llama layer, without rotary on layer
i where (i + 1) % 4 == 0 (no_rope_layer_interval 4).
olmo2, from HF's Olmo2DecoderLayer: no norm before either block; q and k
RMS-normed over their whole width (q_norm of heads * head_dim, k_norm of
kv_heads * head_dim) before NeoX rotary; each block's output normed
(post_attention_norm, post_ffw_norm) before it is added.
the experts' matrices the slices of ffn_{gate,up,down}_exps (or the older
ffn_{gate,up,down}.E tensors, one per expert).
gpt-oss, from HF's GptOssModel (its converter splits gate_up_proj into
ffn_gate_exps and ffn_up_exps): the pre-norm layer with a bias on every
projection (attn_output.bias too), NeoX rotary with YaRN on every layer,
the MLP's norm stored as post_attention_norm; sliding-window layers as
Gemma's (default pattern 2: even layers local); each head's softmax with
its sink logit s (attn_sinks) as one more column, dropped after the
softmax: p_j = e^(x_j) / (sum e^(x) + e^s). The mixture (GptOssTopKRouter,
GptOssExperts): l = h @ ffn_gate_inp.T + bias, top = the expert_used_count
largest of l, w = softmax(l[top]); each expert g = h @ Wg.T + bg, u =
h @ Wu.T + bu, g = min(g, 7), u = clamp(u, -7, 7), f = ((u + 1) * g *
sigmoid(1.702 g)) @ Wd.T + bd. YaRN's correction range is truncated
(floor, ceil) as llama.cpp computes it, not HF's truncate=False.

glm4, from HF's Glm4DecoderLayer: q/k/v biases (attn_qkv and its bias
split as phi3's where the file fuses them), interleaved-pair rotary
(Glm4's rotate_half over the first rope.dimension_count dims), x +=
rmsnorm(attention @ Wo.T) * post_attention_norm, h = rmsnorm(x) *
ffn_norm, x += rmsnorm((silu(gate) * up) @ Wd.T) * post_ffw_norm with gate
and up the halves of the fused ffn_up. glm4moe, from HF's
Glm4MoeDecoderLayer and Glm4MoeMoE: block_count - nextn_predict_layers
layers (the model runs num_hidden_layers; the prediction block after them
is ignored), q/k/v biases, attn_q_norm / attn_k_norm per head where the
file has them, NeoX rotary over the first rope.dimension_count dims, the
MLP's norm post_attention_norm; layers below leading_dense_block_count a
SwiGLU MLP, the rest: s = sigmoid(h @ ffn_gate_inp.T), top = the
expert_used_count largest of s + exp_probs_b, w = s[top] (divided by
their sum + 1e-20 where expert_weights_norm), times expert_weights_scale;
x += sum of w_e * swiglu_e(h) + the shared expert's swiglu(h).

deepseek2, from DeepSeek's reference model (DeepSeek-V2/V3 modeling,
MLA written decompressed, as multi-head attention, not as the engine's
absorbed multi-query form): per layer h = rmsnorm(x) * attn_norm; q =
h @ attn_q.T, or rmsnorm(h @ attn_q_a.T) * attn_q_a_norm @ attn_q_b.T;
each head [key_length_mla] split into q_nope and q_pe (the last
rope.dimension_count); c, k_pe = split(h @ attn_kv_a_mqa.T, [kv_lora_rank,
rope]); c = rmsnorm(c) * attn_kv_a_norm; each head's k_nope and value =
c @ its rows of attn_kv_b.T (the file's attn_k_b transposed back and
attn_v_b where it splits them); rotary (interleaved pairs, as llama.cpp
reads these files; YaRN's ramp without its magnitude, which moves to the
scale) on q_pe and the one k_pe every head shares; key = [k_nope, k_pe],
query = [q_nope, q_pe]; scores scaled by key_length_mla^-0.5 * mscale^2,
mscale = 1 + yarn_log_multiplier * ln(factor) with YaRN (else 1); x +=
(softmax(scores) @ value) @ attn_output.T; then ffn_norm and a SwiGLU MLP
on layers below leading_dense_block_count, else the gate: s = softmax or
sigmoid (expert_gating_func 2) of h @ ffn_gate_inp.T, choice = s +
exp_probs_b where the file has it; with expert_group_count groups, each
scored by the sum of its two best choices (by its best without
exp_probs_b), the others' experts masked to -inf outside the
expert_group_used_count best; top = the expert_used_count best choices;
w = s[top] (renormalized where expert_weights_norm) * expert_weights_scale;
x += sum w_e * swiglu_e(h) + the shared experts' swiglu(h).

qwen2vl, qwen3vl and qwen3vlmoe, from HF's Qwen2VL / Qwen3VL text
models: qwen2's, qwen3's and qwen3moe's layers with M-RoPE, each pair j
of a head turned by the temporal, height or width position its section
names (rope.dimension_sections: consecutive runs for qwen2vl,
apply_multimodal_rotary_pos_emb; for Qwen3-VL pair j is height where j % 3
== 1 and j < 3 * sections[1], width where j % 3 == 2 and j < 3 *
sections[2], else temporal, apply_interleaved_mrope), a text token's
three positions its position; DeepStack adds image features only.
ernie4_5, from HF's Ernie4_5: the llama layer (interleaved pairs) with
q/k/v and output biases where the file has them. ernie4_5-moe, from HF's
Ernie4_5_Moe: layer i a mixture where i >= leading_dense_block_count and
(i + 1) % interleave_moe_layer_step == 0, else SwiGLU: p = softmax(h @
ffn_gate_inp.T), top = the expert_used_count largest of p + exp_probs_b
(where present), w = p[top] / sum, plus the ungated shared MLP.
seed_oss, from HF's SeedOss: qwen2's layer, output bias where present,
the MLP's norm post_attention_norm, scores scaled by attention.scale.
olmoe, from HF's Olmoe: the pre-norm layer, q and k normed over their
whole width (as olmo2's) before NeoX rotary, softmax experts, w = p[top]
not renormalized. exaone, from HF's Exaone: the llama layer with NeoX
rotary (rope_freqs factors). exaone4, from HF's Exaone4DecoderLayer:
olmo2's post-norm layer with q and k normed per head; local layers
(the sliding_window_pattern array) attend over the window, and where
any layer is local the global ones have no rotary ("global NoPE").
mistral3, from HF's Ministral3: the llama layer (interleaved pairs of the
converter's rows), output bias where present; YaRN's magnitude
get_mscale(factor) / get_mscale(factor, mscale_all_dim) (the file's
yarn_log_multiplier); queries times 1 + beta * log(1 + floor(p /
original_context_length)) (attention.temperature_scale).
hunyuan-dense, from HF's HunYuanDenseV1: the llama layer with NeoX rotary
and q and k normed per head after it; rope.scaling.alpha, where the file
has it, multiplies the base by alpha^(head_dim / (head_dim - 2)).
olmo2 with attention.sliding_window (OLMo 3, from HF's Olmo3): the layers
the sliding_window_pattern marks (default: all but every fourth) attend
over the window and rotate by the default rotary of rope.freq_base_swa
(else rope_theta), without the YaRN the others take.
command-r and cohere2, from HF's CohereDecoderLayer and Cohere2DecoderLayer:
one LayerNorm without a bias (CohereLayerNorm: x - mean, over the variance
+ layer_norm_epsilon, times the gain) of x feeds both the attention and
the SwiGLU MLP: x += attn(h) + mlp(h); q and k LayerNormed per head with
[heads, head_dim] gains where the file has them (Command R+); pairs
interleaved (rotate_half of even and odd lanes); logits times
logit_scale. cohere2: local layers (sliding_window_pattern, default 4)
attend over the window with rotary positions, the others over the whole
context without.
lfm2 and lfm2moe, from HF's Lfm2DecoderLayer and Lfm2MoeDecoderLayer: a
layer whose attention.head_count_kv is 0 convolves (Lfm2ShortConv's
slow_forward): B, C, x = chunks of h @ in_proj.T; y = C * conv(B * x),
conv a depthwise Conv1d of shortconv.l_cache taps padded by taps - 1 and
cut to the sequence (causal); x += y @ out_proj.T. The other layers are
qwen3's (q and k normed per head, NeoX rotary). Final norm
token_embd_norm. lfm2moe: layers from leading_dense_block_count take
sigmoid-scored experts, chosen by score + exp_probs_b, renormalized (as
llama.cpp always does) and times expert_weights_scale.
minimax-m2, from HF's MiniMaxM2: q and k RMS-normed across all their
heads (OLMoE's), NeoX rotary on rope.dimension_count, sigmoid experts
chosen by score + exp_probs_b, renormalized, times expert_weights_scale
(glm_mixture).
qwen35, qwen35moe and qwen3next: delta_ref.py's gated delta nets and gated
attention (from HF's Qwen3_5 layers), the MLP's norm named
post_attention_norm; qwen35moe's experts softmax-routed, renormalized,
plus the shared expert scaled by the sigmoid of its gate.
granitehybrid, from HF's GraniteMoeHybridDecoderLayer: a layer whose
attention.head_count_kv is 0 is ssm_ref.py's Mamba-2 mixer (the chunked
SSD scan), the others granite's attention, without rotary positions where
rope.scaling.finetuned is false; granite's multipliers throughout.
nemotron_h and nemotron_h_moe, from HF's NemotronHBlock: one block a
layer, pre-norm (attn_norm) and added to the residual stream: the Mamba-2
mixer, attention without rotary positions, or (ssm_ref.py) the ungated
relu^2 MLP or its experts.

The norm gains are used as the file stores them (llama.cpp's converter
stores Gemma's 1 + w). Local layers: attention.sliding_window_pattern, a
number n (layer i local unless i % n == n - 1) or a bool per layer;
default n = 2 for gemma2 and 6 for gemma3. Gemma 3's local layers rotate
with base 10000 and no scaling; its global ones with rope.freq_base and
the file's linear rope.scaling.factor (positions divided by it).
query_pre_attn_scalar is key_length, but hidden / heads for the 27B
models (62 and 46 layers), whose config says so.

Usage: forward_ref.py MODEL OUT PROMPTS GREEDY [COUNT [TAIL [OUT PROMPTS
GREEDY COUNT TAIL]...]]. PROMPTS is a text file, one prompt per line as
space-separated token ids. For prompt i it writes OUT/logits_i.f32
(little-endian f32, [tokens, vocab], logits at every position; with TAIL >
0 only the last TAIL positions) and, when GREEDY > 0 and i < COUNT
(default: every prompt), OUT/greedy_i.txt: GREEDY lines "token gap", the
greedy continuation and the gap between the top two logits at that step.
Each step runs its new token alone against the keys and values the steps
before it kept: the same float64 arithmetic as recomputing the whole
sequence, up to rounding (the outputs of both ways were identical for
SmolLM2 and Gemma 3 270M), and SmolLM2's reference ran in 20 s instead of
48. Each further group of five arguments is another such job on the same
model, which is read and dequantized once.
"""
import os
import pathlib
import sys

# One BLAS thread unless told otherwise: these matrices are small, and on a
# loaded machine more threads mostly wait on each other.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from gguf import GGUFReader  # noqa: E402
from gguf.constants import GGUFValueType  # noqa: E402
from gguf.quants import dequantize  # noqa: E402

import delta_ref  # noqa: E402
import ssm_ref  # noqa: E402


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            sys.exit(f"missing metadata {key}")
        return default
    value = f.parts[f.data[0]]
    if f.types[0] == GGUFValueType.STRING:
        return bytes(value).decode("utf-8")
    return value.item() if value.size == 1 else value


class Model:
    def __init__(self, path):
        r = GGUFReader(path)
        self.arch = field(r, "general.architecture")
        if self.arch not in ("llama", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "phi3", "gemma2", "gemma3",
                             "granite", "granitemoe", "smollm3", "olmo2", "gpt-oss", "glm4", "glm4moe",
                             "deepseek2", "qwen2vl", "qwen3vl", "qwen3vlmoe", "ernie4_5",
                             "ernie4_5-moe", "seed_oss", "olmoe", "exaone", "exaone4",
                             "mistral3", "hunyuan-dense", "command-r", "cohere2", "lfm2",
                             "lfm2moe", "qwen35", "qwen35moe", "qwen3next", "minimax-m2",
                             "granitehybrid", "nemotron_h", "nemotron_h_moe"):
            sys.exit(f"unsupported architecture {self.arch}")
        a = self.arch
        # GLM-4.5's multi-token-prediction block follows the trunk (HF's
        # Glm4MoeModel runs num_hidden_layers and ignores its weights).
        self.layers = int(field(r, f"{a}.block_count")) - int(field(r, f"{a}.nextn_predict_layers", 0))
        self.hidden = int(field(r, f"{a}.embedding_length"))
        self.heads = int(field(r, f"{a}.attention.head_count"))
        # LFM2's: one per layer, 0 on its convolution layers.
        kv_field = r.fields.get(f"{a}.attention.head_count_kv")
        per_layer = (np.array([int(kv_field.parts[j][0]) for j in kv_field.data])
                     if kv_field is not None else np.array([self.heads]))
        self.kv_heads = int(per_layer.max())
        self.convolves = [len(per_layer) > 1 and int(k) == 0 for k in per_layer] + [False] * self.layers
        self.taps = int(field(r, f"{a}.shortconv.l_cache", 0))
        self.head_dim = int(field(r, f"{a}.attention.key_length", self.hidden // self.heads))
        self.deepseek = a == "deepseek2"
        # Qwen3.5's delta nets and gated attention (delta_ref.py).
        self.qwen35 = a in ("qwen35", "qwen35moe", "qwen3next")
        if self.qwen35:
            self.recurrent = delta_ref.recurrent_flags(r, a, self.layers, field)
            self.delta_shape = delta_ref.DeltaShape(r, a, field)
        self.mamba = a == "granitehybrid"
        self.nemotron = a in ("nemotron_h", "nemotron_h_moe")
        if self.nemotron:
            self.ssm_shape = ssm_ref.MixerShape(r, a, field)
            self.blocks = ssm_ref.block_kinds(r, a, self.layers)
        if self.mamba:
            self.ssm_shape = ssm_ref.MixerShape(r, a, field)
            finetuned = r.fields.get(f"{a}.rope.scaling.finetuned")
            self.rotates = finetuned is None or bool(finetuned.parts[finetuned.data[0]][0])
        if self.deepseek:
            self.kv_rank = int(field(r, f"{a}.attention.kv_lora_rank"))
            self.q_head = int(field(r, f"{a}.attention.key_length_mla", self.head_dim))
            self.v_head = int(field(r, f"{a}.attention.value_length_mla",
                                    field(r, f"{a}.attention.value_length", 0)))
            self.log_mul = float(field(r, f"{a}.rope.scaling.yarn_log_multiplier", 0.0))
            self.gating = int(field(r, f"{a}.expert_gating_func", 1))
            self.groups = int(field(r, f"{a}.expert_group_count", 0))
            self.groups_used = int(field(r, f"{a}.expert_group_used_count", 0))
        elif int(field(r, f"{a}.attention.value_length", self.head_dim)) != self.head_dim:
            sys.exit("value_length != key_length is not supported")
        self.rope_dim = int(field(r, f"{a}.rope.dimension_count", self.head_dim))
        self.base = float(field(r, f"{a}.rope.freq_base", 10000.0))
        # Hunyuan's NTK-aware alpha, where the file has it unfolded.
        alpha = float(field(r, f"{a}.rope.scaling.alpha", 0.0))
        if a == "hunyuan-dense" and alpha > 0:
            self.base *= alpha ** (self.head_dim / (self.head_dim - 2))
        # Cohere's norms are LayerNorms, their epsilon named for that.
        self.cohere = a in ("command-r", "cohere2")
        eps_key = "layer_norm_epsilon" if self.cohere else "layer_norm_rms_epsilon"
        self.eps = float(field(r, f"{a}.attention.{eps_key}"))
        self.base_swa = float(field(r, f"{a}.rope.freq_base_swa", self.base))
        self.context = int(field(r, f"{a}.context_length", 0))
        self.orig_context = int(field(r, f"{a}.rope.scaling.original_context_length", self.context))
        self.attn_factor = float(field(r, f"{a}.rope.scaling.attn_factor", 1.0))
        # Ministral 3's: YaRN's mscale_all_dim, and Llama 4's attention
        # temperature.
        self.mscale_all_dim = float(field(r, f"{a}.rope.scaling.yarn_log_multiplier", 0.0))
        self.temperature = float(field(r, f"{a}.attention.temperature_scale", 0.0))
        self.gemma = a in ("gemma2", "gemma3")
        self.oss = a == "gpt-oss"
        self.granite = a in ("granite", "granitemoe", "granitehybrid")
        self.embedding_scale = float(field(r, f"{a}.embedding_scale", 1.0))
        self.residual_scale = float(field(r, f"{a}.residual_scale", 1.0))
        self.logit_scale = float(field(r, f"{a}.logit_scale", 1.0))
        self.attention_scale = float(field(r, f"{a}.attention.scale", 0.0))
        self.experts = int(field(r, f"{a}.expert_count", 0))
        self.experts_used = int(field(r, f"{a}.expert_used_count", 0))
        self.dense_lead = int(field(r, f"{a}.leading_dense_block_count", 0))
        self.moe_step = int(field(r, f"{a}.interleave_moe_layer_step", 1))
        # Qwen-VL's M-RoPE: the pairs of a head in sections turned by the
        # temporal, height and width positions (HF's
        # apply_multimodal_rotary_pos_emb; Qwen3-VL's interleaved, as its
        # apply_interleaved_mrope).
        sections = r.fields.get(f"{a}.rope.dimension_sections")
        self.mrope = [int(sections.parts[i][0]) for i in sections.data][:3] if sections else None
        self.weights_norm = bool(field(r, f"{a}.expert_weights_norm", a in ("lfm2moe", "minimax-m2")))
        self.weights_scale = float(field(r, f"{a}.expert_weights_scale", 1.0))
        self.linear = 1.0
        self.yarn = None
        scaling = field(r, f"{a}.rope.scaling.type", "none")
        if scaling == "linear":
            self.linear = float(field(r, f"{a}.rope.scaling.factor"))
        elif scaling == "yarn":
            self.yarn = (float(field(r, f"{a}.rope.scaling.factor")),
                         int(field(r, f"{a}.rope.scaling.original_context_length")),
                         float(field(r, f"{a}.rope.scaling.yarn_beta_fast", 32.0)),
                         float(field(r, f"{a}.rope.scaling.yarn_beta_slow", 1.0)))
        self.window = int(field(r, f"{a}.attention.sliding_window", 0))
        pattern = r.fields.get(f"{a}.attention.sliding_window_pattern")
        if pattern is not None and pattern.types[0] == GGUFValueType.ARRAY:
            self.local = [bool(pattern.parts[i][0]) for i in pattern.data]
        else:
            default = {"gemma3": 6, "cohere2": 4, "olmo2": 4}.get(a, 2)
            n = int(field(r, f"{a}.attention.sliding_window_pattern", default))
            self.local = [i % n < n - 1 for i in range(self.layers)]
        windowed = self.gemma or self.oss or a in ("exaone4", "cohere2", "olmo2")
        self.local = [windowed and self.window > 0 and l for l in self.local]
        self.attn_cap = float(field(r, f"{a}.attn_logit_softcapping", 0.0))
        self.final_cap = float(field(r, f"{a}.final_logit_softcapping", 0.0))
        scalar = self.hidden // self.heads if self.layers in (62, 46) and self.gemma else self.head_dim
        self.query_scale = scalar ** -0.5
        self.t = {}
        for t in r.tensors:
            # numpy shape is GGUF dims reversed: [out, in] for a matrix.
            shape = tuple(int(d) for d in reversed(t.shape.tolist()))
            values = dequantize(t.data, t.tensor_type)
            self.t[t.name] = np.asarray(values, dtype=np.float64).reshape(shape)
        self.head = self.t.get("output.weight", self.t["token_embd.weight"])
        self.rope_factors = self.t.get("rope_freqs.weight")
        if self.rope_factors is None and "rope_factors_long.weight" in self.t:
            long = self.context > self.orig_context
            self.rope_factors = self.t["rope_factors_long.weight" if long else "rope_factors_short.weight"]

    def rope(self, x, positions, local=False):
        """x: [tokens, heads, head_dim], rotated in place; `local`: a Gemma 3
        sliding-window layer (base 10000, unscaled) or an OLMo 3 one (HF's
        default rotary of rope_theta: no YaRN)."""
        n = self.rope_dim
        j = np.arange(n // 2, dtype=np.float64)
        base, linear = (10000.0, 1.0) if local and self.arch == "gemma3" else (self.base, self.linear)
        if local and self.arch == "olmo2":
            base = float(self.base_swa)
        freq = base ** (-2.0 * j / n)
        if self.rope_factors is not None:
            freq = freq / self.rope_factors
        magnitude = 1.0
        if self.yarn is not None and not local:
            # HF's _compute_yarn_parameters: find_correction_range (floor,
            # ceil, clipped to the dimensions), linear_ramp_factor, the
            # interpolated and extrapolated frequencies blended by it, and
            # get_mscale's attention factor.
            factor, original, beta_fast, beta_slow = self.yarn
            def correction_dim(turns):
                return n * np.log(original / (turns * 2 * np.pi)) / (2 * np.log(base))
            low = max(np.floor(correction_dim(beta_fast)), 0)
            high = min(np.ceil(correction_dim(beta_slow)), n - 1)
            if low == high:
                high += 0.001
            extrapolation = 1.0 - np.clip((j - low) / (high - low), 0.0, 1.0)
            freq = freq / factor * (1.0 - extrapolation) + freq * extrapolation
            # DeepSeek's magnitude goes to the scores' scale instead;
            # Ministral 3's is HF's get_mscale(factor) / get_mscale(factor,
            # mscale_all_dim).
            magnitude = 1.0 if self.deepseek else 0.1 * np.log(factor) + 1.0
            if self.arch == "mistral3" and self.mscale_all_dim > 0:
                magnitude /= 0.1 * self.mscale_all_dim * np.log(factor) + 1.0
        if self.mrope is not None:
            # A text token's temporal, height and width positions are all
            # its position; pair j turns by the one its section names.
            component = np.zeros(n // 2, dtype=int)
            if self.arch == "qwen2vl":
                component = np.repeat(np.arange(3), self.mrope)[: n // 2]
            else:
                for c, (offset, count) in enumerate([(1, self.mrope[1]), (2, self.mrope[2])], start=1):
                    component[offset : 3 * count : 3] = c
            by_component = np.stack([positions, positions, positions])
            pos = by_component[component].T  # [tokens, n // 2]
            angle = pos.astype(np.float64) / linear * freq[None, :]
        else:
            angle = positions[:, None].astype(np.float64) / linear * freq[None, :]
        attn_factor = 1.0 if local and self.arch == "olmo2" else self.attn_factor
        cos = attn_factor * magnitude * np.cos(angle)[:, None, :]
        sin = attn_factor * magnitude * np.sin(angle)[:, None, :]
        if self.arch in ("llama", "granite", "granitemoe", "granitehybrid", "smollm3", "glm4", "deepseek2",
                         "ernie4_5", "ernie4_5-moe", "mistral3", "command-r", "cohere2"):
            a, b = x[:, :, 0:n:2].copy(), x[:, :, 1:n:2].copy()
            x[:, :, 0:n:2] = a * cos - b * sin
            x[:, :, 1:n:2] = a * sin + b * cos
        else:
            a, b = x[:, :, : n // 2].copy(), x[:, :, n // 2 : n].copy()
            x[:, :, : n // 2] = a * cos - b * sin
            x[:, :, n // 2 : n] = a * sin + b * cos

    def expert(self, p, name, e):
        """Expert e's matrix `name` (gate, up, down) of layer prefix p."""
        stacked = self.t.get(p + f"ffn_{name}_exps.weight")
        return stacked[e] if stacked is not None else self.t[p + f"ffn_{name}.{e}.weight"]

    def oss_mixture(self, p, h):
        """gpt-oss's mixture for normed rows h [tokens, hidden]."""
        w = self.t
        logits = h @ w[p + "ffn_gate_inp.weight"].T + w[p + "ffn_gate_inp.bias"]
        out = np.zeros_like(h)
        for r in range(h.shape[0]):
            top = np.argsort(-logits[r], kind="stable")[: self.experts_used]
            weights = np.exp(logits[r, top] - logits[r, top].max())
            weights /= weights.sum()
            for e, weight in zip(top, weights):
                g = h[r] @ self.expert(p, "gate", e).T + w[p + "ffn_gate_exps.bias"][e]
                u = h[r] @ self.expert(p, "up", e).T + w[p + "ffn_up_exps.bias"][e]
                g, u = np.minimum(g, 7.0), np.clip(u, -7.0, 7.0)
                glu = g / (1.0 + np.exp(-1.702 * g))
                f = ((u + 1.0) * glu) @ self.expert(p, "down", e).T + w[p + "ffn_down_exps.bias"][e]
                out[r] += weight * f
        return out

    def swiglu_expert(self, p, e, h):
        """Expert e's SwiGLU MLP of layer prefix p on rows h."""
        g = h @ self.expert(p, "gate", e).T
        u = h @ self.expert(p, "up", e).T
        return (g / (1.0 + np.exp(-g)) * u) @ self.expert(p, "down", e).T

    def shared_swiglu(self, p, h):
        """The ungated shared expert's SwiGLU MLP of layer prefix p."""
        w = self.t
        g = h @ w[p + "ffn_gate_shexp.weight"].T
        u = h @ w[p + "ffn_up_shexp.weight"].T
        return (g / (1.0 + np.exp(-g)) * u) @ w[p + "ffn_down_shexp.weight"].T

    def glm_mixture(self, p, h):
        """GLM-4.5's mixture (HF's Glm4MoeMoE) for normed rows h."""
        w = self.t
        scores = 1.0 / (1.0 + np.exp(-(h @ w[p + "ffn_gate_inp.weight"].T)))
        choice = scores + w[p + "exp_probs_b.bias"]
        out = np.zeros_like(h)
        for r in range(h.shape[0]):
            top = np.argsort(-choice[r], kind="stable")[: self.experts_used]
            weights = scores[r, top]
            if self.weights_norm:
                weights = weights / (weights.sum() + 1e-20)
            for e, weight in zip(top, weights * self.weights_scale):
                out[r] += weight * self.swiglu_expert(p, e, h[r])
        if p + "ffn_gate_shexp.weight" not in w:  # LFM2-MoE's: no shared expert
            return out
        return out + self.shared_swiglu(p, h)

    def deepseek_mixture(self, p, h):
        """DeepSeek's gate and experts (V2's and V3's) for normed rows h."""
        w = self.t
        logits = h @ w[p + "ffn_gate_inp.weight"].T
        if self.gating == 2:
            scores = 1.0 / (1.0 + np.exp(-logits))
        else:
            scores = np.exp(logits - logits.max(axis=1, keepdims=True))
            scores /= scores.sum(axis=1, keepdims=True)
        bias = w.get(p + "exp_probs_b.bias")
        choice = scores + (bias if bias is not None else 0.0)
        out = np.zeros_like(h)
        for r in range(h.shape[0]):
            row = choice[r].copy()
            if self.groups > 1:
                grouped = row.reshape(self.groups, -1)
                best = 2 if bias is not None else 1
                group_scores = -np.sort(-grouped, axis=1)[:, :best].sum(axis=1)
                keep = np.argsort(-group_scores, kind="stable")[: self.groups_used]
                mask = np.full(self.groups, True)
                mask[keep] = False
                grouped[mask] = -np.inf
                row = grouped.reshape(-1)
            top = np.argsort(-row, kind="stable")[: self.experts_used]
            weights = scores[r, top]
            if self.weights_norm:
                weights = weights / weights.sum()
            for e, weight in zip(top, weights * self.weights_scale):
                out[r] += weight * self.swiglu_expert(p, e, h[r])
        return out + self.shared_swiglu(p, h)

    def deepseek_attention(self, p, h, positions, mask, cache, i):
        """Latent attention (decompressed) of normed rows h; the output
        projection's rows."""
        w, t = self.t, h.shape[0]
        heads, rope, rank = self.heads, self.rope_dim, self.kv_rank
        nope, v = self.q_head - rope, self.v_head
        if p + "attn_q_a.weight" in w:
            q = self.norm(h @ w[p + "attn_q_a.weight"].T, w[p + "attn_q_a_norm.weight"])
            q = q @ w[p + "attn_q_b.weight"].T
        else:
            q = h @ w[p + "attn_q.weight"].T
        q = q.reshape(t, heads, nope + rope)
        q_nope, q_pe = q[:, :, :nope], q[:, :, nope:].copy()
        ckv = h @ w[p + "attn_kv_a_mqa.weight"].T
        c, k_pe = ckv[:, :rank], ckv[:, rank:].reshape(t, 1, rope).copy()
        c = self.norm(c, w[p + "attn_kv_a_norm.weight"])
        if p + "attn_kv_b.weight" in w:
            kv_b = w[p + "attn_kv_b.weight"].reshape(heads, nope + v, rank)
        else:
            k_b = w[p + "attn_k_b.weight"]  # [heads, rank, nope]
            kv_b = np.concatenate([k_b.transpose(0, 2, 1), w[p + "attn_v_b.weight"]], axis=1)
        kv = np.einsum("tr,hdr->thd", c, kv_b)
        k_nope, value = kv[:, :, :nope], kv[:, :, nope:]
        self.rope(q_pe, positions)
        self.rope(k_pe, positions)
        query = np.concatenate([q_nope, q_pe], axis=2)
        key = np.concatenate([k_nope, np.repeat(k_pe, heads, axis=1)], axis=2)
        if cache is not None:
            key, value = cache.extend(i, key, value)
        scale = self.q_head ** -0.5
        if self.yarn is not None:
            mscale = self.attn_factor * (1.0 + self.log_mul * np.log(self.yarn[0]))
            scale *= mscale * mscale
        out = np.empty((t, heads, v))
        for hq in range(heads):
            s = query[:, hq, :] @ key[:, hq, :].T * scale + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, hq, :] = (s / s.sum(axis=1, keepdims=True)) @ value[:, hq, :]
        return out.reshape(t, heads * v) @ w[p + "attn_output.weight"].T

    def mixture(self, p, h):
        """The mixture of experts' output for normed rows h [tokens, hidden]."""
        if self.oss:
            return self.oss_mixture(p, h)
        if self.arch in ("glm4moe", "lfm2moe", "minimax-m2"):
            return self.glm_mixture(p, h)
        if self.deepseek:
            return self.deepseek_mixture(p, h)
        logits = h @ self.t[p + "ffn_gate_inp.weight"].T
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        # ERNIE's load-balancing bias moves the choice, not the weights.
        choice = probs + self.t.get(p + "exp_probs_b.bias", 0.0)
        out = np.zeros_like(h)
        for r in range(h.shape[0]):
            top = np.argsort(-choice[r], kind="stable")[: self.experts_used]
            weights = probs[r, top]
            if self.arch not in ("qwen2moe", "olmoe"):  # norm_topk_prob
                weights = weights / weights.sum()
            for e, weight in zip(top, weights):
                g = h[r] @ self.expert(p, "gate", e).T
                u = h[r] @ self.expert(p, "up", e).T
                out[r] += weight * ((g / (1.0 + np.exp(-g)) * u) @ self.expert(p, "down", e).T)
        if p + "ffn_up_shexp.weight" in self.t:
            g = h @ self.t[p + "ffn_gate_shexp.weight"].T
            u = h @ self.t[p + "ffn_up_shexp.weight"].T
            f = (g / (1.0 + np.exp(-g)) * u) @ self.t[p + "ffn_down_shexp.weight"].T
            gate_inp = self.t.get(p + "ffn_gate_inp_shexp.weight")
            if gate_inp is None:
                out += f
            else:
                out += f / (1.0 + np.exp(-(h @ gate_inp.reshape(-1))))[:, None]
        return out

    def short_conv(self, p, h, cache, i):
        """LFM2's convolution block of normed rows h, which follow the
        tokens whose B * x `cache` keeps: the output projection's rows."""
        w, hidden, taps = self.t, self.hidden, self.taps
        bcx = h @ w[p + "shortconv.in_proj.weight"].T
        b, c, xs = bcx[:, :hidden], bcx[:, hidden : 2 * hidden], bcx[:, 2 * hidden :]
        bx = b * xs
        if cache is not None:
            bx = cache.extend_conv(i, bx)
        kernel = w[p + "shortconv.conv.weight"]  # [hidden, taps]
        # Conv1d(padding=taps - 1)[..., :len]: taps - 1 zeros before the
        # first token; output t reads inputs t - taps + 1 ..= t.
        padded = np.concatenate([np.zeros((taps - 1, hidden)), bx])
        conv = sum(kernel[:, k] * padded[k : k + len(bx)] for k in range(taps))
        return (c * conv[-len(h):]) @ w[p + "shortconv.out_proj.weight"].T

    def norm(self, x, gain):
        if self.cohere:
            # CohereLayerNorm: the mean taken off, no bias.
            x = x - np.mean(x, axis=-1, keepdims=True)
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * gain

    def forward(self, tokens, last_only=False, tail=0, cache=None):
        """Logits of `tokens`, which follow the `cache.length` tokens whose
        keys and values `cache` holds (a KvCache, extended by this call;
        None: `tokens` is the whole sequence)."""
        t, w = len(tokens), self.t
        d, group = self.head_dim, self.heads // self.kv_heads
        x = w["token_embd.weight"][np.asarray(tokens)]
        if self.gemma:
            x = x * np.sqrt(self.hidden)
        if self.granite:
            x = x * self.embedding_scale
        start = cache.length if cache is not None else 0
        positions = np.arange(start, start + t)
        # Query at position p sees keys 0 ..= p; on local layers only
        # p - window + 1 ..= p.
        query, key = positions[:, None], np.arange(start + t)[None, :]
        causal = np.where(key <= query, 0.0, -np.inf)
        windowed = np.where((key <= query) & (key > query - self.window), 0.0, -np.inf)
        for i in range(self.layers):
            local = self.local[i]
            mask = windowed if local else causal
            p = f"blk.{i}."
            if self.nemotron and self.blocks[i] != "*":
                h = self.norm(x, w[p + "attn_norm.weight"])
                if self.blocks[i] == "M":
                    x = x + ssm_ref.mamba2(self, self.ssm_shape, p, h, cache, i)
                elif self.experts > 0:
                    x = x + ssm_ref.relu2_mixture(self, p, h)
                else:
                    x = x + ssm_ref.relu2_mlp(self, p, h)
                continue
            if self.mamba and self.convolves[i]:
                h = self.norm(x, w[p + "attn_norm.weight"])
                x = x + self.residual_scale * ssm_ref.mamba2(self, self.ssm_shape, p, h, cache, i)
                h = self.norm(x, w[p + "ffn_norm.weight"])
                if self.experts > 0:
                    f = self.mixture(p, h)
                else:
                    g = h @ w[p + "ffn_gate.weight"].T
                    f = (g / (1.0 + np.exp(-g)) * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
                x = x + self.residual_scale * f
                continue
            # LFM2's convolution layers, DeepSeek's latent attention and
            # Qwen3.5's layers: the operator, then a dense MLP or the
            # mixture, each pre-norm.
            if self.convolves[i] or self.deepseek or self.qwen35:
                h = self.norm(x, w[p + "attn_norm.weight"])
                if self.convolves[i]:
                    x = x + self.short_conv(p, h, cache, i)
                elif self.qwen35 and self.recurrent[i]:
                    x = x + delta_ref.delta_net(self, self.delta_shape, p, h, cache, i)
                elif self.qwen35:
                    x = x + delta_ref.gated_attention(self, p, h, positions, causal, cache, i)
                else:
                    x = x + self.deepseek_attention(p, h, positions, causal, cache, i)
                h = self.norm(x, w[p + ("post_attention_norm.weight" if self.qwen35 else "ffn_norm.weight")])
                if self.experts > 0 and i >= self.dense_lead:
                    x = x + self.mixture(p, h)
                else:
                    g = h @ w[p + "ffn_gate.weight"].T
                    u = h @ w[p + "ffn_up.weight"].T
                    x = x + (g / (1.0 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
                continue
            # OLMo 2's and EXAONE 4's: no norm before either block, one
            # after each (HF's Olmo2DecoderLayer, Exaone4DecoderLayer).
            olmo2 = self.arch in ("olmo2", "exaone4")
            h = x if olmo2 else self.norm(x, w[p + "attn_norm.weight"])
            if p + "attn_qkv.weight" in w:
                qkv = h @ w[p + "attn_qkv.weight"].T + w.get(p + "attn_qkv.bias", 0.0)
                nq, nkv = self.heads * d, self.kv_heads * d
                q, k, v = qkv[:, :nq], qkv[:, nq : nq + nkv], qkv[:, nq + nkv :]
            else:
                q = h @ w[p + "attn_q.weight"].T + w.get(p + "attn_q.bias", 0.0)
                k = h @ w[p + "attn_k.weight"].T + w.get(p + "attn_k.bias", 0.0)
                v = h @ w[p + "attn_v.weight"].T + w.get(p + "attn_v.bias", 0.0)
            if self.arch in ("olmo2", "olmoe", "minimax-m2"):
                q = self.norm(q, w[p + "attn_q_norm.weight"])
                k = self.norm(k, w[p + "attn_k_norm.weight"])
            q = q.reshape(t, self.heads, d)
            k = k.reshape(t, self.kv_heads, d)
            v = v.reshape(t, self.kv_heads, d)
            if self.arch in ("qwen3", "qwen3moe", "qwen3vl", "qwen3vlmoe", "gemma3", "exaone4", "lfm2",
                             "lfm2moe") or p + "attn_q_norm.weight" in w and self.arch in ("glm4moe", "command-r"):
                # Command R+'s gains are [heads, head_dim]: each head its own.
                q = self.norm(q, w[p + "attn_q_norm.weight"])
                k = self.norm(k, w[p + "attn_k_norm.weight"])
            # EXAONE 4's hybrid models: no rotary on the global layers
            # (HF's "global NoPE").
            # Command R7B's: none on its full-attention layers.
            nope = (self.arch == "exaone4" and any(self.local) or self.arch == "cohere2") and not local
            nope = nope or self.mamba and not self.rotates or self.nemotron
            if not (self.arch == "smollm3" and (i + 1) % 4 == 0) and not nope:
                # Only Gemma 3's local layers rotate differently.
                self.rope(q, positions, local and (self.gemma or self.arch == "olmo2"))
                self.rope(k, positions, local and (self.gemma or self.arch == "olmo2"))
            if self.arch == "hunyuan-dense":
                # HunYuanDenseV1Attention: query_layernorm and
                # key_layernorm after the rotary.
                q = self.norm(q, w[p + "attn_q_norm.weight"])
                k = self.norm(k, w[p + "attn_k_norm.weight"])
            if self.arch == "mistral3" and self.temperature > 0:
                # HF's get_llama_4_attn_scale: 1 + beta * log(1 + floor(p /
                # original_max_position_embeddings)), on the queries.
                steps = np.floor(positions / self.orig_context)
                q = q * (1.0 + self.temperature * np.log1p(steps))[:, None, None]
            if cache is not None:
                k, v = cache.extend(i, k, v)
            out = np.empty((t, self.heads, d))
            scale = self.query_scale if self.gemma else 1.0 / np.sqrt(d)
            if (self.granite or self.nemotron or self.arch in ("seed_oss", "mistral3")) and self.attention_scale > 0:
                scale = self.attention_scale
            for hq in range(self.heads):
                hk = hq // group
                s = q[:, hq, :] @ k[:, hk, :].T * scale
                if self.attn_cap > 0:
                    s = self.attn_cap * np.tanh(s / self.attn_cap)
                s = s + mask
                sinks = w.get(p + "attn_sinks.weight")
                if sinks is not None:
                    # The sink: one more column, dropped after the softmax.
                    s = np.concatenate([s, np.full((t, 1), sinks[hq])], axis=1)
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s = s / s.sum(axis=1, keepdims=True)
                if sinks is not None:
                    s = s[:, :-1]
                out[:, hq, :] = s @ v[:, hk, :]
            o = out.reshape(t, self.heads * d) @ w[p + "attn_output.weight"].T
            o = o + w.get(p + "attn_output.bias", 0.0)
            if self.gemma or olmo2 or self.arch == "glm4":
                o = self.norm(o, w[p + "post_attention_norm.weight"])
            if self.granite:
                o = o * self.residual_scale
            x = x + o
            if self.nemotron:  # attention is the layer's one block
                continue
            ffn_norm = ("post_attention_norm.weight" if self.oss or self.arch in ("glm4moe", "seed_oss")
                        else "ffn_norm.weight")
            # Cohere's parallel layer: the MLP reads the attention's normed
            # rows (CohereDecoderLayer adds both blocks to the residual).
            if not self.cohere:
                h = x if olmo2 else self.norm(x, w[p + ffn_norm])
            if self.experts > 0 and i >= self.dense_lead and (i + 1) % self.moe_step == 0:
                f = self.mixture(p, h)
                x = x + (f * self.residual_scale if self.granite else f)
                continue
            if p + "ffn_gate.weight" not in w:  # phi3's and GLM-4's fused gate and up
                gu = h @ w[p + "ffn_up.weight"].T
                g, u = gu[:, : gu.shape[1] // 2], gu[:, gu.shape[1] // 2 :]
            else:
                g = h @ w[p + "ffn_gate.weight"].T
                u = h @ w[p + "ffn_up.weight"].T
            if self.gemma:
                # GELU, tanh approximation (gelu_pytorch_tanh).
                act = 0.5 * g * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g + 0.044715 * g**3)))
                f = self.norm((act * u) @ w[p + "ffn_down.weight"].T, w[p + "post_ffw_norm.weight"])
            else:
                f = (g / (1.0 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
            if olmo2 or self.arch == "glm4":
                f = self.norm(f, w[p + "post_ffw_norm.weight"])
            if self.granite:
                f = f * self.residual_scale
            x = x + f
        if cache is not None:
            cache.length += t
        if last_only:
            x = x[-1:]
        elif tail > 0:
            x = x[-tail:]
        final_norm = "token_embd_norm.weight" if self.arch in ("lfm2", "lfm2moe") else "output_norm.weight"
        logits = self.norm(x, w[final_norm]) @ self.head.T
        if self.granite:
            logits = logits / self.logit_scale
        if self.cohere and self.logit_scale != 0:  # 0: unset, as llama.cpp reads it
            logits = logits * self.logit_scale
        if self.final_cap > 0:
            logits = self.final_cap * np.tanh(logits / self.final_cap)
        return logits


class KvCache:
    """Each layer's keys (rotated) and values of the tokens run so far."""

    def __init__(self, layers):
        self.length = 0
        self.k = [None] * layers
        self.v = [None] * layers
        self.conv = [None] * layers

    def extend(self, layer, k, v):
        """Appends `k`, `v` ([tokens, kv_heads, head_dim]) to layer's and
        returns the layer's whole keys and values."""
        if self.k[layer] is not None:
            k = np.concatenate([self.k[layer], k])
            v = np.concatenate([self.v[layer], v])
        self.k[layer], self.v[layer] = k, v
        return k, v


    def extend_conv(self, layer, bx):
        """Appends a recurrent layer's input rows (LFM2's B * x, Qwen3.5's
        delta-net inputs) to layer's and returns them all."""
        if self.conv[layer] is not None:
            bx = np.concatenate([self.conv[layer], bx])
        self.conv[layer] = bx
        return bx


def run(model, out, prompts_file, greedy, count, tail) -> None:
    prompts = [
        [int(tok) for tok in line.split()]
        for line in prompts_file.read_text().splitlines()
        if line.strip()
    ]
    count = len(prompts) if count is None else count
    for i, tokens in enumerate(prompts):
        cache = KvCache(model.layers)
        logits = model.forward(tokens, tail=tail, cache=cache)
        logits.astype("<f4").tofile(out / f"logits_{i}.f32")
        if greedy > 0 and i < count:
            row, lines = logits[-1], []
            for step in range(greedy):
                top = np.argsort(row)[::-1][:2]
                lines.append(f"{int(top[0])} {float(row[top[0]] - row[top[1]]):.6f}")
                if step + 1 < greedy:
                    row = model.forward([int(top[0])], cache=cache)[0]
            (out / f"greedy_{i}.txt").write_text("\n".join(lines) + "\n")


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 4 or (len(args) > 6 and (len(args) - 1) % 5):
        sys.exit(__doc__.split("Usage: ")[1].split(". PROMPTS")[0])
    model = Model(args[0])
    jobs = [args[i : i + 5] for i in range(1, len(args), 5)]
    for job in jobs:
        out, prompts, greedy = pathlib.Path(job[0]), pathlib.Path(job[1]), int(job[2])
        count = int(job[3]) if len(job) > 3 else None
        tail = int(job[4]) if len(job) > 4 else 0
        run(model, out, prompts, greedy, count, tail)


if __name__ == "__main__":
    main()
