pub mod sched;
