//! A small engine around the scheduler for tests: storage, one step, and
//! the engine's side of a step (sample, finish).
#![allow(dead_code)]

use pagoda_core::scheduler::{
    EntryId, Policy, SchedSlot, Scheduler, SchedulerConfig, SchedulerPolicy, StepPlan, Work,
    WorkKind,
};
use pagoda_core::{
    KvCache, KvGroups, KvStorage, PageEntry, PageId, Priority, RadixCache, RadixNode, Request,
    RequestId, SeqEntry, Timestamp,
};

#[derive(Debug, Clone, PartialEq)]
pub struct Req {
    pub tag: u32,
    pub prompt: Vec<u32>,
    pub max_new: u32,
    /// Whether its pages enter the prefix cache (a recurrent model's do
    /// not).
    pub shares_pages: bool,
}

impl Request for Req {
    fn prompt(&self) -> &[u32] {
        &self.prompt
    }
    fn max_output_tokens(&self) -> u32 {
        self.max_new
    }
    fn reuses_prefix(&self) -> bool {
        self.shares_pages
    }
    fn shares_pages(&self) -> bool {
        self.shares_pages
    }
}

/// A prompt: `shared` tokens of prefix `group`, then `own` tokens unique to `tag`.
pub fn prompt(group: u32, shared: usize, tag: u32, own: usize) -> Vec<u32> {
    let mut p: Vec<u32> = (0..shared as u32).map(|i| group * 100_000 + i).collect();
    p.extend((0..own as u32).map(|i| 1_000_000_000 + tag * 10_000 + i));
    p
}

fn leak<T>(v: Vec<T>) -> &'static mut [T] {
    Box::leak(v.into_boxed_slice())
}

pub struct Engine<P: SchedulerPolicy = Policy> {
    pub kv: KvCache<'static>,
    pub sched: Scheduler<'static, Req, P>,
    pub plan: Vec<Work>,
    pub now: u64,
    pub next_arrival: u64,
}

impl<P: SchedulerPolicy> Engine<P> {
    pub fn new(pages: usize, config: SchedulerConfig, policy: P) -> Self {
        Self::with_slots(pages, 1024, config, policy)
    }

    pub fn with_slots(pages: usize, slots: usize, config: SchedulerConfig, policy: P) -> Self {
        Self::with_groups(pages, slots, config, policy, KvGroups::SINGLE, 64)
    }

    /// An engine whose cache pages layers in `groups`, each sequence's row
    /// `rows_per_seq` pages long.
    pub fn with_groups(
        pages: usize,
        slots: usize,
        config: SchedulerConfig,
        policy: P,
        groups: KvGroups,
        rows_per_seq: usize,
    ) -> Self {
        let max_seqs = config.max_batch as usize;
        let nodes = pages.max(1);
        let g = groups.count() as usize;
        let kv = KvCache::with_groups(
            KvStorage {
                pages: leak(vec![PageEntry::EMPTY; pages]),
                rows: leak(vec![PageId::VACANT; max_seqs * rows_per_seq * g]),
                seqs: leak(vec![SeqEntry::EMPTY; max_seqs]),
                nodes: leak(vec![RadixNode::EMPTY; nodes]),
                index: leak(vec![0u64; RadixCache::index_len_for(nodes)]),
                scratch: leak(vec![PageId::VACANT; rows_per_seq * g]),
            },
            groups,
            leak(vec![PageId::VACANT; nodes * (g - 1)]),
        )
        .unwrap();
        let sched = Scheduler::new(
            leak((0..slots).map(|_| SchedSlot::EMPTY).collect()),
            leak(vec![0u32; Scheduler::<Req>::watch_len_for(slots)]),
            config,
            policy,
            (rows_per_seq * 16) as u32,
        )
        .unwrap();
        Self {
            kv,
            sched,
            plan: vec![Work::EMPTY; max_seqs],
            now: 0,
            next_arrival: 0,
        }
    }

    pub fn add(&mut self, tag: u32, prompt: Vec<u32>, max_new: u32, priority: Priority) -> EntryId {
        self.add_request(
            Req {
                tag,
                prompt,
                max_new,
                shares_pages: true,
            },
            priority,
        )
    }

    /// Adds `request` (its tag its id) now.
    pub fn add_request(&mut self, request: Req, priority: Priority) -> EntryId {
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        let tag = request.tag;
        self.sched
            .add(
                request,
                RequestId::from_bits(u64::from(tag)),
                priority,
                arrival,
                Timestamp(self.now),
                &self.kv,
            )
            .unwrap()
    }

    pub fn cancel(&mut self, entry: EntryId) -> Result<Req, pagoda_core::scheduler::SchedError> {
        self.sched.cancel(entry, &mut self.kv)
    }

    /// Plans a step at the current time; returns the plan and its items.
    pub fn schedule(&mut self) -> (StepPlan, Vec<Work>) {
        let now = Timestamp(self.now);
        let step = self.sched.schedule(now, &mut self.kv, &mut self.plan);
        (step, self.plan[..step.work].to_vec())
    }

    /// The engine's side: time passes, sampled tokens are recorded, finished
    /// requests leave with their prompt cached. Returns the tags finished.
    pub fn complete(&mut self, work: &[Work], step_us: u64) -> Vec<u32> {
        self.now += step_us;
        let mut done = Vec::new();
        for w in work {
            let samples = matches!(w.kind, WorkKind::Decode { .. })
                || matches!(w.kind, WorkKind::Prefill { last: true, .. });
            if samples
                && self
                    .sched
                    .record_token(w.entry, Timestamp(self.now))
                    .unwrap()
            {
                let req = self.sched.request(w.entry).unwrap().clone();
                let now = Timestamp(self.now);
                self.sched
                    .finish(w.entry, &req.prompt, now, &mut self.kv)
                    .unwrap();
                done.push(req.tag);
            }
        }
        done
    }

    /// Tags admitted (first chunk) in a plan, in plan order.
    pub fn admitted(&self, work: &[Work]) -> Vec<u32> {
        work.iter()
            .filter(|w| matches!(w.kind, WorkKind::Prefill { first: true, .. }))
            .map(|w| self.sched.request(w.entry).unwrap().tag)
            .collect()
    }

    /// Runs steps until idle; returns tags in admission order.
    pub fn run_to_idle(&mut self, step_us: u64) -> Vec<u32> {
        let mut order = Vec::new();
        let mut guard = 0;
        while !self.sched.is_idle() {
            let (_, work) = self.schedule();
            order.extend(self.admitted(&work));
            self.complete(&work, step_us);
            guard += 1;
            assert!(guard < 100_000, "no progress");
        }
        order
    }
}
