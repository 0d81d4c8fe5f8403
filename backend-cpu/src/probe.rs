//! What this machine can do, measured: how fast its cores together read
//! memory, and how many f32 multiply-adds they do per second. The speed
//! benchmarks report model figures as shares of these, measured in the same
//! run.
//!
//! The read loops run over random contents (a host may merge identical
//! pages, and zero pages may all map one frame, which would let a loop
//! "read" faster than memory) and two independent loops measure the same
//! buffer: a sum and an xor fold. The caller should distrust a figure the
//! two disagree on.

use std::hint::black_box;
use std::time::Instant;

/// Read bandwidth in GiB/s, by two independent loops over the same buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReadBandwidth {
    /// Wrapping sum of 64-bit words.
    pub sum_gib_s: f64,
    /// Xor fold into eight 64-bit lanes.
    pub xor_gib_s: f64,
    /// Bytes read per pass.
    pub bytes: usize,
}

impl ReadBandwidth {
    /// The figure to compare with: the slower loop (the faster one could be
    /// the one that is wrong).
    pub fn gib_s(&self) -> f64 {
        self.sum_gib_s.min(self.xor_gib_s)
    }

    /// Whether the two loops agree within 25%.
    pub fn consistent(&self) -> bool {
        let (lo, hi) = (
            self.sum_gib_s.min(self.xor_gib_s),
            self.sum_gib_s.max(self.xor_gib_s),
        );
        hi <= lo * 1.25
    }
}

/// Reads `bytes` of random words on `threads` threads, best of `passes`
/// passes per loop.
pub fn read_bandwidth(bytes: usize, threads: usize, passes: usize) -> ReadBandwidth {
    let words = (bytes / 8).max(threads * 8);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let buffer: Vec<u64> = (0..words)
        .map(|_| {
            // xorshift64: random enough that no two pages are alike.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        })
        .collect();
    let threads = threads.max(1);
    let chunk = words.div_ceil(threads);
    let time = |f: fn(&[u64]) -> u64| {
        let mut best = f64::INFINITY;
        for _ in 0..passes.max(1) {
            let start = Instant::now();
            std::thread::scope(|s| {
                for part in buffer.chunks(chunk) {
                    s.spawn(move || black_box(f(black_box(part))));
                }
            });
            best = best.min(start.elapsed().as_secs_f64());
        }
        (words * 8) as f64 / best / f64::from(1u32 << 30)
    };
    ReadBandwidth {
        sum_gib_s: time(sum_words),
        xor_gib_s: time(xor_lanes),
        bytes: words * 8,
    }
}

/// Wrapping sum of the words, with AVX2 loads where the CPU has them (the
/// widest loads find the most bandwidth; a baseline that is too low flatters
/// every share measured against it).
fn sum_words(words: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected just above.
        return unsafe { x86::sum_words(words) };
    }
    scalar_sum_words(words)
}

fn scalar_sum_words(words: &[u64]) -> u64 {
    words.iter().fold(0u64, |a, &w| a.wrapping_add(w))
}

/// Xor of the words, with AVX2 loads where the CPU has them.
fn xor_lanes(words: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected just above.
        return unsafe { x86::xor_words(words) };
    }
    scalar_xor_lanes(words)
}

fn scalar_xor_lanes(words: &[u64]) -> u64 {
    let mut lanes = [0u64; 8];
    let mut chunks = words.chunks_exact(8);
    for c in &mut chunks {
        for (l, w) in lanes.iter_mut().zip(c) {
            *l ^= w;
        }
    }
    let tail = chunks.remainder().iter().fold(0, |a, w| a ^ w);
    lanes.iter().fold(tail, |a, l| a ^ l)
}

/// f32 multiply-adds per second on `threads` threads, in GFLOP/s (two
/// flops per multiply-add): independent FMA chains in registers, with
/// AVX2+FMA where the CPU has it.
pub fn fma_peak_gflops(threads: usize) -> f64 {
    const ITERATIONS: u64 = 20_000_000;
    let threads = threads.max(1);
    let mut best = 0.0f64;
    for _ in 0..3 {
        let start = Instant::now();
        let flops: u64 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| s.spawn(|| fma_chains(ITERATIONS)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
        });
        best = best.max(flops as f64 / start.elapsed().as_secs_f64() / 1e9);
    }
    best
}

/// Runs FMA chains; returns the flops done.
fn fma_chains(iterations: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: AVX2 and FMA were detected just above.
        return unsafe { x86::fma_chains(iterations) };
    }
    scalar_fma_chains(iterations / 8)
}

fn scalar_fma_chains(iterations: u64) -> u64 {
    let mut acc = [1.0f32, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7];
    let (a, b) = (black_box(0.999_999f32), black_box(1e-7f32));
    for _ in 0..iterations {
        for x in &mut acc {
            *x = x.mul_add(a, b);
        }
    }
    black_box(acc);
    iterations * 8 * 2
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::hint::black_box;

    /// Twelve independent 8-lane FMA chains (enough to cover two FMA units'
    /// latency).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn fma_chains(iterations: u64) -> u64 {
        let a = _mm256_set1_ps(black_box(0.999_999));
        let b = _mm256_set1_ps(black_box(1e-7));
        let mut acc = [_mm256_set1_ps(1.0); 12];
        for _ in 0..iterations {
            for x in &mut acc {
                *x = _mm256_fmadd_ps(*x, a, b);
            }
        }
        black_box(acc);
        iterations * 12 * 8 * 2
    }

    /// Four 256-bit accumulators of 64-bit lanes, added (or xored with
    /// `XOR`): a const parameter, so the loop body has no call in it.
    #[target_feature(enable = "avx2")]
    unsafe fn fold<const XOR: bool>(words: &[u64]) -> u64 {
        let mut acc = [_mm256_setzero_si256(); 4];
        let mut blocks = words.chunks_exact(16);
        for b in &mut blocks {
            for (j, a) in acc.iter_mut().enumerate() {
                // SAFETY: `b` holds 16 words, so words 4j..4j+4 are in it;
                // the load is unaligned.
                let v = unsafe { _mm256_loadu_si256(b[4 * j..].as_ptr().cast()) };
                *a = if XOR {
                    _mm256_xor_si256(*a, v)
                } else {
                    _mm256_add_epi64(*a, v)
                };
            }
        }
        let mut lanes = [0u64; 16];
        for (j, a) in acc.iter().enumerate() {
            // SAFETY: `lanes` has room for 4 words at 4j.
            unsafe { _mm256_storeu_si256(lanes[4 * j..].as_mut_ptr().cast(), *a) };
        }
        let rest = blocks.remainder().iter().chain(&lanes);
        rest.fold(0, |a, &w| if XOR { a ^ w } else { a.wrapping_add(w) })
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn sum_words(words: &[u64]) -> u64 {
        fold::<false>(words)
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn xor_words(words: &[u64]) -> u64 {
        fold::<true>(words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_read_loops_read_everything() {
        for n in [0u64, 1, 15, 16, 17, 1000, 4099] {
            let words: Vec<u64> = (1..=n)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .collect();
            let sum = words.iter().fold(0u64, |a, &w| a.wrapping_add(w));
            let xor = words.iter().fold(0, |a, w| a ^ w);
            assert_eq!(sum_words(&words), sum, "{n} words");
            assert_eq!(scalar_sum_words(&words), sum, "{n} words");
            assert_eq!(xor_lanes(&words), xor, "{n} words");
            assert_eq!(scalar_xor_lanes(&words), xor, "{n} words");
        }
    }

    #[test]
    fn figures_are_positive_and_finite() {
        let bw = read_bandwidth(1 << 20, 2, 1);
        assert!(bw.sum_gib_s.is_finite() && bw.sum_gib_s > 0.0);
        assert!(bw.xor_gib_s.is_finite() && bw.xor_gib_s > 0.0);
        assert_eq!(bw.bytes, 1 << 20);
        let peak = fma_peak_gflops(1);
        assert!(peak.is_finite() && peak > 0.0);
    }
}
