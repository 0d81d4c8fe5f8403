// Shared by every Pagoda kernel: the one descriptor layout, the push
// constants, and KV addressing. See `kernels.list` for the kernels.
//
// The KV pool is split into chunks, each bound as its own storage buffer so
// that no binding exceeds the device's maxStorageBufferRange. Chunk c holds
// pages [c * pages_per_chunk, (c + 1) * pages_per_chunk); inside a chunk a
// page is `page_words` contiguous words laid out [layer][k|v][kv_head][16]
// [head_dim] in the store's dtype (f32, or two f16/bf16 per word, low half
// first). Every kernel indexes a chunk with a value that is the same for the
// whole workgroup (dynamically uniform), which core Vulkan allows.

#extension GL_GOOGLE_include_directive : require

#define KV_CHUNKS 8
#define PAGE_SIZE 16u
#define NO_PARTIAL 0xFFFFFFFFu

layout(std430, set = 0, binding = 0) buffer KvChunk { uint words[]; } kv[KV_CHUNKS];

// Bounds-checking fault word, written only by the BOUNDS_CHECK variants.
layout(std430, set = 0, binding = 5) buffer Faults { uint fault; };

layout(push_constant) uniform Params {
    uint dtype;            // 0 f32, 1 f16, 2 bf16
    uint layer;
    uint layers;
    uint kv_heads;
    uint head_dim;
    uint q_heads;
    uint pages_per_chunk;
    uint page_words;
    uint pages;            // pages in the store
    uint count;            // records this dispatch covers
    float scale;
    uint seq_offset;       // attention: where the sequence table starts in meta
    uint item_offset;      // attention: work items; merge: merge entries
    uint chunks;           // chunks in use
    uint input_words;      // bounds of the other buffers, for BOUNDS_CHECK
    uint output_words;
    uint meta_words;
    uint partial_words;
    uint window;           // attention: sliding window (0: the whole context)
    float softcap;         // attention: soft cap of the scores (0: none)
    uint input_offset;     // first word of the inputs (queries, or keys and values)
    uint output_offset;    // first word of the outputs
} p;

// Fault bits, reported back to the host.
#define FAULT_PAGE 1u
#define FAULT_INPUT 2u
#define FAULT_OUTPUT 4u
#define FAULT_META 8u
#define FAULT_PARTIAL 16u
#define FAULT_KV 32u

#ifdef BOUNDS_CHECK
#define CHECK(cond, bit) if (!(cond)) { atomicOr(fault, bit); return; }
#define CHECK_CONTINUE(cond, bit) if (!(cond)) { atomicOr(fault, bit); continue; }
#else
#define CHECK(cond, bit)
#define CHECK_CONTINUE(cond, bit)
#endif

// The first key position a query at `pos` sees.
uint first_visible(uint pos) {
    return p.window == 0u || pos + 1u < p.window ? 0u : pos + 1u - p.window;
}

// A scaled score, soft-capped where asked: cap × tanh(s / cap), the tanh's
// argument clamped where it is ±1 in f32 (some drivers' tanh overflows).
float soft_cap(float s) {
    return p.softcap > 0.0 ? p.softcap * tanh(clamp(s / p.softcap, -15.0, 15.0)) : s;
}

// Words of one head's row of head_dim elements.
uint row_words() {
    return p.dtype == 0u ? p.head_dim : p.head_dim / 2u;
}

// Chunk of a page, never past the descriptor array. For pages the host
// checked this changes nothing; it keeps a descriptor index in range where
// a compiler evaluates it early from a word the kernel would not use:
// Mesa 26.1's lavapipe does so for the iteration after a kernel's last
// (the stale meta word there, say NO_PARTIAL, made the scatter kernel load
// descriptor 0xFFFFF and fault).
uint chunk_of(uint page) {
    return min(page / p.pages_per_chunk, KV_CHUNKS - 1u);
}

// First word of a page inside its chunk.
uint page_base(uint page) {
    return (page % p.pages_per_chunk) * p.page_words;
}

// Word offset inside a page of token `t`'s row of (layer, k|v, head).
uint row_offset(uint layer, uint kv_sel, uint head, uint t) {
    return (((layer * 2u + kv_sel) * p.kv_heads + head) * PAGE_SIZE + t) * row_words();
}
