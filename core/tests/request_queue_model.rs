//! The request queue against a plain model under random operations: the
//! order requests come out in, exact counts, and that a request is handed
//! out at most once and a cancelled or removed one never.

use pagoda_core::{
    Dequeued, KvDtype, KvGeometry, Priority, QueueSlot, Request, RequestId, RequestQueue, Timestamp,
};
use proptest::prelude::*;

#[derive(Debug)]
struct Req(u32, Vec<u32>);

impl Request for Req {
    fn prompt(&self) -> &[u32] {
        &self.1
    }
    fn max_output_tokens(&self) -> u32 {
        8
    }
}

#[derive(Debug, Clone)]
enum Op {
    Enqueue { class: usize, len: usize },
    Dequeue,
    Remove { pick: usize },
    Cancel { pick: usize },
    Stale { pick: usize },
    Get { max: usize, pages: u64 },
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..4usize, 1..100usize).prop_map(|(class, len)| Op::Enqueue { class, len }),
        3 => Just(Op::Dequeue),
        1 => any::<usize>().prop_map(|pick| Op::Remove { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Stale { pick }),
        2 => (0..6usize, 0..16u64).prop_map(|(max, pages)| Op::Get { max, pages }),
        1 => Just(Op::Clear),
    ]
}

/// The model: waiting requests as (class, arrival, tag, id, pages).
#[derive(Default)]
struct Model {
    waiting: Vec<(Priority, u32, RequestId, u64)>,
}

impl Model {
    /// Waiting requests in hand-out order: class high to low, then arrival.
    fn ordered(&self) -> Vec<(Priority, u32, RequestId, u64)> {
        let mut v = self.waiting.clone();
        v.sort_by_key(|&(class, tag, _, _)| (std::cmp::Reverse(class), tag));
        v
    }

    fn take(&mut self, id: RequestId) -> Option<u32> {
        let i = self.waiting.iter().position(|w| w.2 == id)?;
        Some(self.waiting.remove(i).1)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 100, ..ProptestConfig::default() })]

    #[test]
    fn queue_matches_model(ops in prop::collection::vec(op(), 1..1000)) {
        let geometry = KvGeometry::new(1, 1, 64, KvDtype::F32).unwrap();
        let page = geometry.bytes_per_page();
        let mut slots: Vec<QueueSlot<Req>> = (0..24).map(|_| QueueSlot::EMPTY).collect();
        let q = RequestQueue::new(&mut slots, geometry, 64).unwrap();
        let mut model = Model::default();
        let mut gone: Vec<RequestId> = Vec::new();
        let mut next_tag = 0u32;
        let mut out: Vec<Option<Dequeued<Req>>> = (0..8).map(|_| None).collect();
        for op in ops {
            match op {
                Op::Enqueue { class, len } => {
                    let tag = next_tag;
                    next_tag += 1;
                    let class = Priority::HIGHEST_FIRST[class];
                    match q.enqueue(Req(tag, vec![tag; len]), class, Timestamp(0)) {
                        Ok(id) => {
                            let pages = (len as u64 + 8).div_ceil(16);
                            model.waiting.push((class, tag, id, pages));
                        }
                        Err(rejected) => {
                            prop_assert_eq!(model.waiting.len(), 24, "refused only when full");
                            prop_assert_eq!(rejected.request.0, tag);
                        }
                    }
                }
                Op::Dequeue => {
                    let expected = model.ordered().first().map(|w| w.1);
                    let got = q.try_dequeue();
                    prop_assert_eq!(got.as_ref().map(|d| d.request.0), expected);
                    if let Some(d) = got {
                        model.take(d.id);
                        gone.push(d.id);
                    }
                }
                Op::Remove { pick } | Op::Cancel { pick } if !model.waiting.is_empty() => {
                    let id = model.waiting[pick % model.waiting.len()].2;
                    let tag = model.take(id);
                    let got = if matches!(op, Op::Remove { .. }) { q.remove(id) } else { q.cancel_handle(id).cancel() };
                    prop_assert_eq!(got.map(|r| r.0), tag);
                    gone.push(id);
                }
                Op::Remove { .. } | Op::Cancel { .. } => {}
                Op::Stale { pick } if !gone.is_empty() => {
                    let id = gone[pick % gone.len()];
                    prop_assert!(!q.contains(id));
                    prop_assert!(q.remove(id).is_none());
                    prop_assert!(q.mark_cancelled(id).is_none());
                }
                Op::Stale { .. } => {}
                Op::Get { max, pages } => {
                    // The model: priority order, pass over what does not fit.
                    let mut left = pages;
                    let mut expected = Vec::new();
                    for w in model.ordered() {
                        if expected.len() == max || left == 0 {
                            break;
                        }
                        if w.3 <= left {
                            left -= w.3;
                            expected.push(w.1);
                        }
                    }
                    let sel = q.get_requests(max, pages * page, &mut out);
                    let got: Vec<u32> = out[..sel.count].iter_mut().map(|d| {
                        let d = d.take().unwrap();
                        model.take(d.id);
                        gone.push(d.id);
                        d.request.0
                    }).collect();
                    prop_assert_eq!(got, expected);
                    prop_assert_eq!(sel.bytes, (pages - left) * page);
                }
                Op::Clear => {
                    for w in model.waiting.drain(..) {
                        gone.push(w.2);
                    }
                    q.clear();
                }
            }
            prop_assert_eq!(q.len(), model.waiting.len());
            prop_assert_eq!(q.is_empty(), model.waiting.is_empty());
        }
    }
}
