//! The engine: one owner of the model, the backend, its KV store and the
//! core's structures. Requests come in through [`Engine::submit`], which
//! hands back a [`RequestHandle`]; [`Engine::step`] (in `step.rs`) runs one
//! batch; cancellations from handles arrive over a channel and are applied
//! at the start of every step.
//!
//! All storage is allocated once in [`EngineStorage`] and borrowed by the
//! core's structures, exactly as an embedded host would hand in statics.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Instant;

use crate::backend::{DeviceProgram, StepBackend};
use pagoda_core::scheduler::{EntryId, Scheduler, Work};
use pagoda_core::{
    KvCache, KvGeometry, LayerPlace, PoolStats, Priority, RadixStats, RequestId, RequestQueue,
    Timestamp,
};

use crate::batch::Batch;
use crate::config::EngineConfig;
use crate::error::{EngineError, Rejection};
use crate::kv::{EngineStorage, OtherStorage};
use crate::metrics::{Audit, EngineStats};
use crate::model::{Activations, ConstraintState, Model, ModelError, Sampler, TokenLogprobs};
use crate::request::{Canceller, Event, EventSink, Events, GenRequest, Queued, RequestHandle};

/// A request's engine-side state while it is in the scheduler.
#[derive(Debug)]
pub(crate) struct Live {
    pub(crate) id: RequestId,
    pub(crate) output: Vec<u32>,
    /// Output tokens already streamed to the handle: a recomputation after
    /// preemption does not send them again.
    pub(crate) sent: u32,
    pub(crate) rng: fastrand::Rng,
    pub(crate) arrived: Timestamp,
    pub(crate) admitted: Option<Timestamp>,
    pub(crate) first_token: Option<Timestamp>,
    pub(crate) starts: u32,
    /// Prompt tokens the last admission found in the prefix cache.
    pub(crate) cached_tokens: u32,
    /// The run's constraint matcher, started afresh with each run.
    pub(crate) constraint: Option<Box<dyn ConstraintState>>,
    /// The prompt's scores so far (prompt log probabilities), until sent.
    pub(crate) prompt_logprobs: Vec<TokenLogprobs>,
    /// Whether they were sent (a recomputation does not send them again).
    pub(crate) prompt_sent: bool,
}

impl std::fmt::Debug for dyn ConstraintState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConstraintState")
    }
}

/// The engine over a backend `B`: the one owner of the model, the backend,
/// its KV store and the core's structures. [`submit`](Self::submit) returns
/// a [`RequestHandle`]; [`step`](Self::step) runs one batch.
pub struct Engine<'s, B: StepBackend> {
    pub(crate) model: &'s Model,
    pub(crate) backend: B,
    pub(crate) store: B::KvStore,
    pub(crate) queue: RequestQueue<'s, Queued>,
    pub(crate) kv: KvCache<'s>,
    pub(crate) sched: Scheduler<'s, Queued>,
    pub(crate) plan: Vec<Work>,
    /// One engine-side state per scheduler slot, indexed by entry.
    pub(crate) live: Vec<Option<Live>>,
    pub(crate) entries: HashMap<RequestId, EntryId>,
    pub(crate) batch: Batch,
    pub(crate) activations: Activations,
    /// What the backend prepared for the model (weights on a device).
    pub(crate) prepared: B::Prepared,
    pub(crate) logits: Vec<f32>,
    pub(crate) sampler: Sampler,
    /// Token ids the logit adjustments sort and count.
    pub(crate) scratch_tokens: Vec<u32>,
    /// A row of logits before its adjustments, for its log probabilities.
    pub(crate) raw_logits: Vec<f32>,
    epoch: Instant,
    geometry: KvGeometry,
    /// Tokens a sequence can hold: the model's context or a page-table row.
    pub(crate) max_context: u32,
    cancel_tx: Sender<RequestId>,
    cancel_rx: Receiver<RequestId>,
    /// Requests whose handle was dropped while the engine sent to it.
    pub(crate) dropped: Vec<RequestId>,
    /// Whether the cache records events (see `cache_events`).
    pub(crate) cache_events_on: bool,
    /// Where each layer's keys and values live when the cache groups
    /// layers (empty otherwise).
    pub(crate) places: Vec<LayerPlace>,
}

impl<'s, B: StepBackend> Engine<'s, B> {
    /// Builds the engine: the KV store on the backend, the core's
    /// structures over `storage`.
    pub fn new(
        model: &'s Model,
        mut backend: B,
        config: &EngineConfig,
        storage: &'s mut EngineStorage,
    ) -> Result<Self, EngineError<B::Error>> {
        let mc = model.config();
        let geometry = model.kv_geometry(config.kv_dtype)?;
        config.scheduler.validate()?;
        let (
            kv,
            OtherStorage {
                queue,
                slots,
                watch,
            },
            layout,
        ) = storage.split()?;
        if model.program().has_sinks() && !B::ATTENTION_SINKS {
            return Err(ModelError::BackendLacks {
                backend: backend.name(),
                feature: "attention sinks (gpt-oss); run it with --backend cpu",
            }
            .into());
        }
        if layout.per_group().is_some() && !B::KV_GROUPS {
            return Err(EngineError::Invariant(
                "this backend pages every layer together: build the storage without groups",
            ));
        }
        // A grouped cache's pages each hold one group's layers.
        let store_geometry = match layout.per_group() {
            Some(per) => KvGeometry::new(per, mc.kv_heads, mc.head_dim, config.kv_dtype)
                .map_err(ModelError::from)?,
            None => geometry,
        };
        let store = backend
            .create_kv_store(store_geometry, kv.pool().total_pages())
            .map_err(EngineError::Backend)?;
        let places = layout.places().to_vec();
        // The queue's footprints stay in pages of every layer.
        let queue = RequestQueue::new(queue, geometry, config.kv_pages)?;
        let live = (0..slots.len()).map(|_| None).collect();
        let max_context = kv.table().max_tokens_per_sequence().min(mc.max_context);
        let sched = Scheduler::new(slots, watch, config.scheduler, config.policy, max_context)?;
        let (cancel_tx, cancel_rx) = mpsc::channel();
        let activations = backend.activations();
        Ok(Self {
            model,
            backend,
            store,
            queue,
            kv,
            sched,
            plan: vec![Work::EMPTY; config.scheduler.max_batch as usize],
            live,
            entries: HashMap::new(),
            batch: Batch::default(),
            activations,
            prepared: B::Prepared::default(),
            logits: Vec::new(),
            sampler: Sampler::default(),
            scratch_tokens: Vec::new(),
            raw_logits: Vec::new(),
            epoch: Instant::now(),
            geometry,
            max_context,
            cancel_tx,
            cancel_rx,
            dropped: Vec::new(),
            cache_events_on: config.cache_events > 0,
            places,
        })
    }

    /// Microseconds since the engine was built: the clock of every
    /// timestamp it reports.
    pub fn now(&self) -> Timestamp {
        Timestamp(self.epoch.elapsed().as_micros() as u64)
    }

    /// The backend's name.
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// Dispatches and device time of the last step, when the backend runs
    /// whole steps on a device (`None` on the host, or when the model's
    /// weights did not fit the device and only attention runs there).
    pub fn last_device_step(&self) -> Option<DeviceProgram> {
        if B::whole_steps_on_device(&self.prepared) != Some(true) {
            return None;
        }
        self.backend.last_device_program()
    }

    /// The device's copy bandwidth in bytes read plus written per second,
    /// measured now; `None` for a backend on the host.
    pub fn device_copy_bandwidth(&mut self) -> Option<f64> {
        self.backend.device_copy_bandwidth()
    }

    /// The KV geometry.
    pub fn geometry(&self) -> KvGeometry {
        self.geometry
    }

    /// Bytes the backend's KV store holds.
    pub fn kv_bytes(&self) -> u64 {
        self.backend.memory_bytes(&self.store)
    }

    /// Submits a request arriving at `arrived` (latencies count from it). A
    /// request that can never run (empty prompt, tokens outside the
    /// vocabulary, no tokens to generate, bad sampling parameters, a prompt
    /// that fills the context, more pages than the pool) or that finds the
    /// queue full is refused at once and changes nothing.
    pub fn submit(
        &mut self,
        request: GenRequest,
        priority: Priority,
        arrived: Timestamp,
    ) -> Result<RequestHandle, Rejection> {
        let (events, receiver) = mpsc::channel();
        let id = self.enqueue(request, priority, arrived, Events::Channel(events))?;
        Ok(RequestHandle::new(id, receiver, self.cancel_tx.clone()))
    }

    /// Submits like [`Engine::submit`], with the events going to `sink`
    /// instead of a [`RequestHandle`]. The returned [`Canceller`] does not
    /// cancel on drop: the caller cancels, or `sink` returns `false`.
    pub fn submit_to(
        &mut self,
        request: GenRequest,
        priority: Priority,
        arrived: Timestamp,
        sink: EventSink,
    ) -> Result<Canceller, Rejection> {
        let id = self.enqueue(request, priority, arrived, Events::Sink(sink))?;
        Ok(Canceller::new(id, self.cancel_tx.clone()))
    }

    fn enqueue(
        &mut self,
        request: GenRequest,
        priority: Priority,
        arrived: Timestamp,
        events: Events,
    ) -> Result<RequestId, Rejection> {
        self.check(&request)?;
        let prefix_reusable = !self.model.program().is_recurrent();
        self.queue
            .enqueue(
                Queued {
                    request,
                    events,
                    prefix_reusable,
                },
                priority,
                arrived,
            )
            .map_err(|rejected| rejected.error.into())
    }

    fn check(&self, request: &GenRequest) -> Result<(), Rejection> {
        let vocab = self.model.config().vocab;
        if request.prompt.is_empty() {
            return Err(Rejection::EmptyPrompt);
        }
        if let Some(&token) = request.prompt.iter().find(|&&t| t >= vocab) {
            return Err(Rejection::TokenOutOfVocabulary { token, vocab });
        }
        if request.max_new_tokens == 0 {
            return Err(Rejection::ZeroMaxTokens);
        }
        request.sampling.validate().map_err(Rejection::Sampling)?;
        if request.prompt.len() >= self.max_context as usize {
            return Err(Rejection::PromptFillsContext {
                prompt_len: request.prompt.len(),
                max_context: self.max_context,
            });
        }
        Ok(())
    }

    /// Cancels a request wherever it is: in the queue, waiting in the
    /// scheduler, or running (its pages are freed at once); its handle gets
    /// [`Event::Cancelled`]. Returns whether it was found.
    pub fn cancel(&mut self, id: RequestId) -> bool {
        if let Some(queued) = self.queue.remove(id) {
            let _ = queued.events.send(Event::Cancelled);
            return true;
        }
        let Some(&entry) = self.entries.get(&id) else {
            return false;
        };
        match self.sched.cancel(entry, &mut self.kv) {
            Ok(queued) => {
                self.entries.remove(&id);
                self.live[entry.index() as usize] = None;
                let _ = queued.events.send(Event::Cancelled);
                true
            }
            Err(_) => false,
        }
    }

    /// Applies the cancellations that handles sent and those of handles
    /// found dropped.
    pub(crate) fn apply_cancels(&mut self) {
        while let Ok(id) = self.cancel_rx.try_recv() {
            self.cancel(id);
        }
        while let Some(id) = self.dropped.pop() {
            self.cancel(id);
        }
    }

    /// Ends every request the engine holds with [`Event::Failed`] and frees
    /// what it can: the engine stopped on an error.
    pub(crate) fn fail_all(&mut self) {
        while let Some(d) = self.queue.try_dequeue() {
            let _ = d.request.events.send(Event::Failed);
        }
        let entries: Vec<(RequestId, EntryId)> = self.entries.drain().collect();
        for (_, entry) in entries {
            self.live[entry.index() as usize] = None;
            if let Ok(queued) = self.sched.cancel(entry, &mut self.kv) {
                let _ = queued.events.send(Event::Failed);
            }
        }
    }

    /// Cancels every request the engine holds (queued, waiting, running).
    pub fn cancel_all(&mut self) {
        self.apply_cancels();
        while let Some(d) = self.queue.try_dequeue() {
            let _ = d.request.events.send(Event::Cancelled);
        }
        let ids: Vec<RequestId> = self.entries.keys().copied().collect();
        for id in ids {
            self.cancel(id);
        }
    }

    /// Whether nothing is queued, waiting or running.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.sched.is_idle()
    }

    /// Requests running now.
    pub fn running(&self) -> u32 {
        self.sched.running()
    }

    /// Requests waiting (queue plus scheduler).
    pub fn waiting(&self) -> u32 {
        self.queue.len() as u32 + self.sched.waiting()
    }

    /// The page pool's metrics now.
    pub fn pool_stats(&self) -> PoolStats {
        self.kv.pool_stats(self.now())
    }

    /// The prefix cache's metrics.
    pub fn radix_stats(&self) -> RadixStats {
        self.kv.radix_stats()
    }

    /// Every metric at once.
    pub fn stats(&self) -> EngineStats {
        EngineStats {
            pool: self.pool_stats(),
            radix: self.radix_stats(),
            scheduler: self.sched.metrics().clone(),
            running: self.running(),
            waiting: self.waiting(),
            audit: self.audit(),
        }
    }

    /// Checks that nothing leaked: no sequence, no referenced page, every
    /// page free or cached. Meaningful when the engine is idle.
    pub fn audit(&self) -> Audit {
        let stats = self.kv.pool_stats(self.now());
        Audit {
            total_pages: stats.total_pages,
            free_pages: stats.free_pages,
            cached_pages: stats.evictable_pages,
            referenced_pages: stats.referenced_pages,
            active_sequences: self.kv.active_sequences(),
            waiting: self.waiting(),
            running: self.running(),
        }
    }
}
