//! Tiny random GGUF models written by the `gguf` Python package
//! (tests/reference/make_tiny_gguf.py), loaded by the engine and run through
//! the paged forward pass, against the independent NumPy forward pass
//! (tests/reference/forward_ref.py) over the tensors `gguf` dequantizes: a
//! `qwen2` model (biases, untied head, explicit key length), a `llama`
//! one (tied head, partial rotary, rope factors), a `qwen3` one (QK-norm), a
//! `llama` one with Llama 3.x rope scaling and attention wider than the
//! hidden size, a `phi3` one (fused tensors, LongRoPE), a `gemma3` one
//! (scaled embedding, post-block norms, GELU gating, sliding-window layers
//! with their own rotary base, linear scaling of the global ones) and a
//! `gemma2` one (soft-capped attention and logits), and two mixtures of
//! experts: a Mixtral-style `llama` (stacked and per-expert tensors), a
//! `qwen3moe` one (experts narrower than the MLP) and a `qwen2moe` one (a
//! gated shared expert, weights not renormalized), and Granite's dense and
//! mixture files (muP's multipliers; an ungated shared expert), a `llama`
//! with YaRN, a `smollm3` one (no rotary on every fourth layer) and an
//! `olmo2` one (norms after the blocks only, q and k normed whole), all with weights
//! of every supported type, through both the dense path (dequantized at load)
//! and the quantized one (matrices kept in the map, f32 activations, so
//! held to the same tolerances), and repacked (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
//! Q4_K, Q5_K and Q6_K rows interleaved: f32 activations against the reference, 8-bit ones against
//! the plain layout's). Then the files each loader must refuse.

mod support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use pagoda_core::{KvDtype, QuantKind};
use pagoda_cpu::quant::interleave::multiplies_in_place;
use pagoda_cpu::Isa;
use pagoda_engine::model::{
    ActPrecision, Holding, LoadError, Model, ModelConfig, ModelError, ModelFile, RepackCacheHandle,
    RepackCacheUse, RopeMode,
};

/// Logits may differ from the f64 reference by this fraction of their
/// range (max - min over all positions): f32 compute and the KV cache's
/// rounding. Measured: see the printed figures.
const TOLERANCE_F32: f32 = 3e-5;
const TOLERANCE_F16: f32 = 5e-3;
/// The tiny models make_tiny_gguf.py writes, each checked against the
/// reference.
const ARCHS: [&str; 20] = support::TINY_MODELS;
/// Tiny models only the CPU backend runs (Vulkan has no attention sinks,
/// and its kernels stop short of latent attention's head of 576), checked
/// against the reference here only.
const CPU_ONLY: [&str; 4] = [
    "gpt_oss",
    "deepseek2_lite",
    "deepseek2_v3",
    "deepseek2_legacy",
];

fn prompts() -> Vec<Vec<u32>> {
    vec![
        vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 200, 255, 0, 17],
        (0..40).map(|i| (i * 37 + 11) % 256).collect(),
        vec![42],
    ]
}

/// The tiny models and the reference's logits, made once per test binary.
fn fixtures() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let python = support::require_python("synthetic_gguf")?;
        let dir = support::scratch_dir("synthetic_gguf");
        support::run_reference(&python, "make_tiny_gguf.py", &[dir.as_os_str()]);
        let prompts_file = dir.join("prompts.txt");
        support::write_prompts(&prompts_file, &prompts());
        for arch in ARCHS.into_iter().chain(CPU_ONLY) {
            let out = dir.join(arch);
            std::fs::create_dir_all(&out).unwrap();
            let model = dir.join(format!("{arch}.gguf"));
            support::run_reference(
                &python,
                "forward_ref.py",
                &[
                    model.as_os_str(),
                    out.as_os_str(),
                    prompts_file.as_os_str(),
                    "0".as_ref(),
                ],
            );
        }
        Some(dir)
    })
    .as_ref()
}

fn load(path: &Path) -> Result<Model, LoadError> {
    let file = ModelFile::open(path)?;
    Model::from_gguf(&file.gguf()?)
}

/// A way to load a model file.
type Loader = fn(&Path) -> Result<Model, LoadError>;

/// Both loaders: dense, then quantized in place.
fn loaders() -> [(&'static str, Loader); 2] {
    [("dense", load), ("quantized", |p| Model::load(p))]
}

fn agrees_with_reference(arch: &str) -> Option<ModelConfig> {
    let dir = fixtures()?;
    let path = dir.join(format!("{arch}.gguf"));
    let dense = load(&path).expect("load the tiny model");
    let quantized = Model::load(&path).expect("load the tiny model in place");
    assert!(!dense.is_quantized() && quantized.is_quantized());
    assert_eq!(dense.config(), quantized.config());
    assert_eq!(dense.parameters(), quantized.parameters());
    let runs = [
        (&dense, KvDtype::F32, TOLERANCE_F32),
        (&dense, KvDtype::F16, TOLERANCE_F16),
        (&quantized, KvDtype::F32, TOLERANCE_F32),
        (&quantized, KvDtype::F16, TOLERANCE_F16),
    ];
    for (model, dtype, tolerance) in runs {
        let path_name = if model.is_quantized() {
            "quantized"
        } else {
            "dense"
        };
        for (i, tokens) in prompts().iter().enumerate() {
            let reference = support::read_f32s(&dir.join(arch).join(format!("logits_{i}.f32")));
            let ours = support::logits_every_position(model, tokens, dtype, 7);
            let (diff, range) = support::max_diff(&ours, &reference);
            println!(
                "{arch} {path_name} {dtype:?} prompt {i} ({} tokens): max |diff| {diff:.2e} over a range of {range:.2} ({:.2e} of it)",
                tokens.len(),
                diff / range
            );
            assert!(
                diff <= tolerance * range,
                "{arch} {path_name} {dtype:?} prompt {i}: max |diff| {diff} > {tolerance} × range {range}"
            );
        }
    }
    repacked_agrees(arch, &path, &dir.join(arch));
    Some(*dense.config())
}

/// Logits of the repacked model (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K
/// matrices interleaved eight rows at a time) may differ from the plain layout's, both with
/// 8-bit activations, by this fraction of their range. Each product
/// differs only in the order of its f32 adds (within 1e-5 of Σ|w·x|:
/// `backend-cpu/tests/qmatmul_interleaved.rs`), but the next layer rounds
/// its activations to 8 bits, and a last-bit difference that moves one
/// value across a rounding boundary moves it a whole step: measured up to
/// 3.6e-3 of the range over these prompts (1e-7 where no value crossed).
/// A wrong kernel moves logits by a good part of their range.
const TOLERANCE_REPACKED: f32 = 1e-2;

/// The repacked tolerance of the tiny DeepSeek files, whose 8-bit logits
/// are the most sensitive of all: each layout alone is 0.9e-2 to 1.4e-1 of
/// the range from the f64 reference (0.2e-2 to 4e-2 for the other
/// mixtures), the two alike, and the layouts measured up to 3.3e-2 apart.
/// Their f32 logits, repacked or not, are held to [`TOLERANCE_F32`].
const TOLERANCE_REPACKED_DEEPSEEK: f32 = 6e-2;

/// Whether the CPU multiplies any of `model`'s matrix types interleaved
/// in place (then the loader repacks them).
fn repacks(model: &Model) -> bool {
    model
        .matrices()
        .any(|m| multiplies_in_place(Isa::detect(), m.kind()))
}

/// The repacked model: with f32 activations (every interleaved row copied
/// back out to the plain layout) against the reference, and with 8-bit
/// activations (the interleaved kernels) against the plain layout's.
fn repacked_agrees(arch: &str, path: &Path, reference: &Path) {
    let file = Arc::new(ModelFile::open(path).expect("map the tiny model"));
    let open = |h| Model::open(Arc::clone(&file), h).expect("load the tiny model");
    let f32_packed = open(Holding::Interleaved(ActPrecision::F32));
    let packed = open(Holding::Interleaved(ActPrecision::Int8));
    let plain = open(Holding::Mapped(ActPrecision::Int8));
    let interleaved = packed.matrices().filter(|m| m.is_interleaved()).count();
    // Only where the CPU multiplies interleaved rows in place: elsewhere the
    // loader keeps every matrix plain.
    assert_eq!(
        interleaved > 0,
        repacks(&plain),
        "{arch}: {interleaved} matrices interleaved"
    );
    assert_eq!(packed.parameters(), plain.parameters());
    for (i, tokens) in prompts().iter().enumerate() {
        let want = support::read_f32s(&reference.join(format!("logits_{i}.f32")));
        let ours = support::logits_every_position(&f32_packed, tokens, KvDtype::F32, 7);
        let (diff, range) = support::max_diff(&ours, &want);
        assert!(
            diff <= TOLERANCE_F32 * range,
            "{arch} repacked f32 prompt {i}: max |diff| {diff} > {TOLERANCE_F32} × range {range}"
        );
        let a = support::logits_every_position(&packed, tokens, KvDtype::F32, 7);
        let b = support::logits_every_position(&plain, tokens, KvDtype::F32, 7);
        let (diff, range) = support::max_diff(&a, &b);
        println!(
            "{arch} repacked int8 prompt {i}: {interleaved} matrices interleaved, max |diff| from the plain layout {diff:.2e} ({:.2e} of the range)",
            diff / range
        );
        let tolerance = if arch.starts_with("deepseek2") {
            TOLERANCE_REPACKED_DEEPSEEK
        } else {
            TOLERANCE_REPACKED
        };
        assert!(
            diff <= tolerance * range,
            "{arch} repacked int8 prompt {i}: max |diff| {diff} > {tolerance} × range {range}"
        );
    }
}

/// The repack cache: a first load writes it, a second reads every
/// interleaved matrix from it and computes the very logits of a load
/// without it; a damaged cache file (truncated, a bit flipped in a matrix
/// or the index or the trailer, garbage, empty) is never used: the load repacks, writes a good one, and
/// the logits stay the same. For every tiny architecture (tied heads,
/// fused tensors split into views).
#[test]
fn repack_cache_round_trips_and_refuses_damaged_files() {
    let Some(dir) = fixtures() else { return };
    let cache = dir.join("repack-cache");
    let _ = std::fs::remove_dir_all(&cache);
    let mut rng = fastrand::Rng::with_seed(2026);
    let tokens = &prompts()[1];
    for arch in ARCHS {
        let path = dir.join(format!("{arch}.gguf"));
        let file = Arc::new(ModelFile::open(&path).expect("map the tiny model"));
        let holding = Holding::Interleaved(ActPrecision::Int8);
        let open = || {
            Model::open_cached(Arc::clone(&file), holding, Some(&cache)).expect("load with a cache")
        };
        let plain = Model::open(Arc::clone(&file), holding).expect("load without a cache");
        let want = support::logits_every_position(&plain, tokens, KvDtype::F32, 7);
        let (first, mut writer) = open();
        let writer = writer.as_mut().expect("a handle with a cache");
        assert!(
            matches!(writer.now(), RepackCacheUse::Writing { .. }),
            "{arch}: a first load starts writing the cache, got {:?}",
            writer.now()
        );
        let RepackCacheUse::Written { path: written, .. } = writer.wait().clone() else {
            panic!(
                "{arch}: a first load writes the cache, got {:?}",
                writer.now()
            );
        };
        assert_eq!(
            support::logits_every_position(&first, tokens, KvDtype::F32, 7),
            want
        );
        let (second, used) = open();
        assert_eq!(
            used.as_ref().map(RepackCacheHandle::now),
            Some(&RepackCacheUse::Read {
                path: written.clone()
            }),
            "{arch}"
        );
        assert_eq!(
            second.matrices().filter(|m| m.is_interleaved()).count(),
            plain.matrices().filter(|m| m.is_interleaved()).count(),
        );
        assert_eq!(
            support::logits_every_position(&second, tokens, KvDtype::F32, 7),
            want
        );
        let repacks = repacks(&plain);
        drop((first, second));
        if !repacks {
            continue;
        }
        let good = std::fs::read(&written).unwrap();
        let damaged: Vec<Vec<u8>> = vec![
            good[..good.len() - 1].to_vec(),
            Vec::new(),
            (0..rng.usize(0..4096)).map(|_| rng.u8(..)).collect(),
            {
                // A byte of the index or trailer (the index's offset is
                // the trailer's first word).
                let mut d = good.clone();
                let trailer = good.len() - 32;
                let index = u64::from_le_bytes(good[trailer..trailer + 8].try_into().unwrap());
                let at = rng.usize(index as usize..good.len());
                d[at] ^= 1 << rng.u8(0..8);
                d
            },
            {
                // A byte of the first matrix.
                let mut d = good.clone();
                let at = rng.usize(0..64);
                d[at] ^= 1 << rng.u8(0..8);
                d
            },
            {
                // The trailer's identity.
                let mut d = good.clone();
                let at = good.len() - 24;
                d[at] ^= 0x40;
                d
            },
        ];
        for (i, bytes) in damaged.into_iter().enumerate() {
            std::fs::write(&written, &bytes).unwrap();
            let (model, mut used) = open();
            let used = used.as_mut().map(|w| w.wait().clone());
            assert!(
                matches!(&used, Some(RepackCacheUse::Written { path, .. }) if *path == written),
                "{arch} damage {i}: {used:?}"
            );
            assert_eq!(
                support::logits_every_position(&model, tokens, KvDtype::F32, 7),
                want,
                "{arch} damage {i}"
            );
            assert_eq!(
                std::fs::read(&written).unwrap(),
                good,
                "{arch} damage {i}: rewritten"
            );
        }
    }
}

/// A model file rewritten in place (a new modification time) gets a new
/// cache file, and the old one, as large as the model, is deleted once the
/// new one is written; a copy of the file elsewhere keeps its own.
#[test]
fn a_rewritten_model_file_replaces_its_cache_file() {
    let Some(dir) = fixtures() else { return };
    let work = dir.join("repack-stale");
    let _ = std::fs::remove_dir_all(&work);
    let (here, there) = (work.join("a"), work.join("b"));
    for place in [&here, &there] {
        std::fs::create_dir_all(place).unwrap();
        std::fs::copy(dir.join("llama.gguf"), place.join("tiny.gguf")).unwrap();
    }
    let cache = work.join("cache");
    let written = |place: &Path| {
        let file = Arc::new(ModelFile::open(place.join("tiny.gguf")).unwrap());
        let holding = Holding::Interleaved(ActPrecision::Int8);
        let (_, writer) = Model::open_cached(file, holding, Some(&cache)).unwrap();
        match writer.expect("a handle with a cache").wait().clone() {
            RepackCacheUse::Written { path, .. } => path,
            other => panic!("expected a write, got {other:?}"),
        }
    };
    let first = written(&here);
    let elsewhere = written(&there);
    assert_ne!(first, elsewhere, "two places, two files");
    let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(here.join("tiny.gguf"))
        .unwrap()
        .set_modified(long_ago)
        .unwrap();
    let second = written(&here);
    assert_ne!(first, second, "a new identity");
    assert!(!first.exists(), "the old identity's file is deleted");
    assert!(second.exists() && elsewhere.exists());
    std::fs::remove_dir_all(&work).unwrap();
}

#[test]
fn qwen2_with_biases_and_untied_head_matches_the_reference() {
    if let Some(c) = agrees_with_reference("qwen2") {
        assert_eq!(
            (c.q_heads, c.kv_heads, c.head_dim, c.hidden),
            (2, 1, 64, 256)
        );
        assert_eq!(c.rope_theta, 1e6);
    }
}

#[test]
fn llama_with_tied_head_and_partial_rotary_matches_the_reference() {
    if let Some(c) = agrees_with_reference("llama") {
        assert_eq!(
            (c.q_heads, c.kv_heads, c.head_dim, c.rope_dim),
            (4, 2, 64, 32)
        );
    }
}

#[test]
fn qwen3_with_qk_norm_matches_the_reference() {
    if let Some(c) = agrees_with_reference("qwen3") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (4, 2, 64));
    }
}

#[test]
fn llama3_rope_scaling_and_a_wider_attention_match_the_reference() {
    // Llama 3.x's scaled frequencies (as rope_freqs.weight), and heads ×
    // head_dim (512) wider than the hidden size (256), as Mistral-Nemo has.
    if let Some(c) = agrees_with_reference("llama3") {
        assert_eq!(
            (c.q_heads, c.head_dim, c.rope_dim, c.hidden),
            (8, 64, 64, 256)
        );
        assert_eq!(c.rope_theta, 500_000.0);
    }
}

#[test]
fn phi3_with_fused_tensors_and_longrope_matches_the_reference() {
    if let Some(c) = agrees_with_reference("phi3") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (4, 4, 64));
    }
}

#[test]
fn gemma3_with_windowed_layers_and_post_norms_matches_the_reference() {
    // The 40-token prompt crosses the 5-token window of layer 0.
    if let Some(c) = agrees_with_reference("gemma3") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (4, 2, 64));
    }
}

#[test]
fn gemma2_with_soft_caps_matches_the_reference() {
    if let Some(c) = agrees_with_reference("gemma2") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (2, 1, 64));
    }
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
fn yarn_context_extension_matches_the_reference() {
    // Factor 4 over an original context of 128: the ramp runs over the
    // middle pairs, with the magnitude correction on every angle.
    if let Some(c) = agrees_with_reference("yarn") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (4, 2, 64));
    }
}

#[test]
fn smollm3_with_an_unrotated_fourth_layer_matches_the_reference() {
    if let Some(c) = agrees_with_reference("smollm3") {
        assert_eq!((c.layers, c.q_heads, c.kv_heads), (4, 4, 2));
    }
}

#[test]
fn olmo2_with_post_norms_and_whole_width_qk_norm_matches_the_reference() {
    if let Some(c) = agrees_with_reference("olmo2") {
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
fn q2_k_q3_k_and_iq4_matrices_match_the_reference() {
    // Every matrix of the file Q2_K, Q3_K, IQ4_NL or IQ4_XS, the types of
    // Q2_K, Q3_K_M and IQ4_XS files: each through both layers' products.
    if agrees_with_reference("lowbits").is_some() {
        let model = Model::load(fixtures().unwrap().join("lowbits.gguf")).unwrap();
        let mut kinds: Vec<QuantKind> = model.matrices().map(|m| m.kind()).collect();
        kinds.sort_by_key(|k| k.ggml_id());
        kinds.dedup();
        let expected = [
            QuantKind::Q2_K,
            QuantKind::Q3_K,
            QuantKind::IQ4_NL,
            QuantKind::IQ4_XS,
        ];
        assert_eq!(kinds, expected);
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
fn glm4_with_post_norms_biases_and_a_fused_mlp_matches_the_reference() {
    // q/k/v biases, norms after both blocks, interleaved rotary on half
    // of each head, the gate and up rows in one ffn_up.
    if let Some(c) = agrees_with_reference("glm4") {
        assert_eq!(
            (c.q_heads, c.kv_heads, c.head_dim, c.rope_dim),
            (4, 2, 64, 32)
        );
    }
    // The same layer with the projections fused too, with one fused bias.
    if let Some(c) = agrees_with_reference("glm4_fused") {
        assert_eq!((c.q_heads, c.kv_heads, c.rope_dim), (4, 2, 32));
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
fn granite_with_its_multipliers_matches_the_reference() {
    // Embedding, attention, residual and logit scales all away from 1.
    if let Some(c) = agrees_with_reference("granite") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (4, 2, 64));
    }
}

#[test]
fn granitemoe_with_an_ungated_shared_expert_matches_the_reference() {
    if let Some(c) = agrees_with_reference("granitemoe") {
        assert_eq!((c.q_heads, c.kv_heads, c.ffn), (4, 2, 256));
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

#[test]
fn each_architecture_loads_what_its_file_holds() {
    let Some(dir) = fixtures() else { return };
    for (name, load) in loaders() {
        let qwen2 = load(&dir.join("qwen2.gguf")).unwrap();
        assert!(!qwen2.is_tied() && qwen2.has_biases(), "{name}");
        assert_eq!(qwen2.rope_mode(), RopeMode::Neox);
        let llama = load(&dir.join("llama.gguf")).unwrap();
        assert!(llama.is_tied() && !llama.has_biases(), "{name}");
        assert_eq!(llama.rope_mode(), RopeMode::Interleaved);
        let phi3 = load(&dir.join("phi3.gguf")).unwrap();
        assert_eq!(phi3.architecture(), "phi3");
        // q, k and v (and gate and up) are views of one fused tensor.
        assert_eq!(
            phi3.matrices().count(),
            2 + 7 * phi3.config().layers as usize
        );
        let qwen3 = load(&dir.join("qwen3.gguf")).unwrap();
        assert!(!qwen3.has_biases() && qwen3.architecture() == "qwen3");
    }
    // Mapped matrices are views of the file, not copies.
    let file = std::sync::Arc::new(ModelFile::open(dir.join("phi3.gguf")).unwrap());
    let phi3 = Model::from_file(std::sync::Arc::clone(&file)).unwrap();
    let range = file.bytes().as_ptr_range();
    for m in phi3.matrices() {
        assert!(range.contains(&m.bytes().as_ptr()), "a copy");
    }
}

#[test]
fn unsupported_or_malformed_files_are_refused_by_name() {
    let Some(dir) = fixtures() else { return };
    for (name, load) in loaders() {
        println!("{name} loader");
        refused_by_name(dir, load);
    }
}

fn refused_by_name(dir: &Path, load: Loader) {
    for arch in ["gpt2", "arctic"] {
        match load(&dir.join(format!("{arch}.gguf"))) {
            Err(e @ LoadError::UnsupportedArchitecture(_)) => {
                let LoadError::UnsupportedArchitecture(a) = &e else {
                    unreachable!()
                };
                assert_eq!(a, arch);
                assert!(e.to_string().contains("qwen3moe, phi3"), "{e}");
            }
            other => panic!("{arch}: {other:?}"),
        }
    }
    // Architectures that run, with a feature that is not built: named.
    for (file, arch, feature) in [
        ("experts", "qwen2", "mixture of experts"),
        ("scaling", "llama", "RoPE scaling \"dynamic\""),
        ("llama_shexp", "llama", "shared experts"),
        ("olmo3", "olmo2", "sliding-window layers"),
    ] {
        match load(&dir.join(format!("{file}.gguf"))) {
            Err(e @ LoadError::UnsupportedFeature { .. }) => {
                assert!(e.to_string().contains(feature), "{file}: {e}");
                assert!(
                    e.to_string().starts_with(&format!("{arch}: ")),
                    "{file}: {e}"
                );
            }
            other => panic!("{file}: {other:?}"),
        }
    }
    match load(&dir.join("iq2xxs.gguf")) {
        Err(e @ LoadError::UnsupportedTensorType { .. }) => {
            let LoadError::UnsupportedTensorType { tensor, kind } = &e else {
                unreachable!()
            };
            assert_eq!(
                (tensor.as_str(), kind.as_str()),
                ("blk.0.ffn_gate.weight", "IQ2_XXS")
            );
            assert!(
                e.to_string().contains("IQ2_XXS")
                    && e.to_string().contains("blk.0.ffn_gate.weight")
            );
        }
        other => panic!("iq2xxs: {other:?}"),
    }
    match load(&dir.join("missing.gguf")) {
        Err(LoadError::MissingTensor(t)) => assert_eq!(t, "blk.1.ffn_up.weight"),
        other => panic!("missing: {other:?}"),
    }
    match load(&dir.join("shape.gguf")) {
        Err(LoadError::Shape {
            tensor,
            expected,
            found,
        }) => {
            assert_eq!(tensor, "blk.0.attn_k.weight");
            assert_eq!((expected, found), (vec![256, 64], vec![256, 128]));
        }
        other => panic!("shape: {other:?}"),
    }
    // Mixtures whose metadata does not match their tensors.
    match load(&dir.join("moe_used.gguf")) {
        Err(LoadError::HyperParameter { key, value, .. }) => {
            assert_eq!(
                (key.as_str(), value.as_str()),
                ("qwen3moe.expert_used_count", "9")
            );
        }
        other => panic!("moe_used: {other:?}"),
    }
    match load(&dir.join("moe_count.gguf")) {
        Err(LoadError::Metadata { key, .. }) => assert_eq!(key, "qwen3moe.expert_count"),
        other => panic!("moe_count: {other:?}"),
    }
    for (file, tensor, expected, found) in [
        (
            "moe_width",
            "blk.0.ffn_gate_exps.weight",
            vec![256, 64, 8],
            vec![256, 128, 8],
        ),
        (
            "moe_fewer",
            "blk.0.ffn_gate_inp.weight",
            vec![256, 4],
            vec![256, 8],
        ),
    ] {
        match load(&dir.join(format!("{file}.gguf"))) {
            Err(LoadError::Shape {
                tensor: t,
                expected: e,
                found: f,
            }) => assert_eq!((t.as_str(), e, f), (tensor, expected, found), "{file}"),
            other => panic!("{file}: {other:?}"),
        }
    }
    match load(&dir.join("zero_heads.gguf")) {
        Err(LoadError::Model(ModelError::ZeroSize(what))) => assert_eq!(what, "q_heads"),
        other => panic!("zero heads: {other:?}"),
    }
    let garbage = dir.join("garbage.gguf");
    std::fs::write(&garbage, b"GGUF\x03\x00\x00\x00 too short").unwrap();
    match load(&garbage) {
        Err(LoadError::Gguf(_)) => {}
        other => panic!("garbage: {other:?}"),
    }
    match load(&dir.join("no-such-file.gguf")) {
        Err(LoadError::Io { path, .. }) => assert!(path.ends_with("no-such-file.gguf")),
        other => panic!("no file: {other:?}"),
    }
}
