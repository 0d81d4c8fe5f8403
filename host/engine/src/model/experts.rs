//! A mixture of experts as data (the [`Op::Experts`](super::program::Op::Experts)
//! op's): the router and how its scores choose and weigh the experts,
//! each expert's matrices, and a shared expert every row takes.

use super::program::Gating;
use super::tensors::Matrix;

/// One expert of an [`Experts`] op: a gated MLP of its own width, or an
/// ungated one ([`Gating::ReluSquared`], Nemotron-H's).
#[derive(Debug, Clone)]
pub(crate) struct Expert {
    /// `None` for an ungated expert.
    pub gate: Option<Matrix>,
    pub up: Matrix,
    pub down: Matrix,
    /// Biases of the gate, up and down products (gpt-oss).
    pub biases: Option<Box<ExpertBiases>>,
}

/// An expert's biases: `width`, `width` and `hidden` values.
#[derive(Debug, Clone)]
pub(crate) struct ExpertBiases {
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
    pub down: Vec<f32>,
}

/// How a router's scores become each expert's probability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scoring {
    /// The softmax over the experts (Mixtral, Qwen, gpt-oss).
    Softmax,
    /// Each score's sigmoid, on its own (GLM-4.5, DeepSeek-V3).
    Sigmoid,
}

/// A sparse MLP (Mixtral, Qwen3-MoE, Qwen2-MoE, GLM-4.5): a router scores
/// each row against every expert; the row goes through its `used` most
/// probable experts (by probability plus `selection_bias` where there is
/// one), and their outputs are summed weighted by their probabilities
/// (renormalized over the chosen ones where `normalize`) times
/// `weight_scale`, plus a shared expert every row goes through where there
/// is one.
#[derive(Debug, Clone)]
pub(crate) struct Experts {
    /// One row of `hidden` weights per expert.
    pub router: Matrix,
    /// A bias per expert added to the router's scores (gpt-oss).
    pub router_bias: Option<Vec<f32>>,
    pub experts: Vec<Expert>,
    /// Experts each row goes through (`expert_used_count`).
    pub used: u32,
    /// How the scores become probabilities.
    pub scoring: Scoring,
    /// A bias per expert added to the probabilities to choose the experts
    /// but not to weigh them (DeepSeek-V3's and GLM-4.5's
    /// `exp_probs_b`, which balances the experts' load).
    pub selection_bias: Option<Vec<f32>>,
    /// Group-limited routing (DeepSeek-V3's): a row chooses among the
    /// experts of its best groups only; `None` for every expert.
    pub groups: Option<ExpertGroups>,
    /// Whether the chosen experts' weights are renormalized to sum to 1.
    pub normalize: bool,
    /// Factor on the chosen experts' weights (`expert_weights_scale`,
    /// GLM-4.5's `routed_scaling_factor`; 1 elsewhere).
    pub weight_scale: f32,
    pub gating: Gating,
    /// An expert every row goes through (Qwen2-MoE).
    pub shared: Option<SharedExpert>,
}

/// Group-limited routing: the experts split into `count` groups of
/// consecutive experts, each scored by the sum of its two best selection
/// scores (probability plus selection bias; DeepSeek-V3's), or by its best
/// probability where there is no selection bias (DeepSeek-V2's); a row's
/// experts come from its `used` best groups (llama.cpp's `expert_group_count` and
/// `expert_group_used_count`, DeepSeek-V3's `n_group` and `topk_group`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExpertGroups {
    pub count: u32,
    pub used: u32,
}

/// Qwen2-MoE's shared expert: its output joins the mixture's scaled by
/// `sigmoid(row · gate)` (by 1 without a gate).
#[derive(Debug, Clone)]
pub(crate) struct SharedExpert {
    pub expert: Expert,
    /// `hidden` weights.
    pub gate: Option<Vec<f32>>,
}

impl Expert {
    pub(crate) fn matrices(&self) -> impl Iterator<Item = &Matrix> {
        self.gate.iter().chain([&self.up, &self.down])
    }
}

impl Experts {
    /// The widest expert's hidden layer (the shared one included).
    pub(crate) fn width(&self) -> usize {
        let shared = self.shared.iter().map(|s| &s.expert);
        self.experts
            .iter()
            .chain(shared)
            .map(|e| e.up.rows())
            .max()
            .unwrap_or(0)
    }

    /// Every matrix the op reads: the router, each expert's, the shared
    /// expert's.
    pub(crate) fn matrices(&self) -> impl Iterator<Item = &Matrix> {
        let experts = self.experts.iter().flat_map(Expert::matrices);
        let shared = self.shared.iter().flat_map(|s| s.expert.matrices());
        std::iter::once(&self.router).chain(experts).chain(shared)
    }
}
