//! A model with its text: the weights, the tokenizer and the chat template
//! from one GGUF file ([`TextModel`]), and the text of one request as its
//! tokens arrive ([`TextStream`]: streaming decode, then stop strings).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::chat::{ChatTemplate, ChatTemplateError, StopStrings};
use crate::model::{
    ActPrecision, Holding, LoadError, Model, ModelFile, RepackCacheHandle, RepackCacheUse,
};
use crate::tokenizer::{StreamDecoder, Tokenizer, TokenizerError};

/// Why a GGUF file could not be opened as a text model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The file, its metadata or its tensors.
    #[error(transparent)]
    Model(#[from] LoadError),
    /// The tokenizer's metadata.
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] TokenizerError),
    /// The chat template given in place of the file's does not compile.
    #[error("chat template: {0}")]
    ChatTemplate(#[from] ChatTemplateError),
}

/// What the file says about itself, for reports.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelInfo {
    /// `general.architecture`: `llama` or `qwen2`.
    pub architecture: String,
    /// `general.name`, when the file has one.
    pub name: Option<String>,
    /// The file's size in bytes.
    pub file_bytes: u64,
    /// Time to open, parse and dequantize the file and build the tokenizer.
    pub load_time: Duration,
    /// What the repack cache did, when the load was given one: `Writing`
    /// until [`TextModel::wait_for_repack_cache`] sees the write end.
    pub repack_cache: Option<RepackCacheUse>,
}

/// A model ready to generate text: the decoder, its tokenizer, its chat
/// template (if the file has one) and what the file says about itself.
///
/// ```no_run
/// use pagoda_engine::TextModel;
///
/// let model = TextModel::load("SmolLM2-135M-Instruct.Q4_1.gguf".as_ref())?;
/// let ids = model.tokenizer.encode("The capital of France is", true, true);
/// assert!(!ids.is_empty());
/// # Ok::<(), pagoda_engine::OpenError>(())
/// ```
#[derive(Debug)]
pub struct TextModel {
    /// The decoder, its weights dequantized or kept quantized in the mapped
    /// file ([`WeightMode`]).
    pub model: Model,
    /// Text to ids and back.
    pub tokenizer: Tokenizer,
    /// `tokenizer.chat_template`, compiled (or the template the load was
    /// given in its place).
    pub chat: Option<ChatTemplate>,
    /// Why the file's own template could not be used, when it has one that
    /// does not compile: the model still loads (completions need no
    /// template), and chat says why it has none.
    pub chat_error: Option<ChatTemplateError>,
    /// Name, architecture, size, load time.
    pub info: ModelInfo,
    /// The repack cache's write, while it may run.
    repack_writer: Option<RepackCacheHandle>,
}

/// How a model's weights are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightMode {
    /// Dequantized to f32 at load: the reference's numbers (logits within
    /// 2e-3 of the logit range of a float64 forward pass), at 4 bytes a
    /// parameter.
    #[default]
    Dequantized,
    /// Kept quantized in the memory map, multiplied with activations at
    /// the given precision: loads in milliseconds and holds about the
    /// file's size. With [`ActPrecision::F32`] each block is widened to f32
    /// in registers and the logits are the dense path's within f32
    /// summation error; with [`ActPrecision::Int8`] every step uses
    /// integer products over 8-bit activations, as llama.cpp does, for
    /// about 1.4× the decode and 1.6× the prefill tokens per second.
    Quantized(ActPrecision),
    /// As [`WeightMode::Quantized`], with Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K
    /// matrices copied at load into rows interleaved eight at a time (their
    /// pages of the map let go): the fastest CPU kernels; a device backend reads the
    /// plain layout back out of them.
    Repacked(ActPrecision),
}

impl TextModel {
    /// Loads a GGUF file with dequantized weights (see [`WeightMode`]).
    pub fn load(path: &Path) -> Result<Self, OpenError> {
        Self::open(path, WeightMode::default())
    }

    /// Loads a GGUF file: memory-maps it, builds the model from its metadata
    /// and tensors (held as `mode` says), the tokenizer from its
    /// vocabulary, and compiles its chat template. Any malformed or
    /// unsupported part is a typed error, but for a template that does not
    /// compile: that is [`TextModel::chat_error`], and the model loads.
    pub fn open(path: &Path, mode: WeightMode) -> Result<Self, OpenError> {
        Self::open_cached(path, mode, None)
    }

    /// [`open`](Self::open), keeping repacked weights
    /// ([`WeightMode::Repacked`]) in a cache file in `repack_cache`: a load
    /// that finds this file's there maps it instead of repacking (no fresh
    /// memory to fill), one that does not repacks and writes it on a
    /// thread of its own while the model runs ([`ModelInfo::repack_cache`]
    /// says which; dropping the model waits for the write).
    pub fn open_cached(
        path: &Path,
        mode: WeightMode,
        repack_cache: Option<&Path>,
    ) -> Result<Self, OpenError> {
        Self::open_with_template(path, mode, repack_cache, None)
    }

    /// [`open_cached`](Self::open_cached) with `chat_template` (Jinja
    /// source) compiled in place of the file's own, which is then never
    /// read: a base model without one gets one, and a file whose own does
    /// not compile still loads.
    pub fn open_with_template(
        path: &Path,
        mode: WeightMode,
        repack_cache: Option<&Path>,
        chat_template: Option<&str>,
    ) -> Result<Self, OpenError> {
        let started = Instant::now();
        let file = Arc::new(ModelFile::open(path)?);
        let gguf = file.gguf()?;
        let holding = match mode {
            WeightMode::Dequantized => Holding::Dense,
            WeightMode::Quantized(precision) => Holding::Mapped(precision),
            WeightMode::Repacked(precision) => Holding::Interleaved(precision),
        };
        let (model, repack_writer) = Model::open_cached(Arc::clone(&file), holding, repack_cache)?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        let text_of = |id: Option<u32>| {
            id.and_then(|id| tokenizer.token_text(id))
                .unwrap_or_default()
                .to_string()
        };
        let (bos, eos) = (text_of(tokenizer.bos()), text_of(tokenizer.eos()));
        let (chat, chat_error) = match chat_template {
            Some(source) => (Some(ChatTemplate::new(source, &bos, &eos)?), None),
            None => match ChatTemplate::from_gguf(&gguf, &bos, &eos) {
                Ok(chat) => (chat, None),
                Err(error) => (None, Some(error)),
            },
        };
        let info = ModelInfo {
            architecture: gguf
                .get_str("general.architecture")
                .unwrap_or_default()
                .to_string(),
            name: gguf.get_str("general.name").ok().map(str::to_string),
            file_bytes: file.bytes().len() as u64,
            load_time: Duration::ZERO,
            repack_cache: repack_writer.as_ref().map(|w| w.now().clone()),
        };
        let load_time = started.elapsed();
        Ok(Self {
            model,
            tokenizer,
            chat,
            chat_error,
            info: ModelInfo { load_time, ..info },
            repack_writer,
        })
    }

    /// Waits for the repack cache's write, if one runs, and says what the
    /// cache did (also in [`ModelInfo::repack_cache`]).
    pub fn wait_for_repack_cache(&mut self) -> Option<&RepackCacheUse> {
        if let Some(writer) = &mut self.repack_writer {
            self.info.repack_cache = Some(writer.wait().clone());
        }
        self.info.repack_cache.as_ref()
    }

    /// The repack cache's write, to wait for elsewhere (a server that hands
    /// the model's parts to its engine keeps it until it shuts down).
    pub fn take_repack_writer(&mut self) -> Option<RepackCacheHandle> {
        self.repack_writer.take()
    }
}

/// New text of a request, from one token.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TextPiece {
    /// Text that is final: complete UTF-8, and not the start of a stop
    /// string.
    pub text: String,
    /// A stop string appeared: the request should end here (its text ends
    /// before the stop string).
    pub stopped: bool,
}

/// The text of one request as its tokens arrive: streaming decode (partial
/// UTF-8 held back; end-of-generation tokens print nothing), then stop
/// strings (a possible start of one held back until it is decided).
#[derive(Debug)]
pub struct TextStream {
    decoder: StreamDecoder,
    stops: StopStrings,
    stopped: bool,
}

impl TextStream {
    /// A stream that ends at the first of `stops` (none: never).
    pub fn new(stops: &[String]) -> Self {
        Self {
            // The reply continues its prompt: a leading space is text.
            decoder: StreamDecoder::continuing(true),
            stops: StopStrings::new(stops),
            stopped: false,
        }
    }

    /// [`TextStream::new`] with special tokens written out (a harmony
    /// answer's structure is in them).
    pub fn with_special_tokens(stops: &[String]) -> Self {
        Self {
            decoder: StreamDecoder::continuing(false),
            ..Self::new(stops)
        }
    }

    /// The text that `token` completes.
    pub fn push(&mut self, tokenizer: &Tokenizer, token: u32) -> TextPiece {
        if self.stopped || tokenizer.end_of_generation().contains(&token) {
            return TextPiece::default();
        }
        let decoded = self.decoder.push(tokenizer, token);
        let out = self.stops.push(&decoded);
        self.stopped = out.stopped;
        TextPiece {
            text: out.emit,
            stopped: out.stopped,
        }
    }

    /// The text held back at the end of the request (an incomplete UTF-8
    /// tail decodes lossily; a partial stop string is text after all).
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        let tail = self.decoder.finish();
        let out = self.stops.push(&tail);
        self.stopped = out.stopped;
        let mut text = out.emit;
        if !out.stopped {
            text.push_str(&self.stops.finish());
        }
        text
    }
}
