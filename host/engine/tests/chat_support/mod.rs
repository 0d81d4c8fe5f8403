//! Where the real model and the Python reference are (the repository's
//! shared `tests/support/env.rs`).

#[path = "../../../../tests/support/env.rs"]
mod env;
pub use env::*;
