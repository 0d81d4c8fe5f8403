"""Qwen3.5's layers (`qwen35`, `qwen35moe`) for forward_ref.py, written from
HF's Qwen3_5GatedDeltaNet and Qwen3_5Attention (transformers'
modeling_qwen3_5.py), not from the engine's code.

Gated attention: attn_q's rows per head are the query then its output
gate (HF's q_proj viewed [heads, 2 * head_dim] and chunked); q and k are
RMS-normed per head, rotated, attended, and the output is multiplied by
sigmoid(gate) before attn_output.

Gated delta net (HF's slow path, torch_recurrent_gated_delta_rule): the
layer's queries, keys and values go through a causal depthwise conv of
ssm.conv_kernel taps and a SiLU, q and k are L2-normed (eps 1e-6) and q
divided by sqrt(head_k_dim); every token decays each value head's
[head_k_dim, head_v_dim] state by exp(g), adds k outer (v - S^T k) * beta
and reads S^T q, from a zero state at the sequence's first token. The
output is RMS-normed per head by ssm_norm and multiplied by silu(z).
Here the recurrence is run over the sequence's whole history at every
call (the cache keeps the layer's inputs, never a state).

Value heads: HF groups them, each key head serving num_v / num_k
consecutive value heads (repeat_interleave). llama.cpp's converter
(_LinearAttentionVReorderBase) stores Qwen3.5's tiled instead: file head
j = v * num_k + g is HF's head g * (num_v / num_k) + v. The reference
reads the file's value rows, z rows, beta and alpha rows, A, dt_bias,
the conv's value channels and ssm_out's columns back into HF's order
and then computes as HF does.

qwen3next (HF's Qwen3NextGatedDeltaNet): the value heads stay grouped, and
one product gives beta and alpha (ssm_beta_alpha: in_proj_ba, viewed
[num_k, 2 * num_v / num_k], each group's betas then its alphas).
"""
import numpy as np


def recurrent_flags(reader, arch, layers, field):
    """Which of the trunk's layers are delta nets: the converter's
    attention.recurrent_layers, else every layer but each
    full_attention_interval-th (HF's layer_types)."""
    f = reader.fields.get(f"{arch}.attention.recurrent_layers")
    if f is not None:
        return [bool(f.parts[j][0]) for j in f.data][:layers]
    n = int(field(reader, f"{arch}.full_attention_interval", 4))
    return [(i + 1) % n != 0 for i in range(layers)]


class DeltaShape:
    def __init__(self, reader, arch, field):
        self.taps = int(field(reader, f"{arch}.ssm.conv_kernel"))
        self.dk = int(field(reader, f"{arch}.ssm.state_size"))
        self.nk = int(field(reader, f"{arch}.ssm.group_count"))
        self.nv = int(field(reader, f"{arch}.ssm.time_step_rank"))
        self.dv = int(field(reader, f"{arch}.ssm.inner_size")) // self.nv
        self.grouped = arch == "qwen3next"

    def hf_heads(self):
        """hf[j]: HF's value head for the file's value head j."""
        per = self.nv // self.nk
        if self.grouped:
            return np.arange(self.nv)
        return np.array([(j % self.nk) * per + j // self.nk for j in range(self.nv)])

    def to_hf(self, x, width, axis=-1):
        """x's value-head blocks (each `width` along `axis`) in HF's order."""
        x = np.moveaxis(x, axis, -1)
        blocks = x.reshape(x.shape[:-1] + (self.nv, width))
        out = np.empty_like(blocks)
        out[..., self.hf_heads(), :] = blocks
        return np.moveaxis(out.reshape(x.shape), -1, axis)


def rms(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def silu(x):
    return x / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def delta_net(model, shape, p, h, cache, i):
    """Layer prefix p's gated delta net of normed rows h, which follow the
    tokens whose inputs `cache` keeps (None: h is the whole sequence):
    ssm_out's rows."""
    w, s = model.t, shape
    kw, vw = s.nk * s.dk, s.nv * s.dv
    mixed = h @ w[p + "attn_qkv.weight"].T
    if s.grouped:
        ba = (h @ w[p + "ssm_beta_alpha.weight"].T).reshape(len(h), s.nk, -1)
        per = s.nv // s.nk
        b, a = ba[:, :, :per].reshape(len(h), s.nv), ba[:, :, per:].reshape(len(h), s.nv)
    else:
        b = h @ w[p + "ssm_beta.weight"].T
        a = h @ w[p + "ssm_alpha.weight"].T
    rows = np.concatenate([mixed, b, a], axis=1)
    if cache is not None:
        rows = cache.extend_conv(i, rows)
    mixed, b, a = rows[:, : 2 * kw + vw], rows[:, 2 * kw + vw : 2 * kw + vw + s.nv], rows[:, -s.nv:]
    n = len(rows)
    kernel = w[p + "ssm_conv1d.weight"]  # [channels, taps]
    padded = np.concatenate([np.zeros((s.taps - 1, mixed.shape[1])), mixed])
    conv = silu(sum(kernel[:, k] * padded[k : k + n] for k in range(s.taps)))
    q = conv[:, :kw].reshape(n, s.nk, s.dk)
    k = conv[:, kw : 2 * kw].reshape(n, s.nk, s.dk)
    v = s.to_hf(conv[:, 2 * kw :], s.dv).reshape(n, s.nv, s.dv)
    beta = 1.0 / (1.0 + np.exp(-s.to_hf(b, 1)))
    A = s.to_hf(w[p + "ssm_a"], 1)  # -exp(A_log), as converted
    g = A * softplus(s.to_hf(a, 1) + s.to_hf(w[p + "ssm_dt.bias"], 1))
    per = s.nv // s.nk
    q, k = np.repeat(q, per, axis=1), np.repeat(k, per, axis=1)
    q = q / np.sqrt(np.sum(q * q, axis=-1, keepdims=True) + 1e-6) / np.sqrt(s.dk)
    k = k / np.sqrt(np.sum(k * k, axis=-1, keepdims=True) + 1e-6)
    state = np.zeros((s.nv, s.dk, s.dv))
    out = np.zeros((n, s.nv, s.dv))
    for t in range(n):
        state = state * np.exp(g[t])[:, None, None]
        kv_mem = np.einsum("hkv,hk->hv", state, k[t])
        delta = (v[t] - kv_mem) * beta[t][:, None]
        state = state + k[t][:, :, None] * delta[:, None, :]
        out[t] = np.einsum("hkv,hk->hv", state, q[t])
    out = out[-len(h):]
    z = s.to_hf(h @ w[p + "attn_gate.weight"].T, s.dv).reshape(len(h), s.nv, s.dv)
    y = rms(out, model.eps) * w[p + "ssm_norm.weight"] * silu(z)
    w_out = s.to_hf(w[p + "ssm_out.weight"], s.dv, axis=1)
    return y.reshape(len(h), vw) @ w_out.T


def gated_attention(model, p, h, positions, mask, cache, i):
    """Layer prefix p's gated attention of normed rows h: attn_output's
    rows."""
    w, t, d = model.t, len(h), model.head_dim
    qg = (h @ w[p + "attn_q.weight"].T).reshape(t, model.heads, 2 * d)
    q, gate = qg[:, :, :d].copy(), qg[:, :, d:]
    k = (h @ w[p + "attn_k.weight"].T).reshape(t, model.kv_heads, d)
    v = (h @ w[p + "attn_v.weight"].T).reshape(t, model.kv_heads, d)
    q = rms(q, model.eps) * w[p + "attn_q_norm.weight"]
    k = rms(k, model.eps) * w[p + "attn_k_norm.weight"]
    model.rope(q, positions)
    model.rope(k, positions)
    if cache is not None:
        k, v = cache.extend(i, k, v)
    group = model.heads // model.kv_heads
    out = np.empty((t, model.heads, d))
    for hq in range(model.heads):
        s = q[:, hq, :] @ k[:, hq // group, :].T / np.sqrt(d) + mask
        s = np.exp(s - s.max(axis=1, keepdims=True))
        out[:, hq, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, hq // group, :]
    out = out / (1.0 + np.exp(-gate))
    return out.reshape(t, model.heads * d) @ w[p + "attn_output.weight"].T
