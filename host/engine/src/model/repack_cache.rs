//! Repacked weights kept on disk, so that a model is repacked once, not at
//! every load. Repacking copies each matrix into fresh anonymous memory,
//! and fresh memory is what a load pays for: the kernel zeroes every page
//! before the copy fills it (62% of an 8B load's profile), and a virtual
//! machine whose host took freed memory back backs each page again on its
//! first touch. A cache file is mapped instead: its pages are the page
//! cache's, already filled, so a load only maps them.
//!
//! One file per model file, in the directory the caller names:
//! `<stem>.<place>.<identity>.repack`, where the place hashes the model
//! file's full path and the identity hashes its size, modification time
//! and first MiB, and the interleaved layouts themselves (each type's
//! layout of a fixed matrix), so a model file rewritten or a build whose
//! layouts differ finds no cache and writes its own. Once it is written,
//! the files of earlier identities at the same place are deleted (each is
//! as large as the model), and so are temporary files left by a writer
//! that died (untouched for [`ABANDONED`]). The file holds each repacked
//! matrix at a page-aligned offset, then an index (per matrix: the range
//! of the model file it was made from, its type, rows and columns, where
//! its bytes are, their XXH3 checksum), then a trailer: the index's
//! offset, the identity, a hash of the index, and a magic. A file that
//! fails any check (truncated, another identity, an index that does
//! not hash, an entry outside the file or of the wrong length, a matrix
//! whose bytes do not hash to the index's checksum) is not used: the load
//! repacks as without a cache and writes a fresh file. The file is written
//! on a thread of its own while the model already runs
//! ([`RepackCacheHandle`]; writing an 8B file takes about 20 s, most of it
//! waiting for the kernel's write-back), under a temporary name that is
//! then renamed, and not synced: every byte is
//! checked at load instead (XXH3 over the mapped file on every core: an 8B
//! load takes 0.5-0.6 s with the checks, 0.1 s without; the first decode
//! step would read every page anyway), so a file left half-written by a
//! crash, or damaged later, is never read as weights.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use memmap2::Mmap;
use pagoda_core::QuantKind;
use pagoda_cpu::quant::interleave;
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use super::file::ModelFile;

/// The trailer's last eight bytes.
const MAGIC: &[u8; 8] = b"PGDRPK01";

/// Bytes of the trailer: index offset, identity, index hash, magic.
const TRAILER: usize = 32;

/// Bytes of one index entry: origin start and length, kind (u32, padded to
/// eight), rows, columns, offset and length in the cache file, and the
/// XXH3 of its bytes.
const ENTRY: usize = 64;

/// Matrices start on page boundaries, so each maps as the loader's own
/// copy would.
const ALIGN: usize = 4096;

/// Bytes of the model file's start that its identity hashes (its header,
/// metadata and tensor infos, or most of them).
const HEAD: usize = 1 << 20;

/// A temporary file of this place untouched this long was left by a
/// writer that died, and is deleted by the next write (a live writer
/// touches its file at every 1 MiB it writes).
const ABANDONED: Duration = Duration::from_secs(600);

/// Which matrix an entry holds: the model file's bytes it was made from,
/// with its type and shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Origin {
    pub range: Range<usize>,
    pub kind: QuantKind,
    pub rows: usize,
    pub cols: usize,
}

/// One matrix of the cache file.
struct Entry {
    origin: Origin,
    at: Range<usize>,
    checksum: u64,
}

/// A matrix this load repacked: where it came from, and its bytes
/// (`data[range]`).
type Made = (Origin, Arc<Mmap>, Range<usize>);

/// What the cache did for one load.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "use", rename_all = "snake_case")]
pub enum RepackCacheUse {
    /// Every repacked matrix came from this cache file.
    Read {
        /// The file read.
        path: PathBuf,
    },
    /// The cache file was missing or unusable: the load repacked, and a
    /// thread is writing a new one ([`RepackCacheHandle::wait`] says how it
    /// ended).
    Writing {
        /// The file being written.
        path: PathBuf,
        /// Why the one there (if any) was not used.
        reason: String,
    },
    /// The cache file was missing or unusable: the load repacked and
    /// wrote a new one.
    Written {
        /// The file written.
        path: PathBuf,
        /// Why the one there (if any) was not used.
        reason: String,
    },
    /// The load repacked, and writing the cache failed; the model works
    /// the same.
    NotWritten {
        /// The file that could not be written.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
}

impl RepackCacheUse {
    /// The cache file read, written or meant to be.
    pub fn path(&self) -> &Path {
        match self {
            Self::Read { path }
            | Self::Writing { path, .. }
            | Self::Written { path, .. }
            | Self::NotWritten { path, .. } => path,
        }
    }
}

impl std::fmt::Display for RepackCacheUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Read { path } => write!(f, "repacked weights read from {}", path.display()),
            Self::Writing { path, reason } => write!(
                f,
                "writing repacked weights to {} in the background ({reason})",
                path.display()
            ),
            Self::Written { path, reason } => {
                write!(
                    f,
                    "repacked weights written to {} ({reason})",
                    path.display()
                )
            }
            Self::NotWritten { path, reason } => {
                write!(f, "repack cache {} not written: {reason}", path.display())
            }
        }
    }
}

/// A model file's repack cache for one load: the matrices a usable cache
/// file holds, and those repacked because it did not.
pub(super) struct RepackCache {
    path: PathBuf,
    identity: u64,
    found: Result<(Arc<Mmap>, Vec<Entry>), String>,
    made: Mutex<Vec<Made>>,
}

impl RepackCache {
    /// The cache of `model` in `dir`, read if a usable file is there.
    pub fn open(dir: &Path, model: &ModelFile) -> RepackCache {
        let identity = identity(model);
        let stem = model
            .path()
            .file_stem()
            .map_or_else(|| "model".into(), |s| s.to_string_lossy());
        let path = dir.join(format!(
            "{stem}.{:08x}.{identity:016x}.repack",
            place(model.path())
        ));
        let found = read(&path, identity);
        RepackCache {
            path,
            identity,
            found,
            made: Mutex::new(Vec::new()),
        }
    }

    /// The cached bytes of the matrix made from `origin` (`len` of them),
    /// if the file holds it.
    pub fn find(&self, origin: &Origin, len: usize) -> Option<(Arc<Mmap>, Range<usize>)> {
        let (map, entries) = self.found.as_ref().ok()?;
        let entry = entries.iter().find(|e| &e.origin == origin)?;
        (entry.at.len() == len).then(|| (Arc::clone(map), entry.at.clone()))
    }

    /// Notes a matrix this load repacked (`data[range]`), to be written.
    pub fn made(&self, origin: Origin, data: Arc<Mmap>, range: Range<usize>) {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        made.push((origin, data, range));
    }

    /// Starts writing the matrices this load repacked, when it repacked
    /// any (some were not in the file), on a thread of its own; says what
    /// the cache did, or is doing.
    pub fn finish(self: Arc<Self>) -> RepackCacheHandle {
        let path = self.path.clone();
        let reason = match &self.found {
            Ok(_) if self.made_nothing() => {
                return RepackCacheHandle::done(RepackCacheUse::Read { path })
            }
            Ok(_) => "it lacked some of the model's matrices".to_string(),
            Err(reason) => reason.clone(),
        };
        let writing = RepackCacheUse::Writing {
            path: path.clone(),
            reason: reason.clone(),
        };
        let (thread_path, thread_reason) = (path.clone(), reason);
        let spawned = std::thread::Builder::new()
            .name("repack-cache".into())
            .spawn(move || match self.write_all() {
                Ok(()) => RepackCacheUse::Written {
                    path: thread_path,
                    reason: thread_reason,
                },
                Err(e) => RepackCacheUse::NotWritten {
                    path: thread_path,
                    reason: e.to_string(),
                },
            });
        match spawned {
            Ok(thread) => RepackCacheHandle {
                now: writing,
                thread: Some(thread),
            },
            Err(e) => RepackCacheHandle::done(RepackCacheUse::NotWritten {
                path,
                reason: format!("no thread to write it: {e}"),
            }),
        }
    }

    fn made_nothing(&self) -> bool {
        self.made
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// Writes the file: the matrices a file that lacked some held (its map
    /// stays valid: the new file is renamed over it, not written into
    /// it), then the ones repacked now; then deletes what earlier
    /// identities of this place left.
    fn write_all(&self) -> std::io::Result<()> {
        let made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        let mut all: Vec<Made> = match &self.found {
            Ok((map, entries)) => entries
                .iter()
                .map(|e| (e.origin.clone(), Arc::clone(map), e.at.clone()))
                .collect(),
            Err(_) => Vec::new(),
        };
        all.extend(made.iter().cloned());
        write(&self.path, self.identity, &all)?;
        remove_stale(&self.path);
        Ok(())
    }
}

/// What a load's repack cache did, and the write it started, if it
/// started one. Dropping it waits for the write, so that a file is never
/// left half-written by a clean exit.
#[derive(Debug)]
pub struct RepackCacheHandle {
    now: RepackCacheUse,
    thread: Option<JoinHandle<RepackCacheUse>>,
}

impl RepackCacheHandle {
    fn done(now: RepackCacheUse) -> Self {
        RepackCacheHandle { now, thread: None }
    }

    /// What the cache did, as far as is known now: `Writing` while the
    /// file is being written.
    pub fn now(&self) -> &RepackCacheUse {
        &self.now
    }

    /// Waits for the write (if any) to end: what the cache did.
    pub fn wait(&mut self) -> &RepackCacheUse {
        if let Some(thread) = self.thread.take() {
            self.now = thread.join().unwrap_or(RepackCacheUse::NotWritten {
                path: self.now.path().to_path_buf(),
                reason: "the writing thread panicked".into(),
            });
        }
        &self.now
    }
}

impl Drop for RepackCacheHandle {
    fn drop(&mut self) {
        self.wait();
    }
}

/// The place of the model file at `path`: a hash of its full path, so
/// files of the same name in two directories keep their own caches.
fn place(path: &Path) -> u32 {
    let full = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    xxh3_64(full.as_os_str().as_encoded_bytes()) as u32
}

/// Whether `text` is an identity as file names write it: 16 hex digits.
fn is_identity(text: &str) -> bool {
    text.len() == 16 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Deletes, beside the cache file `path` (`<stem>.<place>.<identity>.repack`),
/// the cache files of this stem and place with another identity, and their
/// temporary files untouched for [`ABANDONED`]. Best effort: a file that
/// cannot be deleted stays.
fn remove_stale(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return;
    };
    // `<stem>.<place>.`: the identity and `.repack` follow.
    let Some(prefix) = name
        .strip_suffix(".repack")
        .and_then(|n| n.rsplit_once('.'))
        .map(|(head, _)| format!("{head}."))
    else {
        return;
    };
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in listing.flatten() {
        let other = entry.file_name();
        let Some(other) = other.to_str() else {
            continue;
        };
        let stale = if let Some(rest) = other
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".repack"))
        {
            other != name && is_identity(rest)
        } else if let Some(rest) = other
            .strip_prefix('.')
            .and_then(|r| r.strip_prefix(&prefix))
            .and_then(|r| r.strip_suffix(".tmp"))
        {
            // `.<stem>.<place>.<identity>.repack.<pid>.tmp`
            let abandoned = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= ABANDONED);
            rest.split_once(".repack.").is_some_and(|(identity, pid)| {
                is_identity(identity) && pid.bytes().all(|b| b.is_ascii_digit())
            }) && abandoned
        } else {
            false
        };
        if stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The model file's identity with the interleaved layouts'.
fn identity(model: &ModelFile) -> u64 {
    let mut h = Xxh3::new();
    let bytes = model.bytes();
    h.update(&(bytes.len() as u64).to_le_bytes());
    let modified = std::fs::metadata(model.path())
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64);
    h.update(&modified.to_le_bytes());
    h.update(&bytes[..bytes.len().min(HEAD)]);
    for kind in QuantKind::ALL {
        h.update(&layout_sample(kind));
    }
    h.digest()
}

/// `kind`'s interleaved layout of one fixed group of rows (empty where it
/// has none): a layout change changes the identity, so no build reads a
/// cache another build's layouts wrote.
fn layout_sample(kind: QuantKind) -> Vec<u8> {
    let (rows, cols) = (interleave::GROUP, 256);
    let (Ok(plain_len), Ok(len)) = (
        kind.bytes_for(rows * cols),
        interleave::interleaved_len(kind, rows, cols),
    ) else {
        return Vec::new();
    };
    let plain: Vec<u8> = (0..plain_len).map(|i| (i * 37 % 251) as u8).collect();
    let mut out = vec![0u8; len];
    match interleave::interleave(kind, rows, cols, &plain, &mut out) {
        Ok(()) => out,
        Err(_) => Vec::new(),
    }
}

/// The usable cache file at `path` for `identity`, or why not.
fn read(path: &Path, identity: u64) -> Result<(Arc<Mmap>, Vec<Entry>), String> {
    let file = File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "none there yet".to_string(),
        _ => format!("{}: {e}", path.display()),
    })?;
    // SAFETY: the map is read-only and private; as for the model file, a
    // cache rewritten in place while a model is served is outside what the
    // engine supports (the engine itself only ever renames a new file over
    // it, which leaves this map's pages alone).
    let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let entries = parse(&map, identity)?;
    if !checksums_match(&map, &entries) {
        return Err("a matrix's bytes are damaged".into());
    }
    Ok((Arc::new(map), entries))
}

/// Whether every entry's bytes hash to its checksum, hashed on every core
/// (the entries shared out by bytes).
fn checksums_match(bytes: &[u8], entries: &[Entry]) -> bool {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let total: usize = entries.iter().map(|e| e.at.len()).sum();
    let share = total.div_ceil(threads).max(1);
    let mut runs: Vec<&[Entry]> = Vec::with_capacity(threads);
    let (mut first, mut sum) = (0, 0);
    for (i, e) in entries.iter().enumerate() {
        sum += e.at.len();
        if sum >= share || i + 1 == entries.len() {
            runs.push(&entries[first..=i]);
            (first, sum) = (i + 1, 0);
        }
    }
    let check = |run: &[Entry]| {
        run.iter()
            .all(|e| xxh3_64(&bytes[e.at.clone()]) == e.checksum)
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = runs
            .iter()
            .map(|&run| scope.spawn(move || check(run)))
            .collect();
        handles.into_iter().all(|h| h.join().unwrap_or(false))
    })
}

/// The entries of cache file `bytes`, checked whole.
fn parse(bytes: &[u8], identity: u64) -> Result<Vec<Entry>, String> {
    let trailer = bytes
        .len()
        .checked_sub(TRAILER)
        .map(|at| &bytes[at..])
        .ok_or("shorter than its trailer")?;
    if &trailer[24..] != MAGIC {
        return Err("not a repack cache of this version".into());
    }
    let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
    if word(trailer, 8) != identity {
        return Err("written for another model file or build".into());
    }
    let index_at = usize::try_from(word(trailer, 0)).map_err(|_| "index offset too large")?;
    let index = bytes
        .get(index_at..bytes.len() - TRAILER)
        .filter(|index| index.len().is_multiple_of(ENTRY))
        .ok_or("index outside the file")?;
    if xxh3_64(index) != word(trailer, 16) {
        return Err("index damaged".into());
    }
    index
        .chunks_exact(ENTRY)
        .map(|e| {
            let size = |at: usize| usize::try_from(word(e, at)).map_err(|_| "size too large");
            let kind = u32::from_le_bytes(e[16..20].try_into().unwrap_or([0; 4]));
            let kind = QuantKind::from_ggml_id(kind).ok_or("unknown type")?;
            let origin_at = size(0)?;
            let origin = origin_at..origin_at.checked_add(size(8)?).ok_or("overflow")?;
            let at = size(40)?;
            let at = at..at.checked_add(size(48)?).ok_or("overflow")?;
            let (rows, cols) = (size(24)?, size(32)?);
            let expected =
                interleave::interleaved_len(kind, rows, cols).map_err(|e| e.to_string())?;
            if at.end > index_at || at.len() != expected {
                return Err("an entry outside the file or of the wrong length".to_string());
            }
            Ok(Entry {
                origin: Origin {
                    range: origin,
                    kind,
                    rows,
                    cols,
                },
                at,
                checksum: word(e, 56),
            })
        })
        .collect()
}

/// Writes `made` as the cache file at `path`: a temporary file beside it,
/// then renamed over it (not synced: the checksums guard every byte).
fn write(path: &Path, identity: u64, made: &[Made]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let temp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let file = File::create(&temp)?;
        let mut out = BufWriter::with_capacity(1 << 20, &file);
        let mut index = Vec::with_capacity(made.len() * ENTRY);
        let mut at = 0usize;
        for (origin, data, range) in made {
            let bytes = &data[range.clone()];
            out.write_all(bytes)?;
            let pad = bytes.len().next_multiple_of(ALIGN) - bytes.len();
            out.write_all(&vec![0u8; pad])?;
            index.extend_from_slice(&entry(origin, at..at + bytes.len(), xxh3_64(bytes)));
            at += bytes.len() + pad;
        }
        out.write_all(&index)?;
        out.write_all(&trailer(at, identity, &index))?;
        out.flush()?;
        drop(out);
        std::fs::rename(&temp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// The index entry of the matrix made from `origin`, at `at` in the file.
fn entry(origin: &Origin, at: Range<usize>, checksum: u64) -> [u8; ENTRY] {
    let mut e = [0u8; ENTRY];
    let words = [
        origin.range.start,
        origin.range.len(),
        0, // the kind, below
        origin.rows,
        origin.cols,
        at.start,
        at.len(),
        checksum as usize,
    ];
    for (slot, v) in e.chunks_exact_mut(8).zip(words) {
        slot.copy_from_slice(&(v as u64).to_le_bytes());
    }
    e[16..20].copy_from_slice(&origin.kind.ggml_id().to_le_bytes());
    e
}

/// The trailer of a file whose `index` starts at `index_at`.
fn trailer(index_at: usize, identity: u64, index: &[u8]) -> [u8; TRAILER] {
    let mut t = [0u8; TRAILER];
    for (slot, v) in t
        .chunks_exact_mut(8)
        .zip([index_at as u64, identity, xxh3_64(index)])
    {
        slot.copy_from_slice(&v.to_le_bytes());
    }
    t[24..].copy_from_slice(MAGIC);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDENTITY: u64 = 0x0123_4567_89ab_cdef;

    fn q4_0(rows: usize, cols: usize, at: usize) -> Origin {
        Origin {
            range: at..at + QuantKind::Q4_0.bytes_for(rows * cols).unwrap(),
            kind: QuantKind::Q4_0,
            rows,
            cols,
        }
    }

    /// A cache file of `entries` (origin, where its bytes are) over
    /// `data` bytes of matrices.
    fn file(data: usize, entries: &[(Origin, Range<usize>)]) -> Vec<u8> {
        let mut bytes = vec![7u8; data];
        let index: Vec<u8> = entries
            .iter()
            .flat_map(|(o, at)| {
                let checksum = bytes.get(at.clone()).map_or(0, xxh3_64);
                entry(o, at.clone(), checksum)
            })
            .collect();
        bytes.extend_from_slice(&index);
        bytes.extend_from_slice(&trailer(data, IDENTITY, &index));
        bytes
    }

    #[test]
    fn a_well_formed_file_parses_to_its_entries() {
        let a = q4_0(8, 256, 100);
        let b = q4_0(16, 512, 5000);
        let (la, lb) = (
            interleave::interleaved_len(a.kind, a.rows, a.cols).unwrap(),
            interleave::interleaved_len(b.kind, b.rows, b.cols).unwrap(),
        );
        let bytes = file(
            ALIGN + lb,
            &[(a.clone(), 0..la), (b.clone(), ALIGN..ALIGN + lb)],
        );
        let entries = parse(&bytes, IDENTITY).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!((&entries[0].origin, entries[0].at.clone()), (&a, 0..la));
        assert_eq!(
            (&entries[1].origin, entries[1].at.clone()),
            (&b, ALIGN..ALIGN + lb)
        );
        assert!(parse(&bytes, IDENTITY ^ 1).is_err(), "another identity");
    }

    /// A file that holds some of a model's matrices is written again with
    /// all of them: those it held, then those repacked now.
    #[test]
    fn a_file_lacking_matrices_is_rewritten_whole() {
        let dir = std::env::temp_dir().join(format!("pagoda-repack-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.repack");
        let (a, b) = (q4_0(8, 256, 0), q4_0(16, 512, 4096));
        let la = interleave::interleaved_len(a.kind, a.rows, a.cols).unwrap();
        let lb = interleave::interleaved_len(b.kind, b.rows, b.cols).unwrap();
        let mut held = file(la, &[(a.clone(), 0..la)]);
        for (i, byte) in held[..la].iter_mut().enumerate() {
            *byte = (i % 251) as u8;
        }
        let index = entry(&a, 0..la, xxh3_64(&held[..la]));
        let end = held.len();
        held[la..end - TRAILER].copy_from_slice(&index);
        held[end - TRAILER..].copy_from_slice(&trailer(la, IDENTITY, &index));
        std::fs::write(&path, &held).unwrap();
        let mut new = memmap2::MmapMut::map_anon(lb).unwrap();
        new.fill(9);
        let cache = RepackCache {
            path: path.clone(),
            identity: IDENTITY,
            found: read(&path, IDENTITY),
            made: Mutex::new(vec![(
                b.clone(),
                Arc::new(new.make_read_only().unwrap()),
                0..lb,
            )]),
        };
        assert!(cache.find(&a, la).is_some() && cache.find(&b, lb).is_none());
        let mut handle = Arc::new(cache).finish();
        assert!(matches!(handle.now(), RepackCacheUse::Writing { .. }));
        assert!(matches!(handle.wait(), RepackCacheUse::Written { .. }));
        let (map, entries) = read(&path, IDENTITY).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!((&entries[0].origin, &entries[1].origin), (&a, &b));
        assert_eq!(&map[entries[0].at.clone()], &held[..la]);
        assert!(map[entries[1].at.clone()].iter().all(|&v| v == 9));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Writing a place's file deletes its other identities and its
    /// abandoned temporary files, and nothing of other places or stems.
    #[test]
    fn a_write_removes_what_earlier_identities_of_its_place_left() {
        let dir = std::env::temp_dir().join(format!("pagoda-stale-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (new, old) = ("0123456789abcdef", "fedcba9876543210");
        let names = [
            (format!("m.0000abcd.{new}.repack"), true),
            (format!("m.0000abcd.{old}.repack"), false),
            (format!("m.0000ffff.{old}.repack"), true),
            (format!("n.0000abcd.{old}.repack"), true),
            ("m.0000abcd.not-an-identity.repack".to_string(), true),
            (format!(".m.0000abcd.{old}.repack.42.tmp"), false),
            (format!(".m.0000abcd.{new}.repack.43.tmp"), true),
            (format!(".m.0000ffff.{old}.repack.44.tmp"), true),
        ];
        let long_ago = std::time::SystemTime::now() - 2 * ABANDONED;
        for (i, (name, _)) in names.iter().enumerate() {
            let file = File::create(dir.join(name)).unwrap();
            // All but the second temporary file were left long ago.
            if i != 6 {
                file.set_modified(long_ago).unwrap();
            }
        }
        remove_stale(&dir.join(&names[0].0));
        for (name, kept) in &names {
            assert_eq!(dir.join(name).exists(), *kept, "{name}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_changed_byte_of_any_matrix_fails_its_checksum() {
        let mut rng = fastrand::Rng::with_seed(3);
        let shapes = [(8, 256), (24, 512), (8, 1024), (16, 256)];
        let mut entries = Vec::new();
        let mut at = 0;
        for (i, (rows, cols)) in shapes.into_iter().enumerate() {
            let o = q4_0(rows, cols, i * 100_000);
            let len = interleave::interleaved_len(o.kind, rows, cols).unwrap();
            entries.push((o, at..at + len));
            at = (at + len).next_multiple_of(ALIGN);
        }
        let mut bytes = file(at, &entries);
        for b in bytes[..at].iter_mut() {
            *b = rng.u8(..);
        }
        // Checksums of the random bytes, then each entry damaged in turn.
        let index: Vec<u8> = entries
            .iter()
            .flat_map(|(o, r)| entry(o, r.clone(), xxh3_64(&bytes[r.clone()])))
            .collect();
        let end = bytes.len();
        bytes[at..end - TRAILER].copy_from_slice(&index);
        bytes[end - TRAILER..].copy_from_slice(&trailer(at, IDENTITY, &index));
        let parsed = parse(&bytes, IDENTITY).unwrap();
        assert!(checksums_match(&bytes, &parsed));
        for (_, r) in &entries {
            let mut damaged = bytes.clone();
            damaged[rng.usize(r.clone())] ^= 1 << rng.u8(0..8);
            assert!(!checksums_match(&damaged, &parsed));
        }
    }

    #[test]
    fn entries_outside_the_data_or_of_the_wrong_length_are_refused() {
        let a = q4_0(8, 256, 0);
        let len = interleave::interleaved_len(a.kind, a.rows, a.cols).unwrap();
        // Past the data (into the index), of the wrong length, of an
        // unknown type, and overflowing.
        assert!(parse(&file(len, &[(a.clone(), 1..len + 1)]), IDENTITY).is_err());
        assert!(parse(&file(len, &[(a.clone(), 0..len - 1)]), IDENTITY).is_err());
        let mut unknown = file(len, &[(a.clone(), 0..len)]);
        unknown[len + 16] = 0xee;
        let index = unknown[len..len + ENTRY].to_vec();
        let end = unknown.len() - TRAILER;
        unknown[end..].copy_from_slice(&trailer(len, IDENTITY, &index));
        assert!(parse(&unknown, IDENTITY).is_err());
        let huge = Origin {
            rows: usize::MAX / 2,
            ..a.clone()
        };
        assert!(parse(&file(len, &[(huge, 0..len)]), IDENTITY).is_err());
    }

    /// Random files, and a good file with random bytes changed or cut
    /// short, parse to an error or to entries inside the file, never a
    /// panic.
    #[test]
    fn random_and_mutated_files_never_panic() {
        let mut rng = fastrand::Rng::with_seed(7);
        let a = q4_0(8, 256, 0);
        let len = interleave::interleaved_len(a.kind, a.rows, a.cols).unwrap();
        let good = file(len, &[(a, 0..len)]);
        for _ in 0..20_000 {
            let bytes: Vec<u8> = match rng.u8(0..3) {
                0 => (0..rng.usize(0..200)).map(|_| rng.u8(..)).collect(),
                1 => good[..rng.usize(0..=good.len())].to_vec(),
                _ => {
                    let mut b = good.clone();
                    for _ in 0..rng.usize(1..4) {
                        let at = rng.usize(0..b.len());
                        b[at] = rng.u8(..);
                    }
                    b
                }
            };
            if let Ok(entries) = parse(&bytes, IDENTITY) {
                for e in entries {
                    assert!(e.at.end <= bytes.len());
                }
            }
        }
    }
}
