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
