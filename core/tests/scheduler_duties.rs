//! The scheduler's duties beyond the policy spec (`scheduler_spec.rs`): no
//! head-of-line blocking, chunked prefill and its share of the step budget,
//! preemption, cancellation, output caps, and typed refusals of caller
//! input.

mod common;

use common::sched::{prompt, Engine, Req};
use pagoda_core::scheduler::{
    Lpm, Policy, SchedSlot, Scheduler, SchedulerConfig, SchedulerPolicy, Work, WorkKind,
    DEFAULT_PREFILL_SHARE,
};
use pagoda_core::{
    KvStorage, PageEntry, PageId, Priority, RadixCache, RadixNode, SeqEntry, Timestamp,
};

const STEP: u64 = 10_000;

fn config() -> SchedulerConfig {
    SchedulerConfig {
        max_batch: 1,
        token_budget: 4096,
        fairness_threshold_us: None,
        aging_per_second: 0.0,
        ..SchedulerConfig::default()
    }
}

fn lpm() -> Policy {
    Policy::lpm(Lpm::default()).unwrap()
}

/// Runs one request to completion so its prompt is cached.
fn warm<P: SchedulerPolicy>(e: &mut Engine<P>, tag: u32, p: Vec<u32>) {
    e.add(tag, p, 1, Priority::Normal);
    e.run_to_idle(STEP);
}

mod issue_duties {
    use super::*;

    #[test]
    fn no_head_of_line_blocking() {
        let cfg = SchedulerConfig {
            max_batch: 8,
            ..config()
        };
        // 20 pages; a running request holds 12.
        let mut e = Engine::new(20, cfg, Policy::default());
        e.add(0, prompt(0, 0, 0, 180), 50, Priority::Normal);
        let (_, work) = e.schedule();
        e.complete(&work, STEP);
        e.add(1, prompt(1, 0, 1, 300), 1, Priority::Normal); // needs 19 pages
        e.add(2, prompt(2, 0, 2, 40), 1, Priority::Normal); // needs 3
        let (step, work) = e.schedule();
        assert_eq!(
            e.admitted(&work),
            vec![2],
            "the light one passes the misfit"
        );
        assert_eq!(step.skipped_for_pages, 1);
    }

    #[test]
    fn overdue_misfit_gets_its_turn() {
        let cfg = SchedulerConfig {
            max_batch: 8,
            fairness_threshold_us: Some(3 * STEP),
            ..config()
        };
        let mut e = Engine::new(24, cfg, Policy::default());
        e.add(0, prompt(0, 0, 0, 100), 6, Priority::Normal);
        let (_, work) = e.schedule();
        e.complete(&work, STEP);
        e.add(1, prompt(1, 0, 1, 300), 1, Priority::Normal); // 19 pages: must wait
        let mut admitted = Vec::new();
        for tag in 2..30 {
            e.add(tag, prompt(tag, 0, tag, 20), 3, Priority::Normal);
            let (_, work) = e.schedule();
            admitted.extend(e.admitted(&work));
            e.complete(&work, STEP);
        }
        assert!(admitted.contains(&1), "the big one ran: {admitted:?}");
    }

    #[test]
    fn chunked_prefill_within_token_budget() {
        let cfg = SchedulerConfig {
            max_batch: 4,
            token_budget: 100,
            ..config()
        };
        let mut e = Engine::new(256, cfg, Policy::default());
        e.add(0, prompt(0, 0, 0, 350), 2, Priority::Normal);
        let mut chunks = Vec::new();
        while !e.sched.is_idle() {
            let (step, work) = e.schedule();
            assert!(step.prefill_tokens + step.decode_tokens <= 100);
            for w in &work {
                if let WorkKind::Prefill { start, len, .. } = w.kind {
                    chunks.push((start, len));
                }
            }
            e.complete(&work, STEP);
        }
        assert_eq!(chunks, vec![(0, 100), (100, 100), (200, 100), (300, 50)]);
    }

    /// Pairs of token counts: (decode, prefill) per step, or (start, len)
    /// per prefill chunk.
    type Pairs = Vec<(u32, u32)>;

    /// Runs `e` to idle; returns each step's (decode, prefill) tokens and
    /// the prefill chunks.
    fn run_steps<P: SchedulerPolicy>(e: &mut Engine<P>) -> (Pairs, Pairs) {
        let (mut steps, mut chunks) = (Vec::new(), Vec::new());
        while !e.sched.is_idle() {
            let (step, work) = e.schedule();
            steps.push((step.decode_tokens, step.prefill_tokens));
            for w in &work {
                if let WorkKind::Prefill { start, len, .. } = w.kind {
                    chunks.push((start, len));
                }
            }
            e.complete(&work, STEP);
        }
        (steps, chunks)
    }

    #[test]
    fn prefill_share_caps_prefill_while_decoding() {
        // Budget 100, prefill share 0.3: while a step decodes, its prefill
        // takes at most 30 tokens (by hand: 100 * 0.3); a step with nothing
        // to decode takes the whole budget. Prompts of 95 and 350: the
        // first step (no decodes yet) prefills 100.
        let cfg = SchedulerConfig {
            max_batch: 4,
            token_budget: 100,
            ..config()
        };
        let policy = Policy::parse("lpm", &[("prefill_share", "0.3")]).unwrap();
        for bad in ["0", "1.5", "NaN", "x"] {
            assert!(
                Policy::parse("lpm", &[("prefill_share", bad)]).is_err(),
                "{bad}"
            );
        }
        let mut e = Engine::new(256, cfg, policy);
        e.add(0, prompt(0, 0, 0, 95), 8, Priority::Normal);
        e.add(1, prompt(1, 0, 1, 350), 2, Priority::Normal);
        let (steps, chunks) = run_steps(&mut e);
        assert_eq!(steps[0], (0, 100), "{steps:?}");
        for &(decode, prefill) in &steps {
            let cap = if decode > 0 { 30 } else { 100 };
            assert!(prefill <= cap, "{steps:?}");
        }
        assert!(steps.iter().any(|&(d, p)| d > 0 && p == 30), "{steps:?}");
        let total: u32 = chunks.iter().map(|c| c.1).sum();
        assert_eq!(total, 95 + 350, "{chunks:?}");
    }

    #[test]
    fn decode_first_is_the_default_for_every_policy() {
        // The scheduler's own share (the default, 1/8) applies to FCFS and
        // LPM alike; a share of 1 (config or LPM's own) gives prefill all
        // the decodes leave. Budget 160: 20 tokens of prefill while
        // decoding.
        assert_eq!(
            SchedulerConfig::default().prefill_share,
            Some(DEFAULT_PREFILL_SHARE)
        );
        let cfg = SchedulerConfig {
            max_batch: 4,
            token_budget: 160,
            ..config()
        };
        let off = SchedulerConfig {
            prefill_share: Some(1.0),
            ..cfg
        };
        let lpm_off = Policy::parse("lpm", &[("prefill_share", "1")]).unwrap();
        let cases = [
            (cfg, Policy::default(), Some(20)),
            (cfg, lpm(), Some(20)),
            (off, Policy::default(), None),
            (
                SchedulerConfig {
                    prefill_share: None,
                    ..cfg
                },
                lpm(),
                None,
            ),
            (cfg, lpm_off, None),
        ];
        for (cfg, policy, cap) in cases {
            let mut e = Engine::new(256, cfg, policy);
            e.add(0, prompt(0, 0, 0, 40), 30, Priority::Normal);
            e.add(1, prompt(1, 0, 1, 600), 2, Priority::Normal);
            let (steps, _) = run_steps(&mut e);
            let decoding: Vec<u32> = steps.iter().filter(|s| s.0 > 0).map(|s| s.1).collect();
            let most = decoding.iter().copied().max().unwrap_or(0);
            match cap {
                Some(cap) => assert_eq!(most, cap, "{policy:?} {steps:?}"),
                None => assert!(most > 100, "{policy:?} {steps:?}"),
            }
        }
        for bad in [0.0, -1.0, 1.5, f32::NAN] {
            let cfg = SchedulerConfig {
                prefill_share: Some(bad),
                ..SchedulerConfig::default()
            };
            assert!(cfg.validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn preemption_instead_of_deadlock() {
        let cfg = SchedulerConfig {
            max_batch: 4,
            ..config()
        };
        // 12 pages; four requests of 2 pages each grow to 6 pages each.
        let mut e = Engine::new(12, cfg, Policy::default());
        for tag in 0..4 {
            e.add(
                tag,
                prompt(tag, 0, tag, 20),
                70,
                Priority::HIGHEST_FIRST[tag as usize],
            );
        }
        let mut finished = Vec::new();
        let mut steps = 0;
        while !e.sched.is_idle() {
            let (_, work) = e.schedule();
            assert!(e.kv.pool().referenced_pages() <= 12);
            finished.extend(e.complete(&work, STEP));
            steps += 1;
            assert!(steps < 5_000, "deadlock");
        }
        finished.sort_unstable();
        assert_eq!(finished, vec![0, 1, 2, 3]);
        assert!(e.sched.metrics().preemptions > 0);
        assert_eq!(e.kv.pool().referenced_pages(), 0, "no page leaked");
    }

    #[test]
    fn cancel_frees_pages_at_once() {
        let cfg = SchedulerConfig {
            max_batch: 4,
            ..config()
        };
        let mut e = Engine::new(64, cfg, Policy::default());
        let running = e.add(0, prompt(0, 0, 0, 100), 50, Priority::Normal);
        let waiting = e.add(1, prompt(1, 0, 1, 100), 50, Priority::Low);
        let (_, work) = e.schedule();
        e.complete(&work, STEP);
        assert!(e.kv.pool().referenced_pages() > 0);
        let r0 = e.cancel(running).unwrap();
        let r1 = e.cancel(waiting).unwrap();
        assert_eq!((r0.tag, r1.tag), (0, 1));
        assert_eq!(e.kv.pool().referenced_pages(), 0);
        assert!(e.sched.is_idle());
        assert!(e.cancel(running).is_err(), "stale id");
    }

    #[test]
    fn output_is_capped_to_the_row_and_overlong_prompts_refused() {
        // Rows hold 1,024 tokens.
        let mut e = Engine::new(128, config(), Policy::default());
        let too_long = e.sched.add(
            Req {
                tag: 9,
                prompt: vec![1; 1024],
                max_new: 1,
                shares_pages: true,
            },
            pagoda_core::RequestId::from_bits(9),
            Priority::Normal,
            0,
            Timestamp(0),
            &e.kv,
        );
        assert_eq!(
            too_long.unwrap_err().1,
            pagoda_core::scheduler::SchedError::TooLong
        );
        // 1,000 prompt tokens and 500 asked: 24 fit, and the request finishes.
        let id = e.add(1, prompt(1, 0, 1, 1000), 500, Priority::Normal);
        let mut generated = 0;
        while !e.sched.is_idle() {
            let (_, work) = e.schedule();
            generated = generated.max(e.sched.generated(id).unwrap_or(0));
            e.complete(&work, STEP);
        }
        assert_eq!(generated, 23, "the 24th token finishes it");
        assert_eq!(e.sched.metrics().generated_tokens, 24);
        assert_eq!(e.kv.pool().referenced_pages(), 0);
    }

    #[test]
    fn an_overdue_request_the_pool_can_never_hold_blocks_nobody() {
        let cfg = SchedulerConfig {
            max_batch: 4,
            fairness_threshold_us: Some(STEP),
            ..config()
        };
        // 20 pages hold 320 tokens; a 600-token prompt never fits.
        let mut e = Engine::new(20, cfg, Policy::default());
        let huge = e.add(0, prompt(0, 0, 0, 600), 1, Priority::Normal);
        e.now += 10 * STEP;
        let mut finished = Vec::new();
        for tag in 1..6 {
            e.add(tag, prompt(tag, 0, tag, 30), 2, Priority::Normal);
            let (_, work) = e.schedule();
            finished.extend(e.complete(&work, STEP));
        }
        for _ in 0..10 {
            let (_, work) = e.schedule();
            finished.extend(e.complete(&work, STEP));
        }
        finished.sort_unstable();
        assert_eq!(finished, vec![1, 2, 3, 4, 5]);
        assert_eq!(e.cancel(huge).unwrap().tag, 0);
        assert!(e.sched.is_idle());
    }
}

mod caller_input {
    use super::*;
    use pagoda_core::scheduler::SchedError;
    use pagoda_core::{KvCache, Request, RequestId};
    use std::cell::Cell;

    #[test]
    fn an_empty_prompt_is_a_typed_refusal_that_changes_nothing() {
        let mut e = Engine::new(32, config(), lpm());
        let refused = e.sched.add(
            Req {
                tag: 1,
                prompt: Vec::new(),
                max_new: 4,
                shares_pages: true,
            },
            RequestId::from_bits(1),
            Priority::Normal,
            0,
            Timestamp(0),
            &e.kv,
        );
        let (request, error) = refused.unwrap_err();
        assert_eq!(error, SchedError::EmptyPrompt);
        assert_eq!(request.tag, 1, "the request is handed back");
        assert!(e.sched.is_idle());
        let (step, _) = e.schedule();
        assert_eq!(step.work, 0);
    }

    #[test]
    fn a_one_slot_scheduler_watches_with_a_one_bucket_table() {
        // `watch_len_for(1)` is 1: every key lands in the one bucket.
        let mut e = Engine::with_slots(64, 1, config(), lpm());
        warm(&mut e, 0, prompt(7, 64, 0, 8));
        e.add(1, prompt(7, 64, 1, 8), 2, Priority::Normal);
        assert_eq!(e.run_to_idle(STEP), vec![1]);
        assert_eq!(e.sched.metrics().cached_tokens, 64);
        assert_eq!(e.kv.pool().referenced_pages(), 0);
    }

    /// A request that does not share its pages (a recurrent model's)
    /// neither starts on cached pages nor leaves any: a later request of
    /// the same prompt finds nothing, while one that shares leaves its
    /// pages for the next.
    #[test]
    fn a_request_that_does_not_share_its_pages_caches_none() {
        let mut e = Engine::new(64, config(), lpm());
        warm(&mut e, 0, prompt(7, 64, 0, 8));
        let cached = e.kv.pool().evictable_pages();
        assert!(cached >= 4, "a shared prompt's pages are cached");
        let private = |tag| Req {
            tag,
            prompt: prompt(7, 64, tag, 40),
            max_new: 20,
            shares_pages: false,
        };
        e.add_request(private(1), Priority::Normal);
        assert_eq!(e.run_to_idle(STEP), vec![1]);
        assert_eq!(
            e.sched.metrics().cached_tokens,
            0,
            "no cached prefix served"
        );
        assert_eq!(e.kv.pool().evictable_pages(), cached, "nothing new cached");
        assert_eq!(e.kv.pool().referenced_pages(), 0);
        e.add_request(private(2), Priority::Normal);
        e.run_to_idle(STEP);
        assert_eq!(e.sched.metrics().cached_tokens, 0);
        assert_eq!(e.kv.pool().evictable_pages(), cached);
    }

    /// A request whose prompt shrinks after it was added.
    struct Shrinking {
        tokens: Vec<u32>,
        len: Cell<usize>,
    }

    impl Request for Shrinking {
        fn prompt(&self) -> &[u32] {
            &self.tokens[..self.len.get()]
        }
        fn max_output_tokens(&self) -> u32 {
            2
        }
    }

    #[test]
    fn a_prompt_that_changes_after_add_is_never_a_panic() {
        let mut pages = vec![PageEntry::EMPTY; 64];
        let mut rows = vec![PageId::from_index(0); 2 * 16];
        let mut seqs = vec![SeqEntry::EMPTY; 2];
        let mut nodes = vec![RadixNode::EMPTY; 64];
        let mut index = vec![0u64; RadixCache::index_len_for(64)];
        let mut scratch = vec![PageId::from_index(0); 16];
        let mut kv = KvCache::new(KvStorage {
            pages: &mut pages,
            rows: &mut rows,
            seqs: &mut seqs,
            nodes: &mut nodes,
            index: &mut index,
            scratch: &mut scratch,
        })
        .unwrap();
        let mut slots: Vec<SchedSlot<Shrinking>> = (0..4).map(|_| SchedSlot::EMPTY).collect();
        let mut watch = vec![0u32; 4];
        let cfg = SchedulerConfig {
            max_batch: 2,
            token_budget: 16,
            ..config()
        };
        let max_context = kv.max_context_tokens();
        let mut sched = Scheduler::new(&mut slots, &mut watch, cfg, lpm(), max_context).unwrap();
        let tokens: Vec<u32> = (0..100).collect();
        let mut entries = Vec::new();
        for (i, len) in [(0u32, 100usize), (1, 40)] {
            let request = Shrinking {
                tokens: tokens.clone(),
                len: Cell::new(len),
            };
            let id = RequestId::from_bits(u64::from(i));
            let entry = sched.add(request, id, Priority::Normal, i.into(), Timestamp(0), &kv);
            entries.push(entry.ok().unwrap());
        }
        let mut plan = vec![Work::EMPTY; 2];
        for round in 0..20u64 {
            // Both prompts shrink to nothing while the scheduler holds them.
            if round == 1 {
                for &entry in &entries {
                    if let Some(r) = sched.request(entry) {
                        r.len.set(0);
                    }
                }
            }
            let step = sched.schedule(Timestamp(round), &mut kv, &mut plan);
            for w in &plan[..step.work] {
                let samples = matches!(w.kind, WorkKind::Decode { .. })
                    || matches!(w.kind, WorkKind::Prefill { last: true, .. });
                if samples && sched.record_token(w.entry, Timestamp(round)).unwrap() {
                    let finished = sched.finish(w.entry, &[], Timestamp(round), &mut kv);
                    assert!(finished.is_ok());
                }
            }
        }
        assert!(sched.is_idle(), "both requests ran to the end");
        assert_eq!(kv.referenced_pages(), 0);
        assert_eq!(kv.active_sequences(), 0);
    }
}
