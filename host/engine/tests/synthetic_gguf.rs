//! Tiny random GGUF models written by the `gguf` Python package
//! (tests/reference/make_tiny_gguf.py), loaded by the engine and run through
//! the paged forward pass, against the independent NumPy forward pass
//! (tests/reference/forward_ref.py) over the tensors `gguf` dequantizes: a
//! `qwen2` model (biases, untied head, explicit key length), a `llama`
//! one (tied head, partial rotary, rope factors), a `qwen3` one (QK-norm), a
//! `llama` one with Llama 3.x rope scaling and attention wider than the
//! hidden size, a `phi3` one (fused tensors, LongRoPE), a `gemma3` one
//! (scaled embedding, post-block norms, GELU gating, sliding-window layers
//! with their own rotary base, linear scaling of the global ones), a
//! `gemma2` one (soft-capped attention and logits), Granite's dense file
//! (muP's multipliers), a `llama` with YaRN, a `smollm3` one (no rotary on
//! every fourth layer), an `olmo2` one (norms after the blocks only, q and
//! k normed whole) and `glm4` ones, all with weights of every supported
//! type, through both the dense path (dequantized at load) and the
//! quantized one (matrices kept in the map, f32 activations, so held to
//! the same tolerances), and repacked (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
//! Q5_K and Q6_K rows interleaved: f32 activations against the reference,
//! 8-bit ones against the plain layout's). Then the repack cache, and the
//! files each loader must refuse. The mixtures of experts are
//! experts_gguf.rs's.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pagoda_core::{KvDtype, QuantKind};
use pagoda_engine::model::{
    ActPrecision, Holding, LoadError, Model, ModelConfig, ModelError, ModelFile, RepackCacheHandle,
    RepackCacheUse, RopeMode,
};
use support::tiny::{self, loaders, prompts, repacks, Loader};

/// The tiny models this file checks against the reference.
const REFERENCE: [&str; 27] = tiny::DENSE;

fn fixtures() -> Option<&'static PathBuf> {
    tiny::fixtures(&REFERENCE)
}

fn agrees_with_reference(arch: &str) -> Option<ModelConfig> {
    Some(tiny::agrees_with_reference(fixtures()?, arch))
}

/// Every tiny model is checked against the reference, here, in
/// experts_gguf.rs or in hybrid_gguf.rs.
#[test]
fn every_tiny_model_is_checked_against_the_reference() {
    let mut checked: Vec<&str> = tiny::DENSE
        .into_iter()
        .chain(tiny::MIXTURES)
        .chain(tiny::HYBRIDS)
        .collect();
    let mut written: Vec<&str> = support::TINY_MODELS
        .into_iter()
        .chain(tiny::CPU_ONLY)
        .collect();
    checked.sort_unstable();
    written.sort_unstable();
    assert_eq!(checked, written);
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
    for arch in support::TINY_MODELS {
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
fn qwen_vl_text_models_with_m_rope_sections_match_the_reference() {
    // Qwen2-VL's sections and Qwen3-VL's interleaved ones with DeepStack
    // layers: on text, the plain NeoX rotary of qwen2 and qwen3.
    if let Some(c) = agrees_with_reference("qwen2vl") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (4, 2, 64));
    }
    if let Some(c) = agrees_with_reference("qwen3vl") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (4, 2, 64));
        let dir = fixtures().unwrap();
        let vl = Model::load(dir.join("qwen3vl.gguf")).unwrap();
        assert_eq!(
            (vl.architecture(), vl.rope_mode(), vl.is_tied()),
            ("qwen3vl", RopeMode::Neox, true)
        );
    }
}

#[test]
fn ernie4_5_with_attention_biases_matches_the_reference() {
    // Interleaved rotary, q/k/v and output biases (HF's use_bias).
    if let Some(c) = agrees_with_reference("ernie4_5") {
        assert_eq!((c.q_heads, c.kv_heads, c.rope_theta), (4, 2, 500_000.0));
        let model = Model::load(fixtures().unwrap().join("ernie4_5.gguf")).unwrap();
        assert!(model.has_biases() && model.rope_mode() == RopeMode::Interleaved);
    }
}

#[test]
fn seed_oss_with_biases_and_its_attention_scale_matches_the_reference() {
    if let Some(c) = agrees_with_reference("seed_oss") {
        assert_eq!(
            (c.q_heads, c.kv_heads, c.head_dim, c.rope_theta),
            (4, 2, 64, 1e7)
        );
    }
}

#[test]
fn exaone_and_exaone4_with_windows_and_global_nope_match_the_reference() {
    // EXAONE 3.5: NeoX rotary with rope_freqs factors.
    if let Some(c) = agrees_with_reference("exaone") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (4, 2, 64));
    }
    // EXAONE 4's hybrid shape: the 40-token prompt crosses the 5-token
    // window of layers 0-2; layer 3 attends over all of it unrotated.
    if let Some(c) = agrees_with_reference("exaone4") {
        assert_eq!((c.layers, c.q_heads, c.kv_heads), (4, 4, 2));
    }
    // And the 1.2B's: every layer rotated, over the whole context.
    if let Some(c) = agrees_with_reference("exaone4_full") {
        assert_eq!((c.layers, c.q_heads, c.kv_heads), (2, 4, 2));
    }
}

#[test]
fn mistral3_with_yarn_s_mscale_ratio_and_the_attention_temperature_matches_the_reference() {
    // The 40-token prompt runs past the original context of 8, where the
    // queries' temperature rises above 1.
    if let Some(c) = agrees_with_reference("mistral3") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (4, 2, 64));
    }
}

#[test]
fn hunyuan_dense_with_qk_norm_after_the_rotary_and_ntk_alpha_matches_the_reference() {
    if let Some(c) = agrees_with_reference("hunyuan_dense") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (4, 2, 64));
    }
}

#[test]
fn command_r_and_cohere2_with_parallel_layers_and_layer_norms_match_the_reference() {
    // Command R+'s shape: one LayerNorm before both blocks, q and k
    // LayerNormed per head by gains of their own, logits times 0.3.
    if let Some(c) = agrees_with_reference("command_r") {
        assert_eq!((c.q_heads, c.kv_heads, c.head_dim), (4, 2, 64));
    }
    // Command R7B's: the 40-token prompt crosses the 5-token window of
    // layers 0-2; layer 3 attends over all of it unrotated.
    if let Some(c) = agrees_with_reference("cohere2") {
        assert_eq!((c.layers, c.q_heads, c.kv_heads), (4, 4, 2));
    }
}

#[test]
fn olmo3_with_windows_and_yarn_on_its_global_layers_matches_the_reference() {
    // Both layers local (no pattern in the file: three of every four).
    if let Some(c) = agrees_with_reference("olmo3") {
        assert_eq!((c.layers, c.q_heads, c.kv_heads), (2, 4, 2));
    }
    // Layers 0-2 over a 5-token window by the plain rotary of
    // freq_base_swa; layer 3 over the whole context with YaRN.
    if let Some(c) = agrees_with_reference("olmo3_yarn") {
        assert_eq!((c.layers, c.q_heads, c.kv_heads), (4, 4, 2));
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
