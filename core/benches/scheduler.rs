//! Request-queue and scheduler benchmarks.
//!
//! - `queue/4p1c`: 4 producer threads push 20,000 requests through the
//!   queue to one consumer, against `std::sync::mpsc` moving the same
//!   requests in the same run.
//! - `step/lpm_10k` and `step/fcfs_10k`: one scheduling step with 10,000
//!   waiting requests sharing prefixes (64 admitted). `step/lpm_10k_growth`
//!   adds a cache insert that 1,000 of them watch, so the step rescores them.

use std::hint::black_box;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use pagoda_core::scheduler::{Lpm, Policy, SchedSlot, Scheduler, SchedulerConfig, Work};
use pagoda_core::{
    KvCache, KvDtype, KvGeometry, KvStorage, PageEntry, PageId, Priority, QueueSlot, RadixCache,
    RadixNode, Request, RequestId, RequestQueue, SeqEntry, Timestamp,
};

#[derive(Debug, Clone)]
struct Req(Vec<u32>);

impl Request for Req {
    fn prompt(&self) -> &[u32] {
        &self.0
    }
    fn max_output_tokens(&self) -> u32 {
        16
    }
}

const PRODUCERS: usize = 4;
const PER_PRODUCER: usize = 5_000;

fn queue_throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("queue/4p1c");
    group.sample_size(20);
    let geometry = KvGeometry::new(2, 2, 64, KvDtype::F16).unwrap();
    group.bench_function("pagoda_request_queue", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut slots: Vec<QueueSlot<Req>> = (0..PRODUCERS * PER_PRODUCER)
                    .map(|_| QueueSlot::EMPTY)
                    .collect();
                let queue = RequestQueue::new(&mut slots, geometry, 1 << 20).unwrap();
                let start = Instant::now();
                thread::scope(|s| {
                    for _ in 0..PRODUCERS {
                        s.spawn(|| {
                            for i in 0..PER_PRODUCER {
                                queue
                                    .enqueue(Req(vec![i as u32]), Priority::Normal, Timestamp(0))
                                    .unwrap();
                            }
                        });
                    }
                    let mut got = 0;
                    while got < PRODUCERS * PER_PRODUCER {
                        match queue.try_dequeue() {
                            Some(d) => {
                                black_box(d);
                                got += 1;
                            }
                            None => std::hint::spin_loop(),
                        }
                    }
                });
                total += start.elapsed();
            }
            total
        })
    });
    group.bench_function("std_mpsc_baseline", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (tx, rx) = mpsc::channel::<Req>();
                let start = Instant::now();
                thread::scope(|s| {
                    for _ in 0..PRODUCERS {
                        let tx = tx.clone();
                        s.spawn(move || {
                            for i in 0..PER_PRODUCER {
                                tx.send(Req(vec![i as u32])).unwrap();
                            }
                        });
                    }
                    for _ in 0..PRODUCERS * PER_PRODUCER {
                        black_box(rx.recv().unwrap());
                    }
                });
                total += start.elapsed();
            }
            total
        })
    });
    group.finish();
}

/// Storage for a scheduler with `waiting` requests over a warm cache.
struct World {
    pages: Vec<PageEntry>,
    rows: Vec<PageId>,
    seqs: Vec<SeqEntry>,
    nodes: Vec<RadixNode>,
    index: Vec<u64>,
    slots: Vec<SchedSlot<Req>>,
    watch: Vec<u32>,
    scratch: Vec<PageId>,
    plan: Vec<Work>,
}

const WAITING: usize = 10_000;
const GROUPS: u32 = 100;

fn prompt(group: u32, tag: u32) -> Vec<u32> {
    // 256 tokens of group prefix, then 40 of the request's own.
    let mut p: Vec<u32> = (0..256).map(|i| group * 1_000 + i).collect();
    p.extend((0..40).map(|i| 10_000_000 + tag * 64 + i));
    p
}

impl World {
    fn new() -> Self {
        let pages = 16_384;
        let batch = 64;
        Self {
            pages: vec![PageEntry::EMPTY; pages],
            rows: vec![PageId::from_index(0); batch * 32],
            seqs: vec![SeqEntry::EMPTY; batch],
            nodes: vec![RadixNode::EMPTY; pages],
            index: vec![0; RadixCache::index_len_for(pages)],
            slots: (0..WAITING + 16).map(|_| SchedSlot::EMPTY).collect(),
            watch: vec![0; (WAITING + 16).next_power_of_two()],
            scratch: vec![PageId::from_index(0); 32],
            plan: vec![Work::EMPTY; batch],
        }
    }
}

fn step_bench(c: &mut Criterion, name: &str, policy: Policy, growth: bool) {
    let config = SchedulerConfig {
        max_batch: 64,
        token_budget: 64 * 300,
        ..SchedulerConfig::default()
    };
    let mut group = c.benchmark_group("step");
    group.sample_size(10);
    group.bench_function(name, |b| {
        // Each iteration builds a fresh world (untimed) and times one step.
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut w = World::new();
                total += one_step(&mut w, config, policy, growth);
            }
            total
        })
    });
    group.finish();
}

fn one_step(w: &mut World, config: SchedulerConfig, policy: Policy, growth: bool) -> Duration {
    let mut kv = KvCache::new(KvStorage {
        pages: &mut w.pages,
        rows: &mut w.rows,
        seqs: &mut w.seqs,
        nodes: &mut w.nodes,
        index: &mut w.index,
        scratch: &mut w.scratch,
    })
    .unwrap();
    // Caches a group's 256-token prefix: a sequence computes it and leaves.
    let cache_group = |g: u32, kv: &mut KvCache<'_>| {
        let p = prompt(g, 0);
        let admission = kv.peek_admission(&p[..257]);
        let seq = kv.admit(&p[..257], &admission, 256).unwrap().seq;
        kv.finish(seq, &p[..256]).unwrap();
    };
    // Half the groups' prefixes are cached.
    for g in 0..GROUPS / 2 {
        cache_group(g, &mut kv);
    }
    let mut sched = Scheduler::new(&mut w.slots, &mut w.watch, config, policy, 32 * 16).unwrap();
    for tag in 0..WAITING as u32 {
        let r = Req(prompt(tag % GROUPS, tag));
        sched
            .add(
                r,
                RequestId::from_bits(tag.into()),
                Priority::Normal,
                tag.into(),
                Timestamp(0),
                &kv,
            )
            .unwrap();
    }
    if growth {
        // The prefix every 100th request shares gets cached.
        cache_group(GROUPS - 1, &mut kv);
    }
    let start = Instant::now();
    let step = sched.schedule(Timestamp(1_000), &mut kv, &mut w.plan);
    let took = start.elapsed();
    assert_eq!(step.admitted, 64);
    black_box(step);
    took
}

fn scheduling_step(c: &mut Criterion) {
    let lpm = Policy::lpm(Lpm::default()).unwrap();
    for (name, policy, growth) in [
        ("lpm_10k", lpm, false),
        ("lpm_10k_growth", lpm, true),
        ("fcfs_10k", Policy::default(), false),
    ] {
        step_bench(c, name, policy, growth);
    }
}

criterion_group!(benches, queue_throughput, scheduling_step);
criterion_main!(benches);
