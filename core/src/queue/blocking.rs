//! Waits that sleep (feature `std`): [`RequestQueue::dequeue`] and
//! [`RequestQueue::dequeue_timeout`]. They only add sleeping to
//! [`RequestQueue::try_dequeue`]; which request comes out is the same.
//!
//! Producers bump an epoch counter after every enqueue and only touch the
//! condition variable when a consumer is asleep, so enqueue stays a spin-lock
//! operation when nobody waits.

// Only compiled with the `std` feature (gated here and in `queue/mod.rs`):
// the default build, which the no-std check links, never sees this module.
#![cfg(feature = "std")]

extern crate std;

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{Dequeued, RequestQueue};
use crate::request::Request;

/// Why a blocking dequeue returned without a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitError {
    /// The timeout passed with the queue empty.
    TimedOut,
    /// The caller's [`WaitToken`] was cancelled.
    Cancelled,
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::TimedOut => "timed out waiting for a request",
            Self::Cancelled => "wait cancelled",
        })
    }
}

impl std::error::Error for WaitError {}

/// The caller's own cancellation of a wait. Cancel it with
/// [`RequestQueue::cancel_wait`], which also wakes the waiter.
#[derive(Debug, Default)]
pub struct WaitToken {
    cancelled: AtomicBool,
}

impl WaitToken {
    /// A token not yet cancelled.
    pub const fn new() -> Self {
        Self {
            cancelled: AtomicBool::new(false),
        }
    }

    /// Whether it was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(SeqCst)
    }
}

/// Wakes sleeping consumers.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    epoch: AtomicU64,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Signal {
    /// After an enqueue (or a cancelled wait): wake whoever sleeps.
    pub(crate) fn notify(&self) {
        self.epoch.fetch_add(1, SeqCst);
        if self.sleepers.load(SeqCst) > 0 {
            // Taking the lock orders this wake after the sleeper's check.
            drop(self.lock.lock().unwrap_or_else(|e| e.into_inner()));
            self.wake.notify_all();
        }
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(SeqCst)
    }

    /// Sleeps until the epoch moves past `seen` or `deadline` passes; false if
    /// the deadline passed first.
    fn sleep_past(&self, seen: u64, deadline: Option<Instant>) -> bool {
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.sleepers.fetch_add(1, SeqCst);
        let moved = loop {
            if self.epoch.load(SeqCst) != seen {
                break true;
            }
            match deadline {
                None => guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break false;
                    }
                    guard = self
                        .wake
                        .wait_timeout(guard, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        };
        self.sleepers.fetch_sub(1, SeqCst);
        moved
    }
}

impl<R: Request> RequestQueue<'_, R> {
    /// Takes the next request, sleeping while the queue is empty, until one
    /// arrives or `token` is cancelled.
    pub fn dequeue(&self, token: &WaitToken) -> Result<Dequeued<R>, WaitError> {
        self.wait_for(None, token)
    }

    /// Takes the next request, sleeping at most `timeout` while the queue is
    /// empty. An empty queue returns [`WaitError::TimedOut`] when the timeout
    /// has passed, not before.
    pub fn dequeue_timeout(
        &self,
        timeout: Duration,
        token: &WaitToken,
    ) -> Result<Dequeued<R>, WaitError> {
        self.wait_for(Some(Instant::now() + timeout), token)
    }

    /// Cancels `token` and wakes every consumer sleeping in this queue, so the
    /// one waiting on `token` returns [`WaitError::Cancelled`].
    pub fn cancel_wait(&self, token: &WaitToken) {
        token.cancelled.store(true, SeqCst);
        self.signal.notify();
    }

    fn wait_for(
        &self,
        deadline: Option<Instant>,
        token: &WaitToken,
    ) -> Result<Dequeued<R>, WaitError> {
        loop {
            if token.is_cancelled() {
                return Err(WaitError::Cancelled);
            }
            let seen = self.signal.epoch();
            if let Some(request) = self.try_dequeue() {
                return Ok(request);
            }
            if !self.signal.sleep_past(seen, deadline) {
                return Err(WaitError::TimedOut);
            }
        }
    }
}
