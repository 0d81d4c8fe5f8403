//! Model check of the request queue's synchronisation with `loom`: every
//! interleaving of two producers, a canceller and the consumer.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p pagoda-core --test queue_loom --release`
//! (CI does). Without `--cfg loom` this file is empty.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;

use pagoda_core::{KvDtype, KvGeometry, Priority, QueueSlot, Request, RequestQueue, Timestamp};

#[derive(Debug)]
struct Req(u32, [u32; 1]);

impl Request for Req {
    fn prompt(&self) -> &[u32] {
        &self.1
    }
    fn max_output_tokens(&self) -> u32 {
        1
    }
}

fn queue(slots: usize) -> Arc<RequestQueue<'static, Req>> {
    let storage: &'static mut [QueueSlot<Req>] =
        Box::leak((0..slots).map(|_| QueueSlot::EMPTY).collect());
    let geometry = KvGeometry::new(1, 1, 64, KvDtype::F32).unwrap();
    Arc::new(RequestQueue::new(storage, geometry, 16).unwrap())
}

#[test]
fn producers_and_consumer_hand_each_request_out_once() {
    loom::model(|| {
        let q = queue(2);
        let producers: Vec<_> = (0..2)
            .map(|t| {
                let q = q.clone();
                thread::spawn(move || {
                    q.enqueue(
                        Req(t, [t]),
                        Priority::HIGHEST_FIRST[t as usize],
                        Timestamp(0),
                    )
                    .unwrap();
                })
            })
            .collect();
        let mut got = Vec::new();
        if let Some(d) = q.try_dequeue() {
            got.push(d.request.0);
        }
        for p in producers {
            p.join().unwrap();
        }
        while let Some(d) = q.try_dequeue() {
            got.push(d.request.0);
        }
        got.sort_unstable();
        assert_eq!(got, vec![0, 1]);
        assert!(q.is_empty());
    });
}

#[test]
fn cancel_racing_dequeue_hands_out_exactly_once() {
    loom::model(|| {
        let q = queue(2);
        let id = q
            .enqueue(Req(7, [7]), Priority::Normal, Timestamp(0))
            .unwrap();
        let canceller = {
            let q = q.clone();
            thread::spawn(move || q.mark_cancelled(id).map(|r| r.0))
        };
        let producer = {
            let q = q.clone();
            thread::spawn(move || {
                q.enqueue(Req(8, [8]), Priority::Low, Timestamp(0)).unwrap();
            })
        };
        let dequeued = q.try_dequeue().map(|d| d.request.0);
        let len_seen = q.len();
        let cancelled = canceller.join().unwrap();
        producer.join().unwrap();
        let rest: Vec<u32> = std::iter::from_fn(|| q.try_dequeue())
            .map(|d| d.request.0)
            .collect();
        // Request 7 went exactly one way; request 8 was handed out once.
        let sevens = [dequeued, cancelled]
            .iter()
            .chain(rest.iter().map(|r| Some(*r)).collect::<Vec<_>>().iter())
            .filter(|r| **r == Some(7))
            .count();
        assert_eq!(sevens, 1);
        let eights = [dequeued]
            .iter()
            .chain(rest.iter().map(|r| Some(*r)).collect::<Vec<_>>().iter())
            .filter(|r| **r == Some(8))
            .count();
        assert_eq!(eights, 1);
        assert!(len_seen <= 2);
        assert!(q.is_empty());
    });
}
