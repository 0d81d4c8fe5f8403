#!/usr/bin/env bash
# The Vulkan backend on a real GPU, in one sitting: correctness (the Vulkan
# test suites under the validation layer, cooperative matrices on and off),
# then figures (the ops bench, `pagoda bench --backend vulkan --suite speed`
# on synthetic files, and llama.cpp's Vulkan `llama-bench` on the same files
# where a build of it is at hand). Made for a machine lent for minutes:
# everything is built elsewhere and carried in one folder.
#
#   scripts/vulkan-gpu.sh DIR [STAGE...]
#
# DIR holds the prebuilt programs: `pagoda`, the test binaries
# (`test-vulkan`, `test-vulkan_ops`, `test-vulkan_int8`, `test-vulkan_step`,
# `test-engine-vulkan_step`), the bench binaries (`bench-ops`), and
# optionally `llama-vulkan.tar.xz` (llama.cpp's `llama-bench` with
# GGML_VULKAN), `vl/*.deb` (a Khronos validation layer to unpack) and
# `gl/*.deb` (a Vulkan loader and libglvnd to unpack into /, for a bare
# image: NVIDIA's Vulkan driver needs libGLdispatch). The loader must be as
# new as the layer: Debian 12's loader 1.3.239 under the 1.4.309 layer
# draws a warning on every device (it asks vkGetDeviceProcAddr for an
# instance function), so carry Debian 13's libvulkan1 with Debian 13's
# vulkan-validationlayers.
# $SPEED_FILES and $SPEED8B_FILES (shape:type pairs) pick the speed
# stages' files, $SPEED_ARGS adds options to their `pagoda bench`
# (`PAGODA_VULKAN_PROFILE=1` adds each step's time per kernel).
# STAGEs: setup, tests, ops, sweep, speed, speed8b, llama (default: all
# but sweep, in that order). `sweep` times the GPU decode product in each
# specialisation in $SHAPES (default: every one) and sets
# PAGODA_VULKAN_MATVEC_SHAPE to the fastest for the stages after it;
# `speed8b` then also runs the 8B Q4_0 file in the default shape, for a
# same-sitting comparison (unless $NO_DEFAULT is set). $LLAMA_FILES (a
# glob, default every file) picks the files llama-bench runs. $COOPS (default "1 0") picks the cooperative-
# matrix settings the tests run under, and $PARALLEL runs them all at
# once. Logs go to $OUT (default
# ./gpu-out); each stage prints its time.
set -uo pipefail
dir="$(cd "$1" && pwd)"
shift
stages=("$@")
((${#stages[@]})) || stages=(setup tests ops speed speed8b llama)
out="${OUT:-$PWD/gpu-out}"
mkdir -p "$out"
work="${PAGODA_GPU_WORK:-/tmp/pagoda-gpu}"
mkdir -p "$work"
log() { printf '\n== %s (%s s)\n' "$*" "$SECONDS"; }

setup() {
    if ! ldconfig -p | grep -q libvulkan.so.1 && compgen -G "$dir/gl/*.deb" >/dev/null; then
        for f in "$dir"/gl/*.deb; do dpkg -x "$f" /; done
        ldconfig
    fi
    if [[ ! -e /usr/share/vulkan/icd.d/nvidia_icd.json && -e /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]]; then
        export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    fi
    # The newest validation layer that loads here (a newer one knows the
    # newer extensions the device offers).
    for deb in $(ls -r "$dir"/vl/*.deb 2>/dev/null); do
        local root="$work/vl-$(basename "$deb" .deb)"
        dpkg -x "$deb" "$root"
        if LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu" ldd "$root"/usr/lib/x86_64-linux-gnu/libVkLayer_khronos_validation.so 2>&1 | grep -q 'not found'; then
            continue
        fi
        export VK_LAYER_PATH="$root/usr/share/vulkan/explicit_layer.d"
        export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        echo "validation layer: $deb"
        break
    done
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>/dev/null
    lscpu | grep -m1 'Model name'
}

# Each test binary with cooperative matrices (where the device has them),
# then without; with $PARALLEL set, every run at once (each its own log),
# which a machine lent by the minute with many cores can afford.
tests() {
    local t coops runs=()
    for t in test-vulkan test-vulkan_ops test-vulkan_int8 test-vulkan_step test-engine-vulkan_step; do
        [[ -x "$dir/$t" ]] || { echo "no $t"; continue; }
        # The attention suite runs no products: cooperative matrices or
        # not, the same kernels.
        coops="${COOPS:-1 0}"
        [[ $t == test-vulkan ]] && coops=1
        for coop in $coops; do
            runs+=("$t:$coop")
        done
    done
    local run pids=()
    for run in "${runs[@]}"; do
        t=${run%:*}
        coop=${run#*:}
        if [[ -n "${PARALLEL:-}" ]]; then
            PAGODA_VULKAN_COOPMAT=$coop timeout 300 "$dir/$t" --test-threads 4 >"$out/test-$t-$coop.log" 2>&1 &
            pids+=($!)
        else
            log "$t (PAGODA_VULKAN_COOPMAT=$coop)"
            PAGODA_VULKAN_COOPMAT=$coop timeout 300 "$dir/$t" --test-threads 4 >"$out/test-$t-$coop.log" 2>&1
        fi
    done
    ((${#pids[@]})) && wait "${pids[@]}"
    for run in "${runs[@]}"; do
        t=${run%:*}
        coop=${run#*:}
        log "$t (PAGODA_VULKAN_COOPMAT=$coop)"
        echo "== $t (PAGODA_VULKAN_COOPMAT=$coop)" >>"$out/tests.log"
        tee -a "$out/tests.log" <"$out/test-$t-$coop.log" | grep -E '^test result|FAILED|panicked|skip|without' | head -20
        rm "$out/test-$t-$coop.log"
    done
    # What the validation layer said, each distinct message once.
    log "validation messages"
    grep -A6 'validation layer' "$out/tests.log" | grep -E 'VUID|Validation|UNASSIGNED|message|Error|Warning' |
        sed 's/0x[0-9a-f]*/0x_/g' | sort | uniq -c | sort -rn | head -40 | cut -c1-600
}

ops() {
    log "ops bench"
    timeout 300 "$dir/bench-ops" --bench 2>&1 | tee -a "$out/ops.log"
}

sweep() {
    log "ops bench, every decode product shape"
    PAGODA_BENCH_MATVEC_SHAPES="${SHAPES:-4,4s,4m,4sm,8,8s,8m,8sm,2,2m}" timeout 300 "$dir/bench-ops" --bench 2>&1 |
        tee -a "$out/sweep.log"
    local best
    best=$(sed -n 's/^fastest at batch 1 on Q4_0 + Q4_K: \([-0-9a-z]*\) .*/\1/p' "$out/sweep.log" | tail -1)
    if [[ -n "$best" ]]; then
        export PAGODA_VULKAN_MATVEC_SHAPE="$best"
        echo "PAGODA_VULKAN_MATVEC_SHAPE=$best for the stages that follow"
    fi
}

synth() { # shape type
    local f="$work/$1-$2.gguf"
    [[ -e "$f" ]] || "$dir/pagoda" synth --shape "$1" --type "$2" --out "$f" >/dev/null
    echo "$f"
}

speed_of() { # shape type
    local f
    f=$(synth "$1" "$2")
    log "speed: $1 $2"
    # shellcheck disable=SC2086 # options, split on purpose
    timeout 300 "$dir/pagoda" bench --backend vulkan --suite speed --model "$f" ${SPEED_ARGS:-} 2>&1 |
        grep -v '^$' | tee -a "$out/speed.log"
}

# Each of the shape:type pairs in $1.
speed_of_each() {
    local file
    for file in $1; do
        speed_of "${file%%:*}" "${file#*:}"
    done
}

speed() {
    speed_of_each "${SPEED_FILES:-smollm2-135m:q4_1 llama3.2-1b:q4_0 llama3.2-1b:q4_k}"
}

speed8b() {
    speed_of_each "${SPEED8B_FILES:-llama3-8b:q4_0 llama3-8b:q4_k}"
    if [[ -n "${PAGODA_VULKAN_MATVEC_SHAPE:-}" && -z "${NO_DEFAULT:-}" ]]; then
        log "(the next in the default shape)"
        (unset PAGODA_VULKAN_MATVEC_SHAPE; speed_of llama3-8b q4_0)
    fi
}

llama() {
    [[ -e "$dir/llama-vulkan.tar.xz" ]] || { echo "no llama.cpp build"; return; }
    mkdir -p "$work/llama" && tar -xJf "$dir/llama-vulkan.tar.xz" -C "$work/llama"
    local bench
    bench=$(find "$work/llama" -name llama-bench -type f | head -1)
    # Its own OpenMP runtime only where the system has none.
    if ! ldconfig -p | grep -q libgomp.so.1; then
        export LD_LIBRARY_PATH="$(dirname "$bench")/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    local f
    for f in "$work"/${LLAMA_FILES:-*}.gguf; do
        log "llama-bench: $(basename "$f")"
        timeout 240 "$bench" -m "$f" -ngl 99 -fa 1 -p 512 -n 128 -r 2 2>&1 | tee -a "$out/llama-bench.log" |
            grep -E '^\||ggml_vulkan: [0-9]'
    done
}

for s in "${stages[@]}"; do
    log "stage $s"
    "$s"
done
log done
