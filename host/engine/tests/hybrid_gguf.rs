//! The tiny hybrids of attention and recurrent layers (LFM2's short
//! convolutions, Qwen3.5's gated delta nets, the Mamba-2 mixers of
//! Granite 4.0-H and Nemotron-H, written by
//! tests/reference/make_tiny_gguf.py) against the independent NumPy forward
//! pass (forward_ref.py, delta_ref.py and ssm_ref.py, from HF's layers): dense, quantized
//! and repacked, each prompt in chunks of 7 so the recurrent state carries
//! across steps. Then the engine: sequences whose prompts share prefixes,
//! batched, chunked and preempted, each continue as the prompt does alone
//! (a recurrent state is never taken from the prefix cache).

mod support;

use std::path::PathBuf;

use pagoda_engine::model::{Model, ModelConfig};
use pagoda_engine::EngineConfig;
use support::tiny;

const REFERENCE: [&str; 9] = tiny::HYBRIDS;

fn fixtures() -> Option<&'static PathBuf> {
    tiny::fixtures(&REFERENCE)
}

fn agrees_with_reference(arch: &str) -> Option<ModelConfig> {
    Some(tiny::agrees_with_reference(fixtures()?, arch))
}

#[test]
fn lfm2_with_convolution_and_attention_layers_matches_the_reference() {
    // Layers 0, 1 and 3 convolve (3 taps), layer 2 attends.
    if let Some(c) = agrees_with_reference("lfm2") {
        assert_eq!((c.layers, c.q_heads, c.kv_heads), (4, 4, 2));
        let model = Model::load(fixtures().unwrap().join("lfm2.gguf")).unwrap();
        // The embedding (the tied head); q, k, v and output on layer 2;
        // in and out projections on the others; an MLP a layer.
        assert_eq!(model.matrices().count(), 1 + 4 + 3 * 2 + 4 * 3);
        // Each convolution's last 2 inputs of 256 channels, in f32.
        assert_eq!(model.recurrent_state_bytes(), 3 * 2 * 256 * 4);
    }
}

#[test]
fn lfm2moe_with_sigmoid_routing_and_a_selection_bias_matches_the_reference() {
    // Layer 1 attends; layer 0's MLP is dense, the others' are 8 experts
    // of 128 (2 used), chosen by sigmoid score plus exp_probs_b,
    // renormalized, times 1.5; 4 taps.
    if let Some(c) = agrees_with_reference("lfm2moe") {
        assert_eq!((c.layers, c.kv_heads, c.ffn), (4, 2, 256));
    }
}

#[test]
fn qwen35_with_delta_nets_and_gated_attention_matches_the_reference() {
    // Layers 0-2 are delta nets (4 taps, 2 key heads of 32 serving 4 value
    // heads of 64), layer 3 gated attention with rotary on 16 of 64 dims.
    if let Some(c) = agrees_with_reference("qwen35") {
        assert_eq!((c.layers, c.q_heads, c.kv_heads, c.head_dim), (4, 4, 2, 64));
        let model = Model::load(fixtures().unwrap().join("qwen35.gguf")).unwrap();
        // The tied head; qkv, gate, beta, alpha and out on the delta nets;
        // q, k, v and output on layer 3; an MLP a layer.
        assert_eq!(model.matrices().count(), 1 + 5 * 3 + 4 + 3 * 4);
        // A sequence's state: each delta net's last 3 inputs of its 384
        // channels, and 4 heads of 32 × 64, in f32.
        assert_eq!(
            model.recurrent_state_bytes(),
            3 * (3 * 384 + 4 * 32 * 64) * 4
        );
        let plain = Model::load(fixtures().unwrap().join("qwen3.gguf")).unwrap();
        assert_eq!(plain.recurrent_state_bytes(), 0);
    }
}

#[test]
fn qwen35moe_with_flagged_layers_and_a_gated_shared_expert_matches_the_reference() {
    // attention.recurrent_layers puts attention on layer 1; 8 experts of
    // 128 (2 used, renormalized) and a shared expert gated by its sigmoid;
    // no feed_forward_length, so the MLP width is the experts'.
    if let Some(c) = agrees_with_reference("qwen35moe") {
        assert_eq!((c.layers, c.ffn), (4, 128));
    }
}

#[test]
fn qwen3next_with_grouped_value_heads_and_fused_gates_matches_the_reference() {
    // Value heads grouped by key head (each key head's two consecutive
    // ones), beta and alpha from one ssm_beta_alpha; the mixture of
    // qwen35moe.gguf; attention on layer 3.
    if let Some(c) = agrees_with_reference("qwen3next") {
        assert_eq!((c.layers, c.ffn), (4, 128));
        let model = Model::load(fixtures().unwrap().join("qwen3next.gguf")).unwrap();
        // The tied head; qkv, gate, the fused gates and out on the delta
        // nets; q, k, v and output on layer 3; a router, 8 experts and a
        // shared expert a layer.
        assert_eq!(
            model.matrices().count(),
            1 + 4 * 3 + 4 + 4 * (1 + 3 * 8 + 3)
        );
    }
}

#[test]
fn granite_hybrid_with_mamba2_mixers_and_rotary_attention_matches_the_reference() {
    // Layers 0, 1 and 3 are Mamba-2 mixers (8 heads of 64, 2 groups of
    // state 32, 4 taps with a bias), layer 2 attends with the rotary;
    // Granite's multipliers.
    if let Some(c) = agrees_with_reference("granite_hybrid") {
        assert_eq!((c.layers, c.q_heads, c.kv_heads), (4, 4, 2));
        let model = Model::load(fixtures().unwrap().join("granite_hybrid.gguf")).unwrap();
        // The tied head; in and out on the mixers; q, k, v and output on
        // layer 2; an MLP a layer.
        assert_eq!(model.matrices().count(), 1 + 2 * 3 + 4 + 3 * 4);
        // A sequence's state: each mixer's last 3 inputs of its 640
        // channels, and 8 heads of 64 × 32, in f32.
        assert_eq!(
            model.recurrent_state_bytes(),
            3 * (3 * 640 + 8 * 64 * 32) * 4
        );
    }
}

#[test]
fn granite_hybrid_moe_with_unrotated_attention_and_a_shared_expert_matches_the_reference() {
    // Attention on layer 1 without rotary positions; one group, no conv
    // bias; 8 experts of 128 (2 used, renormalized) and an ungated shared
    // expert; untied.
    if let Some(c) = agrees_with_reference("granite_hybrid_moe") {
        assert_eq!((c.layers, c.ffn), (4, 128));
        let model = Model::load(fixtures().unwrap().join("granite_hybrid_moe.gguf")).unwrap();
        // The embedding and head; in and out on the mixers; q, k, v and
        // output on layer 1; a router, 8 experts and the shared expert a
        // layer.
        assert_eq!(
            model.matrices().count(),
            2 + 2 * 3 + 4 + 4 * (1 + 3 * 8 + 3)
        );
    }
}

#[test]
fn nemotron_h_with_mixers_unrotated_attention_and_relu_squared_mlps_matches_the_reference() {
    // Pattern M-M*-: mixers on 0 and 2, attention on 3, ungated relu²
    // MLPs of 256 and 192 on 1 and 4 (feed_forward_length per layer).
    if let Some(c) = agrees_with_reference("nemotron_h") {
        assert_eq!((c.layers, c.kv_heads, c.ffn), (5, 2, 256));
        let model = Model::load(fixtures().unwrap().join("nemotron_h.gguf")).unwrap();
        // The tied head; in and out on the mixers; q, k, v and output on
        // layer 3; up and down on the MLPs.
        assert_eq!(model.matrices().count(), 1 + 2 * 2 + 4 + 2 * 2);
    }
}

#[test]
fn nemotron_h_moe_with_ungated_experts_and_a_shared_expert_matches_the_reference() {
    // Pattern ME*ME: 8 ungated relu² experts of 128 (2 used) by sigmoid
    // score plus exp_probs_b, renormalized, times 2.5, and an ungated
    // shared expert of 192; untied.
    if let Some(c) = agrees_with_reference("nemotron_h_moe") {
        assert_eq!((c.layers, c.ffn), (5, 192));
        let model = Model::load(fixtures().unwrap().join("nemotron_h_moe.gguf")).unwrap();
        // The embedding and head; in and out on the mixers; attention on
        // layer 2; a router, 8 experts of two matrices and the shared
        // expert on layers 1 and 4.
        assert_eq!(
            model.matrices().count(),
            2 + 2 * 2 + 4 + 2 * (1 + 2 * 8 + 2)
        );
    }
}

#[test]
fn hybrids_in_the_engine_batch_chunk_and_preempt_as_each_prompt_runs_alone() {
    let Some(dir) = fixtures() else { return };
    let base: Vec<u32> = (0..37).map(|i| (i * 53 + 7) % 256).collect();
    // The second and third extend the first, the fourth repeats it: a
    // model without recurrent layers would start them on its cached pages.
    let prompts = vec![
        base.clone(),
        [&base[..], &[9, 8, 7][..]].concat(),
        [&base[..20], &[200, 100][..]].concat(),
        base.clone(),
        vec![5, 4, 3],
    ];
    let roomy = support::fcfs_config(256, 64);
    // Eight sequences of up to 100 tokens need about 56 pages: 24 forces
    // preemption, and the 64-token budget chunks the prompts.
    let tight = support::fcfs_config(24, 64);
    let many: Vec<Vec<u32>> = (0..8)
        .map(|i| {
            (0..40 + 3 * i)
                .map(|j| (j * 31 + 17 * i + 3) % 256)
                .collect()
        })
        .collect();
    for name in REFERENCE {
        let model = Model::load(dir.join(format!("{name}.gguf"))).unwrap();
        let run = |config: &EngineConfig, prompts: &[Vec<u32>]| {
            support::greedy_run(&model, config, true, prompts, 40)
        };
        let alone = |prompts: &[Vec<u32>]| -> Vec<Vec<u32>> {
            let one = |p: &Vec<u32>| run(&roomy, std::slice::from_ref(p)).outputs.remove(0);
            prompts.iter().map(one).collect()
        };
        let together = run(&roomy, &prompts);
        assert_eq!(together.outputs, alone(&prompts), "{name}: batched");
        assert_eq!(
            together.cached_tokens, 0,
            "{name}: no prompt starts on cached pages"
        );
        let squeezed = run(&tight, &many);
        assert!(squeezed.preempted > 0, "{name}: the small pool preempts");
        assert_eq!(
            squeezed.outputs,
            alone(&many),
            "{name}: chunked and preempted"
        );
    }
}
