//! The request-queue spec (`002`), one test per scenario of its testing
//! requirements (`area::scenario`), plus the flaws of the sketch it fixes.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use pagoda_core::queue::blocking::{WaitError, WaitToken};
use pagoda_core::{
    Dequeued, KvDtype, KvGeometry, Priority, QueueError, QueueSlot, Request, RequestQueue,
    Timestamp,
};

#[derive(Debug, Clone, PartialEq)]
struct Req {
    tag: u32,
    prompt: Vec<u32>,
    max_new: u32,
}

impl Request for Req {
    fn prompt(&self) -> &[u32] {
        &self.prompt
    }
    fn max_output_tokens(&self) -> u32 {
        self.max_new
    }
}

fn req(tag: u32, prompt_len: usize, max_new: u32) -> Req {
    Req {
        tag,
        prompt: vec![tag; prompt_len],
        max_new,
    }
}

fn geometry() -> KvGeometry {
    KvGeometry::new(2, 2, 64, KvDtype::F16).unwrap()
}

fn slots<R>(n: usize) -> Vec<QueueSlot<R>> {
    (0..n).map(|_| QueueSlot::EMPTY).collect()
}

const NOW: Timestamp = Timestamp(0);

fn none<R>(n: usize) -> Vec<Option<Dequeued<R>>> {
    (0..n).map(|_| None).collect()
}

mod basic_operations {
    use super::*;

    #[test]
    fn enqueue_and_dequeue_single_request() {
        let mut s = slots(4);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        let id = q.enqueue(req(7, 20, 4), Priority::Normal, NOW).unwrap();
        let got = q.try_dequeue().unwrap();
        assert_eq!(got.id, id);
        assert_eq!(got.request.tag, 7);
        assert_eq!(got.priority, Priority::Normal);
        assert!(q.try_dequeue().is_none());
    }

    #[test]
    fn enqueue_multiple_requests_verify_priority_ordering() {
        let mut s = slots(16);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        let classes = [
            Priority::Low,
            Priority::Normal,
            Priority::Critical,
            Priority::High,
            Priority::Normal,
            Priority::Low,
            Priority::Critical,
        ];
        for (i, &p) in classes.iter().enumerate() {
            q.enqueue(req(i as u32, 4, 1), p, NOW).unwrap();
        }
        let order: Vec<u32> = std::iter::from_fn(|| q.try_dequeue())
            .map(|d| d.request.tag)
            .collect();
        // Critical (2, 6), High (3), Normal (1, 4), Low (0, 5): FIFO within a class.
        assert_eq!(order, vec![2, 6, 3, 1, 4, 0, 5]);
    }

    #[test]
    fn verify_count_and_is_empty() {
        let mut s = slots(8);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        assert!(q.is_empty());
        assert_eq!(q.len(), 0);
        let a = q.enqueue(req(1, 4, 1), Priority::Normal, NOW).unwrap();
        q.enqueue(req(2, 4, 1), Priority::High, NOW).unwrap();
        assert_eq!(q.len(), 2);
        assert!(!q.is_empty());
        q.mark_cancelled(a).unwrap();
        assert_eq!(q.len(), 1, "a cancelled request is not counted");
        q.try_dequeue().unwrap();
        assert!(q.is_empty());
    }
}

mod cancellation_handling {
    use super::*;

    #[test]
    fn cancel_request_before_dequeue_verify_skipped() {
        let mut s = slots(8);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        let a = q.enqueue(req(1, 4, 1), Priority::Normal, NOW).unwrap();
        let b = q.enqueue(req(2, 4, 1), Priority::Normal, NOW).unwrap();
        let handle = q.cancel_handle(a);
        assert_eq!(handle.cancel().unwrap().tag, 1);
        assert_eq!(q.try_dequeue().unwrap().id, b);
        assert!(q.try_dequeue().is_none());
        assert!(handle.cancel().is_none(), "cancelling twice finds nothing");
    }

    #[test]
    fn cancel_request_after_enqueue_verify_proper_cleanup() {
        let mut s = slots(2);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        for round in 0..100 {
            let a = q.enqueue(req(round, 4, 1), Priority::Low, NOW).unwrap();
            let b = q.enqueue(req(round, 4, 1), Priority::High, NOW).unwrap();
            assert!(q.mark_cancelled(a).is_some());
            assert!(q.mark_cancelled(b).is_some());
            assert!(!q.contains(a) && !q.contains(b));
            assert!(q.is_empty());
        }
        // Two slots recycled 100 times: no registration or slot leaked.
        let stats = q.stats();
        assert_eq!(stats.enqueued, 200);
        assert_eq!(stats.cancelled, 200);
        assert_eq!(q.capacity(), 2);
    }
}

mod batch_selection {
    use super::*;

    #[test]
    fn get_requests_respects_max_count() {
        let mut s = slots(16);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        for i in 0..10 {
            q.enqueue(req(i, 4, 1), Priority::Normal, NOW).unwrap();
        }
        let mut out = none(16);
        let got = q.get_requests(3, u64::MAX, &mut out);
        assert_eq!(got.count, 3);
        assert_eq!(q.len(), 7);
        assert!(out[3].is_none());
    }

    #[test]
    fn get_requests_respects_memory_budget() {
        let g = geometry();
        let mut s = slots(16);
        let q = RequestQueue::new(&mut s, g, 64).unwrap();
        // 20 prompt + 12 output tokens = 2 pages each.
        for i in 0..5 {
            q.enqueue(req(i, 20, 12), Priority::Normal, NOW).unwrap();
        }
        let page = g.bytes_per_page();
        let mut out = none(16);
        let got = q.get_requests(16, 5 * page, &mut out);
        assert_eq!(got.count, 2, "2 × 2 pages fit 5 pages; a third does not");
        assert_eq!(got.bytes, 4 * page);
        assert_eq!(out[0].as_ref().unwrap().footprint_bytes, 2 * page);
    }

    #[test]
    fn priority_order_maintained_in_selection() {
        let mut s = slots(16);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        q.enqueue(req(0, 4, 1), Priority::Low, NOW).unwrap();
        q.enqueue(req(1, 4, 1), Priority::High, NOW).unwrap();
        q.enqueue(req(2, 4, 1), Priority::Normal, NOW).unwrap();
        q.enqueue(req(3, 4, 1), Priority::High, NOW).unwrap();
        let mut out = none(8);
        let got = q.get_requests(8, u64::MAX, &mut out);
        let tags: Vec<u32> = out[..got.count]
            .iter()
            .map(|d| d.as_ref().unwrap().request.tag)
            .collect();
        assert_eq!(tags, vec![1, 3, 2, 0]);
    }

    #[test]
    fn a_misfit_does_not_block_lighter_requests_behind_it() {
        let g = geometry();
        let mut s = slots(16);
        let q = RequestQueue::new(&mut s, g, 64).unwrap();
        let big = q.enqueue(req(0, 200, 0), Priority::High, NOW).unwrap(); // 13 pages
        q.enqueue(req(1, 10, 0), Priority::Normal, NOW).unwrap(); // 1 page
        let mut out = none(8);
        let got = q.get_requests(8, 4 * g.bytes_per_page(), &mut out);
        assert_eq!(got.count, 1);
        assert_eq!(out[0].as_ref().unwrap().request.tag, 1);
        assert!(q.contains(big), "the misfit keeps its place");
    }

    #[test]
    fn memory_is_the_real_kv_footprint() {
        let g = geometry();
        let mut s = slots(4);
        let q = RequestQueue::new(&mut s, g, 64).unwrap();
        let r = req(0, 33, 100);
        // 133 tokens → 9 pages of 16.
        assert_eq!(q.footprint(&r), 9 * g.bytes_per_page());
        drop(q);
        let mut s2 = slots(4);
        let capped = RequestQueue::new(&mut s2, g, 64)
            .unwrap()
            .with_output_reserve(15);
        // 33 + 15 = 48 tokens → 3 pages.
        assert_eq!(capped.footprint(&r), 3 * g.bytes_per_page());
    }
}

mod thread_safety {
    use super::*;

    #[test]
    fn concurrent_enqueue_operations() {
        let mut s = slots(4000);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        thread::scope(|scope| {
            for t in 0..4 {
                let q = &q;
                scope.spawn(move || {
                    for i in 0..1000 {
                        q.enqueue(req(t * 1000 + i, 4, 1), Priority::Normal, NOW)
                            .unwrap();
                    }
                });
            }
        });
        assert_eq!(q.len(), 4000);
        let mut seen = HashSet::new();
        let mut last_per_producer = [None::<u32>; 4];
        while let Some(d) = q.try_dequeue() {
            let tag = d.request.tag;
            assert!(seen.insert(tag));
            // FIFO within a class: each producer's requests come out in order.
            let p = (tag / 1000) as usize;
            assert!(last_per_producer[p] < Some(tag));
            last_per_producer[p] = Some(tag);
        }
        assert_eq!(seen.len(), 4000);
    }

    #[test]
    fn concurrent_dequeue_operations() {
        let mut s = slots(4000);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        for i in 0..4000 {
            q.enqueue(req(i, 4, 1), Priority::Normal, NOW).unwrap();
        }
        let taken: Vec<Vec<u32>> = thread::scope(|scope| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    let q = &q;
                    scope.spawn(move || {
                        std::iter::from_fn(|| q.try_dequeue())
                            .map(|d| d.request.tag)
                            .collect()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let all: HashSet<u32> = taken.iter().flatten().copied().collect();
        assert_eq!(all.len(), 4000, "every request handed out exactly once");
        assert_eq!(taken.iter().map(Vec::len).sum::<usize>(), 4000);
    }

    #[test]
    fn enqueue_dequeue_race_conditions() {
        // Producers, a canceller and a remover race one blocking consumer.
        // Every request ends up exactly once: handed out, cancelled or removed.
        const PRODUCERS: u32 = 4;
        const EACH: u32 = 2000;
        let mut s = slots(256);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        let ids = std::sync::Mutex::new(Vec::new());
        let done = AtomicUsize::new(0);
        let token = WaitToken::new();
        let (handed, cancelled, removed) = thread::scope(|scope| {
            for t in 0..PRODUCERS {
                let (q, ids, done) = (&q, &ids, &done);
                scope.spawn(move || {
                    for i in 0..EACH {
                        let mut r = req(t * EACH + i, 4, 1);
                        let id = loop {
                            match q.enqueue(r, Priority::HIGHEST_FIRST[(i % 4) as usize], NOW) {
                                Ok(id) => break id,
                                Err(rej) => {
                                    assert_eq!(rej.error, QueueError::Full);
                                    r = rej.request;
                                    thread::yield_now();
                                }
                            }
                        };
                        ids.lock().unwrap().push(id);
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                });
            }
            let canceller = {
                let (q, ids, done) = (&q, &ids, &done);
                scope.spawn(move || {
                    let mut got = Vec::new();
                    while done.load(Ordering::SeqCst) < PRODUCERS as usize {
                        let id = ids.lock().unwrap().pop();
                        if let Some(id) = id {
                            if let Some(r) = q.cancel_handle(id).cancel() {
                                got.push(r.tag);
                            }
                        }
                        let id = ids.lock().unwrap().first().copied();
                        if let Some(id) = id {
                            if let Some(r) = q.remove(id) {
                                got.push(r.tag | 1 << 31);
                            }
                        }
                    }
                    got
                })
            };
            let consumer = {
                let (q, done, token) = (&q, &done, &token);
                scope.spawn(move || {
                    let mut got = Vec::new();
                    loop {
                        match q.dequeue_timeout(Duration::from_millis(20), token) {
                            Ok(d) => got.push(d.request.tag),
                            Err(WaitError::TimedOut)
                                if done.load(Ordering::SeqCst) == PRODUCERS as usize
                                    && q.is_empty() =>
                            {
                                break got
                            }
                            Err(WaitError::TimedOut) => {}
                            Err(WaitError::Cancelled) => unreachable!(),
                        }
                    }
                })
            };
            let by_canceller = canceller.join().unwrap();
            let handed = consumer.join().unwrap();
            let cancelled: Vec<u32> = by_canceller
                .iter()
                .filter(|t| *t >> 31 == 0)
                .copied()
                .collect();
            let removed: Vec<u32> = by_canceller
                .iter()
                .filter(|t| *t >> 31 == 1)
                .map(|t| t & !(1 << 31))
                .collect();
            (handed, cancelled, removed)
        });
        let mut all: Vec<u32> = handed
            .iter()
            .chain(&cancelled)
            .chain(&removed)
            .copied()
            .collect();
        all.sort_unstable();
        let expected: Vec<u32> = (0..PRODUCERS * EACH).collect();
        assert_eq!(all, expected, "nothing lost, nothing handed out twice");
        let stats = q.stats();
        assert_eq!(stats.dequeued as usize, handed.len());
        assert_eq!(stats.cancelled as usize, cancelled.len());
        assert_eq!(stats.removed as usize, removed.len());
        assert!(q.is_empty());
    }
}

mod edge_cases {
    use super::*;

    #[test]
    fn dequeue_from_empty_queue_with_timeout() {
        let mut s = slots::<Req>(4);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        let token = WaitToken::new();
        for timeout_ms in [0u64, 10, 50] {
            let timeout = Duration::from_millis(timeout_ms);
            let start = Instant::now();
            let got = q.dequeue_timeout(timeout, &token);
            let waited = start.elapsed();
            assert_eq!(got.unwrap_err(), WaitError::TimedOut);
            assert!(
                waited >= timeout,
                "returned early: {waited:?} < {timeout:?}"
            );
            // Scheduling noise on a loaded 2-core CI machine stays well below this.
            assert!(
                waited < timeout + Duration::from_millis(500),
                "returned late: {waited:?}"
            );
        }
    }

    #[test]
    fn blocking_dequeue_wakes_on_enqueue() {
        let mut s = slots::<Req>(4);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        let token = WaitToken::new();
        let barrier = Barrier::new(2);
        thread::scope(|scope| {
            let consumer = scope.spawn(|| {
                barrier.wait();
                q.dequeue(&token).unwrap().request.tag
            });
            barrier.wait();
            thread::sleep(Duration::from_millis(20));
            q.enqueue(req(42, 4, 1), Priority::Normal, NOW).unwrap();
            assert_eq!(consumer.join().unwrap(), 42);
        });
    }

    #[test]
    fn dequeue_with_cancelled_cancellation_token() {
        let mut s = slots(4);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        // Already cancelled: returns at once, even with a request waiting.
        let cancelled = WaitToken::new();
        q.cancel_wait(&cancelled);
        q.enqueue(req(1, 4, 1), Priority::Normal, NOW).unwrap();
        assert_eq!(q.dequeue(&cancelled).unwrap_err(), WaitError::Cancelled);
        assert_eq!(q.len(), 1, "a cancelled wait takes nothing");
        q.try_dequeue().unwrap();
        // Cancelled while sleeping on an empty queue: wakes and returns.
        let token = WaitToken::new();
        thread::scope(|scope| {
            let waiter = scope.spawn(|| q.dequeue(&token));
            thread::sleep(Duration::from_millis(20));
            q.cancel_wait(&token);
            assert_eq!(waiter.join().unwrap().unwrap_err(), WaitError::Cancelled);
        });
    }

    #[test]
    fn remove_non_existent_request() {
        let mut s = slots(4);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        let id = q.enqueue(req(1, 4, 1), Priority::Normal, NOW).unwrap();
        assert_eq!(q.remove(id).unwrap().tag, 1);
        assert!(q.remove(id).is_none(), "already removed");
        // The slot is reused; the old id does not name the new request.
        let newer = q.enqueue(req(2, 4, 1), Priority::Normal, NOW).unwrap();
        assert!(q.remove(id).is_none());
        assert!(q.contains(newer) && !q.contains(id));
        assert!(q
            .remove(pagoda_core::RequestId::from_bits(u64::MAX))
            .is_none());
    }

    #[test]
    fn clear_and_verify_queue_is_empty() {
        let mut s = slots(8);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        let ids: Vec<_> = (0..6)
            .map(|i| {
                q.enqueue(req(i, 4, 1), Priority::HIGHEST_FIRST[i as usize % 4], NOW)
                    .unwrap()
            })
            .collect();
        q.clear();
        assert!(q.is_empty());
        assert!(q.try_dequeue().is_none());
        assert!(ids.iter().all(|&id| !q.contains(id)));
        // Every slot is free again.
        for i in 0..8 {
            q.enqueue(req(i, 4, 1), Priority::Normal, NOW).unwrap();
        }
    }
}

mod flaws_fixed {
    use super::*;

    #[test]
    fn remove_really_removes() {
        let mut s = slots(4);
        let q = RequestQueue::new(&mut s, geometry(), 64).unwrap();
        let a = q.enqueue(req(1, 4, 1), Priority::Normal, NOW).unwrap();
        q.enqueue(req(2, 4, 1), Priority::Normal, NOW).unwrap();
        q.remove(a).unwrap();
        assert_eq!(q.len(), 1);
        assert_eq!(q.try_dequeue().unwrap().request.tag, 2);
        assert!(q.is_empty());
    }

    #[test]
    fn impossible_requests_are_rejected_at_enqueue() {
        let mut s = slots(4);
        let q = RequestQueue::new(&mut s, geometry(), 8).unwrap();
        let empty = q.enqueue(req(1, 0, 10), Priority::Normal, NOW).unwrap_err();
        assert_eq!(empty.error, QueueError::EmptyPrompt);
        assert_eq!(empty.request.tag, 1, "the request comes back");
        // 8 pages hold 128 tokens; 120 + 9 need 9 pages.
        let big = q
            .enqueue(req(2, 120, 9), Priority::Normal, NOW)
            .unwrap_err();
        assert_eq!(
            big.error,
            QueueError::TooLarge {
                pages: 9,
                pool_pages: 8
            }
        );
        q.enqueue(req(3, 120, 8), Priority::Normal, NOW).unwrap();
        assert_eq!(q.stats().rejected, 2);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn full_queue_hands_the_request_back() {
        let mut s = slots::<Req>(1);
        let q = RequestQueue::new(&mut s, geometry(), 8).unwrap();
        q.enqueue(req(1, 4, 1), Priority::Normal, NOW).unwrap();
        let full = q
            .enqueue(req(2, 4, 1), Priority::Critical, NOW)
            .unwrap_err();
        assert_eq!(full.error, QueueError::Full);
        assert_eq!(full.request.tag, 2);
    }

    #[test]
    fn drop_releases_every_waiting_request() {
        struct Counted(Arc<AtomicUsize>, Vec<u32>);
        impl Request for Counted {
            fn prompt(&self) -> &[u32] {
                &self.1
            }
            fn max_output_tokens(&self) -> u32 {
                1
            }
        }
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let drops = Arc::new(AtomicUsize::new(0));
        let mut s = slots(8);
        {
            let q = RequestQueue::new(&mut s, geometry(), 8).unwrap();
            for _ in 0..5 {
                q.enqueue(Counted(drops.clone(), vec![1; 4]), Priority::Low, NOW)
                    .ok()
                    .unwrap();
            }
            drop(q.try_dequeue());
            assert_eq!(drops.load(Ordering::SeqCst), 1);
        }
        assert_eq!(drops.load(Ordering::SeqCst), 5);
        assert_eq!(Arc::strong_count(&drops), 1, "no request left in the slots");
    }

    #[test]
    fn invalid_storage_is_a_typed_error() {
        let mut none: Vec<QueueSlot<Req>> = Vec::new();
        assert_eq!(
            RequestQueue::new(&mut none, geometry(), 8).unwrap_err(),
            pagoda_core::StorageError::Empty
        );
        let mut s = slots::<Req>(2);
        assert_eq!(
            RequestQueue::new(&mut s, geometry(), 0).unwrap_err(),
            pagoda_core::StorageError::Empty
        );
    }
}
