//! The errors of the paged KV cache, one type per kind of operation.
//!
//! Nothing in the cache panics on input; every refusal is one of these and
//! changes nothing. Each operation returns the narrowest type that covers
//! what it can really refuse, so a caller can match exhaustively:
//!
//! | type             | returned by | means |
//! |------------------|-------------|-------|
//! | [`StorageError`] | the constructors (`PagePool::new`, `PageTable::new`, `RadixCache::new`, `RequestQueue::new`) | a configuration mistake, at start-up only |
//! | [`PoolExhausted`]| `PagePool::allocate` | out of pages: preempt, wait, or refuse (429) |
//! | [`PageError`]    | pool operations on one page | the page id or its state is wrong |
//! | [`TableFull`]    | `PageTable::create` | every sequence row is taken |
//! | [`SeqError`]     | page-table reads and `release` | the sequence id or a position is wrong |
//! | [`AppendError`]  | `PageTable::append` | out of pages, or past the row |
//! | [`KvError`]      | operations that compose the others (`create_with_prefix`, `fork`, the prefix cache's `insert`, `lock`, `unlock`) | any run-time refusal |
//!
//! Every run-time type converts into [`KvError`] with `From`, so `?` composes
//! them. All are small `Copy` values, cheap to return from hot paths and to
//! log on embedded targets.

use core::fmt;

/// Why storage handed to a constructor cannot hold the structure. Only
/// constructors return it: it is a configuration mistake, not a run-time
/// refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum StorageError {
    /// A slice that must hold at least one entry is empty (or, for the
    /// request queue, the pool it sizes requests against has no pages).
    Empty,
    /// A slice has more entries than the structure's ids can address.
    TooLarge,
    /// The slices' lengths do not fit together: page-table rows that are not
    /// a whole number of rows, or a radix index that is not a power of two
    /// larger than its node storage.
    Mismatched,
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "storage is empty",
            Self::TooLarge => "storage is larger than its ids can address",
            Self::Mismatched => "storage slices have lengths that do not fit together",
        })
    }
}

impl core::error::Error for StorageError {}

/// Not enough pages are free or evictable for an operation; it changed
/// nothing. What an engine turns into preemption, a wait, or a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PoolExhausted {
    /// Pages the operation needed.
    pub needed: u32,
    /// Pages that were free or evictable at the time.
    pub available: u32,
}

impl fmt::Display for PoolExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "page pool exhausted: needed {} pages, {} free or evictable",
            self.needed, self.available
        )
    }
}

impl core::error::Error for PoolExhausted {}

/// Why the pool refused an operation on one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PageError {
    /// The page id is outside the pool.
    UnknownPage,
    /// The operation needs a page that somebody references, and this one is
    /// free or only cached.
    NotReferenced,
    /// The page's reference count would overflow `u32`.
    TooManyReferences,
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::UnknownPage => "page id is outside the pool",
            Self::NotReferenced => "page is not referenced",
            Self::TooManyReferences => "page reference count would overflow",
        })
    }
}

impl core::error::Error for PageError {}

/// Every sequence row of the page table is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TableFull;

impl fmt::Display for TableFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("every page-table row is in use")
    }
}

impl core::error::Error for TableFull {}

/// Why the page table refused to read or release a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SeqError {
    /// The sequence id was never issued by this table, or was released.
    UnknownSequence,
    /// A token position at or past the sequence's length was asked for.
    PositionOutOfRange {
        /// The sequence's length in tokens.
        len: u32,
    },
}

impl fmt::Display for SeqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownSequence => f.write_str("unknown or released sequence"),
            Self::PositionOutOfRange { len } => write!(
                f,
                "token position out of range for a sequence of {len} tokens"
            ),
        }
    }
}

impl core::error::Error for SeqError {}

/// Why [`PageTable::append`](crate::PageTable::append) refused; the sequence
/// is as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum AppendError {
    /// The sequence id was never issued by this table, or was released.
    UnknownSequence,
    /// The sequence would grow past its page-table row.
    SequenceTooLong {
        /// The most tokens one sequence can hold in this table.
        max_tokens: u32,
    },
    /// Not enough pages are free or evictable for the new tokens.
    PoolExhausted {
        /// Pages the append needed.
        needed: u32,
        /// Pages that were free or evictable at the time.
        available: u32,
    },
}

impl fmt::Display for AppendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        KvError::from(*self).fmt(f)
    }
}

impl core::error::Error for AppendError {}

impl From<PoolExhausted> for AppendError {
    fn from(e: PoolExhausted) -> Self {
        Self::PoolExhausted {
            needed: e.needed,
            available: e.available,
        }
    }
}

/// Why a paged-KV-cache operation that composes others was refused: the
/// union of the run-time errors above. The operation changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum KvError {
    /// Not enough pages are free or evictable for the request.
    PoolExhausted {
        /// Pages the operation needed.
        needed: u32,
        /// Pages that were free or evictable at the time.
        available: u32,
    },
    /// The page id is outside the pool.
    UnknownPage,
    /// The operation needs a page that somebody references, and this one is free
    /// or only cached.
    PageNotReferenced,
    /// A page's reference count would overflow `u32`.
    TooManyReferences,
    /// The sequence id was never issued by this table, or was released.
    UnknownSequence,
    /// Every sequence row of the page table is taken.
    NoFreeSequenceSlot,
    /// The sequence would grow past its page-table row.
    SequenceTooLong {
        /// The most tokens one sequence can hold in this table.
        max_tokens: u32,
    },
    /// The pages are not a path of the prefix cache from its root.
    NotCached,
    /// The tokens given for a sequence do not match what the prefix cache
    /// already holds in its pages.
    TokensMismatch,
    /// A token position at or past the sequence's length was asked for.
    PositionOutOfRange {
        /// The sequence's length in tokens.
        len: u32,
    },
}

impl fmt::Display for KvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::PoolExhausted { needed, available } => PoolExhausted { needed, available }.fmt(f),
            Self::UnknownPage => PageError::UnknownPage.fmt(f),
            Self::PageNotReferenced => PageError::NotReferenced.fmt(f),
            Self::TooManyReferences => PageError::TooManyReferences.fmt(f),
            Self::UnknownSequence => SeqError::UnknownSequence.fmt(f),
            Self::NoFreeSequenceSlot => TableFull.fmt(f),
            Self::SequenceTooLong { max_tokens } => {
                write!(f, "sequence would exceed its row of {max_tokens} tokens")
            }
            Self::NotCached => f.write_str("pages are not a cached path of the prefix cache"),
            Self::TokensMismatch => {
                f.write_str("tokens do not match the pages the prefix cache holds for them")
            }
            Self::PositionOutOfRange { len } => SeqError::PositionOutOfRange { len }.fmt(f),
        }
    }
}

impl core::error::Error for KvError {}

impl From<PoolExhausted> for KvError {
    fn from(e: PoolExhausted) -> Self {
        Self::PoolExhausted {
            needed: e.needed,
            available: e.available,
        }
    }
}

impl From<PageError> for KvError {
    fn from(e: PageError) -> Self {
        match e {
            PageError::UnknownPage => Self::UnknownPage,
            PageError::NotReferenced => Self::PageNotReferenced,
            PageError::TooManyReferences => Self::TooManyReferences,
        }
    }
}

impl From<TableFull> for KvError {
    fn from(_: TableFull) -> Self {
        Self::NoFreeSequenceSlot
    }
}

impl From<SeqError> for KvError {
    fn from(e: SeqError) -> Self {
        match e {
            SeqError::UnknownSequence => Self::UnknownSequence,
            SeqError::PositionOutOfRange { len } => Self::PositionOutOfRange { len },
        }
    }
}

impl From<AppendError> for KvError {
    fn from(e: AppendError) -> Self {
        match e {
            AppendError::UnknownSequence => Self::UnknownSequence,
            AppendError::SequenceTooLong { max_tokens } => Self::SequenceTooLong { max_tokens },
            AppendError::PoolExhausted { needed, available } => {
                Self::PoolExhausted { needed, available }
            }
        }
    }
}
