//! Paged attention on the CPU: one pass over each sequence's pages with an
//! online softmax (no score matrix), grouped-query heads together so each
//! key and value is read once per group, work split across sequences, KV
//! heads (decode tiles take them all, reading each page as long runs), query
//! tiles and (for long contexts) ranges of the KV length, with a final merge
//! of the partial softmaxes. Tasks run on the backend's [`Team`], whose
//! workers take them one at a time; the plan, the partial softmaxes and
//! each worker's scratch live in [`Buffers`], reused from call to call.

use std::sync::{Mutex, PoisonError};

use pagoda_core::backend::{AttentionShape, SeqAttention};
use pagoda_core::PAGE_SIZE;

use crate::element::KvElement;
use crate::kernels::{page_accumulate, page_scores, page_softmax, Isa};
use crate::store::Layout;
use crate::team::{Team, TeamError};

/// Query rows (tokens × grouped heads) processed together: each key row
/// loaded is used this many times.
const TILE_ROWS: usize = 8;
/// The shortest KV range worth its own task.
const MIN_SPLIT_KEYS: u32 = 64;
/// Work (in pages × KV heads × blocks of `TILE_ROWS` query rows, each about
/// a microsecond) below which a call runs on the calling thread. Handing
/// work to the team and waiting for it costs a few microseconds while its
/// workers spin, tens once they sleep (a thread wake-up; more in a VM),
/// which a short decode would spend several times over.
const SERIAL_WORK: usize = 64;

/// The call's work in the units of [`SERIAL_WORK`].
fn work(shape: &AttentionShape, batch: &[SeqAttention<'_>]) -> usize {
    let group = shape.group() as usize;
    batch
        .iter()
        .map(|s| {
            let blocks = (s.query_len as usize * group).div_ceil(TILE_ROWS);
            s.context_len.div_ceil(PAGE_SIZE as u32) as usize * shape.kv_heads as usize * blocks
        })
        .sum()
}

/// One task: KV heads `head..head + heads` of a sequence, a tile of its
/// query tokens and a range of its keys.
#[derive(Debug, Clone, Copy)]
struct Task {
    seq: u32,
    head: u32,
    heads: u32,
    first_token: u32,
    tokens: u32,
    first_key: u32,
    end_key: u32,
}

/// Per-thread buffers reused across tasks: the tile's scaled queries, a page
/// of scores, and per row the keys it sees in the page (up to its
/// position), how many of those fall before its window, and its rescale
/// factor.
#[derive(Debug, Default)]
struct Scratch {
    q: Vec<f32>,
    scores: Vec<f32>,
    visible: Vec<u32>,
    before_window: Vec<u32>,
    correction: Vec<f32>,
}

/// A task's softmax state per row: running max, sum and weighted values.
#[derive(Debug, Default)]
struct Partial {
    max: Vec<f32>,
    sum: Vec<f32>,
    acc: Vec<f32>,
}

/// KV heads one task covers for a sequence. A decode-sized tile takes every
/// head, so the task walks each page's keys (then values) of all heads as
/// one contiguous run: long runs are what the hardware prefetcher streams
/// well, where one head's few KiB per page, scattered, are not. Longer tiles
/// (prefill) are compute-bound and take one head each.
fn heads_per_task(shape: &AttentionShape, seq: &SeqAttention<'_>, tile_tokens: u32) -> u32 {
    if seq.query_len <= tile_tokens {
        shape.kv_heads
    } else {
        1
    }
}

/// Buffers an attention call reuses: they grow to the largest call seen,
/// so a steady stream of steps allocates nothing.
#[derive(Debug, Default)]
pub struct Buffers {
    /// The call's plan.
    tasks: Vec<Task>,
    /// One softmax state per task.
    partials: Vec<Partial>,
    /// One scratch per worker (each locks only its own).
    scratch: Vec<Mutex<Scratch>>,
}

/// Fills `tasks` with the plan of a call on `threads` workers.
fn plan(shape: &AttentionShape, batch: &[SeqAttention<'_>], threads: usize, tasks: &mut Vec<Task>) {
    let group = shape.group() as usize;
    let tile_tokens = (TILE_ROWS / group).max(1) as u32;
    let tiles: usize = batch
        .iter()
        .map(|s| {
            let head_groups = shape.kv_heads / heads_per_task(shape, s, tile_tokens);
            s.query_len.div_ceil(tile_tokens) as usize * head_groups as usize
        })
        .sum();
    let target = 4 * threads;
    tasks.clear();
    for (i, seq) in batch.iter().enumerate() {
        // Few tasks and a long context: split the keys so every core works.
        let splits = if tiles < target {
            let wanted = target.div_ceil(tiles.max(1)) as u32;
            wanted.min(seq.context_len / MIN_SPLIT_KEYS).max(1)
        } else {
            1
        };
        let chunk = seq.context_len.div_ceil(splits).div_ceil(PAGE_SIZE as u32) * PAGE_SIZE as u32;
        let heads = heads_per_task(shape, seq, tile_tokens);
        for head in (0..shape.kv_heads).step_by(heads as usize) {
            let mut t = 0;
            while t < seq.query_len {
                let tokens = tile_tokens.min(seq.query_len - t);
                // Keys this tile can see: up to its last token's position,
                // from the page holding its first token's window start.
                let first_pos = seq.context_len - seq.query_len + t;
                let last = first_pos + tokens;
                let start = shape.first_visible(first_pos);
                let mut k = start - start % PAGE_SIZE as u32;
                while k < last {
                    let end = (k + chunk).min(last);
                    tasks.push(Task {
                        seq: i as u32,
                        head,
                        heads,
                        first_token: t,
                        tokens,
                        first_key: k,
                        end_key: end,
                    });
                    k = end;
                }
                t += tokens;
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run<E: KvElement>(
    isa: Isa,
    data: &[E],
    layout: &Layout,
    layer: u32,
    shape: &AttentionShape,
    seq: &SeqAttention<'_>,
    queries: &[f32],
    task: &Task,
    scratch: &mut Scratch,
    partial: &mut Partial,
) {
    let dim = shape.head_dim as usize;
    let group = shape.group() as usize;
    // Rows of one head (token × group + g), then all heads, head-major.
    let head_rows = task.tokens as usize * group;
    let rows = task.heads as usize * head_rows;
    let Scratch {
        q,
        scores,
        visible,
        before_window,
        correction,
    } = scratch;
    // Queries of the tile, pre-scaled.
    q.clear();
    q.resize(rows * dim, 0.0);
    for h in 0..task.heads as usize {
        for t in 0..task.tokens as usize {
            let src = (seq.query_start as usize + task.first_token as usize + t) * shape.q_row();
            for g in 0..group {
                let head = (task.head as usize + h) * group + g;
                let from = &queries[src + head * dim..src + (head + 1) * dim];
                let row = h * head_rows + t * group + g;
                for (d, s) in q[row * dim..][..dim].iter_mut().zip(from) {
                    *d = s * shape.scale;
                }
            }
        }
    }
    let first_pos = seq.context_len - seq.query_len + task.first_token;
    let Partial { max, sum, acc } = partial;
    for (v, len, fill) in [
        (&mut *max, rows, f32::NEG_INFINITY),
        (&mut *sum, rows, 0.0),
        (&mut *acc, rows * dim, 0.0),
    ] {
        v.clear();
        v.resize(len, fill);
    }
    scores.clear();
    scores.resize(head_rows * 16, 0.0);
    correction.resize(head_rows, 1.0);
    let block = layout.head_block();
    let first_block = task.head as usize * block;
    let blocks = task.heads as usize * block;
    let mut key = task.first_key;
    while key < task.end_key {
        let page_index = key as usize / PAGE_SIZE;
        let page = seq.pages[page_index].index();
        let in_page = (task.end_key - key).min(PAGE_SIZE as u32) as usize;
        let k_base = layout.offset(layer, page, 0) + first_block;
        let v_base = layout.offset(layer, page, 1) + first_block;
        let keys = &data[k_base..k_base + blocks];
        let values = &data[v_base..v_base + blocks];
        // The task's next page, whose first head's blocks the last head
        // prefetches.
        let next = (key as usize + in_page < task.end_key as usize).then(|| {
            let page = seq.pages[page_index + 1].index();
            let k = layout.offset(layer, page, 0) + first_block;
            let v = layout.offset(layer, page, 1) + first_block;
            (&data[k..k + block], &data[v..v + block])
        });
        // A row sees keys up to its token's position: all of the page, but
        // for the tile's own tokens in prefill. The same for every head.
        visible.clear();
        visible.extend((0..head_rows).map(|r| {
            let pos = first_pos + (r / group) as u32;
            (pos + 1).saturating_sub(key).min(in_page as u32)
        }));
        // With a window, the keys of the page before a row's window start
        // are masked; a row whose whole visible part is before it sees none.
        before_window.clear();
        if shape.window > 0 {
            before_window.extend(visible.iter_mut().enumerate().map(|(r, seen)| {
                let pos = first_pos + (r / group) as u32;
                let hidden = shape.first_visible(pos).saturating_sub(key);
                if hidden >= *seen {
                    *seen = 0;
                }
                hidden.min(*seen)
            }));
        }
        for h in 0..task.heads as usize {
            let (rows_of_head, head_block) = (h * head_rows..(h + 1) * head_rows, h * block);
            // The blocks computed after this head's: the next head's, or
            // the next page's first. The kernels load them while they work
            // on this head's, so memory and arithmetic overlap.
            let (keys_ahead, values_ahead) = if h + 1 < task.heads as usize {
                let next_head = head_block + block..head_block + 2 * block;
                (&keys[next_head.clone()], &values[next_head])
            } else {
                next.unwrap_or((&[], &[]))
            };
            // Whole blocks (keys are scored 16 wide, values are tiled; see
            // `store`).
            let keys = &keys[head_block..head_block + block];
            let values = &values[head_block..head_block + block];
            let acc = &mut acc[rows_of_head.start * dim..rows_of_head.end * dim];
            page_scores(
                isa,
                &q[rows_of_head.start * dim..],
                head_rows,
                keys,
                in_page,
                dim,
                scores,
                keys_ahead,
            );
            if shape.softcap > 0.0 {
                soft_cap(scores, visible, shape.softcap);
            }
            for (r, &hidden) in before_window.iter().enumerate() {
                scores[r * 16..r * 16 + hidden as usize].fill(f32::NEG_INFINITY);
            }
            page_softmax(
                isa,
                scores,
                visible,
                &mut max[rows_of_head.clone()],
                &mut sum[rows_of_head],
                correction,
            );
            for (r, &c) in correction.iter().enumerate() {
                if c != 1.0 {
                    for a in &mut acc[r * dim..(r + 1) * dim] {
                        *a *= c;
                    }
                }
            }
            page_accumulate(
                isa,
                acc,
                head_rows,
                scores,
                values,
                in_page,
                dim,
                values_ahead,
            );
        }
        key += in_page as u32;
    }
}

/// `cap × tanh(score / cap)` over each row's visible scores of a page.
fn soft_cap(scores: &mut [f32], visible: &[u32], cap: f32) {
    for (r, &seen) in visible.iter().enumerate() {
        for s in &mut scores[r * 16..r * 16 + seen as usize] {
            *s = cap * (*s / cap).tanh();
        }
    }
}

/// Locks `m`, ignoring poisoning: a scratch holds no invariant a panic
/// could break (every task resets what it reads).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs attention for a validated batch, writing every output row; with
/// `sinks` (one finite logit per query head) each head's softmax also
/// counts `exp(sink)`, in the final merge: the sink is a key with no value.
/// Fails only if a kernel panicked on a worker (a bug; the team survives
/// it).
#[allow(clippy::too_many_arguments)]
pub fn attention<E: KvElement>(
    team: &mut Team,
    buffers: &mut Buffers,
    isa: Isa,
    data: &[E],
    layout: &Layout,
    layer: u32,
    shape: &AttentionShape,
    sinks: Option<&[f32]>,
    batch: &[SeqAttention<'_>],
    queries: &[f32],
    out: &mut [f32],
) -> Result<(), TeamError> {
    let serial = work(shape, batch) < SERIAL_WORK;
    let threads = if serial { 1 } else { team.workers() };
    let Buffers {
        tasks,
        partials,
        scratch,
    } = buffers;
    plan(shape, batch, threads, tasks);
    if partials.len() < tasks.len() {
        partials.resize_with(tasks.len(), Partial::default);
    }
    if scratch.len() < threads {
        scratch.resize_with(threads, Mutex::default);
    }
    let tasks = &tasks[..];
    let partials = &mut partials[..tasks.len()];
    // Workers take the next task until none is left.
    let next = Mutex::new(tasks.iter().zip(partials.iter_mut()));
    let job = |worker: usize, _: usize| {
        let mut scratch = lock(&scratch[worker]);
        loop {
            let Some((t, partial)) = lock(&next).next() else {
                break;
            };
            let seq = &batch[t.seq as usize];
            run(
                isa,
                data,
                layout,
                layer,
                shape,
                seq,
                queries,
                t,
                &mut scratch,
                partial,
            );
        }
    };
    if serial {
        job(0, 1);
    } else {
        team.run(&job)?;
    }
    let partials = &*partials;
    // Merge consecutive tasks of the same tile (the KV splits) and write.
    let dim = shape.head_dim as usize;
    let group = shape.group() as usize;
    let mut i = 0;
    while i < tasks.len() {
        let t = tasks[i];
        let mut j = i + 1;
        while j < tasks.len()
            && tasks[j].seq == t.seq
            && tasks[j].head == t.head
            && tasks[j].first_token == t.first_token
        {
            j += 1;
        }
        let head_rows = t.tokens as usize * group;
        let seq = &batch[t.seq as usize];
        for r in 0..t.heads as usize * head_rows {
            let (h, in_head) = (r / head_rows, r % head_rows);
            let token = seq.query_start as usize + t.first_token as usize + in_head / group;
            let head = (t.head as usize + h) * group + in_head % group;
            let sink = sinks.map_or(f32::NEG_INFINITY, |s| s[head]);
            let max = partials[i..j].iter().map(|p| p.max[r]).fold(sink, f32::max);
            // The sink's share of the denominator (none without sinks).
            let mut total = if sinks.is_some() {
                (sink - max).exp()
            } else {
                0.0
            };
            let dst = &mut out[token * shape.q_row() + head * dim..][..dim];
            dst.fill(0.0);
            for p in &partials[i..j] {
                if p.sum[r] == 0.0 {
                    continue;
                }
                let w = (p.max[r] - max).exp();
                total += p.sum[r] * w;
                for (o, a) in dst.iter_mut().zip(&p.acc[r * dim..(r + 1) * dim]) {
                    *o += a * w;
                }
            }
            let inv = 1.0 / total;
            for o in dst.iter_mut() {
                *o *= inv;
            }
        }
        i = j;
    }
    Ok(())
}
