//! A server on an ephemeral port over the embedded model, and a minimal
//! HTTP/1.1 client on a raw socket (no client crate: fewer dependencies).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pagoda_engine::model::{Model, ModelConfig};
use pagoda_engine::{Audit, BackendChoice, EngineConfig, EngineStats, SchedulerConfig};
use pagoda_server::{Access, AppState, Limits, Vocab};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub struct TestServer {
    pub addr: SocketAddr,
    pub state: Arc<AppState>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<Audit, pagoda_server::ServerError>>,
}

pub fn config(max_batch: u32, queue: u32, slots: u32) -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerConfig {
            max_batch,
            ..SchedulerConfig::default()
        },
        kv_pages: 512,
        queue_capacity: queue,
        scheduler_slots: slots,
        cache_events: 0,
        ..EngineConfig::default()
    }
}

pub async fn start(config: EngineConfig, max_body_bytes: usize) -> TestServer {
    start_with_deadline(config, max_body_bytes, Duration::from_secs(10)).await
}

/// A server that lets in whom `access` says.
pub async fn start_with_access(config: EngineConfig, access: Access) -> TestServer {
    start_full(config, 1 << 20, Duration::from_secs(10), access).await
}

/// A server whose running requests get `deadline` after shutdown begins.
pub async fn start_with_deadline(
    config: EngineConfig,
    max_body_bytes: usize,
    deadline: Duration,
) -> TestServer {
    start_full(config, max_body_bytes, deadline, Access::default()).await
}

async fn start_full(
    config: EngineConfig,
    max_body_bytes: usize,
    deadline: Duration,
    access: Access,
) -> TestServer {
    let model = Model::seeded(ModelConfig::EMBEDDED, 7).expect("weights");
    let (max_context, logits) = (model.config().max_context, model.config().vocab);
    let client = BackendChoice::Cpu { threads: 1 }
        .spawn(Arc::new(model), config)
        .expect("engine");
    let limits = Limits {
        max_body_bytes,
        max_context,
        kv_pages: config.kv_pages,
        logits,
    };
    let state = AppState::with_access(client, Vocab::Bytes, "embedded".into(), limits, access);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(pagoda_server::serve(
        listener,
        Arc::clone(&state),
        async move {
            let _ = stopped.await;
        },
        deadline,
    ));
    TestServer {
        addr,
        state,
        stop: Some(stop),
        task,
    }
}

impl TestServer {
    /// Stops the server and returns the engine's audit.
    pub async fn shutdown(mut self) -> Audit {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.expect("join").expect("serve")
    }

    /// Waits (up to 10 s) until exactly `n` requests run: one just accepted
    /// may still sit in the queue until the engine's next step takes it.
    pub async fn wait_running(&self, n: u32) -> bool {
        self.wait_for(|stats| stats.running == n).await
    }

    /// Waits (up to 10 s) until the engine holds no request.
    pub async fn wait_idle(&self) -> bool {
        self.wait_for(|stats| stats.running == 0 && stats.waiting == 0)
            .await
    }

    /// Polls the engine's stats every 10 ms, up to 10 s, until `done`.
    async fn wait_for(&self, done: impl Fn(&EngineStats) -> bool) -> bool {
        for _ in 0..1000 {
            let client = self.state.client.clone();
            let stats = tokio::task::spawn_blocking(move || client.stats())
                .await
                .expect("join")
                .expect("stats");
            if done(&stats) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }
}

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The `data:` payloads of an event stream.
    pub fn events(&self) -> Vec<String> {
        self.body
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    }
}

pub fn raw_request(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    raw_request_with(method, path, body, &[])
}

/// [`raw_request`] with more header lines (`"Name: value"`).
pub fn raw_request_with(method: &str, path: &str, body: &[u8], headers: &[&str]) -> Vec<u8> {
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    let mut out = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Sends one request and reads the whole response.
pub async fn request(addr: SocketAddr, method: &str, path: &str, body: &str) -> Response {
    request_with(addr, method, path, body, &[]).await
}

/// [`request`] with more header lines.
pub async fn request_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    headers: &[&str],
) -> Response {
    let mut socket = TcpStream::connect(addr).await.expect("connect");
    socket
        .write_all(&raw_request_with(method, path, body.as_bytes(), headers))
        .await
        .expect("write");
    let mut raw = Vec::new();
    socket.read_to_end(&mut raw).await.expect("read");
    parse(&raw)
}

pub async fn post(addr: SocketAddr, path: &str, body: &str) -> Response {
    request(addr, "POST", path, body).await
}

fn parse(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Response {
        status,
        headers,
        body: String::from_utf8(body).expect("utf-8 body"),
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = String::from_utf8_lossy(&data[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .expect("chunk size");
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[eol + 2..eol + 2 + size]);
        data = &data[eol + 2 + size + 2..];
    }
}
