//! Admission: which waiting requests join the batch this step.
//!
//! First any request waiting past the fairness threshold (oldest first,
//! overriding the policy), then the policy's choice. A candidate's score is
//! confirmed against the cache as it is now (evictions only shorten matches
//! and are not journaled). A request that does not fit the pages left is
//! passed over and lighter ones behind it are admitted; an overdue one that
//! does not fit stops admission instead, so pages free up for it. A request
//! whose next uncached page a running prefill is computing waits for it
//! (`share_prefixes`); an overdue one waiting so stops admission too. Pages
//! that running prefills still need for their remaining chunks are held
//! back.

use super::plan::Planning;
use super::slots::State;
use super::{Scheduler, SchedulerPolicy};
use crate::geometry::PAGE_SIZE;
use crate::list::Stack;
use crate::request::Request;
use crate::time::Timestamp;

impl<R: Request, P: SchedulerPolicy> Scheduler<'_, R, P> {
    pub(super) fn admit(&mut self, now: Timestamp, p: &mut Planning<'_, '_, '_>) {
        let mut reserved = self.reserved_pages(p);
        let threshold = self
            .policy
            .fairness_threshold_us()
            .or(self.config.fairness_threshold_us);
        let mut skipped = Stack::new();
        let mut skips = 0;
        let mut first_prefill_len: Option<u32> = None;
        while self.run.len() < self.config.max_batch
            && p.has_room()
            && skips <= self.config.max_skips
        {
            // The fairness override first, then the policy's choice.
            let oldest = self.by_age.top(self.slots);
            let overdue = oldest.is_some_and(|o| {
                threshold.is_some_and(|t| now.micros_since(self.slots[o as usize].arrived_at) > t)
            });
            let candidate = if overdue {
                oldest
            } else {
                self.by_policy.top(self.slots)
            };
            let Some(candidate) = candidate else {
                break;
            };
            // Confirm the score against the cache as it is now.
            if !overdue
                && self.policy.cache_aware()
                && self.slots[candidate as usize].scored_at != p.kv.radix().version()
            {
                let before = self.slots[candidate as usize].key;
                self.rescore(candidate, p.kv.radix());
                if self.slots[candidate as usize].key < before {
                    continue;
                }
            }
            // Wait a step for a prefix another running request is computing.
            // An overdue request waits too, and admission stops behind it
            // (nobody passes it): otherwise, once a burst of requests is
            // overdue, they are all admitted at once and each computes the
            // prefix they share (the bench's few-shot run lost 3 of its 39
            // points of offline-optimal hit rate that way).
            // (Not a request the cache may not serve: it would gain nothing.)
            if self.config.share_prefixes
                && self.policy.cache_aware()
                && self.slots[candidate as usize].reuses_prefix()
                && self.shares_inflight_prefix(candidate)
            {
                if overdue {
                    p.step.deferred += 1;
                    self.metrics.shared_prefix_deferrals += 1;
                    break;
                }
                self.skip(candidate, &mut skipped);
                p.step.deferred += 1;
                self.metrics.shared_prefix_deferrals += 1;
                skips += 1;
                continue;
            }
            let slot = &self.slots[candidate as usize];
            let admission = if slot.reuses_prefix() {
                p.kv.peek_admission(slot.prompt())
            } else {
                p.kv.peek_admission_uncached(slot.prompt())
            };
            let matched = admission.matched_tokens();
            let chunk = slot.prompt_len.saturating_sub(matched).min(p.budget);
            if let (Some(factor), Some(first)) = (self.config.length_grouping, first_prefill_len) {
                let (lo, hi) = (first.min(chunk) as f32, first.max(chunk) as f32);
                if !overdue && hi > lo * factor {
                    self.skip(candidate, &mut skipped);
                    skips += 1;
                    continue;
                }
            }
            let available = u64::from(p.kv.pool().available_pages()).saturating_sub(reserved);
            if admission.pages_needed() > available {
                // Hold the pages that free up for an overdue request, unless
                // even the whole pool could never hold it.
                if overdue && admission.whole_pages() <= u64::from(p.kv.pool().total_pages()) {
                    break;
                }
                self.skip(candidate, &mut skipped);
                p.step.skipped_for_pages += 1;
                skips += 1;
                continue;
            }
            // Admit: share the cached prefix, append the first chunk.
            let admitted = match p.kv.admit(slot.prompt(), &admission, chunk) {
                Ok(admitted) => admitted,
                Err(crate::KvError::NoFreeSequenceSlot) => break,
                Err(_) => {
                    self.skip(candidate, &mut skipped);
                    skips += 1;
                    continue;
                }
            };
            let seq = admitted.seq;
            self.leave_waiting(candidate);
            let s = &mut self.slots[candidate as usize];
            s.state = State::Running;
            s.seq = Some(seq);
            s.prefilled = matched;
            s.cached_upto = matched;
            s.generated = 0;
            let (wait, first_time, prompt_len) =
                (now.micros_since(s.arrived_at), !s.admitted, s.prompt_len);
            s.admitted = true;
            // Keep watching: the key is where this request's computed pages
            // will grow the cache, which the in-batch sharing check reads.
            self.link_running(candidate);
            reserved += p.kv.pages_short(seq, u64::from(prompt_len) + 1);
            let work = self.prefill_item(candidate, seq, &admitted.appended, true);
            p.push(work);
            first_prefill_len.get_or_insert(chunk);
            p.step.admitted += 1;
            p.step.cached_tokens += matched;
            if overdue {
                p.step.overdue_admitted += 1;
                self.metrics.fairness_overrides += 1;
            }
            // The hit rate counts each request once, at its first
            // admission: a preempted request readmitted finds its own
            // recomputed pages, which no other policy's order would miss.
            if first_time {
                self.metrics.wait.record(wait);
                p.step.first_prompt_tokens += prompt_len;
                p.step.first_cached_tokens += matched;
                self.metrics.prompt_tokens += u64::from(prompt_len);
                self.metrics.cached_tokens += u64::from(matched);
            }
        }
        self.requeue_skipped(skipped);
    }

    /// Pages promised to running prefills for their remaining chunks (and
    /// first output token).
    fn reserved_pages(&self, p: &Planning<'_, '_, '_>) -> u64 {
        let mut reserved = 0;
        for index in self.run.iter(self.slots) {
            let s = &self.slots[index as usize];
            if let Some(seq) = s.seq {
                reserved += p.kv.pages_short(seq, u64::from(s.prompt_len) + 1);
            }
        }
        reserved
    }

    /// Whether a running prefill is computing the page this waiting request
    /// would match next.
    fn shares_inflight_prefix(&self, candidate: u32) -> bool {
        let Some(key) = self.slots[candidate as usize].watch else {
            return false;
        };
        self.run.iter(self.slots).any(|index| {
            let s = &self.slots[index as usize];
            // Its prompt pages are not all cached yet (those computed in the
            // last step are cached at the start of the next).
            let uncached = (s.cached_upto / PAGE_SIZE as u32) < s.prompt_len / PAGE_SIZE as u32;
            uncached && s.watch == Some(key)
        })
    }
}
