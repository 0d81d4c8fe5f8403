//! The one lock the core uses, swapped for `loom`'s under `--cfg loom` so the
//! model checker can explore every interleaving of the queue.

#[cfg(not(loom))]
pub(crate) use spin::Mutex;

/// `loom`'s mutex behind the same `lock()` as `spin`'s.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(loom::sync::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        // A panic while holding the lock is a bug the model run reports anyway.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
