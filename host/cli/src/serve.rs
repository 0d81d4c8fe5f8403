//! `pagoda serve`: the OpenAI-compatible server (pagoda-server) over a GGUF
//! model, or over the embedded random-weight model with a byte tokenizer
//! when no model is given (so it runs on a fresh clone).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pagoda_engine::model::{Model, ModelConfig, RepackCacheUse};
use pagoda_engine::{EngineConfig, Policy, SchedulerConfig, DEFAULT_PREFILL_SHARE};
use pagoda_server::kv_events::KvEventsConfig;
use pagoda_server::{Access, AppState, Limits, Vocab};

use crate::args::{parse_policy, parse_prefill_share, BackendKind, TemplateArgs, WeightArgs};
use crate::error::CliError;

/// `pagoda serve`'s options.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// A GGUF model (see the README for its architectures); without it,
    /// the embedded random-weight model with one token per UTF-8 byte.
    #[arg(long, value_name = "FILE.gguf")]
    model: Option<PathBuf>,
    #[command(flatten)]
    weights: WeightArgs,
    #[command(flatten)]
    template: TemplateArgs,
    /// The model's name in `/v1/models` and in responses that name none
    /// (default: the file's stem, or `pagoda-embedded`).
    #[arg(long, value_name = "NAME")]
    served_model_name: Option<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Pages in the KV pool, 16 tokens each.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..=16_000_000))]
    kv_pages: u32,
    /// Most sequences running at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    max_batch: u32,
    /// Requests waiting in the queue before 429.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    max_queue: u32,
    /// Scheduling policy: fcfs, or lpm[:KEY=VALUE,...].
    #[arg(long, default_value = "lpm", value_parser = parse_policy)]
    policy: Policy,
    /// Decode first: while a step decodes, prefill takes at most this share
    /// of the step's token budget (1: no cap, for offline throughput).
    #[arg(long, default_value_t = DEFAULT_PREFILL_SHARE, value_parser = parse_prefill_share)]
    prefill_share: f32,
    /// Attention backend.
    #[arg(long, value_enum, default_value_t = BackendKind::Cpu)]
    backend: BackendKind,
    /// Threads for attention and matrix products (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Largest request body in bytes (413 above).
    #[arg(long, default_value_t = 4 << 20)]
    max_body_bytes: usize,
    /// Seconds running requests get to finish after SIGTERM or Ctrl-C.
    #[arg(long, default_value_t = 30)]
    shutdown_timeout: u64,
    /// Publish KV-cache events in vLLM's format on a ZeroMQ PUB socket
    /// bound here (e.g. tcp://127.0.0.1:5557); also serves
    /// GET /debug/kv_blocks.
    #[arg(long, value_name = "ENDPOINT")]
    kv_events: Option<String>,
    /// A ZeroMQ ROUTER socket bound here replays buffered event batches.
    #[arg(long, value_name = "ENDPOINT", requires = "kv_events")]
    kv_events_replay: Option<String>,
    /// Event batches kept for replay.
    #[arg(long, default_value_t = 10_000, requires = "kv_events", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    kv_events_buffer: u64,
    /// Require `Authorization: Bearer KEY` on every route but /health and
    /// /metrics (401 otherwise).
    #[arg(long, env = "PAGODA_API_KEY", hide_env_values = true, value_parser = parse_api_key)]
    api_key: Option<String>,
    /// With --api-key, require it on /health and /metrics too.
    #[arg(long, requires = "api_key")]
    api_key_all_routes: bool,
    /// Let browser pages from this origin call the API (CORS), e.g.
    /// `http://localhost:3000`; repeat for more, `*` for any. Without it
    /// browsers keep other origins' pages out.
    #[arg(long = "allowed-origin", value_name = "ORIGIN", value_parser = parse_origin)]
    allowed_origins: Vec<String>,
}

/// A key of printable ASCII without spaces, as a bearer token is sent.
fn parse_api_key(key: &str) -> Result<String, String> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("an API key must be non-empty printable ASCII without spaces".into());
    }
    Ok(key.to_string())
}

/// Whether `host` names only this machine (a loopback address or
/// `localhost`).
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Why `pagoda serve` stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    #[error("cannot start the runtime or listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("engine: {0}")]
    Spawn(#[from] pagoda_engine::SpawnError),
    #[error(transparent)]
    Server(#[from] pagoda_server::ServerError),
    #[error("KV events: {0}")]
    KvEvents(#[from] pagoda_server::kv_events::KvEventsError),
    #[error("the engine did not shut down clean: {0}")]
    Unclean(String),
}

/// A thread joined when this is dropped: on every way out of [`serve`],
/// errors included, so that a failed start (say, the port is taken) still
/// lets the repack cache's write finish rather than leave a temporary file.
struct JoinOnDrop(Option<std::thread::JoinHandle<()>>);

impl Drop for JoinOnDrop {
    fn drop(&mut self) {
        if let Some(thread) = self.0.take() {
            let _ = thread.join();
        }
    }
}

/// `--allowed-origin`: `*`, or `scheme://host[:port]` as browsers send it
/// (lower case: schemes and hosts are case-insensitive, and browsers write
/// them so).
fn parse_origin(text: &str) -> Result<String, String> {
    let lowered = text.trim_end_matches('/').to_ascii_lowercase();
    let origin = lowered.as_str();
    let host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    let ok = origin == "*"
        || host.is_some_and(|h| {
            !h.is_empty()
                && !h.contains('/')
                && h.bytes().all(|b| b.is_ascii_graphic())
                && pagoda_server::access::cors(&[origin.to_string()]).is_ok()
        });
    if ok {
        Ok(origin.to_string())
    } else {
        Err(format!(
            "{text:?} is not an origin: give scheme://host[:port] (http or https), or *"
        ))
    }
}

pub(crate) fn serve(args: ServeArgs) -> Result<(), CliError> {
    // The repack cache's write, reported when it ends and waited for at
    // shutdown: requests are served while it runs.
    let mut cache_report = JoinOnDrop(None);
    let (model, vocab, name) = match &args.model {
        Some(path) => {
            let mut text =
                crate::open_chat_model(path, &args.weights, &args.template, args.backend)?;
            if let Some(used) = &text.info.repack_cache {
                eprintln!("pagoda serve: {used}");
            }
            if let Some(mut writer) = text.take_repack_writer() {
                if matches!(writer.now(), RepackCacheUse::Writing { .. }) {
                    cache_report.0 = std::thread::Builder::new()
                        .name("repack-report".into())
                        .spawn(move || eprintln!("pagoda serve: {}", writer.wait()))
                        .ok();
                }
            }
            let state = text.model.recurrent_state_bytes();
            if state > 0 {
                let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
                eprintln!(
                    "pagoda serve: recurrent state {:.1} MiB a sequence on the host, up to {:.0} MiB for --max-batch {}",
                    mib(state),
                    mib(state.saturating_mul(u64::from(args.max_batch))),
                    args.max_batch
                );
            }
            if let Some(error) = &text.chat_error {
                eprintln!("pagoda serve: the model file's chat template does not compile ({error}): chat is refused; give one with --chat-template FILE");
            }
            let name = path
                .file_stem()
                .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
            let vocab = Vocab::Model {
                tokenizer: Box::new(text.tokenizer),
                chat: text.chat.map(Box::new),
            };
            (text.model, vocab, name)
        }
        None => (
            Model::seeded(ModelConfig::EMBEDDED, crate::EMBEDDED_WEIGHTS_SEED)?,
            Vocab::Bytes,
            "pagoda-embedded".to_string(),
        ),
    };
    let name = args.served_model_name.clone().unwrap_or(name);
    let max_context = model.config().max_context;
    let logits = model.config().vocab;
    let config = EngineConfig {
        scheduler: SchedulerConfig {
            max_batch: args.max_batch,
            prefill_share: Some(args.prefill_share),
            ..SchedulerConfig::default()
        },
        policy: args.policy,
        kv_pages: args.kv_pages,
        queue_capacity: args.max_queue,
        // Drained after every step: twice the pool is more than one step
        // can add and evict, so the ring overflows only in theory.
        cache_events: if args.kv_events.is_some() {
            args.kv_pages.saturating_mul(2).max(256)
        } else {
            0
        },
        ..EngineConfig::default()
    };
    let client = args
        .backend
        .choice(args.threads)
        .spawn(Arc::new(model), config)
        .map_err(ServeError::from)?;
    let limits = Limits {
        max_body_bytes: args.max_body_bytes,
        max_context,
        kv_pages: args.kv_pages,
        logits,
    };
    let access = Access {
        api_key: args.api_key.clone(),
        protect_all: args.api_key_all_routes,
        allowed_origins: args.allowed_origins.clone(),
    };
    if access.api_key.is_none() && !is_loopback(&args.host) {
        eprintln!(
            "pagoda serve: warning: listening on {} with no API key: anyone who can reach it can use it (set --api-key or PAGODA_API_KEY)",
            args.host
        );
    }
    let state = AppState::with_access(client, vocab, name, limits, access);
    let kv_events = args.kv_events.clone().map(|endpoint| KvEventsConfig {
        replay_endpoint: args.kv_events_replay.clone(),
        buffer_steps: usize::try_from(args.kv_events_buffer).unwrap_or(usize::MAX),
        ..KvEventsConfig::new(endpoint)
    });
    let addr = format!("{}:{}", args.host, args.port);
    let listen_error = |source| ServeError::Listen {
        addr: addr.clone(),
        source,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(listen_error)?;
    let audit = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(listen_error)?;
        if let Some(config) = kv_events {
            let endpoint = config.endpoint.clone();
            pagoda_server::kv_events::start(config, &state.client)
                .await
                .map_err(ServeError::from)?;
            state.enable_kv_debug();
            eprintln!("pagoda serve: KV events on {endpoint}");
        }
        let local: SocketAddr = listener.local_addr().map_err(listen_error)?;
        // Scripts and tests read this line for the port.
        eprintln!("pagoda serve: listening on http://{local}");
        let deadline = Duration::from_secs(args.shutdown_timeout);
        pagoda_server::serve(listener, state, shutdown_signal(), deadline)
            .await
            .map_err(ServeError::from)
    })?;
    drop(cache_report);
    eprintln!(
        "pagoda serve: stopped; audit {}",
        serde_json::to_string(&audit).unwrap_or_default()
    );
    if audit.is_clean() {
        Ok(())
    } else {
        Err(ServeError::Unclean(format!("{audit:?}")).into())
    }
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_scheme_host_and_port_or_any() {
        for ok in [
            "*",
            "http://localhost:3000",
            "https://app.example",
            "https://app.example/",
        ] {
            assert_eq!(parse_origin(ok).unwrap(), ok.trim_end_matches('/'));
        }
        assert_eq!(
            parse_origin("HTTP://LocalHost:3000").unwrap(),
            "http://localhost:3000"
        );
        for bad in [
            "",
            "localhost:3000",
            "ftp://x",
            "http://",
            "http://a/b",
            "http://a b",
            "http://\u{e9}",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_loopback_hosts_go_without_a_warning() {
        for host in [
            "127.0.0.1",
            "127.3.2.1",
            "::1",
            "[::1]",
            "localhost",
            "LOCALHOST",
        ] {
            assert!(is_loopback(host), "{host}");
        }
        for host in ["0.0.0.0", "::", "192.168.1.4", "example.com", ""] {
            assert!(!is_loopback(host), "{host}");
        }
        assert!(parse_api_key("sk-abc_123").is_ok());
        for bad in ["", "a b", "tab\there", "é"] {
            assert!(parse_api_key(bad).is_err(), "{bad:?}");
        }
    }
}
