//! How a mixture's router scores and weighs its experts, as the
//! `expert_*` metadata of GLM-4.5's and DeepSeek's files says it: the
//! scoring function, renormalization, a scale, and group-limited routing.

use super::super::config::ModelError;
use super::super::load_error::LoadError;
use super::super::meta::{bad, boolean, float, uint};
use super::super::program::{ExpertGroups, Experts, Scoring};
use super::Loader;

/// A file's routing rule, read once and given to each layer's mixture.
pub(super) struct Router {
    scoring: Scoring,
    normalize: bool,
    scale: f32,
    groups: Option<ExpertGroups>,
}

impl Router {
    /// The rule of `l`'s file; `absent` is the scoring where the file does
    /// not name one (llama.cpp's default for the architecture: GLM-4.5's
    /// sigmoids, DeepSeek-V2's softmax).
    pub fn read(l: &Loader<'_>, absent: Scoring) -> Result<Self, LoadError> {
        // llama.cpp's `llama_expert_gating_func_type`: 0 (none) takes the
        // architecture's default, 1 is the softmax, 2 the sigmoid.
        let gating_key = l.key("expert_gating_func");
        let scoring = match uint(l.g, &gating_key)?.unwrap_or(0) {
            0 => absent,
            1 => Scoring::Softmax,
            2 => Scoring::Sigmoid,
            other => {
                return Err(l.unsupported(format!("expert gating function {other}")));
            }
        };
        let scale_key = l.key("expert_weights_scale");
        // 0 (llama.cpp's default) scales nothing, as 1 does.
        let scale = match float(l.g, &scale_key)?.unwrap_or(0.0) {
            0.0 => 1.0,
            s if s.is_finite() && s > 0.0 => s,
            s => return Err(bad(&scale_key, s, "must be finite and positive")),
        };
        Ok(Self {
            scoring,
            normalize: boolean(l.g, &l.key("expert_weights_norm"))?.unwrap_or(false),
            scale,
            groups: Self::groups(l)?,
        })
    }

    /// `expert_group_count` groups (0 or 1: none), of which a row takes
    /// `expert_group_used_count`. The groups must split the experts evenly,
    /// and the used ones hold at least the experts a row takes.
    fn groups(l: &Loader<'_>) -> Result<Option<ExpertGroups>, LoadError> {
        let count_key = l.key("expert_group_count");
        let count = uint(l.g, &count_key)?.unwrap_or(0);
        if count <= 1 {
            return Ok(None);
        }
        let experts = l.expert_count()?;
        let used_experts = uint(l.g, &l.key("expert_used_count"))?.unwrap_or(0);
        if experts == 0 || !experts.is_multiple_of(count) || count > 64 {
            return Err(bad(
                &count_key,
                count,
                "must divide expert_count, at most 64",
            ));
        }
        let used_key = l.key("expert_group_used_count");
        let used = uint(l.g, &used_key)?.unwrap_or(0);
        if used == 0 || used > count {
            return Err(bad(
                &used_key,
                used,
                "must be between 1 and expert_group_count",
            ));
        }
        if u64::from(used) * u64::from(experts / count) < u64::from(used_experts) {
            return Err(bad(
                &used_key,
                used,
                "its groups hold fewer experts than expert_used_count",
            ));
        }
        Ok(Some(ExpertGroups { count, used }))
    }

    /// The rule with the chosen experts' weights renormalized.
    pub fn normalized(self) -> Self {
        Self {
            normalize: true,
            ..self
        }
    }

    /// `experts` routed by this rule.
    pub fn apply(&self, experts: &mut Experts) {
        experts.scoring = self.scoring;
        experts.normalize = self.normalize;
        experts.weight_scale = self.scale;
        experts.groups = self.groups;
    }
    /// Layer `i`'s experts, `width` wide, routed by this rule and chosen
    /// with the selection bias `exp_probs_b` (GLM-4.5's, LFM2-MoE's and
    /// MiniMax-M2's: it moves the choice, not the weights).
    pub fn biased_experts(
        &self,
        l: &Loader<'_>,
        i: u32,
        width: usize,
    ) -> Result<Experts, LoadError> {
        self.biased(l, i, l.experts(i, width, self.normalize)?)
    }

    /// Layer `i`'s `experts` routed by this rule and chosen with the
    /// selection bias `exp_probs_b`.
    pub fn biased(
        &self,
        l: &Loader<'_>,
        i: u32,
        mut experts: Experts,
    ) -> Result<Experts, LoadError> {
        self.apply(&mut experts);
        let bias = l.layer_vector(i, "exp_probs_b.bias", experts.experts.len())?;
        if !bias.iter().all(|b| b.is_finite()) {
            return Err(ModelError::NonFinite.into());
        }
        experts.selection_bias = Some(bias);
        Ok(experts)
    }
}
