//! An indexed binary heap of slot indices that lives inside the slot array.
//!
//! The scheduler keeps its waiting requests in two heaps (by policy and by
//! age) and must remove or reorder any of them in O(log n) when a request is
//! cancelled, admitted or rescored. Rather than separate arrays, each slot
//! carries one [`HeapCell`] per heap: `item` is the heap's array at that
//! slot's index (a column of the slot array), `pos` is where that slot's
//! entry sits in the heap. The ordering is a type ([`HeapOrder`]), so each
//! heap's comparisons are static and need no branch on which heap it is.

use core::marker::PhantomData;

use crate::list::NIL;

/// One heap's column in a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeapCell {
    /// The heap's array at this slot's index.
    item: u32,
    /// Where this slot's entry sits in the heap, or `NIL`.
    pos: u32,
}

impl HeapCell {
    pub(crate) const EMPTY: Self = Self {
        item: NIL,
        pos: NIL,
    };

    /// The cell for a slot that is re-filled: the column stays (it belongs
    /// to the heap, not to the entry), the entry is in no heap.
    pub(crate) const fn column_only(self) -> Self {
        Self {
            item: self.item,
            pos: NIL,
        }
    }
}

/// How one heap orders slots, and where its cell is.
pub(crate) trait HeapOrder<T> {
    /// This heap's cell in a slot.
    fn cell(slot: &T) -> &HeapCell;
    /// This heap's cell in a slot, to change.
    fn cell_mut(slot: &mut T) -> &mut HeapCell;
    /// Whether `a` comes out before `b`.
    fn before(a: &T, b: &T) -> bool;
}

/// A heap over the cells of a slot array: only its length lives here.
#[derive(Debug)]
pub(crate) struct IndexedHeap<O> {
    len: u32,
    order: PhantomData<O>,
}

impl<O> IndexedHeap<O> {
    pub(crate) const fn new() -> Self {
        Self {
            len: 0,
            order: PhantomData,
        }
    }

    pub(crate) const fn len(&self) -> u32 {
        self.len
    }

    /// The first slot out, if any.
    #[inline]
    pub(crate) fn top<T>(&self, slots: &[T]) -> Option<u32>
    where
        O: HeapOrder<T>,
    {
        if self.len == 0 {
            None
        } else {
            Some(O::cell(&slots[0]).item)
        }
    }

    /// The slot at heap position `pos` (`pos < len`).
    #[inline]
    pub(crate) fn at<T>(&self, slots: &[T], pos: u32) -> u32
    where
        O: HeapOrder<T>,
    {
        O::cell(&slots[pos as usize]).item
    }

    pub(crate) fn contains<T>(&self, slots: &[T], index: u32) -> bool
    where
        O: HeapOrder<T>,
    {
        O::cell(&slots[index as usize]).pos != NIL
    }

    /// Adds a slot that is not in the heap (`len < slots.len()`).
    pub(crate) fn push<T>(&mut self, slots: &mut [T], index: u32)
    where
        O: HeapOrder<T>,
    {
        debug_assert!(!self.contains(slots, index));
        let pos = self.len;
        self.len += 1;
        Self::set(slots, pos, index);
        self.sift_up(slots, pos);
    }

    /// Removes a slot; returns whether it was in the heap.
    pub(crate) fn remove<T>(&mut self, slots: &mut [T], index: u32) -> bool
    where
        O: HeapOrder<T>,
    {
        let pos = O::cell(&slots[index as usize]).pos;
        if pos == NIL {
            return false;
        }
        self.len -= 1;
        let last = self.len;
        let moved = O::cell(&slots[last as usize]).item;
        O::cell_mut(&mut slots[last as usize]).item = NIL;
        O::cell_mut(&mut slots[index as usize]).pos = NIL;
        if pos != last {
            Self::set(slots, pos, moved);
            self.sift_down(slots, pos);
            self.sift_up(slots, O::cell(&slots[moved as usize]).pos);
        }
        true
    }

    /// Takes the first slot out.
    #[cfg(test)]
    pub(crate) fn pop<T>(&mut self, slots: &mut [T]) -> Option<u32>
    where
        O: HeapOrder<T>,
    {
        let top = self.top(slots)?;
        self.remove(slots, top);
        Some(top)
    }

    /// Restores the slot's place after its ordering changed.
    pub(crate) fn fix<T>(&mut self, slots: &mut [T], index: u32)
    where
        O: HeapOrder<T>,
    {
        let pos = O::cell(&slots[index as usize]).pos;
        if pos == NIL {
            return;
        }
        self.sift_up(slots, pos);
        let pos = O::cell(&slots[index as usize]).pos;
        self.sift_down(slots, pos);
    }

    /// Restores the heap after many orderings changed: O(n), bottom-up.
    pub(crate) fn heapify<T>(&mut self, slots: &mut [T])
    where
        O: HeapOrder<T>,
    {
        for pos in (0..self.len / 2).rev() {
            self.sift_down(slots, pos);
        }
    }

    #[inline]
    fn set<T>(slots: &mut [T], pos: u32, index: u32)
    where
        O: HeapOrder<T>,
    {
        O::cell_mut(&mut slots[pos as usize]).item = index;
        O::cell_mut(&mut slots[index as usize]).pos = pos;
    }

    fn sift_up<T>(&self, slots: &mut [T], mut pos: u32)
    where
        O: HeapOrder<T>,
    {
        let index = O::cell(&slots[pos as usize]).item;
        while pos > 0 {
            let parent = (pos - 1) / 2;
            let above = O::cell(&slots[parent as usize]).item;
            if !O::before(&slots[index as usize], &slots[above as usize]) {
                break;
            }
            Self::set(slots, pos, above);
            pos = parent;
        }
        Self::set(slots, pos, index);
    }

    fn sift_down<T>(&self, slots: &mut [T], mut pos: u32)
    where
        O: HeapOrder<T>,
    {
        let len = self.len;
        let index = O::cell(&slots[pos as usize]).item;
        loop {
            let left = 2 * pos + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let mut child = left;
            let left_item = O::cell(&slots[left as usize]).item;
            if right < len {
                let right_item = O::cell(&slots[right as usize]).item;
                if O::before(&slots[right_item as usize], &slots[left_item as usize]) {
                    child = right;
                }
            }
            let below = O::cell(&slots[child as usize]).item;
            if !O::before(&slots[below as usize], &slots[index as usize]) {
                break;
            }
            Self::set(slots, pos, below);
            pos = child;
        }
        Self::set(slots, pos, index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone, Copy)]
    struct Slot {
        key: u8,
        cell: HeapCell,
    }

    /// Smallest key first, ties by slot index (a total order, so the
    /// model's top is unique).
    struct ByKey;

    impl HeapOrder<(u32, Slot)> for ByKey {
        fn cell(slot: &(u32, Slot)) -> &HeapCell {
            &slot.1.cell
        }
        fn cell_mut(slot: &mut (u32, Slot)) -> &mut HeapCell {
            &mut slot.1.cell
        }
        fn before(a: &(u32, Slot), b: &(u32, Slot)) -> bool {
            (a.1.key, a.0) < (b.1.key, b.0)
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u32, u8),
        Remove(u32),
        Fix(u32, u8),
        Pop,
    }

    const N: u32 = 12;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..N, any::<u8>()).prop_map(|(i, k)| Op::Push(i, k)),
            1 => (0..N).prop_map(Op::Remove),
            2 => (0..N, any::<u8>()).prop_map(|(i, k)| Op::Fix(i, k)),
            1 => Just(Op::Pop),
        ]
    }

    /// The model's top: the least (key, index) of the slots in the heap.
    fn least(model: &[Option<u8>]) -> Option<(u8, u32)> {
        model
            .iter()
            .enumerate()
            .filter_map(|(i, k)| k.map(|k| (k, i as u32)))
            .min()
    }

    fn slots() -> [(u32, Slot); N as usize] {
        core::array::from_fn(|i| {
            (
                i as u32,
                Slot {
                    key: 0,
                    cell: HeapCell::EMPTY,
                },
            )
        })
    }

    proptest! {
        #[test]
        fn indexed_heap_matches_a_sorted_model(ops in proptest::collection::vec(op(), 0..200)) {
            let mut slots = slots();
            let mut heap = IndexedHeap::<ByKey>::new();
            // The model: each slot's key while it is in the heap.
            let mut model = [None; N as usize];
            for op in ops {
                match op {
                    Op::Push(i, key) => {
                        if model[i as usize].is_none() {
                            slots[i as usize].1.key = key;
                            heap.push(&mut slots, i);
                            model[i as usize] = Some(key);
                        }
                    }
                    Op::Remove(i) => {
                        prop_assert_eq!(heap.remove(&mut slots, i), model[i as usize].is_some());
                        model[i as usize] = None;
                    }
                    Op::Fix(i, key) => {
                        slots[i as usize].1.key = key;
                        if let Some(k) = &mut model[i as usize] {
                            *k = key;
                        }
                        heap.fix(&mut slots, i);
                    }
                    Op::Pop => {
                        let want = least(&model);
                        prop_assert_eq!(heap.pop(&mut slots), want.map(|(_, i)| i));
                        if let Some((_, i)) = want {
                            model[i as usize] = None;
                        }
                    }
                }
                // The top is the model's least; positions index the array.
                prop_assert_eq!(heap.len() as usize, model.iter().flatten().count());
                prop_assert_eq!(heap.top(&slots), least(&model).map(|(_, i)| i));
                for i in 0..N {
                    let inside = model[i as usize].is_some();
                    prop_assert_eq!(heap.contains(&slots, i), inside);
                    if inside {
                        let pos = slots[i as usize].1.cell.pos;
                        prop_assert!(pos < heap.len());
                        prop_assert_eq!(heap.at(&slots, pos), i);
                    }
                }
            }
        }
    }

    #[test]
    fn heapify_restores_order_after_keys_change() {
        let mut slots = slots();
        let mut heap = IndexedHeap::<ByKey>::new();
        for i in 0..N {
            slots[i as usize].1.key = i as u8;
            heap.push(&mut slots, i);
        }
        // Reverse every key behind the heap's back, then rebuild.
        for (_, s) in slots.iter_mut() {
            s.key = (N as u8) - s.key;
        }
        heap.heapify(&mut slots);
        let order: [Option<u32>; N as usize] = core::array::from_fn(|_| heap.pop(&mut slots));
        let want: [Option<u32>; N as usize] = core::array::from_fn(|i| Some(N - 1 - i as u32));
        assert_eq!(order, want);
        assert_eq!(heap.pop(&mut slots), None);
    }
}
