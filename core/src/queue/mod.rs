//! The request queue: the thread-safe intake between the clients that submit
//! requests and the engine that schedules them.
//!
//! Many producers, one consumer. Requests wait in four priority classes,
//! first in, first out within a class. Unlike a heap with lazy tombstones, every
//! class is an intrusive doubly linked [`List`] over the
//! caller's slots, so
//! cancelling or removing a request unlinks it at once in O(1): `len` counts
//! exactly the requests that can still be handed out, and nothing cancelled is
//! ever returned.
//!
//! Request ids are issued by the queue (slot and generation), so `contains`
//! is one slot read and a stale id can never name a newer request. The lock is
//! a spin lock from `spin`, held for a few dozen instructions per call; with
//! the `std` feature its waiters yield to the OS, and the `blocking` module
//! (also behind `std`, so named here in plain text) adds waits that sleep.
//!
//! ```
//! use pagoda_core::{KvDtype, KvGeometry, Priority, QueueSlot, Request, RequestQueue, Timestamp};
//!
//! #[derive(Debug)]
//! struct Prompt(Vec<u32>);
//! impl Request for Prompt {
//!     fn prompt(&self) -> &[u32] { &self.0 }
//!     fn max_output_tokens(&self) -> u32 { 16 }
//! }
//!
//! let geometry = KvGeometry::new(2, 2, 64, KvDtype::F16).unwrap();
//! let mut slots: Vec<QueueSlot<Prompt>> = (0..8).map(|_| QueueSlot::EMPTY).collect();
//! let queue = RequestQueue::new(&mut slots, geometry, 64).unwrap();
//!
//! let now = Timestamp::from_millis(1);
//! queue.enqueue(Prompt(vec![1; 40]), Priority::Normal, now).unwrap();
//! let urgent = queue.enqueue(Prompt(vec![2; 8]), Priority::High, now).unwrap();
//! assert_eq!(queue.len(), 2);
//!
//! // The high-priority request comes out first.
//! assert_eq!(queue.try_dequeue().unwrap().id, urgent);
//! assert_eq!(queue.len(), 1);
//! ```

#[cfg(feature = "std")]
pub mod blocking;

use core::fmt;

use crate::error::StorageError;
use crate::geometry::KvGeometry;
use crate::list::{Link, List, ListNode, Stack, StackNode, NIL};
use crate::request::{Priority, Request};
use crate::sync::Mutex;
use crate::time::Timestamp;

/// A request's id, issued by [`RequestQueue::enqueue`]. Ids of removed or
/// handed-out requests never match a later request in the same slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RequestId {
    slot: u32,
    generation: u32,
}

impl RequestId {
    /// The id as one number, for logs and wire formats.
    pub const fn to_bits(self) -> u64 {
        ((self.generation as u64) << 32) | self.slot as u64
    }

    /// The id from [`to_bits`](Self::to_bits).
    pub const fn from_bits(bits: u64) -> Self {
        Self {
            slot: bits as u32,
            generation: (bits >> 32) as u32,
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "req-{}.{}", self.slot, self.generation)
    }
}

/// Why [`RequestQueue::enqueue`] refused a request. The request comes back
/// with the error, so nothing is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum QueueError {
    /// The prompt has no tokens: there is nothing to run.
    EmptyPrompt,
    /// Prompt plus reserved output does not fit the whole KV pool, so it could
    /// never be scheduled.
    TooLarge {
        /// Pages the request needs.
        pages: u64,
        /// Pages in the pool.
        pool_pages: u32,
    },
    /// Every queue slot holds a waiting request.
    Full,
}

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::EmptyPrompt => f.write_str("request has an empty prompt"),
            Self::TooLarge { pages, pool_pages } => write!(
                f,
                "request needs {pages} KV pages but the whole pool has {pool_pages}"
            ),
            Self::Full => f.write_str("request queue is full"),
        }
    }
}

impl core::error::Error for QueueError {}

/// A refused request, handed back with the reason.
#[derive(Debug)]
pub struct Rejected<R> {
    /// Why it was refused.
    pub error: QueueError,
    /// The request, untouched.
    pub request: R,
}

/// A request taken out of the queue.
#[derive(Debug)]
pub struct Dequeued<R> {
    /// Its id.
    pub id: RequestId,
    /// The request.
    pub request: R,
    /// Its class.
    pub priority: Priority,
    /// When it was enqueued.
    pub enqueued_at: Timestamp,
    /// Arrival order across all classes (a counter, never reused).
    pub arrival: u64,
    /// Its KV footprint in bytes (see [`RequestQueue::footprint`]).
    pub footprint_bytes: u64,
}

/// What [`RequestQueue::get_requests`] took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Selection {
    /// Requests written to the front of the output.
    pub count: usize,
    /// Their KV footprint in bytes.
    pub bytes: u64,
}

/// Counters over the queue's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct QueueStats {
    /// Requests accepted.
    pub enqueued: u64,
    /// Requests refused at enqueue.
    pub rejected: u64,
    /// Requests handed to the consumer.
    pub dequeued: u64,
    /// Requests cancelled while waiting.
    pub cancelled: u64,
    /// Requests removed while waiting (including by `clear`).
    pub removed: u64,
}

/// One request's place in the queue. Callers only provide storage
/// (`[QueueSlot::EMPTY; N]`, or a `Vec` built with `QueueSlot::EMPTY`).
#[derive(Debug)]
pub struct QueueSlot<R> {
    request: Option<R>,
    generation: u32,
    priority: Priority,
    /// On its class's list while waiting, on the free list (`next` only)
    /// while empty.
    link: Link,
    arrival: u64,
    enqueued_at: Timestamp,
    footprint: u64,
}

impl<R> QueueSlot<R> {
    /// A slot ready for [`RequestQueue::new`].
    pub const EMPTY: Self = Self {
        request: None,
        generation: 0,
        priority: Priority::Normal,
        link: Link::UNLINKED,
        arrival: 0,
        enqueued_at: Timestamp(0),
        footprint: 0,
    };
}

impl<R> Default for QueueSlot<R> {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl<R> ListNode for QueueSlot<R> {
    #[inline]
    fn link(&self) -> &Link {
        &self.link
    }

    #[inline]
    fn link_mut(&mut self) -> &mut Link {
        &mut self.link
    }
}

impl<R> StackNode for QueueSlot<R> {
    #[inline]
    fn next(&self) -> u32 {
        self.link.next
    }

    #[inline]
    fn set_next(&mut self, next: u32) {
        self.link.next = next;
    }
}

/// Everything the lock protects.
#[derive(Debug)]
struct State<'s, R> {
    slots: &'s mut [QueueSlot<R>],
    classes: [List; Priority::COUNT],
    free: Stack,
    len: usize,
    next_arrival: u64,
    stats: QueueStats,
}

/// The thread-safe request intake over caller-provided slots; see the
/// [module docs](self).
pub struct RequestQueue<'s, R> {
    state: Mutex<State<'s, R>>,
    geometry: KvGeometry,
    pool_pages: u32,
    output_reserve: u32,
    #[cfg(feature = "std")]
    signal: blocking::Signal,
}

impl<R> fmt::Debug for RequestQueue<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestQueue")
            .field("geometry", &self.geometry)
            .field("pool_pages", &self.pool_pages)
            .field("output_reserve", &self.output_reserve)
            .finish_non_exhaustive()
    }
}

impl<'s, R: Request> RequestQueue<'s, R> {
    /// An empty queue that holds up to `slots.len()` waiting requests, for a
    /// model with `geometry` and a KV pool of `pool_pages` pages. Each
    /// request's footprint reserves all its `max_output_tokens`; see
    /// [`with_output_reserve`](Self::with_output_reserve) to cap that.
    ///
    /// Fails with [`StorageError::Empty`] if `slots` is empty or
    /// `pool_pages` is zero, or [`StorageError::TooLarge`] if `slots` has
    /// 2^32 − 1 entries or more.
    pub fn new(
        slots: &'s mut [QueueSlot<R>],
        geometry: KvGeometry,
        pool_pages: u32,
    ) -> Result<Self, StorageError> {
        let n = slots.len();
        if n == 0 || pool_pages == 0 {
            return Err(StorageError::Empty);
        }
        if n >= NIL as usize {
            return Err(StorageError::TooLarge);
        }
        for slot in slots.iter_mut() {
            slot.request = None;
            slot.link = Link::UNLINKED;
        }
        let free = Stack::with_all(slots);
        Ok(Self {
            state: Mutex::new(State {
                slots,
                classes: [List::new(); Priority::COUNT],
                free,
                len: 0,
                next_arrival: 0,
                stats: QueueStats::default(),
            }),
            geometry,
            pool_pages,
            output_reserve: u32::MAX,
            #[cfg(feature = "std")]
            signal: blocking::Signal::default(),
        })
    }

    /// Caps the output tokens a request's footprint reserves (requests with a
    /// larger `max_output_tokens` are admitted on this estimate and grow, or
    /// are preempted, later).
    pub fn with_output_reserve(mut self, tokens: u32) -> Self {
        self.output_reserve = tokens;
        self
    }

    /// A request's KV footprint in pages: prompt plus reserved output tokens,
    /// rounded up to whole pages.
    pub fn footprint_pages(&self, request: &R) -> u64 {
        let tokens = request.prompt().len() as u64
            + u64::from(request.max_output_tokens().min(self.output_reserve));
        KvGeometry::pages_for_tokens(tokens)
    }

    /// A request's KV footprint in bytes: [`footprint_pages`](Self::footprint_pages)
    /// × bytes per page.
    pub fn footprint(&self, request: &R) -> u64 {
        self.footprint_pages(request)
            .saturating_mul(self.geometry.bytes_per_page())
    }

    /// Adds a request at the back of its class. Refuses, handing the request
    /// back, an empty prompt, a request larger than the whole pool, or a full
    /// queue.
    pub fn enqueue(
        &self,
        request: R,
        priority: Priority,
        now: Timestamp,
    ) -> Result<RequestId, Rejected<R>> {
        let check = if request.prompt().is_empty() {
            Err(QueueError::EmptyPrompt)
        } else {
            let pages = self.footprint_pages(&request);
            if pages > u64::from(self.pool_pages) {
                Err(QueueError::TooLarge {
                    pages,
                    pool_pages: self.pool_pages,
                })
            } else {
                Ok(self.footprint(&request))
            }
        };
        let mut state = self.state.lock();
        let State { slots, free, .. } = &mut *state;
        let (footprint, index) = match check.and_then(|bytes| {
            let index = free.pop(slots).ok_or(QueueError::Full)?;
            Ok((bytes, index))
        }) {
            Ok(taken) => taken,
            Err(error) => {
                state.stats.rejected += 1;
                return Err(Rejected { error, request });
            }
        };
        let arrival = state.next_arrival;
        state.next_arrival += 1;
        let slot = &mut state.slots[index as usize];
        slot.request = Some(request);
        slot.priority = priority;
        slot.arrival = arrival;
        slot.enqueued_at = now;
        slot.footprint = footprint;
        let id = RequestId {
            slot: index,
            generation: slot.generation,
        };
        state.push_back(index);
        state.len += 1;
        state.stats.enqueued += 1;
        drop(state);
        #[cfg(feature = "std")]
        self.signal.notify();
        Ok(id)
    }

    /// Takes the first request of the highest non-empty class, without
    /// waiting.
    pub fn try_dequeue(&self) -> Option<Dequeued<R>> {
        let mut state = self.state.lock();
        let head = Priority::HIGHEST_FIRST
            .iter()
            .find_map(|p| state.classes[p.index()].head())?;
        let taken = state.take(head);
        if taken.is_some() {
            state.stats.dequeued += 1;
        }
        taken
    }

    /// Takes up to `max_count` requests (and at most `out.len()`) in priority
    /// order whose footprints together fit `memory_budget` bytes, writing them
    /// to the front of `out`. A request that does not fit is passed over and
    /// lighter ones behind it are still taken (no head-of-line blocking); it
    /// keeps its place for the next call.
    pub fn get_requests(
        &self,
        max_count: usize,
        memory_budget: u64,
        out: &mut [Option<Dequeued<R>>],
    ) -> Selection {
        let max_count = max_count.min(out.len());
        let smallest = self.geometry.bytes_per_page();
        let mut picked = Selection::default();
        let mut state = self.state.lock();
        'classes: for class in Priority::HIGHEST_FIRST {
            let mut next = state.classes[class.index()].head();
            while let Some(cursor) = next {
                if picked.count == max_count || memory_budget - picked.bytes < smallest {
                    break 'classes;
                }
                next = List::next(state.slots, cursor);
                let slot = &state.slots[cursor as usize];
                if slot.footprint <= memory_budget - picked.bytes {
                    picked.bytes += slot.footprint;
                    out[picked.count] = state.take(cursor);
                    picked.count += 1;
                    state.stats.dequeued += 1;
                }
            }
        }
        picked
    }

    /// Removes a waiting request and hands it back; `None` if the id is not
    /// waiting (never issued, already handed out, cancelled or removed).
    pub fn remove(&self, id: RequestId) -> Option<R> {
        let mut state = self.state.lock();
        let taken = state.take_id(id)?;
        state.stats.removed += 1;
        Some(taken.request)
    }

    /// Cancels a waiting request: it is unlinked now, so it is never handed
    /// out and no count includes it. Hands the request back so its client can
    /// be told; `None` if it was not waiting.
    pub fn mark_cancelled(&self, id: RequestId) -> Option<R> {
        let mut state = self.state.lock();
        let taken = state.take_id(id)?;
        state.stats.cancelled += 1;
        Some(taken.request)
    }

    /// A handle that cancels request `id` of this queue.
    pub fn cancel_handle(&self, id: RequestId) -> CancelHandle<'_, 's, R> {
        CancelHandle { queue: self, id }
    }

    /// Whether `id` is waiting.
    pub fn contains(&self, id: RequestId) -> bool {
        let state = self.state.lock();
        state.live_slot(id).is_some()
    }

    /// Removes every waiting request, dropping them.
    pub fn clear(&self) {
        let mut state = self.state.lock();
        for class in Priority::HIGHEST_FIRST {
            while let Some(head) = state.classes[class.index()].head() {
                drop(state.take(head));
                state.stats.removed += 1;
            }
        }
    }

    /// Requests waiting now: exact, never counting a cancelled one.
    pub fn len(&self) -> usize {
        self.state.lock().len
    }

    /// Whether no request is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Requests the queue can hold.
    pub fn capacity(&self) -> usize {
        self.state.lock().slots.len()
    }

    /// Lifetime counters.
    pub fn stats(&self) -> QueueStats {
        self.state.lock().stats
    }
}

impl<R> Drop for RequestQueue<'_, R> {
    /// Drops every waiting request, so the caller's slots hold nothing after
    /// the queue is gone.
    fn drop(&mut self) {
        // We own the queue exclusively, so this lock never waits.
        let mut state = self.state.lock();
        for slot in state.slots.iter_mut() {
            slot.request = None;
        }
    }
}

impl<R> State<'_, R> {
    fn live_slot(&self, id: RequestId) -> Option<&QueueSlot<R>> {
        self.slots
            .get(id.slot as usize)
            .filter(|s| s.generation == id.generation && s.request.is_some())
    }

    fn take_id(&mut self, id: RequestId) -> Option<Dequeued<R>> {
        self.live_slot(id)?;
        self.take(id.slot)
    }

    fn push_back(&mut self, index: u32) {
        let class = self.slots[index as usize].priority.index();
        let pushed = self.classes[class].push_back(self.slots, index);
        debug_assert!(pushed);
    }

    /// Unlinks a waiting slot, frees it and returns its request.
    fn take(&mut self, index: u32) -> Option<Dequeued<R>> {
        let slot = self.slots.get_mut(index as usize)?;
        let request = slot.request.take()?;
        let taken = Dequeued {
            id: RequestId {
                slot: index,
                generation: slot.generation,
            },
            request,
            priority: slot.priority,
            enqueued_at: slot.enqueued_at,
            arrival: slot.arrival,
            footprint_bytes: slot.footprint,
        };
        slot.generation = slot.generation.wrapping_add(1);
        self.classes[taken.priority.index()].remove(self.slots, index);
        self.free.push(self.slots, index);
        self.len -= 1;
        Some(taken)
    }
}

/// Cancels one request of a queue: what a client holds while its request
/// waits. Cancelling after the request was handed out does nothing.
#[derive(Debug)]
pub struct CancelHandle<'q, 's, R> {
    queue: &'q RequestQueue<'s, R>,
    id: RequestId,
}

impl<R: Request> CancelHandle<'_, '_, R> {
    /// The request this handle cancels.
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// Cancels the request if it still waits, handing it back.
    pub fn cancel(&self) -> Option<R> {
        self.queue.mark_cancelled(self.id)
    }
}
