//! The persistent thread team: each job runs once per worker, panics come
//! back as errors, splits cover a range exactly once, and a product split
//! across workers equals the single-threaded one.

mod qmatmul_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use pagoda_core::QuantKind;
use pagoda_cpu::{
    matmul, matmul_team, split, Isa, QuantMatrix, QuantizedActivations, Team, TeamError,
};

#[test]
fn every_worker_runs_each_job_exactly_once() {
    for workers in [1, 2, 3, 5] {
        let mut team = Team::new(workers).unwrap();
        assert_eq!(team.workers(), workers);
        let counts: Vec<AtomicUsize> = (0..workers).map(|_| AtomicUsize::new(0)).collect();
        let seen_workers = AtomicUsize::new(0);
        for _ in 0..50 {
            team.run(&|w, n| {
                counts[w].fetch_add(1, Ordering::Relaxed);
                seen_workers.fetch_max(n, Ordering::Relaxed);
            })
            .unwrap();
        }
        for (w, c) in counts.iter().enumerate() {
            assert_eq!(c.load(Ordering::Relaxed), 50, "worker {w} of {workers}");
        }
        assert_eq!(seen_workers.load(Ordering::Relaxed), workers);
    }
}

#[test]
fn many_rapid_runs_complete() {
    let mut team = Team::new(4).unwrap();
    let total = AtomicUsize::new(0);
    for i in 0..20_000 {
        team.run(&|w, _| {
            total.fetch_add(w + 1, Ordering::Relaxed);
        })
        .unwrap();
        // Every run is finished when `run` returns: 1+2+3+4 per run.
        assert_eq!(total.load(Ordering::Relaxed), 10 * (i + 1));
    }
}

#[test]
fn a_panicking_job_is_an_error_and_the_team_survives() {
    let mut team = Team::new(3).unwrap();
    let err = team
        .run(&|w, _| {
            if w == 2 {
                panic!("worker two fails");
            }
        })
        .unwrap_err();
    assert_eq!(
        err,
        TeamError::Panicked {
            worker: 2,
            message: "worker two fails".into()
        }
    );
    let err = team
        .run(&|w, _| assert!(w != 0, "caller fails"))
        .unwrap_err();
    assert!(
        matches!(err, TeamError::Panicked { worker: 0, .. }),
        "{err:?}"
    );
    // Still usable, every worker still there.
    let ran = Mutex::new(Vec::new());
    team.run(&|w, _| ran.lock().unwrap().push(w)).unwrap();
    let mut ran = ran.into_inner().unwrap();
    ran.sort();
    assert_eq!(ran, [0, 1, 2]);
}

#[test]
fn dropping_an_idle_team_joins_its_workers() {
    for workers in [1, 2, 8] {
        let team = Team::new(workers).unwrap();
        drop(team);
    }
    let mut team = Team::new(3).unwrap();
    team.run(&|_, _| {}).unwrap();
    // Let the workers fall asleep past their spin, then drop.
    std::thread::sleep(std::time::Duration::from_millis(50));
    drop(team);
}

#[test]
fn split_covers_a_range_once_in_aligned_runs() {
    let mut rng = fastrand::Rng::with_seed(5);
    for _ in 0..2000 {
        let start = rng.usize(0..100);
        let range = start..start + rng.usize(0..500);
        let (workers, align) = (rng.usize(1..17), rng.usize(1..17));
        let mut next = range.start;
        let mut sizes = Vec::new();
        for w in 0..workers {
            let part = split(range.clone(), w, workers, align);
            assert_eq!(part.start, next, "{range:?} {w}/{workers} align {align}");
            assert!(part.end >= part.start);
            if part.end != range.end {
                assert_eq!((part.end - range.start) % align, 0, "unaligned cut");
            }
            sizes.push(part.len().div_ceil(align));
            next = part.end;
        }
        assert_eq!(next, range.end);
        // Units differ by at most one between workers.
        let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(hi - lo <= 1, "{sizes:?}");
    }
    assert_eq!(split(0..10, 0, 0, 4), 0..0);
    assert_eq!(split(0..10, 3, 2, 4), 0..0);
}

#[test]
fn a_product_split_across_the_team_equals_one_thread() {
    let mut rng = fastrand::Rng::with_seed(9);
    for workers in [1, 2, 3, 4] {
        let mut team = Team::new(workers).unwrap();
        // Few rows (one worker's claim takes them all) and many (each
        // worker claims several runs, the last one short).
        let kinds = [QuantKind::Q4_1, QuantKind::Q4_K, QuantKind::F16];
        for (kind, many_rows) in kinds.into_iter().flat_map(|k| [(k, false), (k, true)]) {
            let cols = 256 * rng.usize(1..3);
            let rows = if many_rows {
                rng.usize(600..1400)
            } else {
                rng.usize(1..70)
            };
            let n = rng.usize(1..20);
            let data = qmatmul_support::random_weights(&mut rng, kind, rows, cols);
            let x = qmatmul_support::random_activations(&mut rng, n, cols);
            let w = QuantMatrix::new(kind, rows, cols, &data).unwrap();
            let mut acts = QuantizedActivations::new();
            acts.quantize(kind, &x, n, cols).unwrap();
            let mut one = vec![0.0f32; n * rows];
            matmul(Isa::Scalar, &w, &acts, &mut one, 0..rows).unwrap();
            for isa in [Isa::Scalar, Isa::detect()] {
                let mut many = vec![f32::NAN; n * rows];
                matmul_team(&mut team, isa, &w, &acts, &mut many).unwrap();
                let mut single = vec![0.0f32; n * rows];
                matmul(isa, &w, &acts, &mut single, 0..rows).unwrap();
                assert_eq!(many, single, "{kind} {isa:?} with {workers} workers");
                if isa == Isa::Scalar {
                    assert_eq!(many, one);
                }
            }
        }
    }
}

/// Several matrices in one run of the team (a layer's q, k and v) give
/// each matrix exactly what its own one-thread product gives, for row
/// counts that do not fall on the workers' unit, decode and prefill sizes,
/// and both activation formats.
#[test]
fn products_in_one_run_equal_each_alone() {
    let mut rng = fastrand::Rng::with_seed(11);
    for workers in [1, 2, 3] {
        let mut team = Team::new(workers).unwrap();
        for (kind, f32_acts) in [
            (QuantKind::Q4_1, true),
            (QuantKind::Q8_0, true),
            (QuantKind::Q4_K, false),
        ] {
            let cols = 256 * rng.usize(1..3);
            let n = [1, 5, 30][rng.usize(0..3)];
            let rows = [rng.usize(1..40), rng.usize(1..13), rng.usize(1..29)];
            let data: Vec<Vec<u8>> = rows
                .iter()
                .map(|&r| qmatmul_support::random_weights(&mut rng, kind, r, cols))
                .collect();
            let x = qmatmul_support::random_activations(&mut rng, n, cols);
            let ws: Vec<QuantMatrix<'_>> = rows
                .iter()
                .zip(&data)
                .map(|(&r, d)| QuantMatrix::new(kind, r, cols, d).unwrap())
                .collect();
            let mut acts = QuantizedActivations::new();
            if f32_acts {
                acts.keep_f32(&x, n, cols).unwrap();
            } else {
                acts.quantize(kind, &x, n, cols).unwrap();
            }
            let isa = Isa::detect();
            let [mut a, mut b, mut c] = rows.map(|r| vec![f32::NAN; n * r]);
            pagoda_cpu::matmul_team_each(
                &mut team,
                isa,
                [&ws[0], &ws[1], &ws[2]],
                &acts,
                [&mut a, &mut b, &mut c],
            )
            .unwrap();
            for (w, got) in ws.iter().zip([&a, &b, &c]) {
                let mut alone = vec![0.0f32; n * w.rows()];
                matmul(isa, w, &acts, &mut alone, 0..w.rows()).unwrap();
                assert_eq!(got, &alone, "{kind} n {n} rows {rows:?}, {workers} workers");
            }
        }
    }
}

/// The thread each worker of a run is on, by worker index.
fn run_threads(team: &mut Team) -> Vec<std::thread::ThreadId> {
    let seen = Mutex::new(vec![None; team.workers()]);
    team.run(&|w, _| seen.lock().unwrap()[w] = Some(std::thread::current().id()))
        .unwrap();
    seen.into_inner()
        .unwrap()
        .into_iter()
        .map(Option::unwrap)
        .collect()
}

#[test]
fn clones_share_the_same_workers() {
    let mut team = Team::new(3).unwrap();
    let mut other = team.clone();
    assert_eq!(other.workers(), 3);
    let (a, b) = (run_threads(&mut team), run_threads(&mut other));
    // Workers 1 and 2 are the same two threads; worker 0 is the caller.
    assert_eq!(a[1..], b[1..]);
    assert_eq!(a[0], std::thread::current().id());
    assert!(!a[1..].contains(&a[0]));
    // Dropping one handle leaves the workers to the other.
    drop(team);
    assert_eq!(run_threads(&mut other)[1..], a[1..]);
}

#[test]
fn runs_from_two_threads_take_turns() {
    // Two callers on clones of one team: each run still sees every worker
    // exactly once and no other run's job.
    let team = Team::new(3).unwrap();
    std::thread::scope(|s| {
        for caller in 0..2usize {
            let mut team = team.clone();
            s.spawn(move || {
                for i in 0..2000 {
                    let tag = caller * 1_000_000 + i;
                    let seen = Mutex::new(Vec::new());
                    team.run(&|w, _| seen.lock().unwrap().push((tag, w)))
                        .unwrap();
                    let mut seen = seen.into_inner().unwrap();
                    seen.sort();
                    assert_eq!(seen, [(tag, 0), (tag, 1), (tag, 2)]);
                }
            });
        }
    });
}

#[test]
fn a_run_from_inside_a_job_is_refused() {
    for workers in [1, 3] {
        let team = Team::new(workers).unwrap();
        let inner = Mutex::new(team.clone());
        let errors = Mutex::new(Vec::new());
        let mut outer = team;
        outer
            .run(&|w, _| {
                if let Ok(mut inner) = inner.try_lock() {
                    errors.lock().unwrap().push((w, inner.run(&|_, _| {})));
                }
            })
            .unwrap();
        let errors = errors.into_inner().unwrap();
        // At least one worker got the handle; every one that did was refused.
        assert!(!errors.is_empty());
        for (w, e) in errors {
            assert_eq!(e, Err(TeamError::Nested), "worker {w} of {workers}");
        }
        // Outside a job, the same handle runs.
        inner.into_inner().unwrap().run(&|_, _| {}).unwrap();
    }
}

#[test]
fn a_single_team_runs_on_the_caller() {
    let mut team = Team::single();
    assert_eq!(team.workers(), 1);
    assert_eq!(run_threads(&mut team), [std::thread::current().id()]);
}

#[test]
fn for_each_chunk_hands_every_piece_to_one_worker_once() {
    for workers in [1, 2, 3] {
        let mut team = Team::new(workers).unwrap();
        for (len, chunk) in [(0usize, 4usize), (1, 4), (10, 3), (64, 8), (7, 0), (5, 9)] {
            let mut data = vec![0u32; len];
            team.for_each_chunk(&mut data, chunk, &|i, piece| {
                for v in piece {
                    *v += 1 + i as u32;
                }
            })
            .unwrap();
            let chunk = chunk.max(1);
            let want: Vec<u32> = (0..len).map(|k| 1 + (k / chunk) as u32).collect();
            assert_eq!(data, want, "{workers} workers, {len} by {chunk}");
        }
    }
}
