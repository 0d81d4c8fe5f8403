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

    /// Lets the process's pages of `range` go (`madvise(MADV_DONTNEED)`):
    /// the loader calls it for tensors it copied (interleaved), so resident
    /// memory holds the copy, not both. A later read of those bytes faults
    /// them back in from the file. Advice only: a failure changes nothing.
    pub fn release(&self, range: std::ops::Range<usize>) {
        if range.end > self.map.len() || range.is_empty() {
            return;
        }
        // SAFETY: the map is a read-only private mapping of a file that
        // nothing in this process writes: its pages are never modified, so
        // dropping them cannot lose data, and a later access (through any
        // slice borrowed from the map) reads the file's same bytes again.
        // The range was checked to lie inside the map.
        let _ = unsafe {
            self.map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                range.start,
                range.len(),
            )
        };
    }

    /// The path it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF header with no tensors and no metadata, then `tail` bytes.
    fn gguf_with_tail(tail: &[u8]) -> Vec<u8> {
        let mut bytes = b"GGUF".to_vec();
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(&0u64.to_le_bytes());
        bytes.extend_from_slice(&0u64.to_le_bytes());
        bytes.extend_from_slice(tail);
        bytes
    }

    /// Letting ranges go loses no byte: every read afterwards, through the
    /// same map, gives the file's bytes, at any offset, including after
    /// ranges that end at the map's end and ranges past it (refused).
    #[test]
    fn released_ranges_read_back_the_file() {
        let mut rng = fastrand::Rng::with_seed(34);
        let tail: Vec<u8> = (0..(5 << 20) + 12_345).map(|_| rng.u8(..)).collect();
        let want = gguf_with_tail(&tail);
        let path = std::env::temp_dir().join(format!("pagoda-release-{}.gguf", std::process::id()));
        std::fs::write(&path, &want).unwrap();
        let file = ModelFile::open(&path).expect("a header-only GGUF parses");
        let len = file.bytes().len();
        assert_eq!(len, want.len());
        // Touch every page first, so there is something to let go.
        assert_eq!(file.bytes(), &want[..]);
        for _ in 0..40 {
            let a = rng.usize(..len);
            let b = rng.usize(a..=len + 64);
            file.release(a..b);
            let (x, y) = (rng.usize(..len), rng.usize(..len));
            let (x, y) = (x.min(y), x.max(y));
            assert_eq!(
                &file.bytes()[x..y],
                &want[x..y],
                "bytes {x}..{y} after letting {a}..{b} go"
            );
        }
        file.release(0..len);
        assert_eq!(file.bytes(), &want[..]);
        std::fs::remove_file(&path).unwrap();
    }
}
