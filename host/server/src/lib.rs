//! Pagoda's OpenAI-compatible HTTP server: axum on tokio in front of an
//! engine running on its own thread ([`pagoda_engine::spawn`]).
//!
//! Handlers never wait on the engine themselves: submissions and events
//! travel through callbacks the engine thread calls, into tokio channels
//! the handlers await (see [`generate`]); stats run on tokio's blocking pool.
//! [`serve`] runs the server until a shutdown signal, drains within a
//! deadline and returns the engine's audit.

#![warn(missing_docs)]

pub mod access;
pub mod cohere;
pub mod deepseek;
pub mod error;
pub mod generate;
pub mod glm;
pub mod handlers;
pub mod harmony;
pub mod kimi;
pub mod kv_events;
pub mod kv_wire;
pub mod logprobs;
pub mod metrics;
pub mod minimax;
pub mod mistral;
pub mod nemotron;
pub mod openai;
pub mod qwen_xml;
pub mod reasoning;
pub mod responses;
pub mod sglang;
pub mod state;
pub mod stream;
pub mod tokenize;
pub mod tools;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pagoda_engine::{Audit, Shutdown, ShutdownError};
use tokio::net::TcpListener;

pub use access::Access;
pub use error::ApiError;
pub use handlers::router;
pub use state::{AppState, Limits, Vocab};

/// Why [`serve`] ended without an audit.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Accepting or serving connections failed.
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
    /// The engine could not be shut down.
    #[error(transparent)]
    Shutdown(#[from] ShutdownError),
    /// A task of the server panicked (a bug).
    #[error("a server task panicked: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// Serves `state` on `listener` until `signal` completes; then stops
/// accepting, lets running requests finish for up to `deadline`, cancels
/// the rest, shuts the engine down and returns its audit.
pub async fn serve<S>(
    listener: TcpListener,
    state: Arc<AppState>,
    signal: S,
    deadline: Duration,
) -> Result<Audit, ServerError>
where
    S: Future<Output = ()> + Send + 'static,
{
    let (fired_tx, fired) = tokio::sync::oneshot::channel::<()>();
    let draining = Arc::clone(&state);
    let graceful = async move {
        signal.await;
        draining.start_draining();
        let _ = fired_tx.send(());
    };
    let app = router(Arc::clone(&state));
    let mut server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(graceful)
            .await
    });
    let early = tokio::select! {
        result = &mut server => Some(result),
        _ = fired => None,
    };
    let mode;
    match early {
        Some(result) => {
            result??;
            mode = Shutdown::Cancel;
        }
        None => match tokio::time::timeout(deadline, &mut server).await {
            Ok(result) => {
                result??;
                mode = Shutdown::Finish;
            }
            Err(_) => mode = Shutdown::Cancel,
        },
    }
    let client = state.client.clone();
    let audit = tokio::task::spawn_blocking(move || client.shutdown(mode)).await??;
    if !server.is_finished() {
        // Cancelled requests end their responses now; give them a moment.
        let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    }
    Ok(audit)
}
