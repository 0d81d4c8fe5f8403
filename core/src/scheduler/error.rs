//! Why the scheduler refuses a request, an entry id or its setup.

use core::fmt;

use super::policy::ConfigError;
use crate::error::StorageError;

/// Why the scheduler refused a request or an entry id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum SchedError {
    /// Every scheduler slot holds a waiting or running request.
    Full,
    /// The prompt has no tokens.
    EmptyPrompt,
    /// The prompt does not fit a page-table row or the pool.
    TooLong,
    /// The entry id is unknown or its request already left.
    UnknownEntry,
    /// The entry is waiting, and the operation needs a running one.
    NotRunning,
    /// The caller's storage is unusable, from
    /// [`Scheduler::new`](super::Scheduler::new) only: no slots or an empty
    /// watch table ([`StorageError::Empty`]), more slots than entry ids
    /// address or a watch table over 2³² buckets
    /// ([`StorageError::TooLarge`]), a watch table whose length is not a
    /// power of two ([`StorageError::Mismatched`]).
    Storage(StorageError),
    /// The configuration is invalid.
    Config(ConfigError),
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full => f.write_str("scheduler is full"),
            Self::EmptyPrompt => f.write_str("request has an empty prompt"),
            Self::TooLong => f.write_str("prompt does not fit a sequence row or the KV pool"),
            Self::UnknownEntry => f.write_str("unknown scheduler entry"),
            Self::NotRunning => f.write_str("request is not running"),
            Self::Storage(e) => write!(f, "invalid scheduler storage: {e}"),
            Self::Config(e) => write!(f, "invalid scheduler configuration: {e}"),
        }
    }
}

impl core::error::Error for SchedError {}

impl From<StorageError> for SchedError {
    fn from(e: StorageError) -> Self {
        Self::Storage(e)
    }
}

impl From<ConfigError> for SchedError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}
