#!/bin/bash
# Runs the CPU backend's interleaved-kernel test (`qmatmul_interleaved`:
# every instruction set the CPU has against the plain scalar product) inside
# the Bochs emulator on an Intel Tiger Lake model, which has AVX-512 F, BW,
# VL and VNNI, so the AVX-512 VNNI kernels run on a machine without them.
# QEMU's TCG emulates neither AVX-512 nor AVX-VNNI, and no Bochs 2.7 model
# has AVX-VNNI, so that set can only be tested on a CPU that has it.
#
# Usage: bash scripts/bochs-avx512.sh [TEST-FILTER]
# Takes 3-4 minutes (a minute of it the guest kernel's boot); the first run
# also fetches Bochs and a kernel (~110 MB, see scripts/run-in-bochs.sh).
# CI runs it where the machine's CPU lacks AVX-512 VNNI; it is not part of
# the test command.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${CARGO_TARGET_DIR:-target}/bochs
# Static, so the guest needs no dynamic loader or libraries.
exe=$(RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR=$target \
    cargo test --release -p pagoda-cpu --test qmatmul_interleaved --no-run \
    --target x86_64-unknown-linux-gnu --message-format=json 2>/dev/null |
    python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])' | tail -n1)
[ -n "$exe" ] || { echo "bochs-avx512: the test did not build" >&2; exit 1; }

out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
bash scripts/run-in-bochs.sh --timeout 900 "$exe" --nocapture --test-threads=1 ${1:+"$1"} | tee "$out"
rc=${PIPESTATUS[0]}
set -e
# The run must have covered the AVX-512 VNNI kernels, not only passed.
if [ "$rc" = 0 ] && ! grep -q 'SIMD paths run: \[[^]]*avx512vnni' "$out"; then
    echo "bochs-avx512: the guest did not run the AVX-512 VNNI path" >&2
    exit 1
fi
exit "$rc"
