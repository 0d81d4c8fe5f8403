//! The layers `describe` gives for the shapes too large to write in a
//! test: each shape's tensors checked as described.

use super::*;

/// gpt-oss-20b in `MXFP4_MOE`: MXFP4 experts and Q8_0 elsewhere (as
/// llama.cpp's quantizer writes it), biases, sinks and the MLP's norm
/// named `post_attention_norm` (checked as described: the file is
/// 12 GiB).
#[test]
fn gpt_oss_layers_hold_mxfp4_experts_biases_and_sinks() {
    let w = describe(Shape::GptOss20b, WeightType::MXFP4_MOE, 2);
    let find = |name: &str| w.tensors().iter().find(|t| t.name == name);
    let spec = |name: &str| find(name).map(|t| (t.dims.clone(), t.kind));
    use QuantKind::{F32, MXFP4, Q8_0};
    assert_eq!(
        spec("blk.1.ffn_down_exps.weight"),
        Some((vec![2880, 2880, 32], MXFP4))
    );
    assert_eq!(spec("blk.1.attn_q.weight"), Some((vec![2880, 4096], Q8_0)));
    assert_eq!(spec("output.weight"), Some((vec![2880, 201_088], Q8_0)));
    assert_eq!(spec("token_embd.weight"), Some((vec![2880, 201_088], Q8_0)));
    assert_eq!(spec("blk.0.attn_sinks.weight"), Some((vec![64], F32)));
    assert_eq!(spec("blk.0.attn_output.bias"), Some((vec![2880], F32)));
    assert_eq!(spec("blk.0.ffn_up_exps.bias"), Some((vec![2880, 32], F32)));
    assert_eq!(spec("blk.0.ffn_gate_inp.bias"), Some((vec![32], F32)));
    assert!(find("blk.0.post_attention_norm.weight").is_some());
    assert!(find("blk.0.ffn_norm.weight").is_none());
    let experts = w.tensors().iter().filter(|t| t.kind == MXFP4).count();
    assert_eq!(experts, 2 * 3);
}

/// GLM-4.5-Air's shape: a dense first layer, then sigmoid-routed
/// experts with their selection bias and a shared expert, q/k/v
/// biases, rotary on half of each head (checked as described: the
/// file is 60 GiB).
#[test]
fn glm_layers_hold_a_dense_lead_biased_experts_and_a_shared_one() {
    let w = describe(Shape::Glm45Air, WeightType::Q4_K_M, 3);
    let find = |name: &str| w.tensors().iter().find(|t| t.name == name);
    let dims = |name: &str| find(name).map(|t| t.dims.clone());
    assert_eq!(dims("blk.0.ffn_gate.weight"), Some(vec![4096, 10_944]));
    assert!(find("blk.0.ffn_gate_inp.weight").is_none());
    assert_eq!(
        dims("blk.1.ffn_down_exps.weight"),
        Some(vec![1408, 4096, 128])
    );
    assert_eq!(dims("blk.1.exp_probs_b.bias"), Some(vec![128]));
    assert_eq!(dims("blk.2.ffn_up_shexp.weight"), Some(vec![4096, 1408]));
    assert_eq!(dims("blk.1.attn_q.bias"), Some(vec![12_288]));
    assert!(find("blk.1.attn_output.bias").is_none());
    assert!(find("blk.1.post_attention_norm.weight").is_some());
    assert!(find("blk.1.ffn_norm.weight").is_none());
}

/// Mixtral's shape is `llama`'s layer with stacked experts as wide as
/// its MLP and an f32 router, no QK-norm (the file is too large to
/// write in a test: its tensors are checked as described).
#[test]
fn mixtral_layers_hold_stacked_experts_and_no_qk_norm() {
    let w = describe(Shape::Mixtral8x7b, WeightType::Q4_0, 1);
    let find = |name: &str| w.tensors().iter().find(|t| t.name == name);
    let dims = |name: &str| find(name).map(|t| t.dims.clone());
    assert_eq!(
        dims("blk.0.ffn_gate_exps.weight"),
        Some(vec![4096, 14_336, 8])
    );
    assert_eq!(
        dims("blk.0.ffn_up_exps.weight"),
        Some(vec![4096, 14_336, 8])
    );
    assert_eq!(
        dims("blk.0.ffn_down_exps.weight"),
        Some(vec![14_336, 4096, 8])
    );
    assert_eq!(dims("blk.0.attn_k.weight"), Some(vec![4096, 1024]));
    let router = find("blk.0.ffn_gate_inp.weight").map(|t| (t.dims.clone(), t.kind));
    assert_eq!(router, Some((vec![4096, 8], QuantKind::F32)));
    assert!(find("blk.0.attn_q_norm.weight").is_none());
    assert!(find("blk.0.ffn_gate.weight").is_none());
    assert!(find("blk.1.attn_q.weight").is_none(), "one layer asked for");
    // Embedding and head, attention, experts, router, norms.
    let params: u64 = w
        .tensors()
        .iter()
        .map(|t| t.dims.iter().product::<u64>())
        .sum();
    assert_eq!(
        params,
        2 * 4096 * 32_000
            + 2 * 4096 * 4096
            + 2 * 4096 * 1024
            + 3 * 8 * 4096 * 14_336
            + 4096 * 8
            + 3 * 4096
    );
}

/// LFM2-1.2B's shape: layers 0, 1 and 3 convolve, layer 2 attends with
/// QK-norm; the final norm is named after the embedding, the head tied.
#[test]
fn lfm2_layers_convolve_but_where_they_attend() {
    let w = describe(Shape::Lfm2_1_2b, WeightType::Q4_K_M, 4);
    let find = |name: &str| w.tensors().iter().find(|t| t.name == name);
    let dims = |name: &str| find(name).map(|t| t.dims.clone());
    assert_eq!(
        dims("blk.0.shortconv.in_proj.weight"),
        Some(vec![2048, 6144])
    );
    assert_eq!(dims("blk.1.shortconv.conv.weight"), Some(vec![3, 2048]));
    assert_eq!(
        dims("blk.3.shortconv.out_proj.weight"),
        Some(vec![2048, 2048])
    );
    assert!(find("blk.0.attn_q.weight").is_none());
    assert_eq!(dims("blk.2.attn_k.weight"), Some(vec![2048, 512]));
    assert_eq!(dims("blk.2.attn_q_norm.weight"), Some(vec![64]));
    assert!(find("blk.2.shortconv.in_proj.weight").is_none());
    assert!(find("token_embd_norm.weight").is_some());
    assert!(find("output_norm.weight").is_none() && find("output.weight").is_none());
}

/// Qwen3.5-9B's shape: layers 0-2 are delta nets (qkv of 2 × 16 key heads
/// and 32 value heads of 128), layer 3 gated attention (queries with their
/// gates, 16 heads of 256); the MLP's norm named after the attention.
#[test]
fn qwen35_layers_run_delta_nets_but_every_fourth() {
    let w = describe(Shape::Qwen35_9b, WeightType::Q4_K_M, 4);
    let find = |name: &str| w.tensors().iter().find(|t| t.name == name);
    let dims = |name: &str| find(name).map(|t| t.dims.clone());
    assert_eq!(dims("blk.0.attn_qkv.weight"), Some(vec![4096, 8192]));
    assert_eq!(dims("blk.1.attn_gate.weight"), Some(vec![4096, 4096]));
    assert_eq!(dims("blk.2.ssm_conv1d.weight"), Some(vec![4, 8192]));
    assert_eq!(dims("blk.2.ssm_a"), Some(vec![32]));
    assert_eq!(dims("blk.0.ssm_out.weight"), Some(vec![4096, 4096]));
    assert!(find("blk.0.attn_q.weight").is_none());
    assert_eq!(dims("blk.3.attn_q.weight"), Some(vec![4096, 8192]));
    assert_eq!(dims("blk.3.attn_k.weight"), Some(vec![4096, 1024]));
    assert_eq!(dims("blk.3.attn_q_norm.weight"), Some(vec![256]));
    assert!(find("blk.3.attn_qkv.weight").is_none());
    assert!(find("blk.0.post_attention_norm.weight").is_some());
    assert!(find("blk.0.ffn_norm.weight").is_none());
    assert!(find("output_norm.weight").is_some() && find("output.weight").is_some());
}

/// Granite-4.0-H-Micro's shape: layer 5 attends without rotary (no
/// QK-norm), the others are Mamba-2 mixers (ssm_in makes z, x, B, C and a
/// step per head: 2 × 4096 + 2 × 128 + 64 rows); the MLP's norm ffn_norm.
#[test]
fn granite_hybrid_layers_are_mixers_but_one_in_ten() {
    let w = describe(Shape::Granite4HMicro, WeightType::Q4_K_M, 6);
    let find = |name: &str| w.tensors().iter().find(|t| t.name == name);
    let dims = |name: &str| find(name).map(|t| t.dims.clone());
    assert_eq!(dims("blk.0.ssm_in.weight"), Some(vec![2048, 8512]));
    assert_eq!(dims("blk.4.ssm_conv1d.weight"), Some(vec![4, 4352]));
    assert_eq!(dims("blk.1.ssm_a"), Some(vec![1, 64]));
    assert_eq!(dims("blk.2.ssm_out.weight"), Some(vec![4096, 2048]));
    assert!(find("blk.0.attn_q.weight").is_none());
    assert_eq!(dims("blk.5.attn_k.weight"), Some(vec![2048, 512]));
    assert!(find("blk.5.attn_q_norm.weight").is_none());
    assert!(find("blk.5.ssm_in.weight").is_none());
    assert!(find("blk.0.ffn_norm.weight").is_some());
    assert!(find("output_norm.weight").is_some() && find("output.weight").is_none());
}
