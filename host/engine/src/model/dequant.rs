//! GGUF tensors to f32 at load (the dense path, and the small vectors of
//! every path), split over threads by rows.

use std::num::NonZeroUsize;

use pagoda_core::dequantize_row;
use pagoda_core::gguf::{Gguf, TensorInfo};

use super::load_error::LoadError;

/// Looks up `name` and checks its GGUF dimensions (row length first). Its
/// type needs no check: the reader refuses a type the core cannot
/// dequantize when it parses the file, which [`LoadError`]'s `From` turns
/// into [`LoadError::UnsupportedTensorType`].
pub(super) fn tensor<'a>(
    g: &Gguf<'a>,
    name: &str,
    dims: &[u64],
) -> Result<TensorInfo<'a>, LoadError> {
    let t = g
        .tensor(name)
        .ok_or_else(|| LoadError::MissingTensor(name.to_string()))?;
    if t.dims() != dims {
        return Err(LoadError::Shape {
            tensor: name.to_string(),
            expected: dims.to_vec(),
            found: t.dims().to_vec(),
        });
    }
    Ok(t)
}

/// A vector tensor `[len]`, in f32.
pub(super) fn vector(g: &Gguf<'_>, name: &str, len: usize) -> Result<Vec<f32>, LoadError> {
    rows(&tensor(g, name, &[len as u64])?)
}

/// Every row of tensor `name` of GGUF dimensions `dims` (row length first:
/// a matrix, or a stack of them), in f32, rows back to back.
pub(super) fn stacked(g: &Gguf<'_>, name: &str, dims: &[u64]) -> Result<Vec<f32>, LoadError> {
    rows(&tensor(g, name, dims)?)
}

/// Dequantizes every row of `t`, with the rows split over the available
/// cores.
fn rows(t: &TensorInfo<'_>) -> Result<Vec<f32>, LoadError> {
    let width = t.row_elems() as usize;
    let count = t.rows() as usize;
    let mut data = vec![0f32; width * count];
    let threads = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    // Enough rows per thread that spawning costs little next to the work.
    let per = count
        .div_ceil(threads)
        .max(4096usize.div_ceil(width).max(1));
    let fail = |source| LoadError::Dequantize {
        tensor: t.name().to_string(),
        source,
    };
    let one = |first: usize, chunk: &mut [f32]| -> Result<(), LoadError> {
        for (i, out) in chunk.chunks_exact_mut(width).enumerate() {
            let bytes = t.row((first + i) as u64).ok_or_else(|| LoadError::Shape {
                tensor: t.name().to_string(),
                expected: vec![width as u64, count as u64],
                found: t.dims().to_vec(),
            })?;
            dequantize_row(t.kind(), bytes, out).map_err(fail)?;
        }
        Ok(())
    };
    if per >= count {
        one(0, &mut data)?;
    } else {
        std::thread::scope(|s| {
            let workers: Vec<_> = data
                .chunks_mut(per * width)
                .enumerate()
                .map(|(k, chunk)| {
                    let one = &one;
                    s.spawn(move || one(k * per, chunk))
                })
                .collect();
            workers
                .into_iter()
                .try_for_each(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        })?;
    }
    Ok(data)
}
