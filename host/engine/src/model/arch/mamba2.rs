//! The Mamba-2 mixer the hybrids of Mamba-2 and attention share (Granite
//! 4.0-H's `granitehybrid`, Nemotron-H's `nemotron_h`), after llama.cpp's
//! `build_mamba2_layer`: `ssm_in` makes each normed row's output gate `z`,
//! its `x`, `B` and `C` and a step size per head, in that order; a
//! [`StateSpace`] convolves the middle part (`ssm_conv1d`, its bias where
//! the file has one), scans each head's state (`ssm_dt.bias`, `ssm_a`,
//! `ssm_d`) and gates and norms the result (`ssm_norm`, one gain per
//! value, normed over each group's share); `ssm_out` takes it back to the
//! residual stream.

use super::super::config::ModelError;
use super::super::load_error::LoadError;
use super::super::meta::{bad, required_uint};
use super::super::program::{Buf, Op, Proj, StateSpace};
use super::Loader;

/// The most taps a mixer's convolution may have (the models' have 4).
const MAX_TAPS: u32 = 64;
/// The widest head and state row (the models' are 64 to 128): a state is
/// `inner × state_dim` values a layer, per sequence.
const MAX_HEAD_DIM: u32 = 256;
/// The most heads (the models' have 48 to 256).
const MAX_HEADS: u32 = 1024;

/// The widths every Mamba-2 mixer of a file shares.
pub(super) struct MixerShape {
    taps: u32,
    heads: u32,
    head_dim: u32,
    groups: u32,
    state_dim: u32,
}

impl MixerShape {
    pub(super) fn read(l: &Loader<'_>) -> Result<Self, LoadError> {
        let bounded = |name: &str, max: u32, reason: &'static str| -> Result<u32, LoadError> {
            let key = l.key(name);
            let value = required_uint(l.g, &key)?;
            if value == 0 || value > max {
                return Err(bad(&key, value, reason));
            }
            Ok(value)
        };
        let taps = bounded("ssm.conv_kernel", MAX_TAPS, "must be between 2 and 64")?;
        if taps < 2 {
            return Err(bad(
                &l.key("ssm.conv_kernel"),
                taps,
                "must be between 2 and 64",
            ));
        }
        let state_dim = bounded("ssm.state_size", MAX_HEAD_DIM, "must be between 1 and 256")?;
        let heads = bounded(
            "ssm.time_step_rank",
            MAX_HEADS,
            "must be between 1 and 1024",
        )?;
        let groups = bounded("ssm.group_count", heads, "must divide ssm.time_step_rank")?;
        if !heads.is_multiple_of(groups) {
            return Err(bad(
                &l.key("ssm.group_count"),
                groups,
                "must divide ssm.time_step_rank",
            ));
        }
        let inner_key = l.key("ssm.inner_size");
        let inner = required_uint(l.g, &inner_key)?;
        let head_dim = inner / heads;
        if head_dim == 0 || head_dim > MAX_HEAD_DIM || head_dim * heads != inner {
            return Err(bad(
                &inner_key,
                inner,
                "must be ssm.time_step_rank heads of 1 to 256",
            ));
        }
        Ok(Self {
            taps,
            heads,
            head_dim,
            groups,
            state_dim,
        })
    }
}

/// Layer `i`'s Mamba-2 mixer of the normed rows in [`Buf::H`], state
/// number `state`, added to the residual stream.
pub(super) fn mixer(
    l: &Loader<'_>,
    i: u32,
    shape: &MixerShape,
    state: u32,
    ops: &mut Vec<Op>,
) -> Result<(), LoadError> {
    let h = l.config.hidden as usize;
    let mut ssm = StateSpace {
        taps: shape.taps,
        conv: Vec::new(),
        conv_bias: Vec::new(),
        heads: shape.heads,
        head_dim: shape.head_dim,
        groups: shape.groups,
        state_dim: shape.state_dim,
        dt_bias: Vec::new(),
        decay: Vec::new(),
        skip: Vec::new(),
        norm: Vec::new(),
        state,
    };
    let (width, heads, inner) = (ssm.conv_width(), ssm.heads as usize, ssm.inner());
    ops.push(Op::Linear {
        src: Buf::H,
        projs: vec![Proj {
            w: l.layer_matrix(i, "ssm_in", h, ssm.input_width())?,
            out: Buf::Conv,
            bias: None,
        }],
    });
    let p = format!("blk.{i}.");
    ssm.conv = l.matrix_values(&format!("{p}ssm_conv1d.weight"), shape.taps as usize, width)?;
    ssm.conv_bias = l
        .optional_vector(&format!("{p}ssm_conv1d.bias"), width)?
        .unwrap_or_else(|| vec![0.0; width]);
    ssm.dt_bias = l.layer_vector(i, "ssm_dt.bias", heads)?;
    // `[1, heads]` in the file, as Mamba-1's per-state decays would be.
    ssm.decay = l.matrix_values(&format!("{p}ssm_a"), 1, heads)?;
    ssm.skip = l.matrix_values(&format!("{p}ssm_d"), 1, heads)?;
    let share = inner / shape.groups as usize;
    let groups = shape.groups as usize;
    ssm.norm = l.matrix_values(&format!("{p}ssm_norm.weight"), share, groups)?;
    if !ssm.vectors().flatten().all(|v| v.is_finite()) {
        return Err(ModelError::NonFinite.into());
    }
    ops.push(Op::StateSpace(Box::new(ssm)));
    ops.push(Op::Linear {
        src: Buf::OutGate,
        projs: vec![Proj {
            w: l.layer_matrix(i, "ssm_out", inner, h)?,
            out: Buf::Sum,
            bias: None,
        }],
    });
    ops.push(Op::Residual { src: Buf::Sum });
    Ok(())
}
