//! The tiny mixtures of experts make_tiny_gguf.py writes, against the
//! independent NumPy forward pass (forward_ref.py) as
//! synthetic_gguf.rs checks the dense ones: a Mixtral-style `llama`
//! (stacked and per-expert tensors), a `qwen3moe` one (experts narrower
//! than the MLP), `qwen2moe` ones (a gated shared expert, weights not
//! renormalized; one without width keys), Granite's mixture (an ungated
//! shared expert), `glm4moe` (sigmoid routing with a selection bias, a
//! prediction block), `gpt-oss` (sinks, windows, biased MXFP4 experts)
//! and three `deepseek2` files (latent attention, group-limited routing),
//! through both loaders, both KV dtypes and repacked.

mod support;

use std::path::PathBuf;

use pagoda_core::{KvDtype, QuantKind};
use pagoda_engine::model::{Model, ModelConfig};
use support::tiny::{self, load, loaders};

/// The tiny models this file checks against the reference.
const REFERENCE: [&str; 14] = tiny::MIXTURES;

fn fixtures() -> Option<&'static PathBuf> {
    tiny::fixtures(&REFERENCE)
}

fn agrees_with_reference(arch: &str) -> Option<ModelConfig> {
    Some(tiny::agrees_with_reference(fixtures()?, arch))
}

#[test]
fn mixtral_experts_stacked_and_per_expert_match_the_reference() {
    // Two of four experts a row; layer 0 reads stacked tensors, layer 1
    // one tensor per expert.
    if let Some(c) = agrees_with_reference("mixtral") {
        assert_eq!((c.q_heads, c.kv_heads, c.ffn), (4, 2, 256));
    }
}

#[test]
fn qwen2moe_with_a_shared_expert_matches_the_reference() {
    // Two of four experts a row plus the shared one, gated by a vector
    // on layer 0 and a one-row matrix on layer 1.
    if let Some(c) = agrees_with_reference("qwen2moe") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (4, 2, 64));
    }
}

#[test]
fn qwen2moe_without_width_keys_takes_llama_cpp_s_defaults() {
    // Experts feed_forward_length / expert_used_count wide, the shared
    // expert feed_forward_length.
    if let Some(c) = agrees_with_reference("qwen2moe_defaults") {
        assert_eq!((c.q_heads, c.kv_heads, c.ffn), (4, 2, 256));
    }
}

#[test]
fn gpt_oss_with_sinks_windows_and_biased_mxfp4_experts_matches_the_reference() {
    // Sinks on every head, layer 0 over a 5-token window, YaRN, biases on
    // every projection, router and expert; the experts MXFP4 (but layer
    // 1's down), gated by the clamped SwiGLU, whose clamp the file's
    // gate and up values reach.
    if let Some(c) = agrees_with_reference("gpt_oss") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim, c.ffn), (4, 2, 64, 128));
        let model = Model::load(fixtures().unwrap().join("gpt_oss.gguf")).unwrap();
        let mxfp4 = model.matrices().filter(|m| m.kind() == QuantKind::MXFP4);
        assert_eq!(mxfp4.count(), 2 * 4 * 3 - 4);
    }
}

#[test]
fn glm4moe_with_sigmoid_routing_a_selection_bias_and_a_prediction_block_matches_the_reference() {
    // A dense first layer, then experts chosen by sigmoid scores plus
    // exp_probs_b, weighed by the unbiased scores renormalized and scaled
    // by 2.5, with a shared expert; the fourth block predicts further
    // tokens and is not part of the trunk.
    if let Some(c) = agrees_with_reference("glm4moe") {
        assert_eq!((c.layers, c.q_heads, c.kv_heads, c.ffn), (3, 4, 2, 256));
        let model = Model::load(fixtures().unwrap().join("glm4moe.gguf")).unwrap();
        // Embedding, head, then per trunk layer q, k, v and output; layer
        // 0's three MLP matrices; layers 1 and 2's router, 8 × 3 experts
        // and 3 shared.
        assert_eq!(
            model.matrices().count(),
            2 + 3 * 4 + 3 + 2 * (1 + 8 * 3 + 3)
        );
    }
}

#[test]
fn deepseek2_latent_attention_and_its_routers_match_the_reference() {
    // V2-Lite's shape (direct queries, softmax routing, YaRN with its
    // scale on the scores), V3's (low-rank queries, sigmoids with a
    // selection bias, 4 groups of which 2 are used, renormalized, scaled)
    // and a file converted before attn_kv_b was split: the absorbed
    // multi-query attention the engine runs against the reference's
    // decompressed multi-head one.
    let Some(lite) = agrees_with_reference("deepseek2_lite") else {
        return;
    };
    // One cached row of the 512-wide latent and 64 rotary dims.
    assert_eq!(
        (lite.q_heads, lite.kv_heads, lite.head_dim, lite.rope_dim),
        (4, 1, 576, 64)
    );
    let v3 = agrees_with_reference("deepseek2_v3").unwrap();
    let legacy = agrees_with_reference("deepseek2_legacy").unwrap();
    assert_eq!(legacy, lite);
    assert_eq!((v3.head_dim, v3.kv_heads), (576, 1));
    let dir = fixtures().unwrap();
    // Embedding and head; per layer the queries (one matrix, or two
    // through the low rank), the latent's, 4 heads' absorbed key and value
    // products and the output; layer 0's MLP; layers 1 and 2's router,
    // 8 × 3 experts and the shared expert's 3.
    for (name, queries) in [
        ("deepseek2_lite", 1),
        ("deepseek2_v3", 2),
        ("deepseek2_legacy", 1),
    ] {
        let model = Model::load(dir.join(format!("{name}.gguf"))).unwrap();
        assert_eq!(
            model.matrices().count(),
            2 + 3 * (queries + 1 + 2 * 4 + 1) + 3 + 2 * (1 + 8 * 3 + 3),
            "{name}"
        );
    }
}

#[test]
fn deepseek2_in_the_engine_batches_as_each_prompt_runs_alone() {
    // Continuous batching over prompts that share prefixes (the second
    // and third extend the first) and the paged cache's one latent row per
    // token: each greedy continuation is the one the prompt gets alone.
    let Some(dir) = fixtures() else { return };
    let base: Vec<u32> = (0..37).map(|i| (i * 53 + 7) % 256).collect();
    let prompts = vec![
        base.clone(),
        [&base[..], &[9, 8, 7][..]].concat(),
        [&base[..20], &[200, 100][..]].concat(),
        vec![5, 4, 3],
    ];
    for name in ["deepseek2_lite", "deepseek2_v3"] {
        let model = load(&dir.join(format!("{name}.gguf"))).unwrap();
        let together = support::greedy_outputs(&model, KvDtype::F32, &prompts, 12);
        for (prompt, batched) in prompts.iter().zip(&together) {
            let alone =
                support::greedy_outputs(&model, KvDtype::F32, std::slice::from_ref(prompt), 12);
            assert_eq!(&alone[0], batched, "{name}: prompt {prompt:?}");
        }
    }
}

#[test]
fn granitemoe_with_an_ungated_shared_expert_matches_the_reference() {
    if let Some(c) = agrees_with_reference("granitemoe") {
        assert_eq!((c.q_heads, c.kv_heads, c.ffn), (4, 2, 256));
    }
}

#[test]
fn qwen3vlmoe_text_model_matches_the_reference() {
    if let Some(c) = agrees_with_reference("qwen3vlmoe") {
        assert_eq!((c.q_heads, c.kv_heads, c.ffn), (4, 2, 128));
    }
}

#[test]
fn ernie4_5_moe_with_interleaved_mixtures_and_a_selection_bias_matches_the_reference() {
    // Layer 0 dense (leading_dense_block_count 1), then experts on every
    // second layer (interleave_moe_layer_step 2: layers 1 and 3, layer 2
    // dense), softmax scores chosen with exp_probs_b on layer 1 only,
    // renormalized, plus one ungated shared MLP.
    if let Some(c) = agrees_with_reference("ernie4_5_moe") {
        assert_eq!((c.layers, c.q_heads, c.kv_heads), (4, 4, 2));
        let model = Model::load(fixtures().unwrap().join("ernie4_5_moe.gguf")).unwrap();
        // Embedding and head; q, k, v and output a layer; layers 0 and 2's
        // MLPs; layers 1 and 3's router, 8 × 3 experts and 3 shared.
        assert_eq!(
            model.matrices().count(),
            2 + 4 * 4 + 2 * 3 + 2 * (1 + 8 * 3 + 3)
        );
    }
}

#[test]
fn olmoe_with_whole_width_qk_norm_and_unrenormalized_experts_matches_the_reference() {
    // Experts as wide as feed_forward_length (the file has no width key).
    if let Some(c) = agrees_with_reference("olmoe") {
        assert_eq!((c.q_heads, c.kv_heads, c.ffn), (4, 2, 256));
    }
}

#[test]
fn minimax_m2_with_whole_width_qk_norm_and_biased_sigmoid_experts_matches_the_reference() {
    // Rotary on 32 of 64 dims; 8 experts of 128, 2 a token, by sigmoid
    // score plus exp_probs_b, renormalized, times 1.5.
    if let Some(c) = agrees_with_reference("minimax_m2") {
        assert_eq!((c.q_heads, c.kv_heads, c.ffn), (4, 2, 128));
    }
}

/// Of the tiny Mixtral's four experts of 3 × 256 × 256 weights a layer, a
/// token goes through two: the other half is neither active nor read.
#[test]
fn a_mixture_counts_only_the_experts_a_token_takes() {
    let Some(dir) = fixtures() else { return };
    for (name, load) in loaders() {
        let m = load(&dir.join("mixtral.gguf")).unwrap();
        let unused = 2 * 2 * 3 * 256 * 256;
        assert_eq!(m.parameters() - m.active_parameters(), unused, "{name}");
        // Embedding (the tied head), then q, k, v, output, the router and
        // 4 × 3 expert matrices a layer.
        assert_eq!(m.matrices().count(), 1 + 2 * (4 + 1 + 12), "{name}");
        let all: u64 = m.matrices().map(|w| w.byte_len()).sum();
        assert!(m.weight_bytes() < all, "{name}");
    }
    let dense = load(&dir.join("qwen3.gguf")).unwrap();
    assert_eq!(dense.parameters(), dense.active_parameters());
}

#[test]
fn qwen3moe_with_narrow_experts_matches_the_reference() {
    // Three of eight experts a row, each 128 wide.
    if let Some(c) = agrees_with_reference("qwen3moe") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (4, 2, 64));
    }
}
