//! The ops over spans of heads, which latent attention (DeepSeek's MLA)
//! is built from: a norm over part of each head, copies between heads'
//! spans, and a product per head. A span is a `width`-value window at
//! `offset` in every `stride`-value head of a buffer's rows; each op
//! checks its spans fit the step's buffers and fails with
//! [`ModelError::Span`] where they do not.

use super::super::config::ModelError;
use super::super::program::Span;
use super::super::tensors::Matrix;
use super::norm::rms_norm_in_place;
use super::{grow, index, project, Run};

impl Run<'_> {
    /// Where the spans of `span` lie in its buffer: head `i` (row by row,
    /// each row's heads in order) starts at `i × stride + offset`. Returns
    /// the heads of a row, or an error where the span does not fit them.
    fn heads_of(&self, span: Span) -> Result<usize, ModelError> {
        let width = self.widths[index(span.buf)];
        let stride = span.stride as usize;
        if stride == 0
            || !width.is_multiple_of(stride)
            || (span.offset + span.width) as usize > stride
        {
            return Err(ModelError::Span);
        }
        Ok(width / stride)
    }

    /// Each span of `span` RMS-normed in place.
    pub(super) fn norm_span(&mut self, span: Span, gain: &[f32]) -> Result<(), ModelError> {
        let heads = self.t * self.heads_of(span)?;
        let (stride, offset, len) = span_range(span);
        let eps = self.c.rms_eps;
        let buf = &mut self.act.bufs[index(span.buf)];
        for i in 0..heads {
            let start = i * stride + offset;
            rms_norm_in_place(&mut buf[start..start + len], gain, eps);
        }
        Ok(())
    }

    /// Each head's span of `from` into the same head's span of `to`.
    pub(super) fn copy(&mut self, from: Span, to: Span) -> Result<(), ModelError> {
        let heads = self.heads_of(from)?;
        if heads != self.heads_of(to)? || from.width != to.width {
            return Err(ModelError::Span);
        }
        let ((s_stride, s_off, len), (d_stride, d_off, _)) = (span_range(from), span_range(to));
        let at = |i: usize| (i * s_stride + s_off, i * d_stride + d_off);
        let bufs = &mut self.act.bufs;
        if from.buf == to.buf {
            let buf = &mut bufs[index(from.buf)];
            for i in 0..self.t * heads {
                let (s, d) = at(i);
                buf.copy_within(s..s + len, d);
            }
            return Ok(());
        }
        let x = std::mem::take(&mut bufs[index(from.buf)]);
        let y = &mut bufs[index(to.buf)];
        for i in 0..self.t * heads {
            let (s, d) = at(i);
            y[d..d + len].copy_from_slice(&x[s..s + len]);
        }
        bufs[index(from.buf)] = x;
        Ok(())
    }

    /// Each head's span of `to` times the sigmoid of the same head's span
    /// of `gate`.
    pub(super) fn sigmoid_gate(&mut self, to: Span, gate: Span) -> Result<(), ModelError> {
        let heads = self.heads_of(to)?;
        if heads != self.heads_of(gate)? || to.width != gate.width || to.buf == gate.buf {
            return Err(ModelError::Span);
        }
        let ((t_stride, t_off, len), (g_stride, g_off, _)) = (span_range(to), span_range(gate));
        let bufs = &mut self.act.bufs;
        let gates = std::mem::take(&mut bufs[index(gate.buf)]);
        let y = &mut bufs[index(to.buf)];
        for i in 0..self.t * heads {
            let (d, g) = (i * t_stride + t_off, i * g_stride + g_off);
            for (v, &z) in y[d..d + len].iter_mut().zip(&gates[g..g + len]) {
                *v /= 1.0 + (-z).exp();
            }
        }
        bufs[index(gate.buf)] = gates;
        Ok(())
    }

    /// Head `h`'s span of `to` = `heads[h] · (head h's span of from)`, for
    /// every row: each head's rows gathered, one product, scattered back.
    pub(super) fn head_linear(
        &mut self,
        from: Span,
        to: Span,
        heads: &[Matrix],
    ) -> Result<(), ModelError> {
        let n = heads.len();
        let fits = |w: &Matrix| w.cols() == from.width as usize && w.rows() == to.width as usize;
        if self.heads_of(from)? != n || self.heads_of(to)? != n || !heads.iter().all(fits) {
            return Err(ModelError::Span);
        }
        let t = self.t;
        let ((s_stride, s_off, cols), (d_stride, d_off, rows)) = (span_range(from), span_range(to));
        let act = &mut *self.act;
        for (h, w) in heads.iter().enumerate() {
            grow(&mut act.head_in, t * cols);
            let x = &act.bufs[index(from.buf)];
            for (r, chunk) in act.head_in.chunks_exact_mut(cols).take(t).enumerate() {
                let start = (r * n + h) * s_stride + s_off;
                chunk.copy_from_slice(&x[start..start + cols]);
            }
            let input = std::mem::take(&mut act.head_in);
            let mut out = std::mem::take(&mut act.head_out);
            let result = project(
                self.team,
                act.isa,
                &mut act.qx,
                self.feed,
                &input,
                cols,
                &[w],
                [&mut out],
            );
            act.head_in = input;
            if result.is_ok() {
                let y = &mut act.bufs[index(to.buf)];
                for (r, chunk) in out.chunks_exact(rows).take(t).enumerate() {
                    let start = (r * n + h) * d_stride + d_off;
                    y[start..start + rows].copy_from_slice(chunk);
                }
            }
            act.head_out = out;
            result?;
        }
        Ok(())
    }
}

/// A span's stride, offset and width, as indices.
fn span_range(span: Span) -> (usize, usize, usize) {
    (
        span.stride as usize,
        span.offset as usize,
        span.width as usize,
    )
}
