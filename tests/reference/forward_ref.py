"""An independent forward pass of a `llama` or `qwen2` GGUF model in NumPy
(float64), for host/engine/tests/real_model.rs and synthetic_gguf.rs.

Written from the architectures' definitions over the tensors that
`gguf.quants.dequantize` gives, not from the Rust engine:

    x = embed[tokens]
    per layer:  h = rmsnorm(x) * attn_norm
                q, k, v = h @ Wq.T (+ bq), h @ Wk.T (+ bk), h @ Wv.T (+ bv)
                rotary on q and k (first rope.dimension_count dims of a head)
                x += softmax(q k^T / sqrt(head_dim), causal) v  @ Wo.T
                h = rmsnorm(x) * ffn_norm
                x += (silu(h @ Wg.T) * (h @ Wu.T)) @ Wd.T
    logits = (rmsnorm(x) * output_norm) @ (output or token_embd).T

Rotary: `llama` files hold Q/K rows as llama.cpp's converter permuted them
for its interleaved-pair mode, so pairs are (2j, 2j+1), applied to the
file's rows as they are; `qwen2` uses the NeoX mode, pairs (j, j + n/2).
Angle j at position p is p * base^(-2j/n) / rope_freqs[j] (rope_freqs only
where the file has it).

Usage: forward_ref.py MODEL OUT PROMPTS GREEDY [COUNT]. PROMPTS is a text
file, one prompt per line as space-separated token ids. For prompt i it
writes OUT/logits_i.f32 (little-endian f32, [tokens, vocab], logits at every
position) and, when GREEDY > 0 and i < COUNT (default: every prompt),
OUT/greedy_i.txt: GREEDY lines "token gap",
the greedy continuation (the whole sequence recomputed at each step) and
the gap between the top two logits at that step.
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
        if self.arch not in ("llama", "qwen2"):
            sys.exit(f"unsupported architecture {self.arch}")
        a = self.arch
        self.layers = int(field(r, f"{a}.block_count"))
        self.hidden = int(field(r, f"{a}.embedding_length"))
        self.heads = int(field(r, f"{a}.attention.head_count"))
        self.kv_heads = int(field(r, f"{a}.attention.head_count_kv", self.heads))
        self.head_dim = int(field(r, f"{a}.attention.key_length", self.hidden // self.heads))
        self.rope_dim = int(field(r, f"{a}.rope.dimension_count", self.head_dim))
        self.base = float(field(r, f"{a}.rope.freq_base", 10000.0))
        self.eps = float(field(r, f"{a}.attention.layer_norm_rms_epsilon"))
        self.t = {}
        for t in r.tensors:
            # numpy shape is GGUF dims reversed: [out, in] for a matrix.
            shape = tuple(int(d) for d in reversed(t.shape.tolist()))
            values = dequantize(t.data, t.tensor_type)
            self.t[t.name] = np.asarray(values, dtype=np.float64).reshape(shape)
        self.head = self.t.get("output.weight", self.t["token_embd.weight"])
        self.rope_factors = self.t.get("rope_freqs.weight")

    def rope(self, x, positions):
        """x: [tokens, heads, head_dim], rotated in place."""
        n = self.rope_dim
        j = np.arange(n // 2, dtype=np.float64)
        freq = self.base ** (-2.0 * j / n)
        if self.rope_factors is not None:
            freq = freq / self.rope_factors
        angle = positions[:, None].astype(np.float64) * freq[None, :]
        cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
        if self.arch == "llama":
            a, b = x[:, :, 0:n:2].copy(), x[:, :, 1:n:2].copy()
            x[:, :, 0:n:2] = a * cos - b * sin
            x[:, :, 1:n:2] = a * sin + b * cos
        else:
            a, b = x[:, :, : n // 2].copy(), x[:, :, n // 2 : n].copy()
            x[:, :, : n // 2] = a * cos - b * sin
            x[:, :, n // 2 : n] = a * sin + b * cos

    def norm(self, x, gain):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * gain

    def forward(self, tokens, last_only=False):
        t, w = len(tokens), self.t
        d, group = self.head_dim, self.heads // self.kv_heads
        x = w["token_embd.weight"][np.asarray(tokens)]
        positions = np.arange(t)
        mask = np.triu(np.full((t, t), -np.inf), k=1)
        for i in range(self.layers):
            p = f"blk.{i}."
            h = self.norm(x, w[p + "attn_norm.weight"])
            q = h @ w[p + "attn_q.weight"].T + w.get(p + "attn_q.bias", 0.0)
            k = h @ w[p + "attn_k.weight"].T + w.get(p + "attn_k.bias", 0.0)
            v = h @ w[p + "attn_v.weight"].T + w.get(p + "attn_v.bias", 0.0)
            q = q.reshape(t, self.heads, d)
            k = k.reshape(t, self.kv_heads, d)
            v = v.reshape(t, self.kv_heads, d)
            self.rope(q, positions)
            self.rope(k, positions)
            out = np.empty((t, self.heads, d))
            for hq in range(self.heads):
                hk = hq // group
                s = q[:, hq, :] @ k[:, hk, :].T / np.sqrt(d) + mask
                s = np.exp(s - s.max(axis=1, keepdims=True))
                out[:, hq, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, hk, :]
            x = x + out.reshape(t, self.heads * d) @ w[p + "attn_output.weight"].T
            h = self.norm(x, w[p + "ffn_norm.weight"])
            g = h @ w[p + "ffn_gate.weight"].T
            u = h @ w[p + "ffn_up.weight"].T
            x = x + (g / (1.0 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
        if last_only:
            x = x[-1:]
        return self.norm(x, w["output_norm.weight"]) @ self.head.T


def main() -> None:
    model = Model(sys.argv[1])
    out = pathlib.Path(sys.argv[2])
    prompts = [
        [int(tok) for tok in line.split()]
        for line in pathlib.Path(sys.argv[3]).read_text().splitlines()
        if line.strip()
    ]
    greedy = int(sys.argv[4])
    count = int(sys.argv[5]) if len(sys.argv) > 5 else len(prompts)
    for i, tokens in enumerate(prompts):
        model.forward(tokens).astype("<f4").tofile(out / f"logits_{i}.f32")
        if greedy > 0 and i < count:
            seq, lines = list(tokens), []
            for _ in range(greedy):
                row = model.forward(seq, last_only=True)[0]
                top = np.argsort(row)[::-1][:2]
                lines.append(f"{int(top[0])} {float(row[top[0]] - row[top[1]]):.6f}")
                seq.append(int(top[0]))
            (out / f"greedy_{i}.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
