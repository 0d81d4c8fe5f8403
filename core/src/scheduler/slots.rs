//! The slot array: one slot per waiting or running request, its id with a
//! generation so a stale id is refused, and the free list.
//!
//! A slot sits on up to three of the scheduler's intrusive lists
//! ([`crate::list`]) at once, one link field each, told apart by tag types:
//! the free [`Stack`](crate::list::Stack) ([`Free`]), the run
//! [`List`](crate::list::List) ([`Run`]) and the step's stack of passed-over
//! waiting entries ([`Skipped`]).

use super::heap::HeapCell;
use super::{SchedError, Scheduler, SchedulerPolicy};
use crate::ids::SeqId;
use crate::list::{Link, ListNode, StackNode, NIL};
use crate::queue::RequestId;
use crate::request::{Priority, Request};
use crate::time::Timestamp;

/// A request inside the scheduler, waiting or running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct EntryId {
    pub(super) slot: u32,
    pub(super) generation: u32,
}

impl EntryId {
    /// The slot index, dense in `0..capacity`: handy for per-request arrays.
    pub const fn index(self) -> u32 {
        self.slot
    }
}

/// Tag of the free stack's links.
#[derive(Debug)]
pub enum Free {}

/// Tag of the run list's links.
#[derive(Debug)]
pub enum Run {}

/// Tag of the links of the entries admission passed over this step.
#[derive(Debug)]
pub enum Skipped {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    Free,
    Waiting,
    Running,
}

/// One request's place in the scheduler. Callers only provide storage
/// (`[SchedSlot::EMPTY; N]`, or a `Vec` of them).
#[derive(Debug)]
pub struct SchedSlot<R> {
    pub(super) request: Option<R>,
    pub(super) state: State,
    pub(super) generation: u32,
    pub(super) id: RequestId,
    pub(super) priority: Priority,
    pub(super) arrival: u64,
    pub(super) arrived_at: Timestamp,
    pub(super) prompt_len: u32,
    pub(super) max_output: u32,
    // Waiting: the score and where the match would grow.
    pub(super) key: f64,
    pub(super) scored_at: u64,
    pub(super) watch: Option<u64>,
    pub(super) watch_prev: u32,
    pub(super) watch_next: u32,
    /// Its cells in the policy and age heaps.
    pub(super) by_policy: HeapCell,
    pub(super) by_age: HeapCell,
    pub(super) skip_next: u32,
    // Running.
    pub(super) seq: Option<SeqId>,
    pub(super) prefilled: u32,
    /// Prompt tokens of this attempt already put in the prefix cache.
    pub(super) cached_upto: u32,
    pub(super) generated: u32,
    pub(super) admitted: bool,
    pub(super) first_token_at: Option<Timestamp>,
    /// Its place in the run list, while running.
    pub(super) run: Link,
    pub(super) next_free: u32,
}

impl<R> SchedSlot<R> {
    /// A slot ready for [`Scheduler::new`].
    pub const EMPTY: Self = Self {
        request: None,
        state: State::Free,
        generation: 0,
        id: RequestId::from_bits(0),
        priority: Priority::Normal,
        arrival: 0,
        arrived_at: Timestamp(0),
        prompt_len: 0,
        max_output: 0,
        key: 0.0,
        scored_at: 0,
        watch: None,
        watch_prev: NIL,
        watch_next: NIL,
        by_policy: HeapCell::EMPTY,
        by_age: HeapCell::EMPTY,
        skip_next: NIL,
        seq: None,
        prefilled: 0,
        cached_upto: 0,
        generated: 0,
        admitted: false,
        first_token_at: None,
        run: Link::UNLINKED,
        next_free: NIL,
    };
}

impl<R> Default for SchedSlot<R> {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl<R> StackNode<Free> for SchedSlot<R> {
    #[inline]
    fn next(&self) -> u32 {
        self.next_free
    }
    #[inline]
    fn set_next(&mut self, next: u32) {
        self.next_free = next;
    }
}

impl<R> ListNode<Run> for SchedSlot<R> {
    #[inline]
    fn link(&self) -> &Link {
        &self.run
    }
    #[inline]
    fn link_mut(&mut self) -> &mut Link {
        &mut self.run
    }
}

impl<R> StackNode<Skipped> for SchedSlot<R> {
    #[inline]
    fn next(&self) -> u32 {
        self.skip_next
    }
    #[inline]
    fn set_next(&mut self, next: u32) {
        self.skip_next = next;
    }
}

impl<R: Request> SchedSlot<R> {
    /// The prompt as it was added: at most `prompt_len` tokens, whatever the
    /// request returns now.
    pub(super) fn prompt(&self) -> &[u32] {
        let prompt = self.request.as_ref().map_or(&[][..], |r| r.prompt());
        prompt.get(..self.prompt_len as usize).unwrap_or(prompt)
    }

    /// Whether the prefix cache may serve the prompt.
    pub(super) fn reuses_prefix(&self) -> bool {
        self.request.as_ref().is_none_or(|r| r.reuses_prefix())
    }

    /// Whether the request's computed pages enter the prefix cache.
    pub(super) fn shares_pages(&self) -> bool {
        self.request.as_ref().is_none_or(|r| r.shares_pages())
    }
}

impl<R, P> Scheduler<'_, R, P> {
    pub(super) fn entry_id(&self, index: u32) -> EntryId {
        EntryId {
            slot: index,
            generation: self.slots[index as usize].generation,
        }
    }

    pub(super) fn live(&self, entry: EntryId) -> Result<&SchedSlot<R>, SchedError> {
        self.slots
            .get(entry.slot as usize)
            .filter(|s| s.generation == entry.generation && s.state != State::Free)
            .ok_or(SchedError::UnknownEntry)
    }

    pub(super) fn live_mut(&mut self, entry: EntryId) -> Result<&mut SchedSlot<R>, SchedError> {
        self.slots
            .get_mut(entry.slot as usize)
            .filter(|s| s.generation == entry.generation && s.state != State::Free)
            .ok_or(SchedError::UnknownEntry)
    }
}

impl<R: Request, P: SchedulerPolicy> Scheduler<'_, R, P> {
    /// Frees a slot that is in no heap and no running list.
    pub(super) fn free_slot(&mut self, index: u32) -> Option<R> {
        self.unwatch(index);
        let s = &mut self.slots[index as usize];
        let request = s.request.take();
        debug_assert!(request.is_some(), "live entries hold a request");
        s.state = State::Free;
        s.generation = s.generation.wrapping_add(1);
        let pushed = self.free.push(self.slots, index);
        debug_assert!(pushed);
        request
    }
}
