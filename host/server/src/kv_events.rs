//! KV-cache events over ZeroMQ, as vLLM publishes them: a PUB socket sends
//! each engine step's cache changes as frames `[topic, seq (u64 big-endian),
//! payload]` (payload: [`kv_wire`](crate::kv_wire)), and an optional ROUTER
//! socket replays buffered batches: a client sends `[empty, start seq (u64
//! big-endian)]` and gets `[empty, seq, payload]` for every buffered batch
//! from `start`, then `[empty, -1 (i64 big-endian), empty]` — the protocol of
//! `ZmqEventPublisher` in vLLM's `vllm/distributed/kv_events.py`.
//!
//! The first batch (seq 0) is the engine's snapshot: `AllBlocksCleared`,
//! then every cached block. Engine steps never wait on a socket: the engine
//! thread hands batches to a channel, and one tokio task sends them.

use std::collections::VecDeque;
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use bytes::Bytes;
use pagoda_engine::{EngineClient, KvEvent};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use crate::error::ApiError;
use crate::kv_wire::encode_batch;
use crate::state::AppState;

/// Where and how to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEventsConfig {
    /// PUB endpoint to bind, e.g. `tcp://127.0.0.1:5557` (`*` as the host
    /// means every interface).
    pub endpoint: String,
    /// ROUTER endpoint to bind for replay, if any.
    pub replay_endpoint: Option<String>,
    /// Batches kept for replay (vLLM's `buffer_steps`); older ones go.
    pub buffer_steps: usize,
    /// The topic frame (vLLM's default: empty).
    pub topic: String,
}

impl KvEventsConfig {
    /// Publishing on `endpoint`, replay off, vLLM's defaults otherwise.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            replay_endpoint: None,
            buffer_steps: 10_000,
            topic: String::new(),
        }
    }
}

/// Why the publisher could not start.
#[derive(Debug, thiserror::Error)]
pub enum KvEventsError {
    /// A socket could not bind its endpoint.
    #[error("cannot bind the KV-event socket on {endpoint}: {source}")]
    Bind {
        /// The endpoint.
        endpoint: String,
        /// Why.
        source: zeromq::ZmqError,
    },
    /// The engine has stopped.
    #[error("the engine has stopped")]
    EngineStopped,
    /// The forwarding thread could not start.
    #[error("cannot start the KV-event thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// Batches in flight between the engine thread and the publisher task.
const CHANNEL_BATCHES: usize = 1024;

/// Starts publishing `client`'s cache events; the task ends when the engine
/// stops. Must run inside a tokio runtime.
pub async fn start(
    config: KvEventsConfig,
    client: &EngineClient,
) -> Result<JoinHandle<()>, KvEventsError> {
    let mut publisher = PubSocket::new();
    bind(&mut publisher, &config.endpoint).await?;
    let replay = match &config.replay_endpoint {
        Some(endpoint) => {
            let mut router = RouterSocket::new();
            bind(&mut router, endpoint).await?;
            Some(router)
        }
        None => None,
    };
    let events = client.watch_cache().ok_or(KvEventsError::EngineStopped)?;
    let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
    std::thread::Builder::new()
        .name("pagoda-kv-events".into())
        .spawn(move || forward(&events, &tx))?;
    let task = Publisher {
        publisher,
        replay,
        topic: Bytes::from(config.topic.into_bytes()),
        buffer: VecDeque::new(),
        buffer_steps: config.buffer_steps.max(1),
        next_seq: 0,
    };
    Ok(tokio::spawn(task.run(rx)))
}

/// Binds `socket`, reading `*` as every interface (as vLLM's endpoints do).
async fn bind<S: Socket>(socket: &mut S, endpoint: &str) -> Result<(), KvEventsError> {
    let address = endpoint.replace("://*:", "://0.0.0.0:");
    socket
        .bind(&address)
        .await
        .map(|_| ())
        .map_err(|source| KvEventsError::Bind {
            endpoint: endpoint.to_string(),
            source,
        })
}

/// The engine's batches into the task's channel (the engine thread's side
/// is a std channel, so a thread bridges it). Ends when either side does.
fn forward(events: &std_mpsc::Receiver<Vec<KvEvent>>, tx: &mpsc::Sender<Vec<KvEvent>>) {
    for batch in events.iter() {
        if tx.blocking_send(batch).is_err() {
            return;
        }
    }
}

struct Publisher {
    publisher: PubSocket,
    replay: Option<RouterSocket>,
    topic: Bytes,
    buffer: VecDeque<(u64, Bytes)>,
    buffer_steps: usize,
    next_seq: u64,
}

/// The replay stream's end marker: -1 as a big-endian i64.
const END_SEQ: [u8; 8] = (-1i64).to_be_bytes();

impl Publisher {
    async fn run(mut self, mut rx: mpsc::Receiver<Vec<KvEvent>>) {
        loop {
            let request = async {
                match self.replay.as_mut() {
                    Some(router) => router.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                batch = rx.recv() => match batch {
                    Some(batch) => self.publish(&batch).await,
                    None => return,
                },
                request = request => {
                    if let Ok(request) = request {
                        self.replay(request).await;
                    }
                }
            }
        }
    }

    async fn publish(&mut self, batch: &[KvEvent]) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let payload = match encode_batch(ts, batch) {
            Ok(p) => Bytes::from(p),
            Err(e) => {
                eprintln!("pagoda serve: cannot encode KV events: {e}");
                return;
            }
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut message = ZmqMessage::from(self.topic.clone());
        message.push_back(Bytes::copy_from_slice(&seq.to_be_bytes()));
        message.push_back(payload.clone());
        if let Err(e) = self.publisher.send(message).await {
            eprintln!("pagoda serve: cannot publish KV events: {e}");
        }
        if self.buffer.len() == self.buffer_steps {
            self.buffer.pop_front();
        }
        self.buffer.push_back((seq, payload));
    }

    /// Answers one replay request `[identity, empty, start seq]`; anything
    /// else is ignored, as vLLM does.
    async fn replay(&mut self, request: ZmqMessage) {
        let frames = request.into_vec();
        let [identity, _, start] = frames.as_slice() else {
            return;
        };
        let Ok(start) = <[u8; 8]>::try_from(start.as_ref()) else {
            return;
        };
        let start = u64::from_be_bytes(start);
        let Some(router) = self.replay.as_mut() else {
            return;
        };
        let reply = |seq: Bytes, payload: Bytes| {
            let mut m = ZmqMessage::from(identity.clone());
            m.push_back(Bytes::new());
            m.push_back(seq);
            m.push_back(payload);
            m
        };
        for (seq, payload) in self.buffer.iter().filter(|(seq, _)| *seq >= start) {
            let seq = Bytes::copy_from_slice(&seq.to_be_bytes());
            if router.send(reply(seq, payload.clone())).await.is_err() {
                return; // the client left
            }
        }
        let end = reply(Bytes::from_static(&END_SEQ), Bytes::new());
        let _ = router.send(end).await;
    }
}

/// `GET /debug/kv_blocks` (only with KV events on, else 404): the hashes of
/// every block cached now, each after its parent, as
/// `{"block_hashes": [...]}`; what a subscriber's mirror must equal.
pub async fn debug_blocks(
    State(state): State<Arc<AppState>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if !state.kv_debug() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "KV events are off (pagoda serve --kv-events)".to_string(),
        ));
    }
    let client = state.client.clone();
    let blocks = tokio::task::spawn_blocking(move || client.cached_blocks())
        .await
        .ok()
        .flatten()
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "engine_stopped",
                "the engine has stopped".to_string(),
            )
        })?;
    let hashes: Vec<u64> = blocks.iter().map(|b| b.hash).collect();
    Ok(Json(serde_json::json!({ "block_hashes": hashes })))
}
