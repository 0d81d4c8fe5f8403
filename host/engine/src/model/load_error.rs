//! Why a model file was refused: every cause a file can have, typed, each
//! naming what it refers to (path, key, tensor, type, architecture).

use std::path::PathBuf;

use pagoda_core::gguf::GgufError;
use pagoda_core::quant::QuantError;

use super::config::ModelError;

/// A model that could not be loaded from a GGUF file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be opened or mapped.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not well-formed GGUF.
    #[error("GGUF: {0}")]
    Gguf(GgufError),
    /// `general.architecture` names an architecture this engine does not run.
    #[error("unsupported architecture {0:?} (supported: {list})", list = super::config::SUPPORTED_ARCHITECTURES.join(", "))]
    UnsupportedArchitecture(String),
    /// The architecture runs, but this file uses a feature of it that is
    /// not built (a mixture of experts, a RoPE scaling).
    #[error("{architecture}: {feature} is not supported")]
    UnsupportedFeature {
        /// The architecture.
        architecture: String,
        /// What the file uses.
        feature: String,
    },
    /// A tensor's weight type is not one the engine dequantizes.
    #[error("tensor {tensor} has unsupported type {kind}")]
    UnsupportedTensorType {
        /// The tensor.
        tensor: String,
        /// Its GGML type's name.
        kind: String,
    },
    /// A tensor the architecture needs is absent.
    #[error("missing tensor {0}")]
    MissingTensor(String),
    /// No memory for the repacked copy of one expert of a stacked tensor.
    #[error("{0}: no memory to repack an expert's rows")]
    ExpertView(String),
    /// A metadata key is absent or holds another type.
    #[error("metadata {key}: {source}")]
    Metadata {
        /// The key.
        key: String,
        /// What is wrong with it.
        #[source]
        source: GgufError,
    },
    /// A tensor's dimensions differ from what the hyper-parameters need.
    #[error("tensor {tensor} has dimensions {found:?}, expected {expected:?}")]
    Shape {
        /// The tensor.
        tensor: String,
        /// The dimensions it needs (row length first, as GGUF stores them).
        expected: Vec<u64>,
        /// The dimensions it has.
        found: Vec<u64>,
    },
    /// A hyper-parameter is out of range or inconsistent with the others.
    #[error("bad hyper-parameter {key} = {value}: {reason}")]
    HyperParameter {
        /// The metadata key (or derived quantity).
        key: String,
        /// Its value.
        value: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The configuration or the tensors fail the model's own checks.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A tensor's bytes could not be dequantized.
    #[error("tensor {tensor}: {source}")]
    Dequantize {
        /// The tensor.
        tensor: String,
        /// The cause.
        #[source]
        source: QuantError,
    },
    /// A tensor's bytes do not form the matrix its shape describes.
    #[error("tensor {tensor}: {source}")]
    Matrix {
        /// The tensor.
        tensor: String,
        /// The cause.
        #[source]
        source: pagoda_cpu::QMatError,
    },
}

impl From<GgufError> for LoadError {
    /// A tensor type the reader does not know becomes
    /// [`LoadError::UnsupportedTensorType`] with the type's GGML name.
    fn from(e: GgufError) -> Self {
        match e {
            GgufError::UnknownTensorType { tensor, id } => LoadError::UnsupportedTensorType {
                tensor: tensor.to_string(),
                kind: ggml_type_name(id),
            },
            other => LoadError::Gguf(other),
        }
    }
}

/// GGML's name for a tensor type id, for messages.
fn ggml_type_name(id: u32) -> String {
    const NAMES: [&str; 31] = [
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K",
        "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",
        "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16",
    ];
    match NAMES.get(id as usize) {
        Some(name) => (*name).to_string(),
        None => format!("type id {id}"),
    }
}
