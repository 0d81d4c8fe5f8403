#!/usr/bin/env bash
# Proves pagoda-core is no_std and allocation-free: builds it for a bare-metal
# target that has no `std` at all, and links it into a tiny binary with no
# global allocator. Any `std` use fails to compile there; any `alloc` use fails
# to link ("no global memory allocator found").
set -euo pipefail
cd "$(dirname "$0")/.."
target=thumbv7em-none-eabihf
rustup target list --installed | grep -qx "$target" || rustup target add "$target"

echo "no-std check: pagoda-core for $target (default features, then defmt)"
cargo build --quiet -p pagoda-core --target "$target"
cargo check --quiet -p pagoda-core --target "$target" --features defmt

echo "no-std check: linking a bare-metal artifact with no allocator"
cargo build --quiet --release --target "$target" \
  --manifest-path scripts/no-std-check/Cargo.toml \
  --target-dir target/no-std-check
echo "no-std check: passed"
