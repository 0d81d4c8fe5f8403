//! LFM2's hybrid layers in a synthetic `lfm2` file: which layers attend
//! (a per-layer `attention.head_count_kv`, 0 where a layer convolves) and
//! each convolution layer's tensors, as llama.cpp's converter writes them.

use pagoda_core::QuantKind;

use super::writer::GgufWriter;
use super::Role;

/// Taps of each short convolution (`shortconv.l_cache`).
const TAPS: u64 = 3;

/// The layers of LFM2-1.2B (and 350M, 700M) that attend; the rest
/// convolve.
const ATTENTION_LAYERS: [u32; 6] = [2, 5, 8, 10, 12, 14];

/// Whether layer `l` attends.
pub(crate) fn attends(l: u32) -> bool {
    ATTENTION_LAYERS.contains(&l)
}

/// The hybrid's metadata under `key` (`lfm2.…`) for its first `layers`
/// layers, the attending ones with `kv_heads` KV heads.
pub(crate) fn metadata(
    w: &mut GgufWriter,
    key: &dyn Fn(&str) -> String,
    layers: u32,
    kv_heads: u32,
) {
    let per_layer: Vec<i32> = (0..layers)
        .map(|l| if attends(l) { kv_heads as i32 } else { 0 })
        .collect();
    w.i32_array(&key("attention.head_count_kv"), &per_layer);
    w.u32(&key("shortconv.l_cache"), TAPS as u32);
}

/// Layer `l`'s convolution tensors over a residual stream `h` wide, each
/// matrix of the type `kind` gives (the projections take the attention's
/// roles: llama.cpp's quantizer gives them its base type).
pub(crate) fn conv_tensors(
    tensor: &mut dyn FnMut(String, &[u64], QuantKind),
    l: u32,
    h: u64,
    kind: &dyn Fn(Role, u32, u64) -> QuantKind,
) {
    let b = |n: &str| format!("blk.{l}.shortconv.{n}.weight");
    tensor(b("in_proj"), &[h, 3 * h], kind(Role::AttnQ, l, h));
    tensor(b("conv"), &[TAPS, h], QuantKind::F32);
    tensor(b("out_proj"), &[h, h], kind(Role::AttnQ, l, h));
}

/// Qwen3.5's gated delta nets: the widths of every one of a shape's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeltaDims {
    /// Query and key heads (`ssm.group_count`).
    pub key_heads: u32,
    /// Value heads (`ssm.time_step_rank`).
    pub value_heads: u32,
}

/// Every delta net's head width, keys and values alike (`ssm.state_size`).
const DELTA_HEAD: u64 = 128;
/// Taps of each delta net's convolution (`ssm.conv_kernel`).
const DELTA_TAPS: u64 = 4;

/// Whether Qwen3.5's layer `l` is a delta net: all but every fourth.
pub(crate) fn recurs(l: u32) -> bool {
    !(l + 1).is_multiple_of(4)
}

/// Qwen3.5's metadata under `key` (`qwen35.…`) for its first `layers`
/// layers: the delta nets' widths and which layers they are, as the
/// converter writes them.
pub(crate) fn delta_metadata(
    w: &mut GgufWriter,
    key: &dyn Fn(&str) -> String,
    layers: u32,
    d: DeltaDims,
) {
    w.u32(&key("ssm.conv_kernel"), DELTA_TAPS as u32);
    w.u32(&key("ssm.state_size"), DELTA_HEAD as u32);
    w.u32(&key("ssm.group_count"), d.key_heads);
    w.u32(&key("ssm.time_step_rank"), d.value_heads);
    w.u32(&key("ssm.inner_size"), d.value_heads * DELTA_HEAD as u32);
    w.u32(&key("full_attention_interval"), 4);
    let flags: Vec<bool> = (0..layers).map(recurs).collect();
    w.bool_array(&key("attention.recurrent_layers"), &flags);
    w.i32_array(&key("rope.dimension_sections"), &[11, 11, 10, 0]);
}

/// Layer `l`'s delta-net tensors over a residual stream `h` wide (the
/// products take the attention's roles, the convolution stays f32 as
/// llama.cpp's quantizer leaves it).
pub(crate) fn delta_tensors(
    tensor: &mut dyn FnMut(String, &[u64], QuantKind),
    l: u32,
    h: u64,
    d: DeltaDims,
    kind: &dyn Fn(Role, u32, u64) -> QuantKind,
) {
    let (keys, values) = (
        u64::from(d.key_heads) * DELTA_HEAD,
        u64::from(d.value_heads) * DELTA_HEAD,
    );
    let heads = u64::from(d.value_heads);
    let conv = 2 * keys + values;
    let b = |n: &str| format!("blk.{l}.{n}");
    tensor(b("attn_qkv.weight"), &[h, conv], kind(Role::AttnQ, l, h));
    tensor(b("attn_gate.weight"), &[h, values], kind(Role::AttnQ, l, h));
    tensor(b("ssm_beta.weight"), &[h, heads], kind(Role::AttnK, l, h));
    tensor(b("ssm_alpha.weight"), &[h, heads], kind(Role::AttnK, l, h));
    tensor(b("ssm_conv1d.weight"), &[DELTA_TAPS, conv], QuantKind::F32);
    tensor(b("ssm_dt.bias"), &[heads], QuantKind::F32);
    tensor(b("ssm_a"), &[heads], QuantKind::F32);
    tensor(b("ssm_norm.weight"), &[DELTA_HEAD], QuantKind::F32);
    tensor(
        b("ssm_out.weight"),
        &[values, h],
        kind(Role::AttnOutput, l, values),
    );
}

/// Granite 4.0-H's Mamba-2 mixers: the widths of every one of a shape's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MixerDims {
    /// Heads (`ssm.time_step_rank`), each [`MIXER_HEAD`] wide.
    pub heads: u32,
}

/// A mixer head's width (`mamba_d_head`).
const MIXER_HEAD: u64 = 64;
/// The width of `B`, `C` and a head state's rows (`ssm.state_size`).
const MIXER_STATE: u64 = 128;
/// Taps of a mixer's convolution (`ssm.conv_kernel`).
const MIXER_TAPS: u64 = 4;

/// The layers of Granite 4.0-H's 40 that attend, one in ten; the rest
/// are mixers.
const GRANITE_ATTENTION: [u32; 4] = [5, 15, 25, 35];

/// Whether Granite 4.0-H's layer `l` attends.
pub(crate) fn granite_attends(l: u32) -> bool {
    GRANITE_ATTENTION.contains(&l)
}

/// Granite 4.0-H's metadata under `key` (`granitehybrid.…`) for its first
/// `layers` layers, the attending ones with `kv_heads` KV heads: the
/// mixers' widths (one group), attention without rotary positions, and
/// Granite's muP multipliers, as the converter writes them.
pub(crate) fn mixer_metadata(
    w: &mut GgufWriter,
    key: &dyn Fn(&str) -> String,
    (layers, kv_heads): (u32, u32),
    m: MixerDims,
) {
    let per_layer: Vec<i32> = (0..layers)
        .map(|l| {
            if granite_attends(l) {
                kv_heads as i32
            } else {
                0
            }
        })
        .collect();
    w.i32_array(&key("attention.head_count_kv"), &per_layer);
    w.u32(&key("ssm.conv_kernel"), MIXER_TAPS as u32);
    w.u32(&key("ssm.state_size"), MIXER_STATE as u32);
    w.u32(&key("ssm.group_count"), 1);
    w.u32(&key("ssm.time_step_rank"), m.heads);
    w.u32(&key("ssm.inner_size"), m.heads * MIXER_HEAD as u32);
    w.bool(&key("rope.scaling.finetuned"), false);
    w.f32(&key("embedding_scale"), 12.0);
    w.f32(&key("residual_scale"), 0.22);
    w.f32(&key("logit_scale"), 8.0);
    w.f32(&key("attention.scale"), 0.015625);
}

/// Layer `l`'s mixer tensors over a residual stream `h` wide (the products
/// take the attention's roles, the convolution and per-head vectors stay
/// f32 as llama.cpp's quantizer leaves them).
pub(crate) fn mixer_tensors(
    tensor: &mut dyn FnMut(String, &[u64], QuantKind),
    l: u32,
    h: u64,
    m: MixerDims,
    kind: &dyn Fn(Role, u32, u64) -> QuantKind,
) {
    let heads = u64::from(m.heads);
    let inner = heads * MIXER_HEAD;
    let conv = inner + 2 * MIXER_STATE;
    let b = |n: &str| format!("blk.{l}.{n}");
    let f32 = QuantKind::F32;
    tensor(
        b("ssm_in.weight"),
        &[h, inner + conv + heads],
        kind(Role::AttnQ, l, h),
    );
    tensor(b("ssm_conv1d.weight"), &[MIXER_TAPS, conv], f32);
    tensor(b("ssm_conv1d.bias"), &[conv], f32);
    tensor(b("ssm_dt.bias"), &[heads], f32);
    tensor(b("ssm_a"), &[1, heads], f32);
    tensor(b("ssm_d"), &[1, heads], f32);
    tensor(b("ssm_norm.weight"), &[inner, 1], f32);
    tensor(
        b("ssm_out.weight"),
        &[inner, h],
        kind(Role::AttnOutput, l, inner),
    );
}
