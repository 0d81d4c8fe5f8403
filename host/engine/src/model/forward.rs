//! A model ready to run: its shape, its [`Program`] (the architecture as
//! data, built once at load) and how its matrices are held; the step's
//! input, checked before any compute; the entry point backends call.

use std::path::Path;
use std::sync::Arc;

use pagoda_core::backend::Backend;
use pagoda_core::gguf::Gguf;
use pagoda_core::{KvDtype, KvGeometry};

use super::arch::{self, Source};
use super::config::{ModelConfig, ModelError};
use super::cpu::{self, Activations};
use super::file::ModelFile;
use super::input::{ForwardError, StepInput};
use super::load_error::LoadError;
use super::precision::ActPrecision;
use super::program::{
    attention_block, mlp_block, Attend, AttentionBlock, Gating, MlpBlock, Op, Program,
};
use super::recurrent::MAX_STATE_ROWS;
use super::repack_cache::{RepackCache, RepackCacheHandle};
use super::rope::{Rope, RopeMode, RopeSpec};
use super::tensors::Matrix;

/// How a model's matrices are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// Quantized in the memory-mapped file, multiplied with activations at
    /// this precision.
    Mapped(ActPrecision),
    /// As [`Holding::Mapped`], with the matrices of Q4_0 and Q8_0 copied
    /// at load with their rows interleaved eight at a time, for the
    /// kernels that multiply eight rows per vector (see
    /// `pagoda_cpu::quant::interleave`); their pages of the map are let go.
    Interleaved(ActPrecision),
    /// Dequantized to f32 (a file at load, or the seeded model).
    Dense,
}

/// A decoder ready to run: its shape, its program and the rotary tables in
/// it.
#[derive(Debug, Clone)]
pub struct Model {
    config: ModelConfig,
    program: Program,
    holding: Holding,
    architecture: String,
    /// Tells models apart (clones share it: same weights), so a backend
    /// knows which model's weights it holds (see `device`).
    id: u64,
}

/// What [`Model::seeded_with`] adds to the seeded Llama layer (the parts
/// other architectures' files bring).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Seeded {
    /// Query, key and value biases, uniform in ±0.5 (qwen2).
    pub biases: bool,
    /// Divisors of the rotary frequencies (Llama 3.x), `rope_dim/2`.
    pub rope_factors: Option<Vec<f32>>,
}

/// The next [`Model`]'s id.
static NEXT_MODEL_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Model {
    fn new(config: ModelConfig, program: Program, holding: Holding, architecture: &str) -> Self {
        Self {
            config,
            program,
            holding,
            architecture: architecture.to_string(),
            id: NEXT_MODEL_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// The model a GGUF file holds, its matrices dequantized to f32.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Model, LoadError> {
        let (config, program) = arch::build(g, Source::Dense)?;
        Ok(Self::new(config, program, Holding::Dense, arch::name(g)?))
    }

    /// The model a mapped GGUF file holds, held as `holding` says: loading
    /// a mapped model reads only the metadata and the small vectors.
    pub fn open(file: Arc<ModelFile>, holding: Holding) -> Result<Model, LoadError> {
        Self::open_cached(file, holding, None).map(|(model, _)| model)
    }

    /// [`open`](Self::open), with interleaved matrices read from the
    /// repack cache in `repack_cache` where it holds this file's, else
    /// repacked and written there on a thread of its own (the handle says
    /// what the cache did and waits for the write; `None` for other
    /// holdings, or without a directory).
    pub fn open_cached(
        file: Arc<ModelFile>,
        holding: Holding,
        repack_cache: Option<&Path>,
    ) -> Result<(Model, Option<RepackCacheHandle>), LoadError> {
        let g = file.gguf()?;
        let mut cache = None;
        let source = match holding {
            Holding::Mapped(_) => Source::Mapped(Arc::clone(&file)),
            Holding::Interleaved(_) => {
                cache = repack_cache.map(|dir| Arc::new(RepackCache::open(dir, &file)));
                Source::Interleaved(Arc::clone(&file), cache.clone())
            }
            Holding::Dense => Source::Dense,
        };
        let (config, program) = arch::build(&g, source)?;
        let used = cache.map(RepackCache::finish);
        Ok((Self::new(config, program, holding, arch::name(&g)?), used))
    }

    /// [`open`](Self::open) with the matrices in the map and f32
    /// activations.
    pub fn from_file(file: Arc<ModelFile>) -> Result<Model, LoadError> {
        Self::open(file, Holding::Mapped(ActPrecision::F32))
    }

    /// Maps the GGUF file at `path` and loads it with [`from_file`](Self::from_file).
    pub fn load(path: impl AsRef<Path>) -> Result<Model, LoadError> {
        Model::from_file(Arc::new(ModelFile::open(path)?))
    }

    /// A Llama-shaped model of `config` with weights drawn from `seed`
    /// (NeoX rotary): each projection uniform with unit output variance
    /// (±√3/√fan_in), norms at one, an output head of its own. Same seed,
    /// same model, on every machine.
    pub fn seeded(config: ModelConfig, seed: u64) -> Result<Model, ModelError> {
        Self::seeded_with(config, seed, &Seeded::default())
    }

    /// [`seeded`](Self::seeded) with what [`Seeded`] adds (the same base
    /// weights: the additions are drawn from a second seed).
    pub fn seeded_with(
        config: ModelConfig,
        seed: u64,
        extra: &Seeded,
    ) -> Result<Model, ModelError> {
        config.validate()?;
        let mut extra_rng = fastrand::Rng::with_seed(seed ^ 0x5eed_b1a5);
        let mut biases = || {
            if !extra.biases {
                return [None, None, None];
            }
            let mut draw = |n: usize| Some((0..n).map(|_| extra_rng.f32() - 0.5).collect());
            [
                draw(config.q_dim()),
                draw(config.kv_dim()),
                draw(config.kv_dim()),
            ]
        };
        if let Some(f) = &extra.rope_factors {
            if f.len() != config.rope_dim as usize / 2
                || !f.iter().all(|x| x.is_finite() && *x > 0.0)
            {
                return Err(ModelError::NonFinite);
            }
        }
        let mut rng = fastrand::Rng::with_seed(seed);
        // Drawn as `[in, out]` (the order the draws have always had), kept
        // as GGUF's `out` rows of `in`.
        let mut matrix = |inp: usize, out: usize| {
            let bound = 3f32.sqrt() / (inp as f32).sqrt();
            let drawn: Vec<f32> = (0..inp * out)
                .map(|_| (rng.f32() * 2.0 - 1.0) * bound)
                .collect();
            let rows = (0..out * inp)
                .map(|k| drawn[(k % inp) * out + k / inp])
                .collect();
            Matrix::dense(rows, out, inp)
        };
        let (v, h, q, kv, f) = (
            config.vocab as usize,
            config.hidden as usize,
            config.q_dim(),
            config.kv_dim(),
            config.ffn as usize,
        );
        // Embedding rows of unit variance: fan-in 1, drawn as one row.
        let embed = matrix(1, v * h)?;
        let embed = Matrix::dense(embed.f32_rows().unwrap_or_default().to_vec(), v, h)?;
        let mut layers = Vec::with_capacity(config.layers as usize);
        for _ in 0..config.layers {
            let attention = AttentionBlock {
                q: matrix(h, q)?,
                k: matrix(h, kv)?,
                v: matrix(h, kv)?,
                biases: biases(),
                qk_norm: None,
                qk_norm_after_rope: false,
                qk_norm_per_head: false,
                output: matrix(q, h)?,
                output_bias: None,
                post_norm: None,
                rope: Some(0),
                attend: Attend::full(&config),
            };
            let (gate, up, down) = (matrix(h, f)?, matrix(h, f)?, matrix(f, h)?);
            let mut ops = Vec::new();
            attention_block(&mut ops, &config, vec![1.0; h], attention);
            let mlp = MlpBlock {
                gate,
                up,
                down,
                gating: Gating::Silu,
                post_norm: None,
            };
            mlp_block(&mut ops, vec![1.0; h], mlp);
            layers.push(ops);
        }
        let head = matrix(h, v)?;
        let rope = RopeSpec {
            mode: RopeMode::Neox,
            base: config.rope_theta,
            dims: config.rope_dim,
            factors: extra.rope_factors.clone(),
            scale: 1.0,
            attn_factor: 1.0,
            yarn: None,
        };
        let ropes = vec![Rope::new(&rope, config.max_context)];
        let program = Program::plain(embed, layers, vec![1.0; h], head, ropes);
        Ok(Self::new(config, program, Holding::Dense, "llama"))
    }

    /// The model's id: equal for a model and its clones only.
    pub(super) fn id(&self) -> u64 {
        self.id
    }

    /// The program every backend runs.
    pub(crate) fn program(&self) -> &Program {
        &self.program
    }

    /// Each cached layer's attention window in tokens (0: the whole
    /// context), as the layer program says: one per layer that attends,
    /// in order (a hybrid's recurrent layers cache nothing).
    pub fn layer_windows(&self) -> Vec<u32> {
        self.program
            .layers
            .iter()
            .filter_map(|ops| {
                ops.iter().find_map(|op| match op {
                    Op::Attention(attend) => Some(attend.window),
                    _ => None,
                })
            })
            .collect()
    }

    /// Layers whose keys and values the cache holds: every layer but a
    /// hybrid's recurrent ones (LFM2-1.2B: 6 of 16).
    pub fn cache_layers(&self) -> u32 {
        self.program.cache_layers()
    }

    /// Bytes of recurrent state (f32) one sequence holds on the host, in
    /// place of keys and values for a hybrid's recurrent layers; 0 for a
    /// model without them. An engine holds one per row of its page table,
    /// `max_batch` at most.
    pub fn recurrent_state_bytes(&self) -> u64 {
        self.program.state_bytes()
    }

    /// The KV cache's geometry for this model: its [`cache_layers`](Self::cache_layers)'
    /// keys and values.
    pub fn kv_geometry(&self, dtype: KvDtype) -> Result<KvGeometry, ModelError> {
        let c = &self.config;
        Ok(KvGeometry::new(
            self.cache_layers(),
            c.kv_heads,
            c.head_dim,
            dtype,
        )?)
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The architecture, as the file names it (`llama` for the seeded
    /// model).
    pub fn architecture(&self) -> &str {
        &self.architecture
    }

    /// How the matrices are held.
    pub fn holding(&self) -> Holding {
        self.holding
    }

    /// Whether the matrices stay quantized in the mapped file.
    pub fn is_quantized(&self) -> bool {
        matches!(self.holding, Holding::Mapped(_) | Holding::Interleaved(_))
    }

    /// Whether the output head is the embedding.
    pub fn is_tied(&self) -> bool {
        self.program.is_tied()
    }

    /// Whether the attention products add biases.
    pub fn has_biases(&self) -> bool {
        self.program.layers.iter().flatten().any(|op| match op {
            Op::Linear { projs, .. } => projs.iter().any(|p| p.bias.is_some()),
            _ => false,
        })
    }

    /// Which dimensions the rotary embedding pairs.
    pub fn rope_mode(&self) -> RopeMode {
        self.program
            .ropes
            .first()
            .map_or(RopeMode::Neox, |r| r.mode)
    }

    /// The token embedding, `vocab` rows of `hidden`.
    pub fn embedding(&self) -> &Matrix {
        &self.program.embed
    }

    /// The output head, `vocab` rows of `hidden` (the embedding when tied).
    pub fn head(&self) -> &Matrix {
        &self.program.head
    }

    /// Every matrix the model reads (a tied head once; views of a fused
    /// tensor as their rows).
    pub fn matrices(&self) -> impl Iterator<Item = &Matrix> {
        self.program.matrices()
    }

    /// Whether the Vulkan backend runs this model's whole steps on the
    /// device; `false`: only attention goes there, the rest of each step
    /// (a mixture of experts, latent attention, Granite's scaled residual,
    /// a weight type without device products) runs on the CPU, or (sinks,
    /// latent attention's head width) the device refuses the model.
    pub fn whole_steps_on_device(&self) -> bool {
        super::device::lowers(&self.program)
    }

    /// Which CPU kernels the products run: the instruction set, then each
    /// weight type the products read (the embedding lookup aside) and its
    /// layout, e.g. `avx2+fma+f16c: Q4_K interleaved, Q6_K interleaved`. Dense
    /// models say `f32`.
    pub fn kernels(&self) -> String {
        let mut types: Vec<(String, bool)> = self
            .matrices()
            .skip(1)
            .chain(std::iter::once(&self.program.head))
            .map(|m| (m.kind().to_string(), m.is_interleaved()))
            .collect();
        types.sort();
        types.dedup();
        let layouts: Vec<String> = types
            .iter()
            .map(|(kind, rows8)| {
                let layout = if *rows8 { "interleaved" } else { "plain" };
                format!("{kind} {layout}")
            })
            .collect();
        format!(
            "{}: {}",
            pagoda_cpu::Isa::detect().name(),
            layouts.join(", ")
        )
    }

    /// Parameters held: a tied head counts once, norm gains and biases
    /// count.
    pub fn parameters(&self) -> u64 {
        let vectors: usize = self.program.vectors().map(<[f32]>::len).sum();
        self.matrices().map(Matrix::elems).sum::<u64>() + vectors as u64
    }

    /// Parameters one token goes through: [`parameters`](Self::parameters)
    /// less the experts of each mixture a row does not take (a prefill's
    /// arithmetic is two operations per active parameter).
    pub fn active_parameters(&self) -> u64 {
        self.parameters() - self.program.unused_expert_elems()
    }

    /// Bytes of weights a decode step reads: the matrices as held (the
    /// embedding only as the output head when tied: lookups read a row;
    /// of a mixture of experts, the share a row goes through) plus the f32
    /// vectors.
    pub fn weight_bytes(&self) -> u64 {
        let embed_lookup_only = if self.is_tied() {
            0
        } else {
            self.program.embed.byte_len()
        };
        let vectors: usize = self.program.vectors().map(<[f32]>::len).sum();
        self.matrices().map(Matrix::byte_len).sum::<u64>()
            - embed_lookup_only
            - self.program.unread_expert_bytes()
            + 4 * vectors as u64
    }

    /// Runs one step on the host (products on the CPU, the KV scatter and
    /// attention on `backend`): writes this step's keys and values into the
    /// KV store and `sample_rows.len() × vocab` logits into `logits`.
    pub fn forward<B: Backend>(
        &self,
        backend: &mut B,
        store: &mut B::KvStore,
        input: &StepInput<'_>,
        act: &mut Activations,
        logits: &mut Vec<f32>,
    ) -> Result<(), ForwardError<B::Error>> {
        self.check(input).map_err(ForwardError::Model)?;
        let precision = match self.holding {
            Holding::Mapped(p) | Holding::Interleaved(p) => p,
            Holding::Dense => ActPrecision::F32,
        };
        cpu::forward(
            &self.program,
            &self.config,
            precision,
            backend,
            store,
            input,
            act,
            logits,
        )
    }

    /// Every token in the vocabulary, every position in the context, one
    /// slot and position per token, sample rows in range.
    pub(crate) fn check(&self, input: &StepInput<'_>) -> Result<(), ModelError> {
        let c = self.config();
        let t = input.tokens.len();
        if input.positions.len() != t || input.slots.len() != t {
            return Err(ModelError::Batch {
                tokens: t,
                positions: input.positions.len(),
                slots: input.slots.len(),
            });
        }
        for layer in 0..self.cache_layers() {
            match input.layer_kv(layer) {
                Some((_, slots, _)) if slots.len() == t => {}
                _ => return Err(ModelError::KvPlace(layer)),
            }
        }
        if self.program.is_recurrent() {
            if input.states.len() != input.seqs.len() {
                return Err(ModelError::StateRows {
                    rows: input.states.len(),
                    seqs: input.seqs.len(),
                });
            }
            if let Some(s) = input.states.iter().find(|s| s.row >= MAX_STATE_ROWS) {
                return Err(ModelError::StateRowRange {
                    row: s.row,
                    max: MAX_STATE_ROWS,
                });
            }
        }
        if let Some(&token) = input.tokens.iter().find(|&&x| x >= c.vocab) {
            return Err(ModelError::Token {
                token,
                vocab: c.vocab,
            });
        }
        if let Some(&position) = input.positions.iter().find(|&&p| p >= c.max_context) {
            return Err(ModelError::Position {
                position,
                max_context: c.max_context,
            });
        }
        if input.sample_rows.len() > t {
            return Err(ModelError::SampleRows {
                rows: input.sample_rows.len(),
                tokens: t,
            });
        }
        if let Some(&row) = input.sample_rows.iter().find(|&&r| r as usize >= t) {
            return Err(ModelError::SampleRow { row, tokens: t });
        }
        Ok(())
    }
}
