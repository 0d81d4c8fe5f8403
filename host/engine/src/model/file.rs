//! A GGUF file mapped into memory: the weights are read in place, and the
//! tokenizer and chat template are built from the same parsed [`Gguf`].

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use pagoda_core::gguf::Gguf;

use super::load_error::LoadError;

/// A memory-mapped GGUF model file, checked to parse when opened.
#[derive(Debug)]
pub struct ModelFile {
    path: PathBuf,
    map: Mmap,
}

impl ModelFile {
    /// Maps `path` and checks that it parses as GGUF.
    pub fn open(path: impl AsRef<Path>) -> Result<ModelFile, LoadError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| LoadError::Io {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(io)?;
        // SAFETY: the map is read-only and private to this process; another
        // process truncating or rewriting a model file while it is served is
        // outside what the engine supports (as for every mmap-based loader).
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let model = ModelFile { path, map };
        model.gguf()?;
        Ok(model)
    }

    /// The parsed file, borrowing from the map (parsing reads only the
    /// header, metadata and tensor infos, not the weights).
    pub fn gguf(&self) -> Result<Gguf<'_>, LoadError> {
        Ok(Gguf::parse(&self.map)?)
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
