"""Mamba-2's mixer (`granitehybrid`, `nemotron_h`) for forward_ref.py,
written from HF's Mamba2Mixer / GraniteMoeHybridMambaLayer torch_forward
(transformers' modeling_granitemoehybrid.py), its path without a cache:
the chunked state-space duality (SSD), not the token-by-token recurrence
the engine runs, so the two agree only if both compute the same scan.

    z, xBC, dt = split(h @ in_proj.T, [inner, inner + 2 G N, heads])
    xBC = silu(causal depthwise conv1d(xBC) + conv bias)
    x, B, C = split(xBC, [inner, G N, G N]); B, C repeated to each head
              (head h reads group h // (heads / G))
    dt = softplus(dt + dt_bias); A = -exp(A_log) (ssm_a, as converted)
    y = SSD(x * dt, A * dt, B, C) + D * x, in chunks of CHUNK tokens:
        within a chunk, y_diag = (C B^T * exp(segsum(A dt))) (x dt);
        across chunks, each chunk's final state decayed into the next
    y = rmsnorm over each group's share(y * silu(z)) * ssm_norm
    out = y @ out_proj.T

Here it runs over the sequence's whole history at every call (the cache
keeps the layer's input rows, never a state).
"""
import numpy as np

# Small, so the tiny tests' prompts span several chunks.
CHUNK = 4


class MixerShape:
    def __init__(self, reader, arch, field):
        self.taps = int(field(reader, f"{arch}.ssm.conv_kernel"))
        self.n = int(field(reader, f"{arch}.ssm.state_size"))
        self.groups = int(field(reader, f"{arch}.ssm.group_count"))
        self.heads = int(field(reader, f"{arch}.ssm.time_step_rank"))
        self.inner = int(field(reader, f"{arch}.ssm.inner_size"))
        self.hd = self.inner // self.heads


def silu(x):
    return x / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def segment_sum(x):
    """x [..., T] -> [..., T, T]: entry (i, j) the sum of x[j + 1 ..= i],
    -inf above the diagonal (HF's segment_sum)."""
    t = x.shape[-1]
    cs = np.cumsum(x, axis=-1)
    out = cs[..., :, None] - cs[..., None, :]
    return np.where(np.tril(np.ones((t, t), dtype=bool)), out, -np.inf)


def ssd(x, a, b, c):
    """The chunked scan from a zero state. x [L, H, P] (already times dt),
    a [L, H] (A dt), b and c [L, H, N]: y [L, H, P]."""
    length = len(x)
    pad = (CHUNK - length % CHUNK) % CHUNK

    def chunks(t):
        t = np.concatenate([t, np.zeros((pad,) + t.shape[1:])])
        return t.reshape((-1, CHUNK) + t.shape[1:])

    x, a, b, c = chunks(x), chunks(a), chunks(b), chunks(c)
    a = a.transpose(2, 0, 1)  # [H, chunks, CHUNK]
    a_cumsum = np.cumsum(a, axis=-1)
    # Within each chunk: the quadratic (attention-like) form.
    decay = np.exp(segment_sum(a))  # [H, chunks, l, s]
    y_diag = np.einsum("clhn,cshn,hcls,cshp->clhp", c, b, decay, x)
    # Each chunk's final state, then the states passed from chunk to chunk.
    decay_states = np.exp(a_cumsum[:, :, -1:] - a_cumsum)
    states = np.einsum("clhn,hcl,clhp->chpn", b, decay_states, x)
    states = np.concatenate([np.zeros_like(states[:1]), states])
    decay_chunk = np.exp(segment_sum(np.pad(a_cumsum[:, :, -1], ((0, 0), (1, 0)))))
    states = np.einsum("hzc,chpn->zhpn", decay_chunk, states)[:-1]
    # The state entering each chunk, read by its tokens.
    y_off = np.einsum("clhn,chpn,hcl->clhp", c, states, np.exp(a_cumsum))
    y = (y_diag + y_off).reshape((-1,) + y_diag.shape[2:])
    return y[:length]


def mamba2(model, shape, p, h, cache, i):
    """Layer prefix p's Mamba-2 mixer of normed rows h, which follow the
    tokens whose input rows `cache` keeps (None: h is the whole sequence):
    out_proj's rows."""
    w, s = model.t, shape
    gn = s.groups * s.n
    rows = h @ w[p + "ssm_in.weight"].T
    if cache is not None:
        rows = cache.extend_conv(i, rows)
    n = len(rows)
    z = rows[:, : s.inner]
    xbc = rows[:, s.inner : 2 * s.inner + 2 * gn]
    dt = rows[:, 2 * s.inner + 2 * gn :]
    kernel = w[p + "ssm_conv1d.weight"]  # [channels, taps]
    padded = np.concatenate([np.zeros((s.taps - 1, xbc.shape[1])), xbc])
    conv = sum(kernel[:, k] * padded[k : k + n] for k in range(s.taps))
    conv = silu(conv + w.get(p + "ssm_conv1d.bias", 0.0))
    x = conv[:, : s.inner].reshape(n, s.heads, s.hd)
    per = s.heads // s.groups
    b = np.repeat(conv[:, s.inner : s.inner + gn].reshape(n, s.groups, s.n), per, axis=1)
    c = np.repeat(conv[:, s.inner + gn :].reshape(n, s.groups, s.n), per, axis=1)
    dt = softplus(dt + w[p + "ssm_dt.bias"])
    a = w[p + "ssm_a"].reshape(s.heads)
    y = ssd(x * dt[:, :, None], a * dt, b, c)
    y = y + w[p + "ssm_d"].reshape(s.heads)[:, None] * x
    y = y.reshape(n, s.inner) * silu(z)
    groups = y.reshape(n, s.groups, s.inner // s.groups)
    groups = groups / np.sqrt(np.mean(groups * groups, axis=-1, keepdims=True) + model.eps)
    y = groups.reshape(n, s.inner) * w[p + "ssm_norm.weight"].reshape(s.inner)
    return (y @ w[p + "ssm_out.weight"].T)[-len(h):]


def block_kinds(reader, arch, layers):
    """Nemotron-H's layer kinds, from the converter's per-layer arrays
    (HF's hybrid_override_pattern): "M" where head_count_kv and
    feed_forward_length are both 0, "*" (attention) where head_count_kv is
    not, "-" (an MLP or experts) elsewhere."""
    def per_layer(key):
        f = reader.fields[f"{arch}.{key}"]
        return [int(f.parts[j][0]) for j in f.data]
    kv, ffn = per_layer("attention.head_count_kv"), per_layer("feed_forward_length")
    return ["*" if kv[i] > 0 else "-" if ffn[i] > 0 else "M" for i in range(layers)]


def relu2(x):
    return np.maximum(x, 0.0) ** 2


def relu2_mlp(model, p, h, name=""):
    """HF's NemotronHMLP of normed rows h: down(relu(up(h))^2), of the
    layer's MLP or (name "_shexp") its shared expert."""
    w = model.t
    return relu2(h @ w[p + f"ffn_up{name}.weight"].T) @ w[p + f"ffn_down{name}.weight"].T


def relu2_mixture(model, p, h):
    """HF's NemotronHMOE of normed rows h: sigmoid scores, the top
    expert_used_count by score + e_score_correction_bias (exp_probs_b),
    their scores renormalized where norm_topk_prob (expert_weights_norm),
    times routed_scaling_factor (expert_weights_scale); each expert a
    NemotronHMLP; plus the shared expert."""
    w = model.t
    scores = 1.0 / (1.0 + np.exp(-(h @ w[p + "ffn_gate_inp.weight"].T)))
    choice = scores + w[p + "exp_probs_b.bias"]
    out = np.zeros_like(h)
    for r in range(h.shape[0]):
        top = np.argsort(-choice[r], kind="stable")[: model.experts_used]
        weights = scores[r, top]
        if model.weights_norm:
            weights = weights / (weights.sum() + 1e-20)
        for e, weight in zip(top, weights * model.weights_scale):
            up, down = w[p + "ffn_up_exps.weight"][e], w[p + "ffn_down_exps.weight"][e]
            out[r] += weight * (relu2(h[r] @ up.T) @ down.T)
    return out + relu2_mlp(model, p, h, "_shexp")
