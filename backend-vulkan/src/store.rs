//! The KV store in device memory, split into chunks so that no binding
//! exceeds the device's `maxStorageBufferRange`.

use std::sync::Arc;

use gpu_allocator::MemoryLocation;
use pagoda_core::{KvDtype, KvGeometry};

use crate::context::Context;
use crate::kernels::KV_CHUNKS;
use crate::memory::Buffer;
use crate::VulkanError;

/// Every page's keys and values for every layer, in device memory.
///
/// Chunk `c` holds pages `c × pages_per_chunk ..`; a page's words for all
/// layers are contiguous, `[layer][k|v][kv_head][16][head_dim]` in the dtype
/// (see `shaders/common.glsl`). Each chunk frees itself when dropped; the
/// store holds the context, so the device outlives it.
pub struct VulkanKvStore {
    ctx: Arc<Context>,
    pub(crate) geometry: KvGeometry,
    pub(crate) pages: u32,
    pub(crate) pages_per_chunk: u32,
    pub(crate) page_words: u32,
    pub(crate) chunks: Vec<Buffer>,
}

impl std::fmt::Debug for VulkanKvStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanKvStore")
            .field("geometry", &self.geometry)
            .field("pages", &self.pages)
            .field("chunks", &self.chunks.len())
            .field("pages_per_chunk", &self.pages_per_chunk)
            .finish()
    }
}

/// The store's dtype code in the kernels.
pub(crate) fn dtype_code(dtype: KvDtype) -> u32 {
    match dtype {
        KvDtype::F32 => 0,
        KvDtype::F16 => 1,
        KvDtype::Bf16 => 2,
    }
}

impl VulkanKvStore {
    pub(crate) fn new(
        ctx: &Arc<Context>,
        geometry: KvGeometry,
        pages: u32,
        max_chunk_bytes: Option<u64>,
    ) -> Result<Self, VulkanError> {
        let page_bytes = geometry.bytes_per_page();
        let page_words = u32::try_from(page_bytes / 4)
            .map_err(|_| VulkanError::Unsupported(format!("a page of {page_bytes} bytes")))?;
        let limit = ctx
            .info
            .max_storage_buffer_range
            .min(ctx.info.max_allocation_bytes)
            .min(max_chunk_bytes.unwrap_or(u64::MAX))
            // Word indexes in the kernels are 32-bit.
            .min(u64::from(u32::MAX));
        let pages_per_chunk = u32::try_from(limit / page_bytes).unwrap_or(u32::MAX);
        if pages_per_chunk == 0 {
            return Err(VulkanError::Unsupported(format!(
                "a page of {page_bytes} bytes exceeds one storage buffer ({limit} bytes)"
            )));
        }
        let chunks = pages.max(1).div_ceil(pages_per_chunk) as usize;
        if chunks > KV_CHUNKS {
            return Err(VulkanError::Unsupported(format!(
                "{pages} pages of {page_bytes} bytes need {chunks} storage buffers of at most \
                 {limit} bytes; the kernels bind {KV_CHUNKS}"
            )));
        }
        // A failure drops the chunks already made, which frees them.
        let mut store = Self {
            ctx: ctx.clone(),
            geometry,
            pages,
            pages_per_chunk,
            page_words,
            chunks: Vec::with_capacity(chunks),
        };
        for c in 0..chunks as u32 {
            let in_chunk = pages_per_chunk.min(pages.max(1) - c * pages_per_chunk);
            let bytes = u64::from(in_chunk) * page_bytes;
            let buffer = Buffer::new(ctx, "kv chunk", bytes, MemoryLocation::GpuOnly).map_err(
                |e| match e {
                    VulkanError::OutOfMemory(m) => VulkanError::OutOfMemory(format!(
                        "KV store of {pages} pages ({} MiB): {m}",
                        (u64::from(pages) * page_bytes) >> 20
                    )),
                    other => other,
                },
            )?;
            store.chunks.push(buffer);
        }
        Ok(store)
    }

    /// The geometry it was built for.
    pub fn geometry(&self) -> KvGeometry {
        self.geometry
    }

    /// Pages it holds.
    pub fn pages(&self) -> u32 {
        self.pages
    }

    /// Storage buffers it is split across.
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// Bytes of device memory it holds.
    pub fn bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.bytes).sum()
    }

    pub(crate) fn same_device(&self, ctx: &Arc<Context>) -> bool {
        Arc::ptr_eq(&self.ctx, ctx)
    }
}
