//! How the [`Loader`] reads a file's mixtures of experts: the expert
//! count and width the metadata gives (with llama.cpp's defaults), each
//! layer's router and experts (stacked or one tensor each), a shared
//! expert, the experts' biases, and the refusal of experts an
//! architecture does not build.

use super::super::config::ModelError;
use super::super::dequant;
use super::super::load_error::LoadError;
use super::super::meta::{bad, required_uint, uint};
use super::super::program::{Expert, ExpertBiases, Experts, Gating, Scoring, SharedExpert};
use super::Loader;

/// Most experts a mixture may have (llama.cpp's `LLAMA_MAX_EXPERTS`): a
/// file cannot make the loader build millions of expert matrices.
const MAX_EXPERTS: u32 = 512;

impl Loader<'_> {
    /// Experts in each layer's mixture (`{arch}.expert_count`; 0 for a
    /// dense file).
    pub fn expert_count(&self) -> Result<u32, LoadError> {
        Ok(uint(self.g, &self.key("expert_count"))?.unwrap_or(0))
    }

    /// The width of each expert: `expert_feed_forward_length` where the
    /// file has it (0 counts as absent, as llama.cpp reads it), else
    /// `fallback` (Qwen's `feed_forward_length / expert_used_count`, as
    /// llama.cpp takes it; llama.cpp reads no such key for Mixtral and
    /// Granite, whose experts are `feed_forward_length` wide).
    pub fn expert_width(&self, fallback: u32) -> Result<usize, LoadError> {
        let key = self.key("expert_feed_forward_length");
        Ok(uint(self.g, &key)?.filter(|&w| w > 0).unwrap_or(fallback) as usize)
    }

    /// `feed_forward_length / expert_used_count`: Qwen's experts' width
    /// where the file does not say it (0 without `expert_used_count`,
    /// which [`experts`](Self::experts) then refuses).
    pub fn ffn_per_used_expert(&self) -> Result<u32, LoadError> {
        let used = uint(self.g, &self.key("expert_used_count"))?.unwrap_or(0);
        Ok(self.config.ffn.checked_div(used).unwrap_or(0))
    }

    /// Layer `i`'s mixture of SwiGLU experts, each `width` wide: the router
    /// `ffn_gate_inp`, and the experts as stacks (`ffn_gate_exps`,
    /// `ffn_up_exps`, `ffn_down_exps`) or, in files converted before
    /// llama.cpp stacked them, one tensor each (`ffn_gate.{e}`, ...).
    /// `normalize`: the chosen experts' weights are renormalized.
    pub fn experts(&self, i: u32, width: usize, normalize: bool) -> Result<Experts, LoadError> {
        self.mixture(i, width, normalize, true)
    }

    /// Layer `i`'s mixture of ungated experts, each `width` wide
    /// (Nemotron-H's: stacks `ffn_up_exps` and `ffn_down_exps`,
    /// [`Gating::ReluSquared`] between them), routed by softmax until the
    /// caller says otherwise.
    pub fn ungated_experts(&self, i: u32, width: usize) -> Result<Experts, LoadError> {
        self.mixture(i, width, false, false)
    }

    fn mixture(
        &self,
        i: u32,
        width: usize,
        normalize: bool,
        gated: bool,
    ) -> Result<Experts, LoadError> {
        let h = self.config.hidden as usize;
        let count_key = self.key("expert_count");
        let count = required_uint(self.g, &count_key)?;
        let used_key = self.key("expert_used_count");
        let used = required_uint(self.g, &used_key)?;
        if count == 0 || count > MAX_EXPERTS {
            return Err(bad(&count_key, count, "must be between 1 and 512"));
        }
        if used == 0 || used > count {
            return Err(bad(&used_key, used, "must be between 1 and expert_count"));
        }
        if width == 0 {
            return Err(ModelError::ZeroSize("expert width").into());
        }
        let n = count as usize;
        let router = self.layer_matrix(i, "ffn_gate_inp", h, n)?;
        if self.has(&format!("blk.{i}.ffn_gate_up_exps.weight")) {
            return Err(self.unsupported("fused ffn_gate_up_exps experts".into()));
        }
        let experts = if !gated {
            let ups = self.layer_stack(i, "ffn_up_exps", (h, width), n)?;
            let downs = self.layer_stack(i, "ffn_down_exps", (width, h), n)?;
            ups.into_iter()
                .zip(downs)
                .map(|(up, down)| Expert {
                    gate: None,
                    up,
                    down,
                    biases: None,
                })
                .collect()
        } else if self.has(&format!("blk.{i}.ffn_gate_exps.weight")) {
            let gates = self.layer_stack(i, "ffn_gate_exps", (h, width), n)?;
            let ups = self.layer_stack(i, "ffn_up_exps", (h, width), n)?;
            let downs = self.layer_stack(i, "ffn_down_exps", (width, h), n)?;
            gates
                .into_iter()
                .zip(ups)
                .zip(downs)
                .map(|((gate, up), down)| Expert {
                    gate: Some(gate),
                    up,
                    down,
                    biases: None,
                })
                .collect()
        } else {
            (0..count)
                .map(|e| {
                    Ok(Expert {
                        gate: Some(self.layer_matrix(i, &format!("ffn_gate.{e}"), h, width)?),
                        up: self.layer_matrix(i, &format!("ffn_up.{e}"), h, width)?,
                        down: self.layer_matrix(i, &format!("ffn_down.{e}"), width, h)?,
                        biases: None,
                    })
                })
                .collect::<Result<_, LoadError>>()?
        };
        Ok(Experts {
            router,
            router_bias: None,
            experts,
            used,
            scoring: Scoring::Softmax,
            selection_bias: None,
            groups: None,
            normalize,
            weight_scale: 1.0,
            gating: if gated {
                Gating::Silu
            } else {
                Gating::ReluSquared
            },
            shared: None,
        })
    }

    /// Layer `i`'s shared expert (`ffn_{gate,up,down}_shexp`), `width`
    /// wide, with its gate `ffn_gate_inp_shexp` (`[hidden]`, or
    /// `[hidden, 1]` as a converter may write it; required where `gated`,
    /// else read where the file has one).
    pub fn shared_expert(
        &self,
        i: u32,
        width: usize,
        gated: bool,
    ) -> Result<SharedExpert, LoadError> {
        let h = self.config.hidden as usize;
        let expert = Expert {
            gate: Some(self.layer_matrix(i, "ffn_gate_shexp", h, width)?),
            up: self.layer_matrix(i, "ffn_up_shexp", h, width)?,
            down: self.layer_matrix(i, "ffn_down_shexp", width, h)?,
            biases: None,
        };
        let name = format!("blk.{i}.ffn_gate_inp_shexp.weight");
        let gate = match self.g.tensor(&name).map(|t| t.dims().len()) {
            None if gated => return Err(LoadError::MissingTensor(name)),
            None => None,
            Some(2) => Some(dequant::stacked(self.g, &name, &[h as u64, 1])?),
            Some(_) => Some(self.vector(&name, h)?),
        };
        Ok(SharedExpert { expert, gate })
    }

    /// Layer `i`'s ungated shared expert (`ffn_up_shexp`, `ffn_down_shexp`),
    /// `width` wide, joined unscaled (Nemotron-H's).
    pub fn ungated_shared_expert(&self, i: u32, width: usize) -> Result<SharedExpert, LoadError> {
        let h = self.config.hidden as usize;
        let expert = Expert {
            gate: None,
            up: self.layer_matrix(i, "ffn_up_shexp", h, width)?,
            down: self.layer_matrix(i, "ffn_down_shexp", width, h)?,
            biases: None,
        };
        Ok(SharedExpert { expert, gate: None })
    }

    /// Layer `i`'s stack `name` of `count` vectors of `len` values (GGUF
    /// dimensions `[len, count]`, one per expert: an expert's biases).
    fn layer_vector_stack(
        &self,
        i: u32,
        name: &str,
        len: usize,
        count: usize,
    ) -> Result<Vec<Vec<f32>>, LoadError> {
        let name = format!("blk.{i}.{name}");
        let values = dequant::stacked(self.g, &name, &[len as u64, count as u64])?;
        Ok(values
            .chunks_exact(len.max(1))
            .map(<[f32]>::to_vec)
            .collect())
    }

    /// Layer `i`'s experts' biases (`ffn_{gate,up,down}_exps.bias`), given
    /// to each of `experts` (`width` wide), and its router's
    /// (`ffn_gate_inp.bias`).
    pub fn expert_biases(&self, i: u32, experts: &mut Experts) -> Result<(), LoadError> {
        let (h, n) = (self.config.hidden as usize, experts.experts.len());
        let width = experts.width();
        let gates = self.layer_vector_stack(i, "ffn_gate_exps.bias", width, n)?;
        let ups = self.layer_vector_stack(i, "ffn_up_exps.bias", width, n)?;
        let downs = self.layer_vector_stack(i, "ffn_down_exps.bias", h, n)?;
        let biases = gates.into_iter().zip(ups).zip(downs);
        for (expert, ((gate, up), down)) in experts.experts.iter_mut().zip(biases) {
            expert.biases = Some(Box::new(ExpertBiases { gate, up, down }));
        }
        experts.router_bias = Some(self.layer_vector(i, "ffn_gate_inp.bias", n)?);
        Ok(())
    }

    /// Refuses mixture-of-experts files (`{arch}.expert_count` above 0) of
    /// an architecture whose mixture is not built.
    pub fn refuse_experts(&self) -> Result<(), LoadError> {
        match uint(self.g, &self.key("expert_count"))? {
            Some(n) if n > 0 => Err(self.unsupported(format!("mixture of experts ({n} experts)"))),
            _ => Ok(()),
        }
    }
}
