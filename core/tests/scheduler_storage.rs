//! The scheduler's storage: what `Scheduler::new` refuses (typed as core's
//! `StorageError`, changing nothing) and how the free slots are handed out
//! and reused. Tests are named `requirement::scenario`.

mod common;

use common::sched::{prompt, Engine, Req};
use pagoda_core::scheduler::{Policy, SchedError, SchedSlot, Scheduler, SchedulerConfig};
use pagoda_core::{Priority, RequestId, StorageError, Timestamp};

fn new_with(slots: usize, watch: usize) -> (Result<(), SchedError>, Vec<u32>) {
    let mut slots: Vec<SchedSlot<Req>> = (0..slots).map(|_| SchedSlot::EMPTY).collect();
    // A pattern `new` would overwrite (it fills the table with NIL).
    let mut watch = vec![7u32; watch];
    let result = Scheduler::new(
        &mut slots,
        &mut watch,
        SchedulerConfig::default(),
        Policy::default(),
        64,
    )
    .map(|_| ());
    (result, watch)
}

mod refused_storage {
    use super::*;

    #[test]
    fn no_slots_is_empty() {
        let (result, watch) = new_with(0, 4);
        assert_eq!(result, Err(SchedError::Storage(StorageError::Empty)));
        assert_eq!(watch, [7; 4], "a refusal changes nothing");
    }

    #[test]
    fn an_empty_watch_table_is_empty() {
        let (result, _) = new_with(4, 0);
        assert_eq!(result, Err(SchedError::Storage(StorageError::Empty)));
    }

    #[test]
    fn a_watch_table_not_a_power_of_two_is_mismatched() {
        for len in [3, 5, 6, 12] {
            let (result, watch) = new_with(4, len);
            assert_eq!(
                result,
                Err(SchedError::Storage(StorageError::Mismatched)),
                "watch length {len}"
            );
            assert!(watch.iter().all(|&w| w == 7), "a refusal changes nothing");
        }
    }

    #[test]
    fn the_error_names_its_storage_cause() {
        let e = SchedError::from(StorageError::Mismatched);
        assert_eq!(e, SchedError::Storage(StorageError::Mismatched));
        let text = e.to_string();
        assert!(text.starts_with("invalid scheduler storage"), "{text}");
        assert!(
            text.ends_with(&StorageError::Mismatched.to_string()),
            "{text}"
        );
    }

    #[test]
    fn the_smallest_storage_is_accepted() {
        // One slot, one watch bucket (whatever the watch length the slots
        // suggest, any power of two works).
        assert_eq!(new_with(1, 1).0, Ok(()));
        assert_eq!(new_with(5, 1).0, Ok(()));
        assert_eq!(new_with(5, 64).0, Ok(()));
    }
}

mod free_slots {
    use super::*;

    fn add(e: &mut Engine, tag: u32) -> Result<u32, SchedError> {
        e.sched
            .add(
                Req {
                    tag,
                    prompt: prompt(0, 0, tag, 20),
                    max_new: 4,
                    shares_pages: true,
                },
                RequestId::from_bits(u64::from(tag)),
                Priority::Normal,
                u64::from(tag),
                Timestamp(0),
                &e.kv,
            )
            .map(|entry| entry.index())
            .map_err(|(_, error)| error)
    }

    #[test]
    fn slots_are_handed_out_in_order_then_full() {
        let mut e = Engine::with_slots(64, 4, SchedulerConfig::default(), Policy::default());
        let indices: Vec<u32> = (0..4).map(|t| add(&mut e, t).unwrap()).collect();
        assert_eq!(indices, [0, 1, 2, 3]);
        assert_eq!(add(&mut e, 4), Err(SchedError::Full));
        assert_eq!(e.sched.waiting(), 4, "a refused add changes nothing");
    }

    #[test]
    fn a_freed_slot_is_reused_first_with_a_new_generation() {
        let mut e = Engine::with_slots(64, 4, SchedulerConfig::default(), Policy::default());
        let entries: Vec<_> = (0..3)
            .map(|t| e.add(t, prompt(0, 0, t, 20), 4, Priority::Normal))
            .collect();
        // Free slots 2 then 0: the last freed comes back first.
        e.cancel(entries[2]).unwrap();
        e.cancel(entries[0]).unwrap();
        assert_eq!(add(&mut e, 10), Ok(0));
        assert_eq!(add(&mut e, 11), Ok(2));
        assert_eq!(add(&mut e, 12), Ok(3));
        assert_eq!(add(&mut e, 13), Err(SchedError::Full));
        // The old ids name nothing now, though their slots are taken again.
        assert_eq!(e.sched.request(entries[0]), None);
        assert_eq!(e.cancel(entries[2]), Err(SchedError::UnknownEntry));
        assert_eq!(e.sched.request(entries[1]).map(|r| r.tag), Some(1));
    }
}
