//! The running list and what a step does for running sequences: cache the
//! prompt pages computed last step, give each decode its token, give each
//! prefill its next chunk, and preempt the lowest-priority sequence when
//! pages run out.
//!
//! The list is kept in priority order (class, then arrival), so decodes are
//! planned highest priority first and the victim of a preemption is always
//! the tail. A victim's pages are released and its request goes back to the
//! waiting set with its original arrival, to be computed again; a running
//! sequence's pages are never evicted.

use super::plan::{Planning, Work, WorkKind};
use super::slots::{Run, State};
use super::{Scheduler, SchedulerPolicy};
use crate::error::AppendError;
use crate::geometry::PAGE_SIZE;
use crate::ids::SeqId;
use crate::kv_cache::KvCache;
use crate::list::List;
use crate::page_table::Appended;
use crate::request::Request;

/// An append the step wants for a running entry.
#[derive(Debug, Clone, Copy)]
struct Growth {
    /// The entry.
    index: u32,
    seq: SeqId,
    tokens: u32,
    /// Whether running out of pages may preempt (else the entry waits).
    may_preempt: bool,
}

impl<R: Request, P: SchedulerPolicy> Scheduler<'_, R, P> {
    fn runs_before(&self, a: u32, b: u32) -> bool {
        let (x, y) = (&self.slots[a as usize], &self.slots[b as usize]);
        (core::cmp::Reverse(x.priority), x.arrival) < (core::cmp::Reverse(y.priority), y.arrival)
    }

    /// Links an entry into the run list after the last entry that runs
    /// before it, walking from the tail (a new entry usually runs last).
    pub(super) fn link_running(&mut self, index: u32) {
        let mut after = self.run.tail();
        while let Some(a) = after {
            if !self.runs_before(index, a) {
                break;
            }
            after = List::<Run>::prev(self.slots, a);
        }
        let linked = match after {
            Some(a) => self.run.insert_after(self.slots, index, a),
            None => self.run.push_front(self.slots, index),
        };
        debug_assert!(linked);
    }

    pub(super) fn unlink_running(&mut self, index: u32) {
        let unlinked = self.run.remove(self.slots, index);
        debug_assert!(unlinked);
        self.slots[index as usize].seq = None;
    }

    /// Caches the full prompt pages running prefills computed so far, so
    /// requests waiting on the same prefix can hit them.
    pub(super) fn cache_computed_prompts(&mut self, kv: &mut KvCache<'_>) {
        let mut cursor = self.run.head();
        while let Some(index) = cursor {
            let slot = &self.slots[index as usize];
            let next = List::<Run>::next(self.slots, index);
            let done = slot.prefilled / PAGE_SIZE as u32 * PAGE_SIZE as u32;
            // `done` is within the prompt as added; `get` keeps it total if
            // the request's prompt changed since.
            if let (Some(seq), Some(computed), true) = (
                slot.seq,
                slot.prompt().get(..done as usize),
                done > slot.cached_upto && slot.shares_pages(),
            ) {
                let cached = kv.cache(seq, computed);
                debug_assert!(cached.is_ok(), "{cached:?}");
                self.slots[index as usize].cached_upto = done;
                // Watch where this prefill grows the cache next.
                if self.policy.cache_aware() {
                    self.score(index, kv.radix());
                }
            }
            cursor = next;
        }
    }

    pub(super) fn plan_decodes(&mut self, p: &mut Planning<'_, '_, '_>) {
        let mut cursor = self.run.head();
        while let Some(index) = cursor.filter(|_| p.has_room()) {
            let slot = &self.slots[index as usize];
            let mut next = List::<Run>::next(self.slots, index);
            let in_decode = slot.prefilled == slot.prompt_len
                && slot.generated >= 1
                && slot.generated < slot.max_output;
            let Some(seq) = slot.seq.filter(|_| in_decode) else {
                cursor = next;
                continue;
            };
            // A decode always gets its page: preempt from the bottom if need be.
            let growth = Growth {
                index,
                seq,
                tokens: 1,
                may_preempt: true,
            };
            if let Some(appended) = self.append_or_preempt(p, growth, &mut next) {
                p.push(Work {
                    entry: self.entry_id(index),
                    seq,
                    kind: WorkKind::Decode {
                        position: appended.first_position,
                    },
                    copies: appended.copies,
                });
            }
            cursor = next;
        }
    }

    pub(super) fn plan_prefill_chunks(&mut self, p: &mut Planning<'_, '_, '_>) {
        let mut cursor = self.run.head();
        while let Some(index) = cursor.filter(|_| p.has_room()) {
            let slot = &self.slots[index as usize];
            let mut next = List::<Run>::next(self.slots, index);
            let (Some(seq), true) = (slot.seq, slot.prefilled < slot.prompt_len) else {
                cursor = next;
                continue;
            };
            let growth = Growth {
                index,
                seq,
                tokens: (slot.prompt_len - slot.prefilled).min(p.budget),
                // Preempt only when nothing else progresses this step (or
                // this would deadlock); otherwise others free pages: wait.
                may_preempt: p.step.work == 0,
            };
            if let Some(appended) = self.append_or_preempt(p, growth, &mut next) {
                let work = self.prefill_item(index, seq, &appended, false);
                p.push(work);
            }
            cursor = next;
        }
    }

    /// The work item for a prefill chunk just appended, advancing the
    /// entry's prefill.
    pub(super) fn prefill_item(
        &mut self,
        index: u32,
        seq: SeqId,
        appended: &Appended,
        first: bool,
    ) -> Work {
        let slot = &mut self.slots[index as usize];
        let (start, len) = (appended.first_position, appended.tokens);
        slot.prefilled = start + len;
        let last = slot.prefilled == slot.prompt_len;
        Work {
            entry: self.entry_id(index),
            seq,
            kind: WorkKind::Prefill {
                start,
                len,
                first,
                last,
            },
            copies: appended.copies,
        }
    }

    /// Appends to a running entry. When the pool is exhausted and the growth
    /// may preempt, preempts from the bottom of the running list until the
    /// append fits or the entry itself was preempted (`None`). `next` is the
    /// caller's place in the list: if the victim was it, nothing follows any
    /// more. Any other refusal is `None` too: `add` caps output at the row's
    /// length.
    fn append_or_preempt(
        &mut self,
        p: &mut Planning<'_, '_, '_>,
        growth: Growth,
        next: &mut Option<u32>,
    ) -> Option<Appended> {
        loop {
            match p.kv.append(growth.seq, growth.tokens) {
                Ok(appended) => return Some(appended),
                Err(AppendError::PoolExhausted { .. }) if growth.may_preempt => {
                    // The growing entry itself runs, so the list is not empty.
                    let victim = self.run.tail()?;
                    if Some(victim) == *next {
                        *next = None;
                    }
                    self.preempt(victim, p.kv);
                    p.step.preempted += 1;
                    if victim == growth.index {
                        return None;
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// Releases a running sequence and puts its request back in line with
    /// its original arrival, to be computed again.
    fn preempt(&mut self, index: u32, kv: &mut KvCache<'_>) {
        if let Some(seq) = self.slots[index as usize].seq.take() {
            let released = kv.release(seq);
            debug_assert!(released.is_ok());
        }
        self.unlink_running(index);
        let s = &mut self.slots[index as usize];
        s.prefilled = 0;
        s.cached_upto = 0;
        s.generated = 0;
        s.state = State::Waiting;
        self.metrics.preemptions += 1;
        self.enter_waiting(index, kv.radix());
    }
}
