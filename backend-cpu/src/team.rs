//! A persistent team of threads for the many small parallel steps of a
//! forward pass (one matrix product takes tens of microseconds at decode, so
//! waking a pool per step must cost next to nothing).
//!
//! `Team::run(job)` hands `job(worker, workers)` to every worker, the caller
//! being worker 0, and returns when all are done. A [`Team`] is a handle:
//! its clones share the same workers (runs from different handles take
//! turns), so the attention backend and the model's products use one set
//! of threads. Workers wait between jobs
//! at a barrier that spins a bounded number of iterations (a job a few
//! microseconds later finds them awake) and then sleeps on a `Condvar`.
//! Nothing is allocated per run. A panicking job is caught on its worker
//! and reported to the caller as [`TeamError::Panicked`] once every worker
//! has finished, so a panic never leaves the team waiting.
//!
//! Work is divided with [`split`]: contiguous, nearly equal runs of whole
//! `align`-sized units, so workers touch disjoint rows and cache lines.

use std::any::Any;
use std::cell::Cell;
use std::fmt;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

/// Spins before a waiting thread sleeps (about tens of microseconds).
const SPINS: u32 = 1 << 14;

/// Spins between yields of the time slice while spinning: when threads
/// outnumber free cores, a spinning waiter would otherwise hold the core the
/// thread it waits for needs.
const YIELD_EVERY: u32 = 1 << 8;

/// One iteration of a spin wait.
#[inline]
fn spin(i: u32) {
    if i % YIELD_EVERY == YIELD_EVERY - 1 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// The part of `range` that `worker` of `workers` takes: contiguous runs of
/// whole `align`-element units (the last may be short), as equal as units
/// allow, covering `range` exactly once over all workers. Empty for workers
/// past the number of units; `workers == 0` or `worker >= workers` is empty.
pub fn split(range: Range<usize>, worker: usize, workers: usize, align: usize) -> Range<usize> {
    let len = range.end.saturating_sub(range.start);
    if workers == 0 || worker >= workers {
        return range.start..range.start;
    }
    let align = align.max(1);
    let units = len.div_ceil(align);
    let (base, extra) = (units / workers, units % workers);
    let first = worker * base + worker.min(extra);
    let count = base + usize::from(worker < extra);
    let start = (first * align).min(len);
    let end = ((first + count) * align).min(len);
    range.start + start..range.start + end
}

/// Why a team could not start or a run failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TeamError {
    /// The operating system refused a thread.
    Spawn(String),
    /// A job tried to run a job on a team: the team would wait for itself.
    Nested,
    /// The job panicked on at least one worker (the lowest index given);
    /// every worker finished first, and the team stays usable.
    Panicked {
        /// A worker whose job panicked.
        worker: usize,
        /// The panic message, when it was a string.
        message: String,
    },
}

impl fmt::Display for TeamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Spawn(e) => write!(f, "cannot start a worker thread: {e}"),
            Self::Nested => write!(f, "a job cannot run another job on a team"),
            Self::Panicked { worker, message } => {
                write!(f, "the job panicked on worker {worker}: {message}")
            }
        }
    }
}

impl std::error::Error for TeamError {}

/// The job's type as the workers see it: its lifetime is erased, which
/// `run` makes sound by not returning before every worker is done with it.
type Job = &'static (dyn Fn(usize, usize) + Sync);

struct Shared {
    /// Bumped for every job (and for shutdown); workers wait for a change.
    epoch: AtomicU64,
    /// The current job, set before `epoch` moves.
    job: Mutex<Option<Job>>,
    /// Workers (not counting the caller) still running the current job.
    pending: AtomicUsize,
    /// Workers asleep or about to sleep on `wake`.
    sleepers: AtomicUsize,
    wake_lock: Mutex<()>,
    wake: Condvar,
    /// Set while the caller sleeps on `done`.
    caller_sleeps: AtomicBool,
    done_lock: Mutex<()>,
    done: Condvar,
    shutdown: AtomicBool,
    /// The lowest worker whose job panicked, and its message.
    panic: Mutex<Option<(usize, String)>>,
}

thread_local! {
    /// Set while this thread runs a job: a run from inside one is refused
    /// (it would wait on the run it is part of).
    static IN_JOB: Cell<bool> = const { Cell::new(false) };
}

/// Runs `job` as worker `index` of `workers`, marked as inside a job.
fn run_marked(
    job: &(dyn Fn(usize, usize) + Sync),
    index: usize,
    workers: usize,
) -> Result<(), Box<dyn Any + Send>> {
    IN_JOB.with(|c| c.set(true));
    let result = catch_unwind(AssertUnwindSafe(|| job(index, workers)));
    IN_JOB.with(|c| c.set(false));
    result
}

/// The threads of a team and their shared state; dropped (and the threads
/// joined) with the last [`Team`] handle.
struct Crew {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

impl Shared {
    fn new() -> Self {
        Self {
            epoch: AtomicU64::new(0),
            job: Mutex::new(None),
            pending: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            wake_lock: Mutex::new(()),
            wake: Condvar::new(),
            caller_sleeps: AtomicBool::new(false),
            done_lock: Mutex::new(()),
            done: Condvar::new(),
            shutdown: AtomicBool::new(false),
            panic: Mutex::new(None),
        }
    }
}

/// Threads created once and reused for every job; see the module docs.
/// Cloning gives another handle on the same threads.
#[derive(Clone)]
pub struct Team {
    crew: Arc<Mutex<Crew>>,
    workers: usize,
}

impl fmt::Debug for Team {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Team")
            .field("workers", &self.workers())
            .finish()
    }
}

impl Team {
    /// A team of `workers` (at least 1) including the calling thread, so
    /// `workers − 1` threads are started.
    pub fn new(workers: usize) -> Result<Self, TeamError> {
        let workers = workers.max(1);
        let mut crew = Crew {
            shared: Arc::new(Shared::new()),
            handles: Vec::with_capacity(workers - 1),
        };
        for index in 1..workers {
            let shared = Arc::clone(&crew.shared);
            let handle = std::thread::Builder::new()
                .name(format!("pagoda-team-{index}"))
                .spawn(move || worker_loop(&shared, index, workers))
                .map_err(|e| TeamError::Spawn(e.to_string()))?;
            // On an error above, `crew` drops here and joins those started.
            crew.handles.push(handle);
        }
        Ok(Self::from_crew(crew))
    }

    /// A team of the calling thread alone: it starts no thread, so it
    /// cannot fail.
    pub fn single() -> Self {
        Self::from_crew(Crew {
            shared: Arc::new(Shared::new()),
            handles: Vec::new(),
        })
    }

    fn from_crew(crew: Crew) -> Self {
        Self {
            workers: crew.workers(),
            crew: Arc::new(Mutex::new(crew)),
        }
    }

    /// Workers, the caller included.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Runs `job(worker, workers)` once on every worker (the caller is
    /// worker 0) and returns when all have finished. A run from another
    /// handle waits for this one; a run from inside a job is refused with
    /// [`TeamError::Nested`].
    pub fn run(&mut self, job: &(dyn Fn(usize, usize) + Sync)) -> Result<(), TeamError> {
        if IN_JOB.with(Cell::get) {
            return Err(TeamError::Nested);
        }
        lock(&self.crew).run(job)
    }
}

impl Team {
    /// Runs `f(i, piece)` for every `chunk`-element piece `i` of `data`
    /// (the last may be short), each worker taking a contiguous run of
    /// pieces: row-wise work on a step's activations (norms, gating,
    /// rounding) without the caller doing it alone. A `chunk` of 0 is
    /// taken as 1.
    ///
    /// ```
    /// use pagoda_cpu::Team;
    ///
    /// let mut team = Team::new(2).unwrap();
    /// let mut rows = vec![1.0f32; 6];
    /// team.for_each_chunk(&mut rows, 2, &|i, row| row.iter_mut().for_each(|v| *v *= i as f32))
    ///     .unwrap();
    /// assert_eq!(rows, [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]);
    /// ```
    pub fn for_each_chunk<T: Send>(
        &mut self,
        data: &mut [T],
        chunk: usize,
        f: &(dyn Fn(usize, &mut [T]) + Sync),
    ) -> Result<(), TeamError> {
        let chunk = chunk.max(1);
        let (len, pieces) = (data.len(), data.len().div_ceil(chunk));
        let base = Pieces(data.as_mut_ptr());
        self.run(&|worker, workers| {
            for i in split(0..pieces, worker, workers, 1) {
                let start = i * chunk;
                let n = chunk.min(len - start);
                // SAFETY: `split` gives each worker pieces no other worker
                // has, so these `n` elements at `start` (inside `data`,
                // as `i < pieces`) are borrowed by this worker alone, and
                // `run` returns before the borrow of `data` ends.
                let piece = unsafe { std::slice::from_raw_parts_mut(base.at(start), n) };
                f(i, piece);
            }
        })
    }
}

/// The start of a slice that [`Team::for_each_chunk`] hands out in
/// disjoint pieces.
struct Pieces<T>(*mut T);

impl<T> Pieces<T> {
    /// The element at `i` (inside the slice, by the caller).
    fn at(&self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
    }
}

// SAFETY: the pointer is only turned into disjoint `&mut` pieces, one
// worker each (see `for_each_chunk`), so sharing it is sharing `&mut [T]`
// split apart, which `T: Send` allows.
unsafe impl<T: Send> Sync for Pieces<T> {}

impl Crew {
    fn workers(&self) -> usize {
        self.handles.len() + 1
    }

    /// [`Team::run`] on the locked crew.
    fn run(&mut self, job: &(dyn Fn(usize, usize) + Sync)) -> Result<(), TeamError> {
        let workers = self.workers();
        let s = &*self.shared;
        if workers > 1 {
            // SAFETY: only the lifetime is changed. Workers use the reference
            // only between the `epoch` bump below and their `pending`
            // decrement, and this function waits for `pending` to reach 0
            // (even when the caller's own part panics) before returning, so
            // the job outlives every use. `&mut self` (the crew's lock) rules
            // out a second run replacing it meanwhile.
            let job: Job =
                unsafe { std::mem::transmute::<&(dyn Fn(usize, usize) + Sync), Job>(job) };
            *lock(&s.job) = Some(job);
            s.pending.store(workers - 1, SeqCst);
            s.epoch.fetch_add(1, SeqCst);
            if s.sleepers.load(SeqCst) > 0 {
                let _guard = lock(&s.wake_lock);
                s.wake.notify_all();
            }
        }
        let mine = run_marked(job, 0, workers);
        if workers > 1 {
            wait_done(s);
            *lock(&s.job) = None;
        }
        let theirs = lock(&s.panic).take();
        match (mine, theirs) {
            (Err(payload), _) => Err(TeamError::Panicked {
                worker: 0,
                message: message(payload.as_ref()),
            }),
            (Ok(()), Some((worker, message))) => Err(TeamError::Panicked { worker, message }),
            (Ok(()), None) => Ok(()),
        }
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.shutdown.store(true, SeqCst);
        s.epoch.fetch_add(1, SeqCst);
        {
            let _guard = lock(&s.wake_lock);
            s.wake.notify_all();
        }
        for h in self.handles.drain(..) {
            // A worker never panics outside a job (jobs are caught), so a
            // join error cannot carry anything worth re-raising in a drop.
            let _ = h.join();
        }
    }
}

/// Locks `m`, ignoring poisoning: the only lock held across user code (a
/// team's crew, during a run) sees every panic of a job caught.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A panic payload's message, when it is a string.
fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

/// The caller's barrier: spin, then sleep until `pending` is 0.
fn wait_done(s: &Shared) {
    for i in 0..SPINS {
        if s.pending.load(SeqCst) == 0 {
            return;
        }
        spin(i);
    }
    let mut guard = lock(&s.done_lock);
    s.caller_sleeps.store(true, SeqCst);
    while s.pending.load(SeqCst) != 0 {
        guard = s.done.wait(guard).unwrap_or_else(PoisonError::into_inner);
    }
    s.caller_sleeps.store(false, SeqCst);
}

fn worker_loop(s: &Shared, index: usize, workers: usize) {
    let mut seen = 0u64;
    loop {
        seen = wait_epoch(s, seen);
        if s.shutdown.load(SeqCst) {
            return;
        }
        let job = *lock(&s.job);
        if let Some(job) = job {
            if let Err(payload) = run_marked(job, index, workers) {
                let mut p = lock(&s.panic);
                if p.as_ref().is_none_or(|(w, _)| *w > index) {
                    *p = Some((index, message(payload.as_ref())));
                }
            }
        }
        if s.pending.fetch_sub(1, SeqCst) == 1 && s.caller_sleeps.load(SeqCst) {
            let _guard = lock(&s.done_lock);
            s.done.notify_one();
        }
    }
}

/// A worker's barrier: spin, then sleep until `epoch` differs from `seen`;
/// returns the new epoch.
fn wait_epoch(s: &Shared, seen: u64) -> u64 {
    for i in 0..SPINS {
        let e = s.epoch.load(SeqCst);
        if e != seen {
            return e;
        }
        spin(i);
    }
    let mut guard = lock(&s.wake_lock);
    s.sleepers.fetch_add(1, SeqCst);
    loop {
        let e = s.epoch.load(SeqCst);
        if e != seen {
            s.sleepers.fetch_sub(1, SeqCst);
            return e;
        }
        guard = s.wake.wait(guard).unwrap_or_else(PoisonError::into_inner);
    }
}
