//! `deepseek2`: DeepSeek-V2, V2-Lite, V2.5, V3, R1 and the models built
//! on them (Kimi K2, Moonlight), as llama.cpp's `models/deepseek2.cpp`
//! builds them: multi-head latent attention, then a dense MLP on the first
//! `leading_dense_block_count` layers and a mixture of experts with shared
//! experts on the rest.
//!
//! Latent attention runs absorbed, as llama.cpp's MLA path does: each token
//! caches one row, its normed latent (`kv_lora_rank`, 512) and its rotated
//! rotary part (64), which every query head reads as one key head
//! (multi-query attention at head dim 576). A head's query is its rotary
//! part beside its key part taken into the latent by the absorbed product
//! `attn_k_b`; the head's output, a weighted sum of latents, comes out by
//! `attn_v_b`. The values are the same rows (their latent part; the cache
//! keeps them as values too, twice the bytes of llama.cpp's, which reads
//! the values out of the keys). Files converted before the split hold the
//! two as one `attn_kv_b`, split here into f32 matrices (the key part
//! transposed).
//!
//! Queries come from `attn_q` (V2-Lite) or through a low-rank `attn_q_a`,
//! its norm and `attn_q_b`. The scores are scaled by
//! `mscale² / √(key_length_mla)` with YaRN's `mscale = 1 + 0.1 ·
//! mscale_all_dim · ln factor` (`rope.scaling.yarn_log_multiplier` holds
//! `0.1 · mscale_all_dim`), and the rotary itself is left unscaled by
//! YaRN, as llama.cpp and the reference implementation do. Pairs are
//! interleaved.
//!
//! The mixture: softmax scores (V2, where the file names no gating
//! function) or sigmoids with the selection bias `exp_probs_b` (V3), chosen
//! within the best expert groups where the file has groups, renormalized
//! where `expert_weights_norm`, scaled by `expert_weights_scale`, plus
//! `expert_shared_count` ungated shared experts as one MLP.

use super::super::config::ModelError;
use super::super::dequant;
use super::super::load_error::LoadError;
use super::super::meta::{bad, float, required_uint, uint};
use super::super::program::{
    experts_block, mlp_block, residual, Attend, Buf, Latent, Op, Program, Proj, Scoring, Span,
};
use super::super::rope::{Rope, RopeMode};
use super::super::tensors::Matrix;
use super::router::Router;
use super::{Ffn, Loader};

/// The model of a `deepseek2` file.
pub(super) fn build(l: &Loader<'_>) -> Result<Program, LoadError> {
    let c = &l.config;
    let h = c.hidden as usize;
    let shape = Shape::read(l)?;
    let mut spec = l.rope(RopeMode::Interleaved)?;
    let mut scale = 1.0 / (shape.latent.q_head as f32).sqrt();
    if let Some(yarn) = spec.yarn {
        // YaRN's magnitude moves from the rotary to the scores, squared.
        let log_key = l.key("rope.scaling.yarn_log_multiplier");
        let log_mul = float(l.g, &log_key)?.unwrap_or(0.0);
        if !(log_mul.is_finite() && log_mul >= 0.0) {
            return Err(bad(&log_key, log_mul, "must be finite, at least 0"));
        }
        let mscale = spec.attn_factor * (1.0 + log_mul * yarn.factor.ln());
        scale *= mscale * mscale;
        spec.attn_factor /= 1.0 + 0.1 * yarn.factor.ln();
    }
    let router = Router::read(l, Scoring::Softmax)?;
    let dense_lead = uint(l.g, &l.key("leading_dense_block_count"))?.unwrap_or(0);
    let shared_count = uint(l.g, &l.key("expert_shared_count"))?.unwrap_or(0) as usize;
    let mut layers = Vec::with_capacity(c.layers as usize);
    for i in 0..c.layers {
        let mut ops = Vec::new();
        shape.attention(l, i, scale, &mut ops)?;
        let norm = l.layer_vector(i, "ffn_norm.weight", h)?;
        let ffn = if i < dense_lead {
            Ffn::Dense(l.swiglu(i)?)
        } else {
            let width = l.expert_width(0)?;
            let mut experts = l.experts(i, width, false)?;
            router.apply(&mut experts);
            let n = experts.experts.len();
            let bias_name = format!("blk.{i}.exp_probs_b.bias");
            if let Some(bias) = l.optional_vector(&bias_name, n)? {
                if !bias.iter().all(|b| b.is_finite()) {
                    return Err(ModelError::NonFinite.into());
                }
                experts.selection_bias = Some(bias);
            }
            if shared_count > 0 {
                experts.shared = Some(l.shared_expert(i, width * shared_count, false)?);
            }
            Ffn::Experts(experts)
        };
        match ffn {
            Ffn::Dense(mlp) => mlp_block(&mut ops, norm, mlp),
            Ffn::Experts(experts) => experts_block(&mut ops, norm, experts),
        }
        layers.push(ops);
    }
    let (embed, head) = l.embedding_and_head()?;
    let final_norm = l.vector("output_norm.weight", h)?;
    let ropes = vec![Rope::new(&spec, c.max_context)];
    Ok(Program {
        latent: Some(shape.latent),
        ..Program::plain(embed, layers, final_norm, head, ropes)
    })
}

/// The widths of a file's latent attention.
struct Shape {
    latent: Latent,
    /// A query head's key part (`key_length_mla` less the rotary part).
    nope: u32,
    /// The rotary part of a query head and of the cached row.
    rope: u32,
}

impl Shape {
    /// The widths the metadata gives: `kv_lora_rank`, `rope.dimension_count`,
    /// `key_length_mla` and `value_length_mla` (in files converted before
    /// them, `key_length` and `value_length` are a decompressed head's),
    /// `q_lora_rank` where layer 0 has a low-rank query. The configuration
    /// already made `head_dim` the latent plus the rotary part.
    fn read(l: &Loader<'_>) -> Result<Self, LoadError> {
        let c = &l.config;
        let kv_rank = required_uint(l.g, &l.key("attention.kv_lora_rank"))?;
        let rope = c.rope_dim;
        let mla = |name: &str, fallback: &str| -> Result<u32, LoadError> {
            match uint(l.g, &l.key(name))? {
                Some(n) => Ok(n),
                None => required_uint(l.g, &l.key(fallback)),
            }
        };
        let q_head_key = l.key("attention.key_length_mla");
        let q_head = mla("attention.key_length_mla", "attention.key_length")?;
        let v_head = mla("attention.value_length_mla", "attention.value_length")?;
        if q_head <= rope || q_head > 4096 {
            return Err(bad(
                &q_head_key,
                q_head,
                "must exceed the rotary dimensions, at most 4096",
            ));
        }
        if v_head == 0 || v_head > 4096 {
            let key = l.key("attention.value_length_mla");
            return Err(bad(&key, v_head, "must be between 1 and 4096"));
        }
        if kv_rank + rope != c.head_dim {
            let key = l.key("attention.kv_lora_rank");
            return Err(bad(
                &key,
                kv_rank,
                "with the rotary part, not a supported head width",
            ));
        }
        let q_rank = if l.has("blk.0.attn_q_a.weight") {
            let key = l.key("attention.q_lora_rank");
            let rank = required_uint(l.g, &key)?;
            if rank == 0 || rank > 65_536 {
                return Err(bad(&key, rank, "must be between 1 and 65536"));
            }
            rank
        } else {
            0
        };
        Ok(Self {
            latent: Latent {
                q_rank,
                kv_rank,
                q_head,
                v_head,
            },
            nope: q_head - rope,
            rope,
        })
    }

    /// Pushes layer `i`'s attention half onto `ops`: the norm, the query's
    /// and the latent's products, the latent's norm (copied to the values
    /// before the rotary part turns), the absorbed key products and the
    /// rotary parts of the queries, attention at `scale`, the values out of
    /// the latent, the output product and the residual add.
    fn attention(
        &self,
        l: &Loader<'_>,
        i: u32,
        scale: f32,
        ops: &mut Vec<Op>,
    ) -> Result<(), LoadError> {
        let c = &l.config;
        let Latent {
            q_rank,
            kv_rank,
            q_head,
            v_head,
        } = self.latent;
        let (h, heads) = (c.hidden as usize, c.q_heads as usize);
        let (row, queries) = (c.head_dim, heads * q_head as usize);
        let proj = |w, out| Proj { w, out, bias: None };
        ops.push(Op::Norm {
            src: Buf::X,
            dst: Buf::H,
            gain: l.layer_vector(i, "attn_norm.weight", h)?,
            per_head: None,
        });
        let kv_a = l.layer_matrix(i, "attn_kv_a_mqa", h, row as usize)?;
        if q_rank > 0 {
            let q_a = l.layer_matrix(i, "attn_q_a", h, q_rank as usize)?;
            ops.push(Op::Linear {
                src: Buf::H,
                projs: vec![proj(q_a, Buf::QLatent), proj(kv_a, Buf::K)],
            });
            ops.push(Op::Norm {
                src: Buf::QLatent,
                dst: Buf::QLatent,
                gain: l.layer_vector(i, "attn_q_a_norm.weight", q_rank as usize)?,
                per_head: None,
            });
            let q_b = l.layer_matrix(i, "attn_q_b", q_rank as usize, queries)?;
            ops.push(Op::Linear {
                src: Buf::QLatent,
                projs: vec![proj(q_b, Buf::QHeads)],
            });
        } else {
            let q = l.layer_matrix(i, "attn_q", h, queries)?;
            ops.push(Op::Linear {
                src: Buf::H,
                projs: vec![proj(q, Buf::QHeads), proj(kv_a, Buf::K)],
            });
        }
        let span = |buf, stride, offset, width| Span {
            buf,
            stride,
            offset,
            width,
        };
        ops.push(Op::NormSpan {
            span: span(Buf::K, row, 0, kv_rank),
            gain: l.layer_vector(i, "attn_kv_a_norm.weight", kv_rank as usize)?,
        });
        ops.push(Op::Copy {
            from: span(Buf::K, row, 0, row),
            to: span(Buf::V, row, 0, row),
        });
        let (k_b, v_b) = self.absorbed(l, i, heads)?;
        ops.push(Op::HeadLinear {
            from: span(Buf::QHeads, q_head, 0, self.nope),
            to: span(Buf::Q, row, 0, kv_rank),
            heads: k_b,
        });
        ops.push(Op::Copy {
            from: span(Buf::QHeads, q_head, self.nope, self.rope),
            to: span(Buf::Q, row, kv_rank, self.rope),
        });
        for (buf, n) in [(Buf::Q, c.q_heads), (Buf::K, 1)] {
            ops.push(Op::Rope {
                buf,
                heads: n,
                table: 0,
                offset: kv_rank,
            });
        }
        ops.push(Op::Attention(Attend {
            scale,
            ..Attend::full(c)
        }));
        ops.push(Op::HeadLinear {
            from: span(Buf::Attn, row, 0, kv_rank),
            to: span(Buf::VHeads, v_head, 0, v_head),
            heads: v_b,
        });
        let output = l.layer_matrix(i, "attn_output", heads * v_head as usize, h)?;
        ops.push(Op::Linear {
            src: Buf::VHeads,
            projs: vec![proj(output, Buf::Sum)],
        });
        residual(ops, None);
        Ok(())
    }

    /// Layer `i`'s absorbed products, one matrix a head: the key part into
    /// the latent (`kv_lora_rank` rows of `nope`) and the value out of it
    /// (`value_length_mla` rows of `kv_lora_rank`), from `attn_k_b` and
    /// `attn_v_b`, or split out of a legacy `attn_kv_b`.
    fn absorbed(
        &self,
        l: &Loader<'_>,
        i: u32,
        heads: usize,
    ) -> Result<(Vec<Matrix>, Vec<Matrix>), LoadError> {
        let (rank, nope, v) = (
            self.latent.kv_rank as usize,
            self.nope as usize,
            self.latent.v_head as usize,
        );
        if l.has(&format!("blk.{i}.attn_k_b.weight")) {
            let k_b = l.layer_stack(i, "attn_k_b", (nope, rank), heads)?;
            let v_b = l.layer_stack(i, "attn_v_b", (rank, v), heads)?;
            return Ok((k_b, v_b));
        }
        // `attn_kv_b`: per head, `nope` key rows then `v` value rows, each
        // `rank` wide. The key part is used transposed: row j of head h's
        // matrix is column j of its key rows.
        let name = format!("blk.{i}.attn_kv_b.weight");
        let per_head = nope + v;
        let rows = heads * per_head;
        let w = dequant::stacked(l.g, &name, &[rank as u64, rows as u64])?;
        let mut k_b = Vec::with_capacity(heads);
        let mut v_b = Vec::with_capacity(heads);
        for head in w.chunks_exact(per_head * rank) {
            let (keys, values) = head.split_at(nope * rank);
            let mut transposed = vec![0.0; rank * nope];
            for (r, key_row) in keys.chunks_exact(rank).enumerate() {
                for (j, &x) in key_row.iter().enumerate() {
                    transposed[j * nope + r] = x;
                }
            }
            k_b.push(Matrix::dense(transposed, rank, nope)?);
            v_b.push(Matrix::dense(values.to_vec(), v, rank)?);
        }
        Ok((k_b, v_b))
    }
}
