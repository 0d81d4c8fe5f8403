//! Whether the row loops' kernels hint a fixed distance ahead of the
//! weights in hand ([`fixed_hints`]), chosen once per process by the
//! CPU's model, and by weight type.
//!
//! The hints were worth 5% of SmolLM2's decode on Zen 2 and made Llama
//! decode reach the bandwidth on Zen 3 (`PREFETCH_AHEAD`'s and
//! `prefetch_ahead`'s docs). On Zen 4 they cost the K-quants: their
//! kernels hint a line every 32-byte chunk of 1,152- to 1,680-byte group
//! blocks, and the hardware prefetcher follows a worker's one stream of
//! weights alone, while each hint takes an L1 miss buffer the stream would
//! have used. There one thread read a plain stream at 30.1-31.5 GB/s without
//! hints and 26.6-27.3 with one per line 4 KiB ahead; without them
//! Llama-3.2-1B Q4_K_M decoded at 27.3-27.6 tok/s against 22.9-24.2 (one
//! thread), 1.025× on two, and Llama-3-8B Q4_K_M 1.05-1.15× (AMD EPYC
//! family 25 model 17, AVX2, alternating runs; prefill and 16 sequences
//! unchanged). The Q4_0 family kept its hints: without them SmolLM2 Q4_1
//! decoded 0.95× and Llama-3-8B Q4_0 0.97×; Q8_0 too, unmeasured.
//! Where hints are off, the kernels hint the block in hand (distance 0,
//! lines already on their way) rather than test for it in their loops: a
//! branch there cost 1.5-6%. Later calls over a group still hint at the next
//! group (`rows8::hint_distance`), which no hardware prefetcher sees
//! coming.

use std::sync::OnceLock;

use pagoda_core::QuantKind;

/// Whether the kernels hint [`PREFETCH_AHEAD`](super::PREFETCH_AHEAD)
/// bytes ahead of `kind`'s weights on this CPU (not K-quants on Zen 4;
/// see the module docs).
pub(super) fn fixed_hints(kind: QuantKind) -> bool {
    static ZEN4: OnceLock<bool> = OnceLock::new();
    let zen4 = *ZEN4.get_or_init(|| {
        let (vendor, family, model) = cpu_model();
        is_zen4(&vendor, family, model)
    });
    !(zen4 && kind.block_elems() == 256)
}

/// The CPU's vendor string and its family and model as `cpuid` leaf 1
/// gives them, extended fields added in.
fn cpu_model() -> ([u8; 12], u32, u32) {
    use std::arch::x86_64::__cpuid;
    // `__cpuid` is safe from Rust 1.94 and unsafe before (MSRV 1.89).
    #[allow(unused_unsafe)]
    // SAFETY: `cpuid` exists on every x86_64 CPU, and leaves 0 and 1 on
    // every one of them.
    let (zero, one) = unsafe { (__cpuid(0), __cpuid(1)) };
    let mut vendor = [0u8; 12];
    for (at, reg) in [zero.ebx, zero.edx, zero.ecx].into_iter().enumerate() {
        vendor[4 * at..4 * at + 4].copy_from_slice(&reg.to_le_bytes());
    }
    let (family, model) = family_and_model(one.eax);
    (vendor, family, model)
}

/// The family and model `cpuid` leaf 1's `eax` gives: the extended family
/// is added to family 0xf, and the extended model prefixed for families
/// 0x6 and 0xf (Intel's rule for 0x6: a Sapphire Rapids is model 0x8f,
/// not 0xf; AMD's families are all 0xf and above).
fn family_and_model(eax: u32) -> (u32, u32) {
    let base_family = (eax >> 8) & 0xf;
    let base_model = (eax >> 4) & 0xf;
    let family = if base_family == 0xf {
        base_family + ((eax >> 20) & 0xff)
    } else {
        base_family
    };
    let model = if matches!(base_family, 0x6 | 0xf) {
        base_model | ((eax >> 12) & 0xf0)
    } else {
        base_model
    };
    (family, model)
}

/// Whether this vendor, family and model is AMD's Zen 4 (family 0x19,
/// models 0x10-0x1f, 0x60-0x7f and 0xa0-0xaf; Zen 3 shares the family).
fn is_zen4(vendor: &[u8; 12], family: u32, model: u32) -> bool {
    vendor == b"AuthenticAMD"
        && family == 0x19
        && matches!(model, 0x10..=0x1f | 0x60..=0x7f | 0xa0..=0xaf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zen4_is_told_by_family_and_model() {
        let amd = b"AuthenticAMD";
        // Zen 4: Genoa (this machine kind's family 25 model 17), Raphael,
        // Phoenix, Bergamo.
        for model in [0x11, 0x61, 0x74, 0xa0] {
            assert!(is_zen4(amd, 0x19, model), "model {model:#x}");
        }
        // Zen 2, Zen 3 (Milan, Vermeer, Cezanne), Zen 5, and an Intel of
        // the same numbers.
        assert!(!is_zen4(amd, 0x17, 0x31));
        for model in [0x01, 0x21, 0x50] {
            assert!(!is_zen4(amd, 0x19, model), "model {model:#x}");
        }
        assert!(!is_zen4(amd, 0x1a, 0x02));
        assert!(!is_zen4(b"GenuineIntel", 0x19, 0x11));
    }

    /// Leaf 1's `eax` of known CPUs (their family, model and stepping as
    /// the vendors publish them).
    #[test]
    fn family_and_model_follow_the_vendors_rules() {
        // AMD EPYC Genoa: family 0x19 model 0x11; Zen 2 Rome 0x17/0x31.
        assert_eq!(family_and_model(0x00a1_0f11), (0x19, 0x11));
        assert_eq!(family_and_model(0x0083_0f10), (0x17, 0x31));
        // Intel Sapphire Rapids 0x6/0x8f, Emerald Rapids 0x6/0xcf, and a
        // Pentium 4 (family 0xf, model 0x2) with no extended fields.
        assert_eq!(family_and_model(0x0008_06f8), (0x6, 0x8f));
        assert_eq!(family_and_model(0x000c_06f2), (0x6, 0xcf));
        assert_eq!(family_and_model(0x0000_0f29), (0xf, 0x2));
        // Family 0x5 (Pentium) takes no extended model.
        assert_eq!(family_and_model(0x0000_0543), (0x5, 0x4));
    }

    #[test]
    fn only_k_quants_can_go_without_fixed_hints() {
        for kind in [
            QuantKind::Q4_0,
            QuantKind::Q4_1,
            QuantKind::Q8_0,
            QuantKind::Q5_1,
        ] {
            assert!(fixed_hints(kind), "{kind}");
        }
        let (vendor, family, model) = cpu_model();
        let zen4 = is_zen4(&vendor, family, model);
        for kind in [QuantKind::Q4_K, QuantKind::Q5_K, QuantKind::Q6_K] {
            assert_eq!(fixed_hints(kind), !zen4, "{kind}");
        }
    }

    /// Against the kernel's own reading of `cpuid`, where there is one
    /// (`/proc/cpuinfo`'s decimal `vendor_id`, `cpu family` and `model`).
    #[test]
    fn the_cpu_model_matches_the_kernels() {
        let (vendor, family, model) = cpu_model();
        println!(
            "{}, family {family:#x} model {model:#x}: K-quants' fixed hints {}",
            String::from_utf8_lossy(&vendor),
            if fixed_hints(QuantKind::Q4_K) {
                "on"
            } else {
                "off"
            }
        );
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            println!("no /proc/cpuinfo: skipped");
            return;
        };
        let field = |name: &str| {
            info.lines()
                .find(|l| l.split(':').next().map(str::trim) == Some(name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        assert_eq!(
            field("vendor_id").as_deref(),
            std::str::from_utf8(&vendor).ok()
        );
        assert_eq!(field("cpu family"), Some(family.to_string()));
        assert_eq!(field("model"), Some(model.to_string()));
    }
}
