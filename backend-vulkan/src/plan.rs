//! Turns an attention batch into the kernels' metadata: a sequence table,
//! the page lists, work items (tiles of query vectors over a KV range; the
//! items of decoding sequences, one new token each, listed apart for the
//! decode kernel) and, for split decode, merge entries. Pure host code,
//! tested without a device.

use pagoda_core::backend::{AttentionShape, SeqAttention};
use pagoda_core::PAGE_SIZE;

/// Query vectors (query heads × new tokens) one workgroup takes at most, by
/// head dim: the tile's queries and one page of keys must fit in the 32 KiB
/// of shared memory lavapipe (and most GPUs) give a workgroup.
pub(crate) fn max_vectors(head_dim: u32) -> u32 {
    if head_dim <= 128 {
        16
    } else {
        8
    }
}

/// Query heads one decode item takes at most (`MAX_HEADS` in `decode.comp`,
/// which keeps every head's accumulators in registers); larger groups are
/// split into several items.
pub(crate) const DECODE_MAX_HEADS: u32 = 8;
/// Below this many workgroups the device has idle cores, so long contexts
/// are split across their KV length.
pub(crate) const TARGET_WORKGROUPS: u32 = 1024;
/// A split covers at least this many tokens (four pages), so the merge
/// stays cheap. Splits of 512 left an 8B model's decode at 4,096 tokens
/// with 64 workgroups (8 KV heads × 8 splits) on an H100's 132 cores: its
/// step took 3.3 ms longer than at 8 tokens (100 µs a layer, for 16 MB of
/// KV a layer that read in 5 µs at copy speed); at 64 tokens the same
/// decode has 512 workgroups.
pub(crate) const MIN_SPLIT_TOKENS: u32 = 64;
/// Marks an item that writes its outputs directly (`NO_PARTIAL` in GLSL).
const NO_PARTIAL: u32 = u32::MAX;
/// Words of one work item (see `attention.comp`).
const ITEM_WORDS: usize = 9;

/// The metadata of one attention call.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct AttentionPlan {
    /// Sequence table, page lists, items, then merge entries.
    pub meta: Vec<u32>,
    /// Where the tile items (for `attention.comp`) start in `meta`.
    pub item_offset: u32,
    /// Tile items.
    pub items: u32,
    /// Where the decode items (for `decode.comp`) start in `meta`.
    pub decode_offset: u32,
    /// Decode items: one new token of one sequence, all heads of a group.
    pub decode_items: u32,
    /// Where the merge entries start in `meta`.
    pub merge_offset: u32,
    /// Merge entries (query vectors whose KV range was split).
    pub merges: u32,
    /// Partial records (running max, sum, then `head_dim` accumulators).
    pub partial_records: u32,
}

/// One work item before it is written into the metadata.
struct Item {
    seq: u32,
    kv_head: u32,
    head0: u32,
    hcount: u32,
    i0: u32,
    rcount: u32,
    kv_end: u32,
}

/// Plans a validated batch (see [`pagoda_core::backend::validate_attention`]).
pub(crate) fn plan_attention(shape: &AttentionShape, batch: &[SeqAttention<'_>]) -> AttentionPlan {
    let group = shape.group();
    let tile_heads = group.min(max_vectors(shape.head_dim));
    let rows_per_tile = (max_vectors(shape.head_dim) / tile_heads).max(1);
    let decode_heads = group.min(DECODE_MAX_HEADS);
    let mut meta = Vec::new();
    // Sequence table: 4 words each, then every sequence's used pages.
    let pages_start = batch.len() * 4;
    let mut page_at = pages_start as u32;
    for seq in batch {
        let used = (seq.context_len as usize).div_ceil(PAGE_SIZE);
        meta.extend_from_slice(&[page_at, seq.context_len, seq.query_start, seq.query_len]);
        page_at += used as u32;
    }
    for seq in batch {
        let used = (seq.context_len as usize).div_ceil(PAGE_SIZE);
        meta.extend(seq.pages[..used].iter().map(|p| p.index()));
    }
    let mut tiles = Vec::new();
    let mut decodes = Vec::new();
    for (s, seq) in batch.iter().enumerate() {
        let (items, hcount_max) = if seq.query_len == 1 {
            (&mut decodes, decode_heads)
        } else {
            (&mut tiles, tile_heads)
        };
        for kv_head in 0..shape.kv_heads {
            for head0 in (0..group).step_by(hcount_max as usize) {
                for i0 in (0..seq.query_len).step_by(rows_per_tile as usize) {
                    let rcount = rows_per_tile.min(seq.query_len - i0);
                    items.push(Item {
                        seq: s as u32,
                        kv_head,
                        head0,
                        hcount: hcount_max.min(group - head0),
                        i0,
                        rcount,
                        // One past the position of the tile's last row.
                        kv_end: seq.context_len - seq.query_len + i0 + rcount,
                    });
                }
            }
        }
    }
    // Few items over long contexts leave the device idle: split them.
    let wanted = TARGET_WORKGROUPS.div_ceil(((tiles.len() + decodes.len()) as u32).max(1));
    let mut splitter = Splitter {
        wanted,
        group,
        merges: Vec::new(),
        partial_records: 0,
    };
    let item_offset = meta.len() as u32;
    let items = splitter.write(&tiles, batch, &mut meta);
    let decode_offset = meta.len() as u32;
    let decode_items = splitter.write(&decodes, batch, &mut meta);
    let merge_offset = meta.len() as u32;
    let merges = (splitter.merges.len() / 5) as u32;
    meta.extend(splitter.merges);
    AttentionPlan {
        meta,
        item_offset,
        items,
        decode_offset,
        decode_items,
        merge_offset,
        merges,
        partial_records: splitter.partial_records,
    }
}

/// Writes items into the metadata, split across their KV length, and
/// collects the merges the splits need.
struct Splitter {
    /// Splits wanted per item (before the minimum split length).
    wanted: u32,
    group: u32,
    merges: Vec<u32>,
    partial_records: u32,
}

impl Splitter {
    /// Writes `items` and returns how many records they became.
    fn write(&mut self, items: &[Item], batch: &[SeqAttention<'_>], meta: &mut Vec<u32>) -> u32 {
        let start = meta.len();
        let mut count = 0u32;
        for item in items {
            let pages = item.kv_end.div_ceil(PAGE_SIZE as u32);
            let splits = self.wanted.min(item.kv_end / MIN_SPLIT_TOKENS).max(1);
            let pages_per_split = pages.div_ceil(splits);
            let splits = pages.div_ceil(pages_per_split);
            let vectors = item.hcount * item.rcount;
            let first_record = self.partial_records;
            for split in 0..splits {
                let begin = split * pages_per_split * PAGE_SIZE as u32;
                let end = ((split + 1) * pages_per_split * PAGE_SIZE as u32).min(item.kv_end);
                let partial = if splits == 1 {
                    NO_PARTIAL
                } else {
                    let at = self.partial_records;
                    self.partial_records += vectors;
                    at
                };
                meta.extend_from_slice(&[
                    item.seq,
                    item.kv_head,
                    item.head0,
                    item.hcount,
                    item.i0,
                    item.rcount,
                    begin,
                    end,
                    partial,
                ]);
                count += 1;
            }
            if splits > 1 {
                let seq = &batch[item.seq as usize];
                for v in 0..vectors {
                    let (r, h) = (v / item.hcount, v % item.hcount);
                    self.merges.extend_from_slice(&[
                        seq.query_start + item.i0 + r,
                        item.kv_head * self.group + item.head0 + h,
                        first_record + v,
                        splits,
                        vectors,
                    ]);
                }
            }
        }
        debug_assert_eq!(meta.len(), start + count as usize * ITEM_WORDS);
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pagoda_core::PageId;

    fn shape(q_heads: u32, kv_heads: u32, head_dim: u32) -> AttentionShape {
        AttentionShape {
            q_heads,
            kv_heads,
            head_dim,
            scale: 0.1,
            window: 0,
            softcap: 0.0,
        }
    }

    fn items(plan: &AttentionPlan) -> Vec<&[u32]> {
        plan.meta[plan.item_offset as usize..plan.merge_offset as usize]
            .chunks(ITEM_WORDS)
            .collect()
    }

    #[test]
    fn every_query_vector_is_covered_once_with_its_causal_range() {
        let pages: Vec<PageId> = (0..8).map(PageId::from_index).collect();
        let batch = [
            SeqAttention {
                pages: &pages[..2],
                context_len: 20,
                query_start: 0,
                query_len: 20,
            },
            SeqAttention {
                pages: &pages[2..],
                context_len: 90,
                query_start: 20,
                query_len: 1,
            },
        ];
        let s = shape(8, 2, 64);
        let plan = plan_attention(&s, &batch);
        assert_eq!(plan.merges, 0, "short contexts are not split");
        // The decoding sequence's items (one per KV head, all 4 grouped
        // heads each) are listed apart, after the prefill's tiles.
        assert_eq!(plan.decode_items, 2);
        assert_eq!(
            plan.items, 10,
            "20 rows of 4 heads in tiles of 16, per KV head"
        );
        let decode = &plan.meta[plan.decode_offset as usize..plan.merge_offset as usize];
        for it in decode.chunks(ITEM_WORDS) {
            assert_eq!((it[0], it[3], it[5]), (1, 4, 1), "{it:?}");
        }
        let mut seen = vec![0u32; 21 * 8];
        for it in items(&plan) {
            let (seq, kv_head, head0, hcount, i0, rcount, begin, end, partial) = (
                it[0], it[1], it[2], it[3], it[4], it[5], it[6], it[7], it[8],
            );
            assert_eq!(partial, NO_PARTIAL);
            assert_eq!(begin, 0);
            assert!(hcount * rcount <= max_vectors(64));
            let b = &batch[seq as usize];
            assert_eq!(end, b.context_len - b.query_len + i0 + rcount);
            for r in 0..rcount {
                for h in 0..hcount {
                    seen[((b.query_start + i0 + r) * 8 + kv_head * 4 + head0 + h) as usize] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
        // The page list holds the used pages of each sequence.
        assert_eq!(&plan.meta[8..10], &[0, 1]);
        assert_eq!(&plan.meta[10..16], &[2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn a_wide_group_is_decoded_in_items_of_at_most_eight_heads() {
        let pages: Vec<PageId> = (0..4).map(PageId::from_index).collect();
        let batch = [SeqAttention {
            pages: &pages,
            context_len: 50,
            query_start: 0,
            query_len: 1,
        }];
        let s = shape(24, 2, 128);
        let plan = plan_attention(&s, &batch);
        assert_eq!(plan.items, 0);
        let decode = &plan.meta[plan.decode_offset as usize..plan.merge_offset as usize];
        let mut seen = [0u32; 24];
        for it in decode.chunks(ITEM_WORDS) {
            let (kv_head, head0, hcount) = (it[1], it[2], it[3]);
            assert!(hcount <= DECODE_MAX_HEADS, "{it:?}");
            for h in head0..head0 + hcount {
                seen[(kv_head * 12 + h) as usize] += 1;
            }
        }
        assert_eq!(plan.decode_items, 4, "12 heads per KV head: 8 + 4");
        assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
    }

    #[test]
    fn a_long_decode_has_workgroups_for_every_core_of_a_gpu() {
        let pages: Vec<PageId> = (0..256).map(PageId::from_index).collect();
        let batch = [SeqAttention {
            pages: &pages,
            context_len: 4096,
            query_start: 0,
            query_len: 1,
        }];
        // Llama 3 8B: 32 query heads over 8 KV heads.
        let plan = plan_attention(&shape(32, 8, 128), &batch);
        assert_eq!(plan.decode_items, 8 * 4096 / MIN_SPLIT_TOKENS);
        assert_eq!(plan.merges, 32);
    }

    #[test]
    fn a_long_decode_is_split_on_page_boundaries_and_merged() {
        let pages: Vec<PageId> = (0..257).map(PageId::from_index).collect();
        let batch = [SeqAttention {
            pages: &pages,
            context_len: 4097,
            query_start: 0,
            query_len: 1,
        }];
        let s = shape(4, 1, 128);
        let plan = plan_attention(&s, &batch);
        let its = items(&plan);
        assert!(its.len() > 1);
        assert_eq!(plan.merges, 4, "one merge per query head");
        let mut next = 0;
        for it in &its {
            assert_eq!(it[6], next, "splits tile the range");
            assert_eq!(it[6] % PAGE_SIZE as u32, 0);
            assert!(it[7] > it[6], "no empty split");
            next = it[7];
        }
        assert_eq!(next, 4097);
        assert_eq!(plan.partial_records, 4 * its.len() as u32);
        let merge = &plan.meta[plan.merge_offset as usize..][..5];
        assert_eq!(merge, &[0, 0, 0, its.len() as u32, 4]);
    }
}
