//! Intrusive lists over the caller's entry arrays: one implementation of the
//! index-linked lists that the pool, the page table, the prefix cache, the
//! request queue and the scheduler keep.
//!
//! Entries live in a slice the caller owns and are named by their index. The
//! links live inside the entries (a [`Link`] field, reached through
//! [`ListNode`]), so one entry array can carry several lists at once, every
//! operation is O(1) and nothing allocates. [`u32::MAX`] ([`NIL`]) is the
//! "no entry" sentinel, so the links cost 4 bytes each.
//!
//! Two shapes:
//!
//! - [`List`], doubly linked: push at either end, insert before or after a
//!   given entry, remove any entry, pop, iterate both ways. For orders that
//!   entries leave from the middle (LRU, priority classes, the run list).
//! - [`Stack`], singly linked: push and pop at the head. For free lists,
//!   where a pop must touch only the popped entry (a doubly linked pop would
//!   also write the next entry's back link: one more cache line on the
//!   allocation path).
//!
//! A list is a small `Copy` head; the entry array is passed to each
//! operation. A list never panics: an index outside the array is refused
//! (`false` or `None`) and changes nothing. Which list an entry is on is the
//! caller's bookkeeping (entries carry a state for that); linking an entry
//! twice or removing one from a list it is not on breaks the order, and is
//! caught by `debug_assert!`s where it can be seen in O(1).

use core::fmt;
use core::marker::PhantomData;

/// The "no entry" index.
pub const NIL: u32 = u32::MAX;

/// An entry's place in one doubly linked [`List`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Link {
    /// The entry before, or [`NIL`] at the head.
    pub prev: u32,
    /// The entry after, or [`NIL`] at the tail.
    pub next: u32,
}

impl Link {
    /// Not on any list.
    pub const UNLINKED: Self = Self {
        prev: NIL,
        next: NIL,
    };
}

impl Default for Link {
    fn default() -> Self {
        Self::UNLINKED
    }
}

/// An entry type that carries a [`Link`] for the lists tagged `K`. An entry on
/// several lists at once implements it once per tag (any type works as a
/// tag; `()` is the default for entries on one list).
pub trait ListNode<K = ()> {
    /// The entry's links for lists of tag `K`.
    fn link(&self) -> &Link;
    /// The same, to change.
    fn link_mut(&mut self) -> &mut Link;
}

/// An entry type that carries the one forward link of a [`Stack`] tagged `K`.
pub trait StackNode<K = ()> {
    /// The entry below this one, or [`NIL`].
    fn next(&self) -> u32;
    /// Sets the entry below this one.
    fn set_next(&mut self, next: u32);
}

/// A doubly linked list of entries of one array: its head, tail and length.
pub struct List<K = ()> {
    head: u32,
    tail: u32,
    len: u32,
    tag: PhantomData<fn() -> K>,
}

impl<K> Clone for List<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for List<K> {}

impl<K> Default for List<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for List<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("List")
            .field("head", &self.head)
            .field("tail", &self.tail)
            .field("len", &self.len)
            .finish()
    }
}

impl<K> List<K> {
    /// An empty list.
    pub const fn new() -> Self {
        Self {
            head: NIL,
            tail: NIL,
            len: 0,
            tag: PhantomData,
        }
    }

    /// The first entry.
    #[inline]
    pub fn head(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// The last entry.
    #[inline]
    pub fn tail(&self) -> Option<u32> {
        (self.tail != NIL).then_some(self.tail)
    }

    /// Entries on the list.
    #[inline]
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the list is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// The entry after `index` on its list, if any.
    #[inline]
    pub fn next<E: ListNode<K>>(entries: &[E], index: u32) -> Option<u32> {
        let next = entries.get(index as usize)?.link().next;
        (next != NIL).then_some(next)
    }

    /// The entry before `index` on its list, if any.
    #[inline]
    pub fn prev<E: ListNode<K>>(entries: &[E], index: u32) -> Option<u32> {
        let prev = entries.get(index as usize)?.link().prev;
        (prev != NIL).then_some(prev)
    }

    /// Appends `index` at the tail. `false`, changing nothing, if it is
    /// outside `entries`.
    #[inline]
    pub fn push_back<E: ListNode<K>>(&mut self, entries: &mut [E], index: u32) -> bool {
        let tail = self.tail;
        self.link_between(entries, index, tail, NIL)
    }

    /// Puts `index` at the head. `false`, changing nothing, if it is outside
    /// `entries`.
    #[inline]
    pub fn push_front<E: ListNode<K>>(&mut self, entries: &mut [E], index: u32) -> bool {
        let head = self.head;
        self.link_between(entries, index, NIL, head)
    }

    /// Links `index` just before `before`, an entry of this list. `false`,
    /// changing nothing, if either is outside `entries` or they are the same.
    #[inline]
    pub fn insert_before<E: ListNode<K>>(
        &mut self,
        entries: &mut [E],
        index: u32,
        before: u32,
    ) -> bool {
        match entries.get(before as usize) {
            Some(b) if before != index => {
                let prev = b.link().prev;
                self.link_between(entries, index, prev, before)
            }
            _ => false,
        }
    }

    /// Links `index` just after `after`, an entry of this list. `false`,
    /// changing nothing, if either is outside `entries` or they are the same.
    #[inline]
    pub fn insert_after<E: ListNode<K>>(
        &mut self,
        entries: &mut [E],
        index: u32,
        after: u32,
    ) -> bool {
        match entries.get(after as usize) {
            Some(a) if after != index => {
                let next = a.link().next;
                self.link_between(entries, index, after, next)
            }
            _ => false,
        }
    }

    /// Unlinks `index`, an entry of this list, and clears its links. `false`,
    /// changing nothing, if it is outside `entries`.
    #[inline]
    pub fn remove<E: ListNode<K>>(&mut self, entries: &mut [E], index: u32) -> bool {
        let Some(e) = entries.get_mut(index as usize) else {
            return false;
        };
        let Link { prev, next } = *e.link();
        *e.link_mut() = Link::UNLINKED;
        match prev {
            NIL => {
                debug_assert_eq!(self.head, index, "removing an entry not on this list");
                self.head = next;
            }
            _ => Self::set_next(entries, prev, next),
        }
        match next {
            NIL => {
                debug_assert_eq!(self.tail, index, "removing an entry not on this list");
                self.tail = prev;
            }
            _ => Self::set_prev(entries, next, prev),
        }
        debug_assert!(self.len > 0);
        self.len = self.len.wrapping_sub(1);
        true
    }

    /// Unlinks and returns the head.
    #[inline]
    pub fn pop_front<E: ListNode<K>>(&mut self, entries: &mut [E]) -> Option<u32> {
        let head = self.head()?;
        self.remove(entries, head).then_some(head)
    }

    /// The entries from head to tail (reversible).
    pub fn iter<'e, E: ListNode<K>>(&self, entries: &'e [E]) -> Iter<'e, E, K> {
        Iter {
            entries,
            front: self.head,
            back: self.tail,
            left: self.len,
            tag: PhantomData,
        }
    }

    #[inline]
    fn link_between<E: ListNode<K>>(
        &mut self,
        entries: &mut [E],
        index: u32,
        prev: u32,
        next: u32,
    ) -> bool {
        let Some(e) = entries.get_mut(index as usize) else {
            return false;
        };
        *e.link_mut() = Link { prev, next };
        match prev {
            NIL => self.head = index,
            _ => Self::set_next(entries, prev, index),
        }
        match next {
            NIL => self.tail = index,
            _ => Self::set_prev(entries, next, index),
        }
        self.len += 1;
        true
    }

    #[inline]
    fn set_next<E: ListNode<K>>(entries: &mut [E], index: u32, next: u32) {
        match entries.get_mut(index as usize) {
            Some(e) => e.link_mut().next = next,
            None => debug_assert!(false, "list link outside the entries"),
        }
    }

    #[inline]
    fn set_prev<E: ListNode<K>>(entries: &mut [E], index: u32, prev: u32) {
        match entries.get_mut(index as usize) {
            Some(e) => e.link_mut().prev = prev,
            None => debug_assert!(false, "list link outside the entries"),
        }
    }
}

/// The entries of a [`List`], from [`List::iter`]. Do not change the list
/// while iterating; collect first, or walk with [`List::next`].
pub struct Iter<'e, E, K = ()> {
    entries: &'e [E],
    front: u32,
    back: u32,
    left: u32,
    tag: PhantomData<fn() -> K>,
}

impl<E: ListNode<K>, K> Iterator for Iter<'_, E, K> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        if self.left == 0 {
            return None;
        }
        let index = self.front;
        self.front = self.entries.get(index as usize)?.link().next;
        self.left -= 1;
        Some(index)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left as usize))
    }
}

impl<E: ListNode<K>, K> DoubleEndedIterator for Iter<'_, E, K> {
    #[inline]
    fn next_back(&mut self) -> Option<u32> {
        if self.left == 0 {
            return None;
        }
        let index = self.back;
        self.back = self.entries.get(index as usize)?.link().prev;
        self.left -= 1;
        Some(index)
    }
}

/// A singly linked stack of entries of one array (a free list): its head
/// and length.
pub struct Stack<K = ()> {
    head: u32,
    len: u32,
    tag: PhantomData<fn() -> K>,
}

impl<K> Clone for Stack<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Stack<K> {}

impl<K> Default for Stack<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for Stack<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stack")
            .field("head", &self.head)
            .field("len", &self.len)
            .finish()
    }
}

impl<K> Stack<K> {
    /// An empty stack.
    pub const fn new() -> Self {
        Self {
            head: NIL,
            len: 0,
            tag: PhantomData,
        }
    }

    /// A stack holding every entry of `entries`, index 0 on top: what a free
    /// list starts as. Empty if `entries` has [`NIL`] entries or more.
    pub fn with_all<E: StackNode<K>>(entries: &mut [E]) -> Self {
        let n = entries.len();
        if n == 0 || n >= NIL as usize {
            return Self::new();
        }
        for (i, e) in entries.iter_mut().enumerate() {
            // Fits: i + 1 ≤ n < NIL.
            let next = i as u32 + 1;
            e.set_next(if (next as usize) < n { next } else { NIL });
        }
        Self {
            head: 0,
            len: n as u32,
            tag: PhantomData,
        }
    }

    /// The top entry.
    #[inline]
    pub fn peek(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// Entries on the stack.
    #[inline]
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the stack is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// Puts `index` on top. `false`, changing nothing, if it is outside
    /// `entries`.
    #[inline]
    pub fn push<E: StackNode<K>>(&mut self, entries: &mut [E], index: u32) -> bool {
        let Some(e) = entries.get_mut(index as usize) else {
            return false;
        };
        e.set_next(self.head);
        self.head = index;
        self.len += 1;
        true
    }

    /// Takes the top entry. Its link is left as it was: the caller
    /// reinitialises the entry it takes.
    #[inline]
    pub fn pop<E: StackNode<K>>(&mut self, entries: &[E]) -> Option<u32> {
        let head = self.peek()?;
        self.head = entries.get(head as usize)?.next();
        debug_assert!(self.len > 0);
        self.len = self.len.wrapping_sub(1);
        Some(head)
    }
}
