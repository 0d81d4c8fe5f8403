//! Gemma 3's sliding-window layers in the paged cache, through the real
//! scheduler: 16 sequences of 4,096 tokens decode at once in a pool of 30 %
//! of the bytes that caching every layer in full would take, with no
//! preemption, and each sequence's windowed groups hold at most a window
//! and a page while it decodes.

mod common;

use common::sched::{prompt, Engine};
use pagoda_core::scheduler::{Policy, SchedulerConfig, WorkKind};
use pagoda_core::{KvGroups, LayerPlace, Priority, PAGE_SIZE};

/// Gemma 3 270M: 18 layers, every sixth global, the rest see 512 tokens.
fn gemma3_groups() -> (KvGroups, u32) {
    let windows: Vec<u32> = (0..18).map(|l| if l % 6 == 5 { 0 } else { 512 }).collect();
    let mut places = vec![LayerPlace::default(); 18];
    KvGroups::plan(&windows, &mut places).unwrap()
}

#[test]
fn sixteen_gemma3_sequences_of_4096_tokens_fit_in_30_percent_of_a_full_cache() {
    let (groups, per_group) = gemma3_groups();
    assert_eq!((groups.count(), per_group), (6, 3));
    const SEQS: usize = 16;
    const CONTEXT: usize = 4096;
    const OUTPUT: u32 = 128;
    // Caching every layer in full: a page of all 18 layers per 16 tokens.
    let full_cache_units = SEQS * CONTEXT / PAGE_SIZE * 18;
    // Our pages hold 3 layers each.
    let pool_pages = full_cache_units * 30 / 100 / per_group as usize;
    let config = SchedulerConfig {
        max_batch: SEQS as u32,
        token_budget: 2048,
        // Prefill at full speed beside the decodes, so that every sequence
        // is in before the first finishes.
        prefill_share: None,
        ..SchedulerConfig::default()
    };
    let policy = Policy::Fcfs(pagoda_core::scheduler::Fcfs);
    let rows = CONTEXT / PAGE_SIZE + 1;
    let mut e = Engine::with_groups(pool_pages, 64, config, policy, groups, rows);
    for tag in 0..SEQS as u32 {
        let p = prompt(tag, 0, tag, CONTEXT - OUTPUT as usize);
        e.add(tag, p, OUTPUT, Priority::Normal);
    }
    let (mut most_running, mut peak_referenced, mut steps) = (0, 0, 0);
    let (mut worst_windowed, mut peak_decoding) = (0, 0);
    while !e.sched.is_idle() {
        let (plan, work) = e.schedule();
        assert!(plan.work > 0, "the scheduler stalled");
        most_running = most_running.max(e.sched.running());
        peak_referenced = peak_referenced.max(e.kv.referenced_pages());
        for w in &work {
            if let WorkKind::Decode { .. } = w.kind {
                for g in groups.full()..groups.count() {
                    let held = e.kv.group_pages(w.seq, g).unwrap();
                    let held = held.iter().filter(|p| !p.is_vacant()).count() as u32;
                    assert!(held <= groups.window_pages(), "{held} windowed pages");
                    worst_windowed = worst_windowed.max(held);
                }
            }
        }
        if work
            .iter()
            .all(|w| matches!(w.kind, WorkKind::Decode { .. }))
        {
            peak_decoding = peak_decoding.max(e.kv.referenced_pages());
        }
        e.complete(&work, 1_000);
        steps += 1;
        assert!(steps < 100_000);
    }
    let metrics = e.sched.metrics();
    assert_eq!(most_running, SEQS as u32, "all sixteen decode at once");
    assert_eq!(metrics.preemptions, 0);
    assert_eq!(e.kv.referenced_pages(), 0);
    let share = |pages: u32| f64::from(pages) * f64::from(per_group) / full_cache_units as f64;
    println!(
        "16 x {CONTEXT} tokens: pool {pool_pages} pages of {per_group} layers (30% of a full cache); \
         peak held {peak_referenced} pages = {:.1}% of a full cache ({peak_decoding} = {:.1}% \
         while only decoding); windowed rows held at most {worst_windowed} pages (a window is {} \
         and a page)",
        100.0 * share(peak_referenced),
        100.0 * share(peak_decoding),
        groups.window_pages() - 1,
    );
    // Decoding, each sequence holds its full pages and a window per group.
    let per_seq = u32::try_from(groups.pages_at(CONTEXT as u64)).unwrap();
    assert!(peak_decoding <= SEQS as u32 * per_seq);
    assert!(share(peak_referenced) <= 0.30);
}
