//! Why the scheduler refuses a request, an entry id or its setup.

use core::fmt;

use super::policy::ConfigError;

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
    /// The caller's storage is unusable (empty slots, a watch table that is
    /// not a power of two).
    InvalidStorage,
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
            Self::InvalidStorage => f.write_str("invalid scheduler storage"),
            Self::Config(e) => write!(f, "invalid scheduler configuration: {e}"),
        }
    }
}

impl From<ConfigError> for SchedError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}
