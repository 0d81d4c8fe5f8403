//! The firmware: runs the workload over a `static`, prints the report, the
//! target's type sizes and the stack's high-water mark over semihosting, and
//! exits QEMU with the outcome. A panic or a fault exits QEMU with a failure
//! code instead of hanging.

use core::fmt::Write;
use core::mem::size_of;
use core::panic::PanicInfo;
use core::ptr::{addr_of, addr_of_mut};

use cortex_m_rt::{entry, exception, ExceptionFrame};
use cortex_m_semihosting::{debug, hio};
use pagoda_core::scheduler::{Policy, SchedSlot, Scheduler, Work};
use pagoda_core::{
    KvCache, PageEntry, PageId, QueueSlot, RadixCache, RadixNode, Request, RequestQueue, SeqEntry,
    PAGE_SIZE,
};
use pagoda_embedded::script::Scripted;
use pagoda_embedded::Storage;

/// The word the unused stack is painted with.
const PAINT: u32 = 0x5AFE_C0DE;
/// Bytes left unpainted below the stack pointer when painting starts, for
/// the painting loop's own frame.
const PAINT_MARGIN: usize = 256;

/// All the workload's storage, in RAM from reset.
static mut STORAGE: Storage = Storage::new();

// The sizes on this 32-bit target, checked at build time like the host's in
// core/tests/footprint.rs: a type that grows stops the firmware building.
const _: () = assert!(size_of::<PageEntry>() == 20);
const _: () = assert!(size_of::<PageId>() == 4);
const _: () = assert!(size_of::<SeqEntry>() == 24);
const _: () = assert!(size_of::<RadixNode>() == 96);
const _: () = assert!(size_of::<QueueSlot<Scripted>>() == 56);
const _: () = assert!(size_of::<SchedSlot<Scripted>>() == 168);
const _: () = assert!(size_of::<Work>() == 100);

extern "C" {
    /// The stack's top (cortex-m-rt's linker script).
    static _stack_start: u32;
    /// The stack's lowest address: the end of the statics.
    static _stack_end: u32;
}

#[entry]
fn main() -> ! {
    let (bottom, top) = stack_bounds();
    paint(
        bottom,
        cortex_m::register::msp::read() as usize - PAINT_MARGIN,
    );
    // SAFETY: `main` runs once, and nothing else (no interrupt handler)
    // touches STORAGE, so this is its only reference.
    let storage = unsafe { &mut *addr_of_mut!(STORAGE) };
    let Ok(mut out) = hio::hstdout() else {
        exit(false);
    };
    let result = pagoda_embedded::run(storage, &mut out);
    let used = top - high_water(bottom, top);
    let written = report_target(&mut out, used, top - bottom);
    match result {
        Ok(()) => exit(written.is_ok()),
        Err(e) => {
            if let Ok(mut err) = hio::hstderr() {
                let _ = writeln!(err, "pagoda-embedded: {e}");
            }
            exit(false)
        }
    }
}

/// Lines only the firmware prints (sizes differ from the host's): the
/// runner sets them apart from the compared report by their prefix.
fn report_target(out: &mut hio::HostStream, stack_used: usize, stack: usize) -> core::fmt::Result {
    writeln!(
        out,
        "target: size_of PageEntry {} PageId {} SeqEntry {} RadixNode {} QueueSlot {} SchedSlot {} Work {} Storage {}",
        size_of::<PageEntry>(),
        size_of::<PageId>(),
        size_of::<SeqEntry>(),
        size_of::<RadixNode>(),
        size_of::<QueueSlot<Scripted>>(),
        size_of::<SchedSlot<Scripted>>(),
        size_of::<Work>(),
        size_of::<Storage>()
    )?;
    writeln!(
        out,
        "target: size_of QueueSlot<Prompt> {} SchedSlot<Prompt> {} KvCache {} RequestQueue {} Scheduler {}",
        size_of::<QueueSlot<Prompt>>(),
        size_of::<SchedSlot<Prompt>>(),
        size_of::<KvCache<'static>>(),
        size_of::<RequestQueue<'static, Prompt>>(),
        size_of::<Scheduler<'static, Prompt, Policy>>()
    )?;
    writeln!(
        out,
        "target: stated configuration (4096 pages, 64 x 2048 tokens, 256 slots, batch 64): storage {} bytes",
        stated_storage()
    )?;
    writeln!(
        out,
        "target: stack high-water mark {stack_used} bytes (of {stack} between the statics and the top of RAM)"
    )
}

/// A request as core/tests/footprint.rs sizes it: a borrowed prompt and an
/// output limit.
#[allow(dead_code)]
struct Prompt {
    tokens: &'static [u32],
    max_new: u32,
}

impl Request for Prompt {
    fn prompt(&self) -> &[u32] {
        self.tokens
    }

    fn max_output_tokens(&self) -> u32 {
        self.max_new
    }
}

/// Caller storage for core/tests/footprint.rs's stated configuration (4,096
/// pages, 64 sequences of 2,048 tokens, 256 queue and scheduler slots, a
/// batch of 64) with this target's sizes.
const fn stated_storage() -> usize {
    let (pages, sequences, row, slots, batch) = (4096, 64, 2048 / PAGE_SIZE, 256, 64);
    pages * size_of::<PageEntry>()
        + sequences * row * size_of::<PageId>()
        + sequences * size_of::<SeqEntry>()
        + pages * size_of::<RadixNode>()
        + RadixCache::index_len_for(pages) * size_of::<u64>()
        + row * size_of::<PageId>()
        + slots * size_of::<QueueSlot<Prompt>>()
        + slots * size_of::<SchedSlot<Prompt>>()
        + Scheduler::<Prompt, Policy>::watch_len_for(slots) * size_of::<u32>()
        + batch * size_of::<Work>()
}

/// The stack's lowest and highest addresses.
fn stack_bounds() -> (usize, usize) {
    // Only the symbols' addresses are taken, never their contents.
    (
        addr_of!(_stack_end) as usize,
        addr_of!(_stack_start) as usize,
    )
}

/// Fills the unused stack, `from..to`, with [`PAINT`].
fn paint(from: usize, to: usize) {
    let mut at = from;
    while at + 4 <= to {
        // SAFETY: `from..to` lies between the end of the statics and below
        // the live stack frames (the margin covers this loop), so no Rust
        // object lives there; the address is 4-aligned (cortex-m-rt aligns
        // `_stack_end`).
        unsafe { core::ptr::write_volatile(at as *mut u32, PAINT) };
        at += 4;
    }
}

/// The lowest address whose paint was overwritten: the deepest the stack
/// went.
fn high_water(from: usize, to: usize) -> usize {
    let mut at = from;
    while at + 4 <= to {
        // SAFETY: the same stack region [`paint`] wrote, read as plain words.
        if unsafe { core::ptr::read_volatile(at as *const u32) } != PAINT {
            return at;
        }
        at += 4;
    }
    to
}

fn exit(success: bool) -> ! {
    debug::exit(if success {
        debug::EXIT_SUCCESS
    } else {
        debug::EXIT_FAILURE
    });
    // Only reached without a debugger or QEMU to exit to.
    loop {
        cortex_m::asm::bkpt();
    }
}

#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    if let Ok(mut err) = hio::hstderr() {
        let _ = writeln!(err, "pagoda-embedded: panic: {info}");
    }
    exit(false)
}

#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    if let Ok(mut err) = hio::hstderr() {
        let _ = writeln!(
            err,
            "pagoda-embedded: hard fault at pc {:#010x}",
            frame.pc()
        );
    }
    exit(false)
}
