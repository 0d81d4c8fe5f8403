//! Property tests of the scheduler under random workloads: arrivals with
//! heavy prefix sharing, steps, cancellations and policy switches, against
//! the rules it promises.
//!
//! After every step: each planned request runs and appears once; a finished
//! or cancelled request never appears again; the batch and token limits
//! hold; every page is free, cached or referenced, never two at once; an
//! overdue request that was not admitted was passed over by nobody. At the
//! end, everything drains and every page is free or cached.

mod common;

use std::collections::{HashMap, HashSet};

use common::sched::{prompt, Engine};
use pagoda_core::scheduler::{Lpm, Policy, SchedulerConfig, WorkKind};
use pagoda_core::Priority;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Add {
        group: u32,
        shared_pages: usize,
        own: usize,
        max_new: u32,
        class: usize,
    },
    Step {
        dt: u64,
    },
    Cancel {
        pick: usize,
    },
    Switch {
        lpm: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..4u32, 0..6usize, 1..40usize, 1..24u32, 0..4usize).prop_map(
            |(group, shared_pages, own, max_new, class)| Op::Add { group, shared_pages, own, max_new, class }
        ),
        6 => (1..20_000u64).prop_map(|dt| Op::Step { dt }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => any::<bool>().prop_map(|lpm| Op::Switch { lpm }),
    ]
}

fn config() -> impl Strategy<Value = (SchedulerConfig, usize, bool)> {
    (
        1..8u32,
        16..400u32,
        prop::option::of(10_000..200_000u64),
        prop::bool::ANY,
        0.0..5.0f64,
        12..96usize,
        prop::bool::ANY,
    )
        .prop_map(
            |(max_batch, token_budget, threshold, share, aging, pages, lpm)| {
                (
                    SchedulerConfig {
                        max_batch,
                        token_budget,
                        fairness_threshold_us: threshold,
                        aging_per_second: aging,
                        share_prefixes: share,
                        ..SchedulerConfig::default()
                    },
                    pages,
                    lpm,
                )
            },
        )
}

fn policy(lpm: bool) -> Policy {
    if lpm {
        Policy::lpm(Lpm::default()).unwrap()
    } else {
        Policy::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn scheduler_keeps_its_promises((cfg, pages, lpm) in config(), ops in prop::collection::vec(op(), 1..400)) {
        let mut e = Engine::with_slots(pages, 512, cfg, policy(lpm));
        let total = e.kv.pool().total_pages();
        let mut live: Vec<(u32, pagoda_core::scheduler::EntryId)> = Vec::new();
        let mut arrived_at: HashMap<u32, u64> = HashMap::new();
        let mut admitted: HashSet<u32> = HashSet::new();
        let mut gone: HashSet<u32> = HashSet::new();
        let mut next_tag = 0u32;
        let threshold = cfg.fairness_threshold_us;
        let run_step = |e: &mut Engine, live: &mut Vec<(u32, pagoda_core::scheduler::EntryId)>, admitted: &mut HashSet<u32>, gone: &mut HashSet<u32>, arrived_at: &HashMap<u32, u64>, dt: u64| -> Result<(), TestCaseError> {
            // The oldest waiting request, if overdue now.
            let overdue = threshold.and_then(|t| {
                live.iter()
                    .filter(|(tag, _)| !admitted.contains(tag))
                    .map(|(tag, _)| (arrived_at[tag], *tag))
                    .min()
                    .filter(|(at, _)| e.now - at > t)
                    .map(|(_, tag)| tag)
            });
            let (step, work) = e.schedule();
            let mut seen = HashSet::new();
            let mut tokens = 0;
            let mut newly = Vec::new();
            for w in &work {
                let tag = e.sched.request(w.entry).expect("planned entries are live").tag;
                prop_assert!(seen.insert(tag), "planned twice in one step");
                prop_assert!(!gone.contains(&tag), "finished or cancelled request planned");
                prop_assert_eq!(e.sched.sequence(w.entry), Some(w.seq));
                tokens += w.tokens();
                if let WorkKind::Prefill { first: true, .. } = w.kind {
                    if admitted.insert(tag) {
                        newly.push(tag);
                    }
                }
            }
            prop_assert!(tokens <= cfg.token_budget);
            prop_assert!(e.sched.running() <= cfg.max_batch);
            let (free, cached, held) = (e.kv.pool().free_pages(), e.kv.pool().evictable_pages(), e.kv.pool().referenced_pages());
            prop_assert_eq!(free + cached + held, total);
            if let Some(old) = overdue {
                if !newly.contains(&old) && !admitted.contains(&old) {
                    prop_assert!(newly.is_empty(), "overdue {old} passed over by {newly:?} ({step:?})");
                }
            }
            // Preempted requests go back to waiting: forget their admission.
            let running: HashSet<u32> = live.iter().filter(|(_, id)| e.sched.sequence(*id).is_some()).map(|(t, _)| *t).collect();
            admitted.retain(|t| running.contains(t));
            for tag in e.complete(&work, dt) {
                prop_assert!(gone.insert(tag), "finished twice");
                live.retain(|(t, _)| *t != tag);
                admitted.remove(&tag);
            }
            Ok(())
        };
        for op in ops {
            match op {
                Op::Add { group, shared_pages, own, max_new, class } => {
                    let tag = next_tag;
                    next_tag += 1;
                    let p = prompt(group, shared_pages * 16, tag, own);
                    let id = e.add(tag, p, max_new, Priority::HIGHEST_FIRST[class]);
                    arrived_at.insert(tag, e.now);
                    live.push((tag, id));
                }
                Op::Step { dt } => run_step(&mut e, &mut live, &mut admitted, &mut gone, &arrived_at, dt)?,
                Op::Cancel { pick } if !live.is_empty() => {
                    let (tag, id) = live.remove(pick % live.len());
                    let req = e.cancel(id).unwrap();
                    prop_assert_eq!(req.tag, tag);
                    prop_assert!(gone.insert(tag));
                    admitted.remove(&tag);
                    prop_assert!(e.cancel(id).is_err(), "cancelled twice");
                }
                Op::Cancel { .. } => {}
                Op::Switch { lpm } => {
                    let waiting = e.sched.waiting();
                    e.sched.set_policy(policy(lpm), &e.kv);
                    prop_assert_eq!(e.sched.waiting(), waiting);
                }
            }
        }
        // Drain: everything finishes.
        let mut guard = 0;
        while !e.sched.is_idle() {
            run_step(&mut e, &mut live, &mut admitted, &mut gone, &arrived_at, 5_000)?;
            guard += 1;
            prop_assert!(guard < 20_000, "no progress");
        }
        prop_assert!(live.is_empty());
        prop_assert_eq!(gone.len() as u32, next_tag, "every request ended exactly once");
        prop_assert_eq!(e.kv.pool().referenced_pages(), 0);
    }
}
