//! Bare-metal smoke artifact: statics for storage, no allocator, no `std`.
#![no_std]
#![no_main]

use core::panic::PanicInfo;

use pagoda_core::{KvDtype, KvGeometry, PageEntry, PageId, PagePool, PageTable, SeqEntry};

/// The entry point an embedded reset handler would call.
#[no_mangle]
pub extern "C" fn _start() -> ! {
    let mut pages = [PageEntry::EMPTY; 32];
    let mut rows = [PageId::from_index(0); 4 * 8];
    let mut seqs = [SeqEntry::EMPTY; 4];
    let ok = run(&mut pages, &mut rows, &mut seqs);
    loop {
        core::hint::black_box(ok);
    }
}

fn run(pages: &mut [PageEntry], rows: &mut [PageId], seqs: &mut [SeqEntry]) -> bool {
    let Ok(geometry) = KvGeometry::new(2, 2, 64, KvDtype::F16) else {
        return false;
    };
    let Ok(mut pool) = PagePool::new(pages) else {
        return false;
    };
    let Ok(mut table) = PageTable::new(rows, seqs) else {
        return false;
    };
    let Ok(seq) = table.create() else {
        return false;
    };
    let appended = table.append(seq, 40, &mut pool, &mut ()).is_ok();
    let child = table.fork(seq, &mut pool);
    appended && child.is_ok() && geometry.bytes_per_page() > 0
}

#[panic_handler]
fn panic(_: &PanicInfo) -> ! {
    loop {}
}
