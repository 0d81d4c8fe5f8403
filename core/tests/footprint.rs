//! The core's memory footprint: the bytes each piece of caller storage costs,
//! and the total for a stated configuration. Every size is asserted exactly,
//! so a type that grows (or shrinks) fails here and docs/EMBEDDED.md, which
//! quotes these numbers, is updated with it.
//!
//! These are the sizes on a 64-bit host (x86_64, aarch64). The firmware in
//! `embedded/` asserts the same types' sizes on the 32-bit Cortex-M4F at
//! build time and prints them.

use core::mem::size_of;

use pagoda_core::scheduler::{Policy, SchedSlot, Scheduler, Work};
use pagoda_core::{
    CacheEvent, KvCache, PageEntry, PageId, QueueSlot, RadixCache, RadixNode, Request,
    RequestQueue, SeqEntry, PAGE_SIZE,
};

/// A request as an embedded caller holds it: a borrowed prompt and an
/// output limit (24 bytes on a 64-bit host, 12 on a 32-bit target).
#[allow(dead_code)]
struct Prompt<'a> {
    tokens: &'a [u32],
    max_new: u32,
}

impl Request for Prompt<'_> {
    fn prompt(&self) -> &[u32] {
        self.tokens
    }

    fn max_output_tokens(&self) -> u32 {
        self.max_new
    }
}

/// The stated configuration: 4,096 pages (64 Ki tokens of KV), 64
/// sequences of up to 2,048 tokens, one radix node per page, 256 queue and
/// scheduler slots, a batch of 64.
struct Config {
    pages: usize,
    sequences: usize,
    tokens_per_sequence: usize,
    queue_slots: usize,
    scheduler_slots: usize,
    max_batch: usize,
}

const STATED: Config = Config {
    pages: 4096,
    sequences: 64,
    tokens_per_sequence: 2048,
    queue_slots: 256,
    scheduler_slots: 256,
    max_batch: 64,
};

/// Bytes of caller storage for `c`, part by part.
fn storage_bytes(c: &Config) -> [(&'static str, usize); 10] {
    let pages_per_sequence = c.tokens_per_sequence.div_ceil(PAGE_SIZE);
    [
        ("pool entries", c.pages * size_of::<PageEntry>()),
        (
            "page-table rows",
            c.sequences * pages_per_sequence * size_of::<PageId>(),
        ),
        ("sequence entries", c.sequences * size_of::<SeqEntry>()),
        ("radix nodes", c.pages * size_of::<RadixNode>()),
        (
            "radix index",
            RadixCache::index_len_for(c.pages) * size_of::<u64>(),
        ),
        ("scratch row", pages_per_sequence * size_of::<PageId>()),
        (
            "queue slots",
            c.queue_slots * size_of::<QueueSlot<Prompt<'static>>>(),
        ),
        (
            "scheduler slots",
            c.scheduler_slots * size_of::<SchedSlot<Prompt<'static>>>(),
        ),
        (
            "watch table",
            Scheduler::<Prompt<'static>, Policy>::watch_len_for(c.scheduler_slots)
                * size_of::<u32>(),
        ),
        ("step plan", c.max_batch * size_of::<Work>()),
    ]
}

/// The structures that own the storage, wherever the caller puts them.
fn owner_bytes() -> usize {
    size_of::<KvCache<'static>>()
        + size_of::<RequestQueue<'static, Prompt<'static>>>()
        + size_of::<Scheduler<'static, Prompt<'static>, Policy>>()
}

mod per_entry_sizes {
    use super::*;

    #[test]
    fn pool_page_table_and_radix_entries() {
        assert_eq!(size_of::<PageEntry>(), 20, "bytes per page entry");
        assert_eq!(size_of::<PageId>(), 4, "bytes per page-table row entry");
        // A row entry maps a page of 16 tokens: a quarter of a byte per token.
        assert_eq!(PAGE_SIZE, 16);
        assert_eq!(size_of::<PageId>() as f64 / PAGE_SIZE as f64, 0.25);
        assert_eq!(size_of::<SeqEntry>(), 24, "bytes per sequence entry");
        assert_eq!(size_of::<RadixNode>(), 96, "bytes per radix node");
        assert_eq!(size_of::<u64>(), 8, "bytes per radix index slot");
        // About two index slots per node.
        assert_eq!(RadixCache::index_len_for(4096), 8192);
        // The optional event ring (KV-cache events): a page's hash, its
        // parent's and its 16 tokens, per entry; none by default.
        assert_eq!(size_of::<CacheEvent>(), 88, "bytes per cache-event entry");
    }

    #[test]
    fn queue_scheduler_and_plan_entries() {
        assert_eq!(size_of::<Prompt<'static>>(), 24);
        assert_eq!(size_of::<QueueSlot<Prompt<'static>>>(), 64);
        assert_eq!(size_of::<SchedSlot<Prompt<'static>>>(), 176);
        // Most of it is the copies-on-write, one slot per KV group.
        assert_eq!(size_of::<Work>(), 100, "bytes per step-plan item");
        assert_eq!(
            Scheduler::<Prompt<'static>, Policy>::watch_len_for(256),
            256,
            "one watch entry (4 bytes) per scheduler slot, rounded to a power of two"
        );
    }

    #[test]
    fn owning_structures() {
        assert_eq!(
            [
                size_of::<KvCache<'static>>(),
                size_of::<RequestQueue<'static, Prompt<'static>>>(),
                size_of::<Scheduler<'static, Prompt<'static>, Policy>>(),
            ],
            [848, 200, 8_344]
        );
    }
}

mod stated_configuration {
    use super::*;

    #[test]
    fn total_for_4096_pages_and_64_sequences_of_2048_tokens() {
        let parts = storage_bytes(&STATED);
        let expected = [
            ("pool entries", 81_920),
            ("page-table rows", 32_768),
            ("sequence entries", 1_536),
            ("radix nodes", 393_216),
            ("radix index", 65_536),
            ("scratch row", 512),
            ("queue slots", 16_384),
            ("scheduler slots", 45_056),
            ("watch table", 1_024),
            ("step plan", 6_400),
        ];
        assert_eq!(parts, expected);
        let storage: usize = parts.iter().map(|(_, b)| b).sum();
        assert_eq!(storage, 644_352, "caller storage");
        assert_eq!(
            storage + owner_bytes(),
            653_744,
            "with the owning structures"
        );
    }

    #[test]
    fn storage_grows_linearly_with_pages_and_sequences() {
        // Doubling pages or sequences adds exactly their per-entry bytes:
        // nothing hidden scales with the configuration.
        let total = |c: &Config| storage_bytes(c).iter().map(|(_, b)| b).sum::<usize>();
        let base = total(&STATED);
        let more_pages = Config {
            pages: STATED.pages * 2,
            ..STATED
        };
        let per_page = size_of::<PageEntry>() + size_of::<RadixNode>() + 2 * size_of::<u64>();
        assert_eq!(total(&more_pages) - base, STATED.pages * per_page);
        let more_sequences = Config {
            sequences: STATED.sequences * 2,
            ..STATED
        };
        let per_sequence =
            STATED.tokens_per_sequence / PAGE_SIZE * size_of::<PageId>() + size_of::<SeqEntry>();
        assert_eq!(
            total(&more_sequences) - base,
            STATED.sequences * per_sequence
        );
    }
}
