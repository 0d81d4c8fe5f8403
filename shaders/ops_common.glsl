// Shared by the model-op kernels (the ones kernels.list marks -DOPS): their
// own descriptor layout and push constants, separate from the attention
// kernels' (common.glsl). Weights are one read-only buffer of GGUF blocks
// exactly as the file lays them out (rows of `row_bytes`, blocks of 18 or 34
// bytes need not be word-aligned, so bytes are picked out of words);
// activations are one f32 buffer that every op reads and writes at offsets.

#extension GL_GOOGLE_include_directive : require

layout(std430, set = 0, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, set = 0, binding = 1) buffer Activations { float act[]; };
// Bounds-checking fault word, written only by the BOUNDS_CHECK variants.
layout(std430, set = 0, binding = 2) buffer Faults { uint fault; };
// Small integers: token ids, positions, sampled tokens.
layout(std430, set = 0, binding = 3) buffer Meta { uint meta[]; };

layout(push_constant) uniform OpParams {
    uint rows;             // output features
    uint cols;             // input features
    uint batch;            // activation rows
    uint w_offset;         // first byte of the matrix in `w`
    uint row_bytes;        // bytes of one weight row
    uint x_offset;         // first input element in `act`
    uint x_stride;         // elements between input rows
    uint y_offset;         // first output element in `act`
    uint y_stride;         // elements between output rows
    uint w_words;          // bounds, for BOUNDS_CHECK
    uint act_words;
    uint meta_words;
    uint aux0;             // per op: a meta offset, a second input, ...
    uint aux1;
    uint aux2;
    uint aux3;
    float eps;             // rms_norm: epsilon; embed: the factor on the rows
} p;

#define FAULT_WEIGHTS 1u
#define FAULT_ACT 2u
#define FAULT_META 4u
#define FAULT_TOKEN 8u

#ifdef BOUNDS_CHECK
#define CHECK(cond, bit) if (!(cond)) { atomicOr(fault, bit); return; }
#else
#define CHECK(cond, bit)
#endif

// Byte `b` of the weights.
uint byte_at(uint b) {
    return (w[b >> 2u] >> ((b & 3u) << 3u)) & 0xFFu;
}

// The f16 at byte `b` (2-byte aligned), as f32.
float half_at(uint b) {
    uint lo = w[b >> 2u];
    uint bits = (b & 2u) == 0u ? (lo & 0xFFFFu) : (lo >> 16u);
    return unpackHalf2x16(bits).x;
}

// The signed byte at `b`.
int int8_at(uint b) {
    return int(byte_at(b) << 24u) >> 24;
}
