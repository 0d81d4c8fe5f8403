//! Constrained decoding: what a request may generate, as a mask over the
//! vocabulary before each token is sampled (structured outputs: a JSON
//! schema, a regular expression, a grammar). The engine knows only these
//! two traits; `structured.rs` implements them with `llguidance`.
//!
//! A [`Constraint`] is compiled once per request (shared by its `n`
//! choices and its restarts); each run of the request starts a fresh
//! [`ConstraintState`] from it, which the engine asks for a mask before
//! every sample and tells every token it sampled. The engine prepares the
//! masks of a step while its model runs (on a thread of their own), so a
//! constrained request adds little to the step of the others.

use std::fmt;
use std::sync::Arc;

/// A compiled constraint, shared read-only.
pub trait ConstraintSpec: Send + Sync + fmt::Debug {
    /// A matcher at the start of the output.
    fn start(&self) -> Box<dyn ConstraintState>;
}

/// One run's matcher.
pub trait ConstraintState: Send {
    /// Computes which tokens may come next. An error ends the request (the
    /// constraint cannot go on).
    fn prepare(&mut self) -> Result<(), String>;
    /// Sets the logit of every token the last [`prepare`](Self::prepare)
    /// ruled out to −∞.
    fn apply(&self, logits: &mut [f32]);
    /// [`prepare`](Self::prepare), then [`apply`](Self::apply).
    fn mask(&mut self, logits: &mut [f32]) -> Result<(), String> {
        self.prepare()?;
        self.apply(logits);
        Ok(())
    }
    /// Moves past the token that was sampled.
    fn accept(&mut self, token: u32) -> Result<(), String>;
    /// Whether the output is complete: nothing more may follow.
    fn is_finished(&self) -> bool;
}

/// A request's constraint: a shared [`ConstraintSpec`]. Two are equal when
/// they are the same compiled constraint.
#[derive(Clone)]
pub struct Constraint(pub Arc<dyn ConstraintSpec>);

impl fmt::Debug for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for Constraint {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl serde::Serialize for Constraint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:?}", self.0))
    }
}
