//! Packing a step's plan into one batch: every work item's new tokens,
//! positions and KV slots side by side, one attention sequence per item,
//! and the rows that sample.

use pagoda_core::scheduler::{SchedError, Scheduler, Work, WorkKind};
use pagoda_core::{PageCopy, Slot, Timestamp};

use crate::engine::Live;
use crate::error::EngineError;
use crate::model::StateRow;
use crate::request::Queued;
use pagoda_core::KvCache;

/// The packed batch of one step (buffers reused across steps).
#[derive(Debug, Default)]
pub(crate) struct Batch {
    pub(crate) tokens: Vec<u32>,
    pub(crate) positions: Vec<u32>,
    pub(crate) slots: Vec<Slot>,
    /// The rows' slots in the pages of KV groups `1..` (empty with one
    /// group).
    pub(crate) group_slots: Vec<Vec<Slot>>,
    /// Per sequence: work index, query start, query length, context length.
    pub(crate) seqs: Vec<(usize, u32, u32, u32)>,
    /// Per sequence, its recurrent state: its page-table row, tagged with
    /// its request (read only by a recurrent model).
    pub(crate) states: Vec<StateRow>,
    /// The rows whose logits the step computes: each sampling row, and
    /// the prompt rows of requests that score their prompt.
    pub(crate) sample_rows: Vec<u32>,
    /// Rows that are prompt tokens (the rest decode).
    pub(crate) prompt_rows: usize,
    /// Work index of each row that samples.
    pub(crate) samplers: Vec<usize>,
    /// Each sampler's row of logits (its index in `sample_rows`).
    pub(crate) sampler_rows: Vec<usize>,
    /// Rows that score a prompt token: work index, the prompt position of
    /// the token the row predicts, its row of logits.
    pub(crate) scorers: Vec<(usize, u32, usize)>,
    pub(crate) copies: Vec<PageCopy>,
}

impl Batch {
    /// Packs `plan`'s work items. A prefill that starts a request (again,
    /// after a preemption) resets its output and its sampler.
    pub(crate) fn pack<E>(
        &mut self,
        plan: &[Work],
        live: &mut [Option<Live>],
        sched: &Scheduler<'_, Queued>,
        kv: &KvCache<'_>,
        now: Timestamp,
    ) -> Result<(), EngineError<E>> {
        self.tokens.clear();
        self.positions.clear();
        self.slots.clear();
        let groups = kv.groups().count() as usize;
        self.group_slots.resize_with(groups - 1, Vec::new);
        self.group_slots.iter_mut().for_each(Vec::clear);
        self.seqs.clear();
        self.states.clear();
        self.sample_rows.clear();
        self.prompt_rows = 0;
        self.samplers.clear();
        self.sampler_rows.clear();
        self.scorers.clear();
        self.copies.clear();
        for (i, w) in plan.iter().enumerate() {
            let live = live
                .get_mut(w.entry.index() as usize)
                .and_then(Option::as_mut)
                .ok_or(EngineError::Invariant("planned entry has no state"))?;
            let request = &sched
                .request(w.entry)
                .ok_or(SchedError::UnknownEntry)?
                .request;
            let query_start = self.tokens.len() as u32;
            let (first_position, len, samples) = match w.kind {
                WorkKind::Prefill {
                    start,
                    len,
                    first,
                    last,
                } => {
                    if first {
                        // A fresh start (or a restart after preemption): the
                        // output and the sampler begin again.
                        live.output.clear();
                        live.rng = fastrand::Rng::with_seed(request.seed);
                        live.constraint = request.sampling.constraint.as_ref().map(|c| c.0.start());
                        live.admitted = Some(now);
                        live.starts += 1;
                        // The first chunk starts past the cached prefix.
                        live.cached_tokens = start;
                        if !live.prompt_sent {
                            live.prompt_logprobs.clear();
                        }
                    }
                    let prompt = request
                        .prompt
                        .get(start as usize..(start + len) as usize)
                        .ok_or(EngineError::Invariant("prefill past the prompt"))?;
                    self.tokens.extend_from_slice(prompt);
                    self.prompt_rows += prompt.len();
                    // Scoring the prompt: each row predicts the next prompt
                    // token (the last prompt row samples instead).
                    if request.sampling.prompt_logprobs.is_some() && !live.prompt_sent {
                        let prompt_len = request.prompt.len() as u32;
                        for j in 0..len {
                            let next = start + j + 1;
                            if next < prompt_len {
                                self.scorers.push((i, next, self.sample_rows.len()));
                                self.sample_rows.push(query_start + j);
                            }
                        }
                    }
                    (start, len, last)
                }
                WorkKind::Decode { position } => {
                    let token = *live
                        .output
                        .last()
                        .ok_or(EngineError::Invariant("decode before any token"))?;
                    self.tokens.push(token);
                    (position, 1, true)
                }
            };
            self.positions.extend(first_position..first_position + len);
            let at = self.slots.len();
            self.slots.resize(at + len as usize, Slot(0));
            kv.slot_mapping(w.seq, first_position, &mut self.slots[at..])?;
            for (g, slots) in (1..).zip(self.group_slots.iter_mut()) {
                slots.resize(at + len as usize, Slot(0));
                kv.group_slot_mapping(w.seq, g, first_position, &mut slots[at..])?;
            }
            self.seqs.push((i, query_start, len, first_position + len));
            self.states.push(StateRow {
                row: w.seq.row(),
                owner: live.id.to_bits(),
            });
            if samples {
                self.sampler_rows.push(self.sample_rows.len());
                self.sample_rows.push(query_start + len - 1);
                self.samplers.push(i);
            }
            self.copies.extend(w.copies.iter());
        }
        Ok(())
    }
}
