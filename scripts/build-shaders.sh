#!/usr/bin/env bash
# Compiles every kernel in shaders/kernels.list to SPIR-V in shaders/spirv/.
#   scripts/build-shaders.sh          rebuild the committed SPIR-V
#   scripts/build-shaders.sh --check  rebuild into a temporary folder, validate
#                                     each module with spirv-val, and fail if
#                                     the committed SPIR-V differs
# Needs glslc (Debian: glslc) and, for --check, spirv-val (spirv-tools).
# Kernels that define COOPMAT need GL_KHR_cooperative_matrix, and those that
# define INT_DOT GL_EXT_integer_dot_product, which Debian 12's glslang
# (11.13) lacks: they are compiled and validated by
# $GLSLC_COOPMAT and $SPIRV_VAL_COOPMAT, by default the Debian 13 tools of
# scripts/coopmat-lavapipe.sh (run its `install` first).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck disable=SC2206 # each is a command line, split on purpose
glslc_coop=(${GLSLC_COOPMAT:-$root/scripts/coopmat-lavapipe.sh exec glslc})
# shellcheck disable=SC2206
spirv_val_coop=(${SPIRV_VAL_COOPMAT:-$root/scripts/coopmat-lavapipe.sh exec spirv-val})
shaders="$root/shaders"
check=false
[[ "${1:-}" == "--check" ]] && check=true
out="$shaders/spirv"
if $check; then
    out="$(mktemp -d)"
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
flags=(--target-env=vulkan1.1 -O -I "$shaders")
status=0
# shellcheck disable=SC2206 # defines are split on purpose
while read -r name source defines; do
    [[ -z "$name" || "$name" == \#* ]] && continue
    src="$shaders/${source:-$name}.comp"
    defs=($defines)
    compile=(glslc)
    validate=(spirv-val)
    if [[ " $defines " == *" -DCOOPMAT "* || " $defines " == *" -DINT_DOT "* ]]; then
        compile=("${glslc_coop[@]}")
        validate=("${spirv_val_coop[@]}")
    fi
    "${compile[@]}" "${flags[@]}" "${defs[@]}" -o "$out/$name.spv" "$src"
    "${compile[@]}" "${flags[@]}" "${defs[@]}" -DBOUNDS_CHECK -o "$out/$name.checked.spv" "$src"
    if $check; then
        for variant in "$name.spv" "$name.checked.spv"; do
            "${validate[@]}" --target-env vulkan1.1 "$out/$variant"
            if ! cmp -s "$out/$variant" "$shaders/spirv/$variant"; then
                echo "shaders/spirv/$variant is stale: run scripts/build-shaders.sh and commit it" >&2
                status=1
            fi
        done
    fi
done <"$shaders/kernels.list"
# No SPIR-V without a kernel in the list.
if $check; then
    for spv in "$shaders"/spirv/*.spv; do
        if [[ ! -e "$out/$(basename "$spv")" ]]; then
            echo "shaders/spirv/$(basename "$spv") has no kernel in shaders/kernels.list" >&2
            status=1
        fi
    done
    [[ $status == 0 ]] && echo "SPIR-V is current and valid"
fi
exit $status
