//! # pagoda-core
//!
//! The allocation-free heart of Pagoda, an LLM-inference engine: a paged KV
//! cache (page pool, page tables, reference counts, copy-on-write, LRU
//! eviction, memory metrics) over storage the caller hands in.
//!
//! `#![no_std]`, no `alloc`: an embedded user passes static arrays, a host
//! passes `Vec`s. There is no clock either; operations that need time take a
//! [`Timestamp`] from the caller.
//!
//! ## The paged KV cache
//!
//! Keys and values live in pages of [`PAGE_SIZE`] (16) token slots. The
//! [`PagePool`] owns the page ids: a free list, a reference count per page and
//! an LRU list of cached pages nobody references. The [`PageTable`] maps each
//! sequence's tokens to pages in one dense table that kernels read as it is.
//! The bytes themselves live in a backend; the core only hands out page ids
//! and slots (`page × 16 + offset`).
//!
//! ```
//! use pagoda_core::{KvDtype, KvGeometry, PageEntry, PageId, PagePool, PageTable, SeqEntry, Timestamp};
//!
//! // A 1 MiB cache for a small model: the pool size comes from the byte budget.
//! let geometry = KvGeometry::new(4, 2, 64, KvDtype::F16).unwrap();
//! let pages = geometry.pages_for_budget(1 << 20).unwrap() as usize;
//! assert_eq!(pages, 32);
//!
//! let mut page_storage = [PageEntry::EMPTY; 32];
//! let mut pool = PagePool::new(&mut page_storage[..pages]).unwrap();
//! let mut rows = [PageId::from_index(0); 4 * 8]; // 4 sequences × 8 pages (128 tokens)
//! let mut seqs = [SeqEntry::EMPTY; 4];
//! let mut table = PageTable::new(&mut rows, &mut seqs).unwrap();
//!
//! let prompt = table.create().unwrap();
//! table.append(prompt, 40, &mut pool, &mut ()).unwrap(); // 3 pages
//! let token = table.locate(prompt, 39).unwrap();
//! assert_eq!(token.offset, 39 % 16);
//!
//! let stats = pool.stats(Timestamp::from_millis(5));
//! assert_eq!(stats.pages_in_use(), 3);
//! assert_eq!(stats.unused_slots(), 3 * 16 - 40);
//!
//! table.release(prompt, &mut pool).unwrap();
//! assert_eq!(pool.free_pages(), 32);
//! ```
//!
//! The pool, the page table, the prefix cache, the request queue and the
//! scheduler keep their free lists and orders as intrusive lists over the
//! caller's entries: one implementation, [`list`].
//!
//! [`KvCache`] puts the pool, the page tables and the prefix cache
//! ([`RadixCache`]) behind one owner, so the scheduler and an engine admit a
//! sequence on its cached prefix, append, cache and finish through one API
//! instead of threading the three parts through every call.
//!
//! ## Model files
//!
//! [`gguf`] reads llama.cpp's GGUF model files (v2 and v3) over borrowed
//! bytes, with a typed [`GgufError`] for every malformed file; [`quant`]
//! defines the weight block layouts ([`QuantKind`]) and their scalar
//! dequantization ([`dequantize_row`]), once for every backend.
//!
//! ## Panic policy
//!
//! Nothing a caller does makes this crate panic. Every operation that can be
//! refused returns a typed error and changes nothing when it does: each
//! returns the narrowest type that covers what it can refuse
//! ([`StorageError`] at construction, [`PoolExhausted`], [`PageError`],
//! [`TableFull`], [`SeqError`], [`AppendError`]), and operations that compose
//! others return their union, [`KvError`]. Internal invariants are checked with `debug_assert!` only, and the
//! property tests run them under random operation sequences.
//!
//! ## Features
//!
//! - `defmt`: logs evictions through `defmt` and derives `defmt::Format` for
//!   the public types, for embedded targets.
#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
mod error;
mod geometry;
pub mod gguf;
mod groups;
mod ids;
mod kv_cache;
pub mod list;
mod log;
mod page_table;
mod pool;
pub mod quant;
pub mod queue;
mod radix;
mod request;
pub mod scheduler;
mod stats;
mod sync;
mod time;

pub use error::{
    AppendError, KvError, PageError, PoolExhausted, SeqError, StorageError, TableFull,
};
pub use geometry::{GeometryError, KvDtype, KvGeometry, ParseKvDtypeError, MAX_PAGES, PAGE_SIZE};
pub use gguf::{Gguf, GgufError};
pub use groups::{GroupsError, KvGroups, LayerPlace, MAX_KV_GROUPS};
pub use ids::{PageId, SeqId, Slot};
pub use kv_cache::{Admission, Admitted, KvCache, KvStorage};
pub use page_table::{Appended, PageCopies, PageCopy, PageTable, SeqEntry, TokenLocation};
pub use pool::{CacheTag, EvictionListener, PageEntry, PagePool};
pub use quant::{dequantize_row, QuantError, QuantKind};
pub use queue::{
    CancelHandle, Dequeued, QueueError, QueueSlot, QueueStats, Rejected, RequestId, RequestQueue,
    Selection,
};
pub use radix::{
    CacheEvent, CachedBlock, EventDrain, Growth, GrowthKeys, Inserted, PrefixMatch, PrefixProbe,
    RadixCache, RadixNode, RadixStats, GROWTH_JOURNAL,
};
pub use request::{Priority, Request};
pub use stats::{PageRates, PoolStats};
pub use time::Timestamp;
