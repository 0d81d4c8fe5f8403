//! The step plan: what each sequence computes in one engine step, and the
//! step's counts. The engine reads it; the scheduler writes it.

use super::EntryId;
use crate::ids::SeqId;
use crate::kv_cache::KvCache;
use crate::list::NIL;
use crate::page_table::PageCopies;

/// What one planned item computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WorkKind {
    /// Prompt tokens `start..start + len`, already appended to the sequence.
    Prefill {
        /// First prompt position computed.
        start: u32,
        /// Tokens computed.
        len: u32,
        /// The first chunk of this attempt: the engine starts the request's
        /// output afresh (it may have been preempted and restarted).
        first: bool,
        /// The chunk ends the prompt: the engine samples the first token.
        last: bool,
    },
    /// One token: the last sampled token, at `position`.
    Decode {
        /// Its position in the sequence.
        position: u32,
    },
}

/// One sequence's work in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Work {
    /// The request.
    pub entry: EntryId,
    /// Its sequence in the page table.
    pub seq: SeqId,
    /// What to compute.
    pub kind: WorkKind,
    /// A copy-on-write page copy to run before this item's attention.
    pub copies: PageCopies,
}

impl Work {
    /// A placeholder for plan storage (`[Work::EMPTY; N]`); the scheduler
    /// overwrites every item it reports.
    pub const EMPTY: Self = Self {
        entry: EntryId {
            slot: NIL,
            generation: 0,
        },
        seq: SeqId {
            row: NIL,
            generation: 0,
        },
        kind: WorkKind::Decode { position: 0 },
        copies: PageCopies::NONE,
    };

    /// Tokens this item computes.
    pub fn tokens(&self) -> u32 {
        match self.kind {
            WorkKind::Prefill { len, .. } => len,
            WorkKind::Decode { .. } => 1,
        }
    }
}

/// What a step's plan holds, besides its work items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StepPlan {
    /// Work items written to the front of the plan slice.
    pub work: usize,
    /// Decode tokens.
    pub decode_tokens: u32,
    /// Prefill tokens.
    pub prefill_tokens: u32,
    /// Requests admitted this step.
    pub admitted: u32,
    /// Of those, admitted by the fairness threshold.
    pub overdue_admitted: u32,
    /// Prompt tokens the admitted requests found in the prefix cache: the
    /// batch's cache reuse.
    pub cached_tokens: u32,
    /// Prompt tokens of the requests admitted for the first time (a
    /// request preempted and readmitted is not counted again).
    pub first_prompt_tokens: u32,
    /// Of those, found in the prefix cache: the hit rate's numerator, so
    /// a readmitted request hitting its own recomputed pages is no hit.
    pub first_cached_tokens: u32,
    /// Requests held back to share a prefix being computed in the batch.
    pub deferred: u32,
    /// Requests passed over because they did not fit the pages left.
    pub skipped_for_pages: u32,
    /// Running sequences preempted for recomputation.
    pub preempted: u32,
    /// Prefill items in the step.
    pub prefills: u32,
    /// Token slots a padding backend wastes: prefill items × longest chunk
    /// − prefill tokens.
    pub padding_tokens: u32,
}

impl StepPlan {
    /// Padding as a share of the padded prefill batch, in percent.
    pub fn padding_percent(&self) -> f64 {
        let padded = self.prefill_tokens + self.padding_tokens;
        if padded == 0 {
            0.0
        } else {
            100.0 * f64::from(self.padding_tokens) / f64::from(padded)
        }
    }
}

/// A step being planned: what the step's stages share.
pub(super) struct Planning<'p, 'k, 'a> {
    /// The KV cache the step appends to.
    pub(super) kv: &'k mut KvCache<'a>,
    /// Where work items go.
    pub(super) plan: &'p mut [Work],
    /// The step's counts so far.
    pub(super) step: StepPlan,
    /// Tokens left in the step's budget.
    pub(super) budget: u32,
}

impl Planning<'_, '_, '_> {
    /// Whether another item fits: plan room and budget left.
    #[inline]
    pub(super) fn has_room(&self) -> bool {
        self.step.work < self.plan.len() && self.budget > 0
    }

    /// Adds an item (callers check [`has_room`](Self::has_room) and that
    /// its tokens fit the budget) and counts it.
    #[inline]
    pub(super) fn push(&mut self, work: Work) {
        let Some(item) = self.plan.get_mut(self.step.work) else {
            debug_assert!(false, "plan is full");
            return;
        };
        *item = work;
        self.step.work += 1;
        match work.kind {
            WorkKind::Prefill { len, .. } => {
                self.step.prefills += 1;
                self.step.prefill_tokens += len;
            }
            WorkKind::Decode { .. } => self.step.decode_tokens += 1,
        }
        debug_assert!(work.tokens() <= self.budget);
        self.budget = self.budget.saturating_sub(work.tokens());
    }
}
