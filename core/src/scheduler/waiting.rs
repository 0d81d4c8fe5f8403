//! The waiting set: two indexed heaps over the slot array (by policy
//! priority and by age, for the fairness override) and the watch table,
//! which lists waiting requests by the place where the prefix cache would
//! have to grow to extend their match, so an insert rescores only the
//! requests it helps.
//!
//! The policy heap orders by `class + score − rate × arrival`: the age boost
//! `rate × (now − arrival)` differs from that by `rate × now`, the same for
//! everyone, so keys never change while a request waits.
//!
//! The watch table's chains are hand-linked rather than one
//! [`List`](crate::list::List) per bucket: the table is a hash table whose
//! bucket heads the caller hands in as plain `u32`s (`Scheduler::new`'s
//! `watch`), and a chain only ever needs its head (entries are pushed at the
//! head and unlinked from anywhere, the bucket found again from the key; no
//! append, count or backward walk). A `List` head would add a tail and a
//! length, tripling the table (4 to 12 bytes a bucket) and changing the
//! caller's storage type for nothing.

use core::cmp::Ordering;

use super::heap::{HeapCell, HeapOrder};
use super::slots::{SchedSlot, Skipped, State};
use super::{Scheduler, SchedulerPolicy};
use crate::list::{Stack, NIL};
use crate::radix::{Growth, PrefixProbe, RadixCache};
use crate::request::Request;

/// The policy heap: highest key first, then earliest arrival.
#[derive(Debug)]
pub(super) struct ByPolicy;

impl<R> HeapOrder<SchedSlot<R>> for ByPolicy {
    #[inline]
    fn cell(slot: &SchedSlot<R>) -> &HeapCell {
        &slot.by_policy
    }
    #[inline]
    fn cell_mut(slot: &mut SchedSlot<R>) -> &mut HeapCell {
        &mut slot.by_policy
    }
    #[inline]
    fn before(x: &SchedSlot<R>, y: &SchedSlot<R>) -> bool {
        match x.key.total_cmp(&y.key) {
            Ordering::Greater => true,
            Ordering::Less => false,
            Ordering::Equal => x.arrival < y.arrival,
        }
    }
}

/// The age heap: oldest first.
#[derive(Debug)]
pub(super) struct ByAge;

impl<R> HeapOrder<SchedSlot<R>> for ByAge {
    #[inline]
    fn cell(slot: &SchedSlot<R>) -> &HeapCell {
        &slot.by_age
    }
    #[inline]
    fn cell_mut(slot: &mut SchedSlot<R>) -> &mut HeapCell {
        &mut slot.by_age
    }
    #[inline]
    fn before(x: &SchedSlot<R>, y: &SchedSlot<R>) -> bool {
        (x.arrived_at, x.arrival) < (y.arrived_at, y.arrival)
    }
}

impl<R: Request, P: SchedulerPolicy> Scheduler<'_, R, P> {
    pub(super) fn enter_waiting(&mut self, index: u32, radix: &RadixCache<'_>) {
        self.slots[index as usize].state = State::Waiting;
        self.score(index, radix);
        self.by_policy.push(self.slots, index);
        self.by_age.push(self.slots, index);
        self.waiting += 1;
    }

    pub(super) fn leave_waiting(&mut self, index: u32) {
        self.by_policy.remove(self.slots, index);
        self.by_age.remove(self.slots, index);
        // A running prefill keeps its watch key (for in-batch sharing); a
        // finished or cancelled entry's is dropped in `free_slot`.
        self.waiting -= 1;
    }

    /// Takes a waiting entry out of both heaps for the rest of this step,
    /// onto the `skipped` stack.
    pub(super) fn skip(&mut self, index: u32, skipped: &mut Stack<Skipped>) {
        self.by_policy.remove(self.slots, index);
        self.by_age.remove(self.slots, index);
        let pushed = skipped.push(self.slots, index);
        debug_assert!(pushed);
    }

    /// Puts the entries passed over this step back in line, the last
    /// skipped first.
    pub(super) fn requeue_skipped(&mut self, mut skipped: Stack<Skipped>) {
        while let Some(index) = skipped.pop(self.slots) {
            self.by_policy.push(self.slots, index);
            self.by_age.push(self.slots, index);
        }
    }

    /// Computes an entry's match, key and watch without touching heaps.
    /// Policies that ignore the cache skip the lookup.
    pub(super) fn score(&mut self, index: u32, radix: &RadixCache<'_>) {
        self.unwatch(index);
        let s = &self.slots[index as usize];
        let probe = if self.policy.cache_aware() {
            let prompt = s.prompt();
            radix.probe_prefix(prompt.split_last().map_or(&[][..], |(_, rest)| rest))
        } else {
            PrefixProbe::default()
        };
        let score = self.policy.score(probe.tokens, s.prompt_len);
        let age = s
            .arrived_at
            .micros_since(self.epoch.unwrap_or(s.arrived_at)) as f64
            / 1e6;
        let key = self.config.class_weight * s.priority.index() as f64 + score
            - self.config.aging_per_second * age;
        let version = radix.version();
        let s = &mut self.slots[index as usize];
        s.key = key;
        s.scored_at = version;
        s.watch = probe.next_key;
        self.rewatch(index);
    }

    /// Scores a waiting entry again and fixes its heap place.
    pub(super) fn rescore(&mut self, index: u32, radix: &RadixCache<'_>) {
        self.score(index, radix);
        self.by_policy.fix(self.slots, index);
    }

    pub(super) fn rescore_all(&mut self, radix: &RadixCache<'_>) {
        for pos in 0..self.by_policy.len() {
            let index = self.by_policy.at(self.slots, pos);
            self.score(index, radix);
        }
        self.by_policy.heapify(self.slots);
        self.growth_cursor = radix.growth_cursor();
        self.metrics.full_rescores += 1;
    }

    /// Scores again the waiting requests whose match the cache grew under.
    pub(super) fn sync_cache(&mut self, radix: &RadixCache<'_>) {
        if !self.policy.cache_aware() {
            self.growth_cursor = radix.growth_cursor();
            return;
        }
        match radix.growth_since(self.growth_cursor) {
            Growth::Overflowed => self.rescore_all(radix),
            Growth::Keys(keys) => {
                for key in keys {
                    let mut cursor = self.watch[self.watch_bucket(key)];
                    while cursor != NIL {
                        let next = self.slots[cursor as usize].watch_next;
                        let s = &self.slots[cursor as usize];
                        if s.watch == Some(key) && s.state == State::Waiting {
                            self.rescore(cursor, radix);
                            self.metrics.rescored += 1;
                        }
                        cursor = next;
                    }
                }
            }
        }
        self.growth_cursor = radix.growth_cursor();
    }

    /// The key's bucket: its top bits. A one-bucket table shifts by 64,
    /// which `checked_shr` maps to bucket 0 instead of overflowing.
    #[inline]
    fn watch_bucket(&self, key: u64) -> usize {
        key.checked_shr(self.watch_shift).unwrap_or(0) as usize
    }

    fn rewatch(&mut self, index: u32) {
        let Some(key) = self.slots[index as usize].watch else {
            return;
        };
        let bucket = self.watch_bucket(key);
        let head = self.watch[bucket];
        let s = &mut self.slots[index as usize];
        s.watch_prev = NIL;
        s.watch_next = head;
        if head != NIL {
            self.slots[head as usize].watch_prev = index;
        }
        self.watch[bucket] = index;
    }

    pub(super) fn unwatch(&mut self, index: u32) {
        let s = &self.slots[index as usize];
        let Some(key) = s.watch else {
            return;
        };
        let (prev, next) = (s.watch_prev, s.watch_next);
        if prev == NIL {
            let bucket = self.watch_bucket(key);
            self.watch[bucket] = next;
        } else {
            self.slots[prev as usize].watch_next = next;
        }
        if next != NIL {
            self.slots[next as usize].watch_prev = prev;
        }
        let s = &mut self.slots[index as usize];
        s.watch = None;
        s.watch_prev = NIL;
        s.watch_next = NIL;
    }
}
