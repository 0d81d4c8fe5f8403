//! The one lock the core uses, swapped for `loom`'s under `--cfg loom` so the
//! model checker can explore every interleaving of the queue.

/// A test-and-set spin lock. Not a ticket lock: with more threads than cores,
/// a fair lock stalls everyone behind a waiter the OS has descheduled, while
/// this one lets whoever runs take it. Critical sections are a few dozen
/// instructions. With `std`, waiters yield to the OS instead of spinning.
#[cfg(all(not(loom), feature = "std"))]
pub(crate) type Mutex<T> = spin::mutex::SpinMutex<T, spin::relax::Yield>;

#[cfg(all(not(loom), not(feature = "std")))]
pub(crate) type Mutex<T> = spin::mutex::SpinMutex<T>;

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
