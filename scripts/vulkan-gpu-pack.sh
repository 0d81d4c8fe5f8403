#!/usr/bin/env bash
# Fills DIR with what `scripts/vulkan-gpu.sh DIR` runs on a GPU lent for
# minutes, built here (an x86-64 Debian 12 machine), so that the loan's
# time goes to the device alone:
#
#   scripts/vulkan-gpu-pack.sh DIR        (LLAMA=1: llama.cpp's Vulkan build too)
#
# - `pagoda`, the Vulkan test binaries and the two Vulkan benches, release
#   builds, stripped, under the names vulkan-gpu.sh runs;
# - `gl/*.deb`: a Vulkan loader and libglvnd for a bare image (NVIDIA's
#   Vulkan driver needs libGLdispatch). The loader is Debian 13's, as new
#   as the validation layer: Debian 12's 1.3.239 under the 1.4.309 layer
#   draws a warning on every device;
# - `vl/*.deb`: Debian 13's Khronos validation layer;
# - with LLAMA=1, `llama-vulkan.tar.xz`: llama.cpp's `llama-bench` (the
#   `llama-cpp-python` sdist's, as `compare-llama-cpp.sh` builds it) with
#   GGML_VULKAN, compiled with the Debian 13 root's glslc, Vulkan and
#   SPIR-V headers (Debian 12's glslc lacks cooperative matrices): minutes
#   on two cores the first time (3 min 13 s here once its shaders were
#   generated), 7.6 MB packed.
#
# The Debian 13 tools come from `scripts/coopmat-lavapipe.sh install`'s
# root (run here first when missing; root or sudo). Everything together
# stays under the 64 MiB a call carries (about 45 MB). On the device:
# `PARALLEL=1 bash scripts/vulkan-gpu.sh DIR` (carry DIR).
set -euo pipefail
root_dir="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:?usage: $0 DIR}"
mkdir -p "$dir/gl" "$dir/vl"
dir="$(cd "$dir" && pwd)"
cd "$root_dir"
coop_root="${PAGODA_COOPMAT_ROOT:-$HOME/.cache/pagoda/coopmat-root}"
sudo_cmd=""
[[ $(id -u) != 0 ]] && sudo_cmd="sudo"

# The executables cargo built for a target selection, one per line.
executables() {
    python3 -c 'import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["target"]["name"], m["executable"])'
}

echo "== pagoda, tests and benches (release)"
cargo build --release -q -p pagoda-cli
cp target/release/pagoda "$dir/pagoda"
cargo test --release -q --no-run -p pagoda-conformance --test vulkan --test vulkan_ops \
    --test vulkan_int8 --test vulkan_step --message-format=json 2>/dev/null | executables |
    while read -r name exe; do cp "$exe" "$dir/test-$name"; done
cargo test --release -q --no-run -p pagoda-engine --test vulkan_step --message-format=json 2>/dev/null |
    executables | while read -r _ exe; do cp "$exe" "$dir/test-engine-vulkan_step"; done
cargo bench -q --no-run -p pagoda-vulkan --bench ops --bench attention --message-format=json 2>/dev/null |
    executables | while read -r name exe; do cp "$exe" "$dir/bench-$name"; done
strip "$dir"/pagoda "$dir"/test-* "$dir"/bench-*

echo "== loader, libglvnd and validation layer"
bash scripts/coopmat-lavapipe.sh install
(cd "$dir/gl" && apt-get download libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null)
$sudo_cmd chroot "$coop_root" bash -c \
    'mkdir -p /tmp/pack && cd /tmp/pack && rm -f ./*.deb && apt-get download libvulkan1 vulkan-validationlayers >/dev/null'
cp "$coop_root"/tmp/pack/libvulkan1_*.deb "$dir/gl/"
cp "$coop_root"/tmp/pack/vulkan-validationlayers_*.deb "$dir/vl/"

if [[ -n "${LLAMA:-}" ]]; then
    echo "== llama.cpp with GGML_VULKAN"
    version=${LLAMA_CPP_PYTHON:-0.3.36}
    llama=$HOME/.cache/pagoda/llama.cpp/$version
    if [[ ! -d $llama/src ]]; then
        # The source as compare-llama-cpp.sh fetches it, without a build.
        echo "no llama.cpp source in $llama/src: run scripts/compare-llama-cpp.sh once" >&2
        exit 1
    fi
    $sudo_cmd chroot "$coop_root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends -t trixie-backports libvulkan-dev spirv-headers >/dev/null
    tools=$llama/vulkan-tools
    mkdir -p "$tools/include" "$tools/share/cmake"
    cp -r "$coop_root"/usr/include/vulkan "$coop_root"/usr/include/vk_video \
        "$coop_root"/usr/include/spirv "$tools/include/"
    cp -r "$coop_root"/usr/share/cmake/SPIRV-Headers "$tools/share/cmake/"
    printf '#!/bin/sh\nexec %q/scripts/coopmat-lavapipe.sh exec glslc "$@"\n' "$root_dir" >"$tools/glslc"
    chmod +x "$tools/glslc"
    PATH=$llama/venv/bin:$PATH cmake -S "$llama/src/vendor/llama.cpp" -B "$llama/build-vk" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DBUILD_SHARED_LIBS=OFF \
        -DGGML_VULKAN=ON -DVulkan_INCLUDE_DIR="$tools/include" \
        -DVulkan_LIBRARY=/usr/lib/x86_64-linux-gnu/libvulkan.so.1 \
        -DVulkan_GLSLC_EXECUTABLE="$tools/glslc" \
        -DSPIRV-Headers_DIR="$tools/share/cmake/SPIRV-Headers" \
        "-DCMAKE_CXX_FLAGS=-isystem $tools/include" \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON >"$llama/configure-vk.log"
    PATH=$llama/venv/bin:$PATH cmake --build "$llama/build-vk" --target llama-bench \
        -j "$(nproc)" >"$llama/build-vk.log"
    pack=$(mktemp -d)
    mkdir -p "$pack/bin/lib"
    strip -o "$pack/bin/llama-bench" "$llama/build-vk/bin/llama-bench"
    # Its OpenMP runtime, for an image without one (vulkan-gpu.sh looks
    # in bin/lib only then).
    cp /lib/x86_64-linux-gnu/libgomp.so.1 "$pack/bin/lib/"
    tar -cJf "$dir/llama-vulkan.tar.xz" -C "$pack" bin
    rm -rf "$pack"
fi
du -sh "$dir"
