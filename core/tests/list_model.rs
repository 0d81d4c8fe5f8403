//! The intrusive list and stack against plain `Vec` models, under random
//! sequences of push / insert / remove / pop over several lists that share one
//! entry array.
//!
//! After every step: each list's order read head to tail and tail to head is
//! the model's, lengths agree, `next`/`prev` agree with the order, and every
//! entry on no list has cleared links. Calls with an index outside the array
//! are refused and change nothing.

use pagoda_core::list::{Link, List, ListNode, Stack, StackNode, NIL};
use proptest::prelude::*;

const ENTRIES: usize = 20;
const LISTS: usize = 3;

#[derive(Debug, Clone, Copy)]
struct Entry {
    link: Link,
    /// A second, independent link: one entry on two kinds of list at once.
    free_next: u32,
}

impl ListNode for Entry {
    fn link(&self) -> &Link {
        &self.link
    }
    fn link_mut(&mut self) -> &mut Link {
        &mut self.link
    }
}

impl StackNode for Entry {
    fn next(&self) -> u32 {
        self.free_next
    }
    fn set_next(&mut self, next: u32) {
        self.free_next = next;
    }
}

#[derive(Debug, Clone)]
enum Op {
    PushBack { list: usize, entry: usize },
    PushFront { list: usize, entry: usize },
    InsertBefore { entry: usize, at: usize },
    InsertAfter { entry: usize, at: usize },
    Remove { entry: usize },
    PopFront { list: usize },
    OutOfRange { list: usize, index: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    let entry = 0..ENTRIES;
    let list = 0..LISTS;
    prop_oneof![
        4 => (list.clone(), entry.clone()).prop_map(|(list, entry)| Op::PushBack { list, entry }),
        3 => (list.clone(), entry.clone()).prop_map(|(list, entry)| Op::PushFront { list, entry }),
        3 => (entry.clone(), any::<usize>()).prop_map(|(entry, at)| Op::InsertBefore { entry, at }),
        3 => (entry.clone(), any::<usize>()).prop_map(|(entry, at)| Op::InsertAfter { entry, at }),
        4 => entry.prop_map(|entry| Op::Remove { entry }),
        2 => list.clone().prop_map(|list| Op::PopFront { list }),
        1 => (list, ENTRIES as u32..=u32::MAX).prop_map(|(list, index)| Op::OutOfRange { list, index }),
    ]
}

/// The model: each list's entries in order.
struct Model {
    lists: [Vec<u32>; LISTS],
}

impl Model {
    fn list_of(&self, entry: u32) -> Option<usize> {
        self.lists.iter().position(|l| l.contains(&entry))
    }

    /// A list entry chosen by `at` among all linked entries, with its list.
    fn pick(&self, at: usize) -> Option<(usize, usize)> {
        let total: usize = self.lists.iter().map(Vec::len).sum();
        if total == 0 {
            return None;
        }
        let mut at = at % total;
        for (l, list) in self.lists.iter().enumerate() {
            if at < list.len() {
                return Some((l, at));
            }
            at -= list.len();
        }
        None
    }
}

fn check(lists: &[List; LISTS], entries: &[Entry], model: &Model) -> Result<(), TestCaseError> {
    for (list, expected) in lists.iter().zip(&model.lists) {
        let forward: Vec<u32> = list.iter(entries).collect();
        prop_assert_eq!(&forward, expected);
        let mut backward: Vec<u32> = list.iter(entries).rev().collect();
        backward.reverse();
        prop_assert_eq!(&backward, expected);
        prop_assert_eq!(list.len() as usize, expected.len());
        prop_assert_eq!(list.is_empty(), expected.is_empty());
        prop_assert_eq!(list.head(), expected.first().copied());
        prop_assert_eq!(list.tail(), expected.last().copied());
        for (i, &e) in expected.iter().enumerate() {
            let next = expected.get(i + 1).copied();
            let prev = i.checked_sub(1).map(|p| expected[p]);
            prop_assert_eq!(List::<()>::next(entries, e), next);
            prop_assert_eq!(List::<()>::prev(entries, e), prev);
        }
    }
    for (i, e) in entries.iter().enumerate() {
        if model.list_of(i as u32).is_none() {
            prop_assert_eq!(e.link, Link::UNLINKED);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn list_order_matches_model(ops in prop::collection::vec(op(), 1..300)) {
        let mut entries = [Entry { link: Link::UNLINKED, free_next: NIL }; ENTRIES];
        let mut lists = [List::<()>::new(); LISTS];
        let mut model = Model { lists: [Vec::new(), Vec::new(), Vec::new()] };
        for op in ops {
            match op {
                Op::PushBack { list, entry } | Op::PushFront { list, entry } => {
                    let e = entry as u32;
                    if model.list_of(e).is_some() {
                        continue;
                    }
                    if matches!(op, Op::PushBack { .. }) {
                        prop_assert!(lists[list].push_back(&mut entries, e));
                        model.lists[list].push(e);
                    } else {
                        prop_assert!(lists[list].push_front(&mut entries, e));
                        model.lists[list].insert(0, e);
                    }
                }
                Op::InsertBefore { entry, at } | Op::InsertAfter { entry, at } => {
                    let e = entry as u32;
                    if model.list_of(e).is_some() {
                        continue;
                    }
                    let Some((list, pos)) = model.pick(at) else { continue };
                    let anchor = model.lists[list][pos];
                    if matches!(op, Op::InsertBefore { .. }) {
                        prop_assert!(lists[list].insert_before(&mut entries, e, anchor));
                        model.lists[list].insert(pos, e);
                    } else {
                        prop_assert!(lists[list].insert_after(&mut entries, e, anchor));
                        model.lists[list].insert(pos + 1, e);
                    }
                }
                Op::Remove { entry } => {
                    let e = entry as u32;
                    let Some(list) = model.list_of(e) else { continue };
                    prop_assert!(lists[list].remove(&mut entries, e));
                    model.lists[list].retain(|&x| x != e);
                }
                Op::PopFront { list } => {
                    let expected = (!model.lists[list].is_empty())
                        .then(|| model.lists[list].remove(0));
                    prop_assert_eq!(lists[list].pop_front(&mut entries), expected);
                }
                Op::OutOfRange { list, index } => {
                    let before = lists[list];
                    let snapshot = entries;
                    prop_assert!(!lists[list].push_back(&mut entries, index));
                    prop_assert!(!lists[list].push_front(&mut entries, index));
                    prop_assert!(!lists[list].remove(&mut entries, index));
                    if let Some(head) = before.head() {
                        prop_assert!(!lists[list].insert_before(&mut entries, index, head));
                        prop_assert!(!lists[list].insert_after(&mut entries, head, index));
                    }
                    prop_assert_eq!(List::<()>::next(&entries, index), None);
                    prop_assert_eq!(lists[list].len(), before.len());
                    prop_assert_eq!(lists[list].head(), before.head());
                    prop_assert_eq!(lists[list].tail(), before.tail());
                    for (a, b) in entries.iter().zip(&snapshot) {
                        prop_assert_eq!(a.link, b.link);
                    }
                }
            }
            check(&lists, &entries, &model)?;
        }
    }

    #[test]
    fn stack_is_lifo_and_independent_of_list_links(
        ops in prop::collection::vec((any::<bool>(), 0..ENTRIES), 1..200),
    ) {
        let mut entries = [Entry { link: Link::UNLINKED, free_next: 0 }; ENTRIES];
        let mut stack = Stack::<()>::with_all(&mut entries);
        // Every entry starts on the stack, 0 on top.
        let mut model: Vec<u32> = (0..ENTRIES as u32).rev().collect();
        let mut list = List::<()>::new();
        for (pop, entry) in ops {
            if pop {
                let expected = model.pop();
                let got = stack.pop(&entries);
                prop_assert_eq!(got, expected);
                // A taken entry goes on a list: the stack's link is separate.
                if let Some(e) = got {
                    prop_assert!(list.push_back(&mut entries, e));
                }
            } else if !model.contains(&(entry as u32)) {
                prop_assert!(list.remove(&mut entries, entry as u32));
                prop_assert!(stack.push(&mut entries, entry as u32));
                model.push(entry as u32);
            }
            prop_assert_eq!(stack.len() as usize, model.len());
            prop_assert_eq!(stack.peek(), model.last().copied());
            prop_assert_eq!(list.len() as usize + model.len(), ENTRIES);
            prop_assert!(!stack.push(&mut entries, ENTRIES as u32));
        }
    }
}
