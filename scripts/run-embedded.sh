#!/usr/bin/env bash
# The core on a microcontroller, checked: builds embedded/ for the host and
# for the Cortex-M4F that QEMU emulates as `mps2-an386`, runs both, and fails
# unless the firmware exits 0 within the time limit and its report equals the
# host's byte for byte. Then prints the firmware's flash and RAM sizes and
# checks its call graph for recursion (scripts/check-no-recursion.py).
#
# Needs qemu-system-arm and binutils-arm-none-eabi (Debian), and the
# thumbv7em-none-eabihf target. The outputs stay in embedded/target/check/.
set -euo pipefail
cd "$(dirname "$0")/.."
target=thumbv7em-none-eabihf
manifest=embedded/Cargo.toml
out=embedded/target/check
elf=embedded/target/$target/release/pagoda-embedded
limit=${EMBEDDED_TIMEOUT:-60}
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
mkdir -p "$out"

# The workspace's `cargo fmt --all` does not reach this crate.
cargo fmt --check --manifest-path "$manifest"

echo "embedded: the workload on the host: its tests, then the expected report"
nice -n 19 cargo test --quiet --release --locked --manifest-path "$manifest"
nice -n 19 cargo build --quiet --release --locked --manifest-path "$manifest"
embedded/target/release/pagoda-embedded >"$out/host.txt"

echo "embedded: the firmware for $target"
nice -n 19 cargo build --quiet --release --locked --manifest-path "$manifest" --target "$target"

echo "embedded: running it on qemu-system-arm -machine mps2-an386 (limit ${limit}s)"
status=0
timeout --kill-after=5 "$limit" qemu-system-arm -machine mps2-an386 -cpu cortex-m4 \
  -nographic -monitor none -serial none \
  -semihosting-config enable=on,target=native \
  -kernel "$elf" >"$out/qemu.txt" 2>"$out/qemu-stderr.txt" || status=$?
cat "$out/qemu-stderr.txt" >&2
if ((status == 124 || status == 137)); then
  echo "embedded: FAILED: the firmware did not exit within ${limit}s" >&2
  exit 1
elif ((status != 0)); then
  echo "embedded: FAILED: the firmware exited with status $status (a panic, a fault or a failed check)" >&2
  exit 1
fi

# The firmware adds lines of its own (sizes on the 32-bit target, the stack's
# high-water mark), marked `target: `; the rest must be the host's report.
grep -v '^target: ' "$out/qemu.txt" >"$out/qemu-report.txt" || true
if ! cmp -s "$out/host.txt" "$out/qemu-report.txt"; then
  echo "embedded: FAILED: the firmware's report differs from the host's" >&2
  diff -u "$out/host.txt" "$out/qemu-report.txt" >&2 || true
  exit 1
fi
grep -q '^ok$' "$out/host.txt" || {
  echo "embedded: FAILED: the report does not end in 'ok'" >&2
  exit 1
}
echo "embedded: the firmware's report equals the host's ($(wc -l <"$out/host.txt") lines):"
sed 's/^/  | /' "$out/qemu.txt"

echo "embedded: flash and RAM (arm-none-eabi-size; flash = text + data, RAM = data + bss + stack)"
arm-none-eabi-size "$elf"

echo "embedded: no recursion (call graph of the firmware's disassembly)"
python3 scripts/check-no-recursion.py --self-test
arm-none-eabi-objdump -d -C --no-show-raw-insn "$elf" >"$out/firmware.dis"
python3 scripts/check-no-recursion.py "$out/firmware.dis"
echo "embedded: passed"
