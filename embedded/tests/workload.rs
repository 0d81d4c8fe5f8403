//! The workload on the host: what the firmware's run is compared against
//! must itself be right and repeatable.

use pagoda_core::scheduler::{Fcfs, Lpm, Policy};
use pagoda_core::Request;
use pagoda_embedded::script::{self, Scripted, REQUESTS};
use pagoda_embedded::{run, run_policy, Storage};

mod workload {
    use super::*;

    #[test]
    fn a_second_run_on_the_same_storage_prints_the_same_report() {
        // The firmware's storage is a static that every run reuses: each
        // run must rebuild the structures, not inherit the last run's state.
        let mut storage = Box::new(Storage::new());
        let (mut first, mut second) = (String::new(), String::new());
        run(&mut storage, &mut first).unwrap();
        run(&mut storage, &mut second).unwrap();
        assert_eq!(first, second);
        assert!(first.ends_with("\nok\n"), "{first}");
        assert!(first.contains("policy lpm") && first.contains("policy fcfs"));
    }

    #[test]
    fn lpm_serves_more_prompt_tokens_from_the_cache_than_fcfs() {
        let mut storage = Box::new(Storage::new());
        let lpm = run_policy(&mut storage, Policy::lpm(Lpm::default()).unwrap()).unwrap();
        let fcfs = run_policy(&mut storage, Policy::Fcfs(Fcfs)).unwrap();
        for outcome in [&lpm, &fcfs] {
            outcome.check().unwrap();
            assert_eq!(outcome.metrics.finished, REQUESTS as u64);
            assert_eq!(outcome.leaked_pages, 0);
            // Same traffic, same prompts: only the order differs.
            assert_eq!(outcome.metrics.prompt_tokens, lpm.metrics.prompt_tokens);
            let outputs: u32 = (0..REQUESTS).map(script::output_len).sum();
            assert_eq!(outcome.metrics.generated_tokens, u64::from(outputs));
            // The pool is small enough that the cache has to evict.
            assert!(outcome.pool.evictions > 0);
        }
        assert!(lpm.metrics.cached_tokens > fcfs.metrics.cached_tokens);
        assert_eq!(lpm.policy, "lpm");
        assert_eq!(fcfs.policy, "fcfs");
    }
}

mod script_requests {
    use super::*;

    #[test]
    fn first_turns_share_system_prompts_and_follow_ups_continue_answers() {
        assert!(Scripted::get(REQUESTS).is_none());
        let prompt = |i| Scripted::get(i).unwrap().prompt().to_vec();
        // Requests 0 and 4 open on the same system prompt (80 tokens), then
        // differ.
        let (a, b) = (prompt(0), prompt(4));
        let shared = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        assert_eq!(shared, 80);
        // A follow-up is its first turn, that turn's answer, a new question.
        let follow = prompt(16);
        assert_eq!(&follow[..a.len()], &a[..]);
        let answer: Vec<u32> = (0..script::output_len(0))
            .map(|k| script::output_token(0, k))
            .collect();
        assert_eq!(&follow[a.len()..a.len() + answer.len()], &answer[..]);
        assert_eq!(follow.len(), a.len() + answer.len() + 12);
        // Arrivals are in order, so the queue sees them as scripted.
        assert!((1..REQUESTS).all(|i| script::arrival_us(i - 1) <= script::arrival_us(i)));
    }
}
