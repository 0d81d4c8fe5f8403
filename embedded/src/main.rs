//! The workload as a program. On `thumbv7em-none-eabihf` (target_os
//! "none") it is the firmware for QEMU's `mps2-an386`: static storage, the
//! report over semihosting, the stack's high-water mark, and a semihosting
//! exit code. On the host it prints the same report to stdout: the text the
//! firmware's must equal.
#![cfg_attr(target_os = "none", no_std)]
#![cfg_attr(target_os = "none", no_main)]

#[cfg(target_os = "none")]
mod firmware;

#[cfg(not(target_os = "none"))]
fn main() -> std::process::ExitCode {
    use std::io::Write;

    let mut storage = Box::new(pagoda_embedded::Storage::new());
    let mut report = String::new();
    let result = pagoda_embedded::run(&mut storage, &mut report);
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(report.as_bytes())
        .and_then(|()| stdout.flush());
    match (result, written) {
        (Ok(()), Ok(())) => std::process::ExitCode::SUCCESS,
        (Err(e), _) => {
            eprintln!("pagoda-embedded: {e}");
            std::process::ExitCode::FAILURE
        }
        (_, Err(e)) => {
            eprintln!("pagoda-embedded: writing the report: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
