//! DeepSeek's multi-head latent attention in a synthetic `deepseek2` file:
//! its metadata and each layer's tensors, as llama.cpp's converter writes
//! them for the absorbed form (`attn_k_b` and `attn_v_b` split out of
//! `attn_kv_b`, the key part transposed).

use pagoda_core::QuantKind;

use super::writer::GgufWriter;
use super::Role;

/// The cached latent's width (`kv_lora_rank`).
pub(crate) const RANK: u64 = 512;
/// The rotary part of a query head and of the cached row.
pub(crate) const ROPE: u64 = 64;
/// The cached row: the latent, then the rotary part.
pub(crate) const ROW: u64 = RANK + ROPE;
/// A query head's key part.
const NOPE: u64 = 128;
/// A head's value.
const VALUE: u64 = 128;

/// The latent attention's metadata, DeepSeek-V2-Lite's (its YaRN and
/// softmax routing included), under `key` (`deepseek2.…`).
pub(crate) fn metadata(w: &mut GgufWriter, key: &dyn Fn(&str) -> String) {
    // V2-Lite projects its queries directly: a low rank of 0, which
    // llama.cpp requires of any file not 27 layers deep (a `--layers`
    // cut) to take its direct `attn_q`.
    w.u32(&key("attention.q_lora_rank"), 0);
    w.u32(&key("attention.kv_lora_rank"), RANK as u32);
    w.u32(&key("attention.key_length"), ROW as u32);
    w.u32(&key("attention.value_length"), RANK as u32);
    w.u32(&key("attention.key_length_mla"), (NOPE + ROPE) as u32);
    w.u32(&key("attention.value_length_mla"), VALUE as u32);
    w.u32(&key("leading_dense_block_count"), 1);
    w.u32(&key("expert_shared_count"), 2);
    w.f32(&key("expert_weights_scale"), 1.0);
    w.bool(&key("expert_weights_norm"), false);
    w.u32(&key("expert_gating_func"), 1);
    w.str(&key("rope.scaling.type"), "yarn");
    w.f32(&key("rope.scaling.factor"), 40.0);
    w.u32(&key("rope.scaling.original_context_length"), 4096);
    w.f32(&key("rope.scaling.yarn_log_multiplier"), 0.0707);
}

/// Layer `l`'s attention tensors (its norm aside) for `heads` heads over a
/// residual stream `h` wide, each matrix of the type `kind` gives.
pub(crate) fn tensors(
    tensor: &mut dyn FnMut(String, &[u64], QuantKind),
    l: u32,
    heads: u64,
    h: u64,
    kind: &dyn Fn(Role, u32, u64) -> QuantKind,
) {
    let b = |n: &str| format!("blk.{l}.{n}.weight");
    let queries = heads * (NOPE + ROPE);
    tensor(b("attn_q"), &[h, queries], kind(Role::AttnQ, l, h));
    tensor(b("attn_kv_a_mqa"), &[h, ROW], kind(Role::AttnK, l, h));
    tensor(b("attn_kv_a_norm"), &[RANK], QuantKind::F32);
    tensor(
        b("attn_k_b"),
        &[NOPE, RANK, heads],
        kind(Role::AttnK, l, NOPE),
    );
    tensor(
        b("attn_v_b"),
        &[RANK, VALUE, heads],
        kind(Role::AttnV, l, RANK),
    );
    let out = heads * VALUE;
    tensor(b("attn_output"), &[out, h], kind(Role::AttnOutput, l, out));
}

#[cfg(test)]
mod tests {
    use super::super::{describe, Shape, WeightType};

    /// DeepSeek-V2-Lite's shape: the absorbed products split as the
    /// converter writes them, a dense first layer, 64 experts and the two
    /// shared ones as one MLP twice an expert's width (checked as
    /// described: the file is 9 GiB).
    #[test]
    fn deepseek_layers_hold_latent_attention_a_dense_lead_and_two_shared_experts() {
        let w = describe(Shape::DeepseekV2Lite, WeightType::Q4_K_M, 2);
        let find = |name: &str| w.tensors().iter().find(|t| t.name == name);
        let dims = |name: &str| find(name).map(|t| t.dims.clone());
        assert_eq!(dims("blk.0.attn_q.weight"), Some(vec![2048, 16 * 192]));
        assert_eq!(dims("blk.0.attn_kv_a_mqa.weight"), Some(vec![2048, 576]));
        assert_eq!(dims("blk.1.attn_k_b.weight"), Some(vec![128, 512, 16]));
        assert_eq!(dims("blk.1.attn_v_b.weight"), Some(vec![512, 128, 16]));
        assert_eq!(dims("blk.0.attn_output.weight"), Some(vec![2048, 2048]));
        assert_eq!(dims("blk.0.ffn_gate.weight"), Some(vec![2048, 10_944]));
        assert!(find("blk.0.ffn_gate_exps.weight").is_none());
        assert_eq!(
            dims("blk.1.ffn_down_exps.weight"),
            Some(vec![1408, 2048, 64])
        );
        assert_eq!(dims("blk.1.ffn_up_shexp.weight"), Some(vec![2048, 2816]));
        // k_b's rows of 128 cannot take a K-quant.
        let kind = find("blk.1.attn_k_b.weight").map(|t| t.kind);
        assert!(kind.is_some_and(|k| k.block_elems() <= 32), "{kind:?}");
        assert!(find("blk.0.attn_k.weight").is_none());
    }
}
