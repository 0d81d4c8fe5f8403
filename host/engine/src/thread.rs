//! The engine on its own thread: [`spawn`] builds the storage and the engine
//! inside the thread (the core's structures borrow their storage) and hands
//! back an [`EngineClient`] that any thread can clone and submit through.
//! The thread blocks while the engine is idle and steps while it is not.

use std::error::Error;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::backend::StepBackend;
use pagoda_core::Priority;

use crate::cache_events::{CachedBlock, KvEvent};
use crate::config::EngineConfig;
use crate::engine::Engine;
use crate::error::Rejection;
use crate::kv::EngineStorage;
use crate::metrics::{Audit, EngineStats};
use crate::model::Model;
use crate::request::{Canceller, EventSink, GenRequest, RequestHandle};

/// A boxed error from the engine's thread.
pub type BoxError = Box<dyn Error + Send + Sync + 'static>;

/// What [`EngineClient::shutdown`] does with the requests still held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// Cancel them.
    Cancel,
    /// Run them to the end first (no new request is taken).
    Finish,
}

/// Why [`spawn`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The backend or the engine could not be built.
    #[error("cannot build the engine: {0}")]
    Build(#[source] BoxError),
    /// The operating system refused the thread.
    #[error("cannot start the engine thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// Why [`EngineClient::shutdown`] has no audit to report.
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    /// A step failed; every request then held got `Event::Failed`.
    #[error("the engine failed: {0}")]
    Failed(#[source] BoxError),
    /// The engine was already shut down.
    #[error("the engine has already stopped")]
    Stopped,
    /// The engine thread panicked (a bug).
    #[error("the engine thread panicked")]
    Panicked,
}

/// Where [`EngineClient::submit_to`]'s answer goes.
type SubmitReply = Box<dyn FnOnce(Result<Canceller, Rejection>) + Send + 'static>;

enum Command {
    Submit {
        request: GenRequest,
        priority: Priority,
        reply: Sender<Result<RequestHandle, Rejection>>,
    },
    SubmitTo {
        request: GenRequest,
        priority: Priority,
        sink: EventSink,
        reply: SubmitReply,
    },
    Stats {
        reply: Sender<EngineStats>,
    },
    WatchCache {
        sink: SyncSender<Vec<KvEvent>>,
    },
    CachedBlocks {
        reply: Sender<Vec<CachedBlock>>,
    },
    FlushCache {
        reply: Sender<u32>,
    },
    Shutdown {
        mode: Shutdown,
        reply: Sender<Result<Audit, ShutdownError>>,
    },
}

/// A handle on an engine thread; cheap to clone and to send.
#[derive(Clone)]
pub struct EngineClient {
    commands: Sender<Command>,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl std::fmt::Debug for EngineClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineClient").finish_non_exhaustive()
    }
}

/// Runs an engine over `model` on a new thread, with the backend
/// `make_backend` builds there.
pub fn spawn<B, F>(
    model: Arc<Model>,
    config: EngineConfig,
    make_backend: F,
) -> Result<EngineClient, SpawnError>
where
    B: StepBackend,
    B::Error: Error + Send + Sync + 'static,
    F: FnOnce() -> Result<B, B::Error> + Send + 'static,
{
    let (commands, inbox) = mpsc::channel();
    let (built_tx, built_rx) = mpsc::channel::<Result<(), BoxError>>();
    let thread = std::thread::Builder::new()
        .name("pagoda-engine".into())
        .spawn(move || {
            let backend = match make_backend() {
                Ok(b) => b,
                Err(e) => {
                    let _ = built_tx.send(Err(Box::new(e)));
                    return;
                }
            };
            let mut storage = EngineStorage::for_model(&config, &model, B::KV_GROUPS);
            let built = Engine::new(&model, backend, &config, &mut storage);
            match built {
                Ok(engine) => {
                    let _ = built_tx.send(Ok(()));
                    serve(engine, &inbox);
                }
                Err(e) => {
                    let _ = built_tx.send(Err(Box::new(e)));
                }
            };
        })?;
    match built_rx.recv() {
        Ok(Ok(())) => Ok(EngineClient {
            commands,
            thread: Arc::new(Mutex::new(Some(thread))),
        }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(SpawnError::Build(e))
        }
        Err(_) => {
            let _ = thread.join();
            Err(SpawnError::Build(
                "the engine thread stopped while starting".into(),
            ))
        }
    }
}

/// The engine thread's loop.
fn serve<B>(mut engine: Engine<'_, B>, inbox: &Receiver<Command>)
where
    B: StepBackend,
    B::Error: Error + Send + Sync + 'static,
{
    let mut watcher: Option<Watcher> = None;
    loop {
        // Idle: sleep until a command comes (or every client is gone).
        if engine.is_idle() {
            match inbox.recv() {
                Ok(command) => {
                    if handle(&mut engine, command, &mut watcher).is_break() {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
        while let Ok(command) = inbox.try_recv() {
            if handle(&mut engine, command, &mut watcher).is_break() {
                return;
            }
        }
        if engine.is_idle() {
            continue;
        }
        let stepped = engine.step();
        publish_cache_events(&mut engine, &mut watcher);
        if let Err(e) = stepped {
            // Every held request got `Failed`; refuse all else from now on.
            return failed(Box::new(e), inbox);
        }
    }
}

/// Batches a watcher may hold unread before the engine stops sending it
/// changes and owes it a snapshot instead: memory stays bounded and the
/// engine never waits on a slow watcher.
const WATCH_BATCHES: usize = 1024;

/// Where cache events go, and whether the last batch could not be sent.
struct Watcher {
    sink: SyncSender<Vec<KvEvent>>,
    owes_snapshot: bool,
}

/// Sends the cache's changes of the last step to the watcher, if any: a
/// watcher whose channel is full misses them and gets a snapshot as soon
/// as it has room; one that hung up is forgotten. Without a watcher,
/// events are dropped.
fn publish_cache_events<B: StepBackend>(engine: &mut Engine<'_, B>, watcher: &mut Option<Watcher>) {
    if !engine.cache_events_on() {
        return;
    }
    let events = engine.drain_cache_events();
    let Some(w) = watcher else {
        return;
    };
    let batch = if w.owes_snapshot {
        engine.cache_snapshot()
    } else if events.is_empty() {
        return;
    } else {
        events
    };
    match w.sink.try_send(batch) {
        Ok(()) => w.owes_snapshot = false,
        Err(TrySendError::Full(_)) => w.owes_snapshot = true,
        Err(TrySendError::Disconnected(_)) => *watcher = None,
    }
}

/// Handles one command; breaks when the engine is to stop.
fn handle<B>(
    engine: &mut Engine<'_, B>,
    command: Command,
    watcher: &mut Option<Watcher>,
) -> std::ops::ControlFlow<()>
where
    B: StepBackend,
    B::Error: Error + Send + Sync + 'static,
{
    match command {
        Command::Submit {
            request,
            priority,
            reply,
        } => {
            let now = engine.now();
            let _ = reply.send(engine.submit(request, priority, now));
        }
        Command::SubmitTo {
            request,
            priority,
            sink,
            reply,
        } => {
            let now = engine.now();
            reply(engine.submit_to(request, priority, now, sink));
        }
        Command::Stats { reply } => {
            let _ = reply.send(engine.stats());
        }
        Command::WatchCache { sink } => {
            // Pending changes are older than the snapshot that replaces them.
            let _ = engine.drain_cache_events();
            if sink.send(engine.cache_snapshot()).is_ok() {
                *watcher = Some(Watcher {
                    sink,
                    owes_snapshot: false,
                });
            }
        }
        Command::CachedBlocks { reply } => {
            let _ = reply.send(engine.cached_blocks());
        }
        Command::FlushCache { reply } => {
            let _ = reply.send(engine.flush_cache());
            // The removals go out now, not after the next step.
            publish_cache_events(engine, watcher);
        }
        Command::Shutdown { mode, reply } => {
            let result = match mode {
                Shutdown::Cancel => {
                    engine.cancel_all();
                    Ok(engine.audit())
                }
                Shutdown::Finish => finish(engine),
            };
            let _ = reply.send(result);
            return std::ops::ControlFlow::Break(());
        }
    }
    std::ops::ControlFlow::Continue(())
}

/// Runs what the engine holds to the end.
fn finish<B>(engine: &mut Engine<'_, B>) -> Result<Audit, ShutdownError>
where
    B: StepBackend,
    B::Error: Error + Send + Sync + 'static,
{
    while !engine.is_idle() {
        engine
            .step()
            .map_err(|e| ShutdownError::Failed(Box::new(e)))?;
    }
    engine.apply_cancels();
    Ok(engine.audit())
}

/// After a failed step: submissions are refused (their reply channel is
/// dropped), the first shutdown gets the error.
fn failed(error: BoxError, inbox: &Receiver<Command>) {
    let mut error = Some(error);
    for command in inbox.iter() {
        if let Command::Shutdown { reply, .. } = command {
            let e = error
                .take()
                .map_or(ShutdownError::Stopped, ShutdownError::Failed);
            let _ = reply.send(Err(e));
            return;
        }
    }
}

impl EngineClient {
    /// Submits a request arriving now; refused at once as
    /// [`Engine::submit`] refuses, or with [`Rejection::EngineStopped`].
    pub fn submit(
        &self,
        request: GenRequest,
        priority: Priority,
    ) -> Result<RequestHandle, Rejection> {
        let (reply, answer) = mpsc::channel();
        self.commands
            .send(Command::Submit {
                request,
                priority,
                reply,
            })
            .map_err(|_| Rejection::EngineStopped)?;
        answer.recv().map_err(|_| Rejection::EngineStopped)?
    }

    /// Submits a request arriving now without waiting: its events go to
    /// `sink`, and `reply` gets its [`Canceller`] or its refusal, both
    /// called on the engine thread (they must not block). If the engine has
    /// stopped, `reply` is called here with [`Rejection::EngineStopped`], or
    /// dropped uncalled when a failed engine discards the submission.
    pub fn submit_to(
        &self,
        request: GenRequest,
        priority: Priority,
        sink: EventSink,
        reply: impl FnOnce(Result<Canceller, Rejection>) + Send + 'static,
    ) {
        let command = Command::SubmitTo {
            request,
            priority,
            sink,
            reply: Box::new(reply),
        };
        if let Err(mpsc::SendError(Command::SubmitTo { reply, .. })) = self.commands.send(command) {
            reply(Err(Rejection::EngineStopped));
        }
    }

    /// A snapshot of the engine's metrics; `None` once it has stopped.
    pub fn stats(&self) -> Option<EngineStats> {
        let (reply, answer) = mpsc::channel();
        self.commands.send(Command::Stats { reply }).ok()?;
        answer.recv().ok()
    }

    /// Watches the prefix cache: the receiver first gets a snapshot
    /// ([`KvEvent::AllCleared`], then every cached block), then each step's
    /// changes as one batch (a watcher that falls more than 1,024 batches
    /// behind gets a new snapshot instead of the changes it missed). Needs
    /// [`EngineConfig::cache_events`](crate::EngineConfig::cache_events) above
    /// zero (otherwise only the snapshot comes). A new watcher replaces the
    /// previous one. `None` once the engine has stopped.
    pub fn watch_cache(&self) -> Option<Receiver<Vec<KvEvent>>> {
        let (sink, events) = mpsc::sync_channel(WATCH_BATCHES);
        self.commands.send(Command::WatchCache { sink }).ok()?;
        Some(events)
    }

    /// Every block the prefix cache holds now, each after its parent; `None`
    /// once the engine has stopped.
    pub fn cached_blocks(&self) -> Option<Vec<CachedBlock>> {
        let (reply, answer) = mpsc::channel();
        self.commands.send(Command::CachedBlocks { reply }).ok()?;
        answer.recv().ok()
    }

    /// Empties the prefix cache of every page no running request holds;
    /// the pages freed, or `None` once the engine has stopped. See
    /// [`Engine::flush_cache`].
    pub fn flush_cache(&self) -> Option<u32> {
        let (reply, answer) = mpsc::channel();
        self.commands.send(Command::FlushCache { reply }).ok()?;
        answer.recv().ok()
    }

    /// Stops the engine: cancels or finishes what it holds, then reports the
    /// audit and ends the thread. Later calls (from any clone) get
    /// [`ShutdownError::Stopped`].
    pub fn shutdown(&self, mode: Shutdown) -> Result<Audit, ShutdownError> {
        let (reply, answer) = mpsc::channel();
        let sent = self
            .commands
            .send(Command::Shutdown { mode, reply })
            .is_ok();
        let result = if sent {
            answer.recv().unwrap_or(Err(ShutdownError::Stopped))
        } else {
            Err(ShutdownError::Stopped)
        };
        let thread = self
            .thread
            .lock()
            .map_err(|_| ShutdownError::Panicked)?
            .take();
        if let Some(thread) = thread {
            thread.join().map_err(|_| ShutdownError::Panicked)?;
        }
        result
    }
}
