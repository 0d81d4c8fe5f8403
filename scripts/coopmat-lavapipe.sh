#!/usr/bin/env bash
# A second lavapipe, new enough for VK_KHR_cooperative_matrix, beside the
# system's. Debian 12's Mesa (22.3, and 25.0 in its backports) has no
# cooperative matrices on lavapipe; Debian 13's backports have Mesa 26.1,
# whose lavapipe does, and a glslang new enough to compile them (15.1). Both
# need Debian 13's C library, so they live in a Debian 13 root made with
# debootstrap, and run through that root's own dynamic loader: no chroot,
# no change to the system.
#
#   scripts/coopmat-lavapipe.sh install       make the root (root or sudo;
#                                             about a minute, once)
#   scripts/coopmat-lavapipe.sh exec CMD ...  run CMD (a path) with the
#                                             root's C library, Vulkan loader,
#                                             lavapipe and validation layer
#
# The root is $PAGODA_COOPMAT_ROOT, or ~/.cache/pagoda/coopmat-root.
# CI runs the Vulkan product tests this way (cargo's runner), and checks the
# cooperative-matrix SPIR-V with the root's glslc and spirv-val.
set -euo pipefail
root="${PAGODA_COOPMAT_ROOT:-$HOME/.cache/pagoda/coopmat-root}"
packages=(mesa-vulkan-drivers vulkan-validationlayers glslc spirv-tools)
stamp="$root/.pagoda-ready"

install() {
    [[ -e "$stamp" ]] && return 0
    local sudo_cmd=""
    [[ $(id -u) != 0 ]] && sudo_cmd="sudo"
    if ! command -v debootstrap >/dev/null; then
        $sudo_cmd apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq debootstrap
    fi
    mkdir -p "$(dirname "$root")"
    $sudo_cmd rm -rf "$root"
    $sudo_cmd debootstrap --variant=minbase trixie "$root" http://deb.debian.org/debian >/dev/null
    echo 'deb http://deb.debian.org/debian trixie-backports main' |
        $sudo_cmd tee "$root/etc/apt/sources.list.d/backports.list" >/dev/null
    $sudo_cmd chroot "$root" apt-get update -qq
    $sudo_cmd chroot "$root" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends -t trixie-backports "${packages[@]}" >/dev/null
    # lavapipe alone, found by absolute path: the system's drivers stay out.
    $sudo_cmd tee "$root/lvp_icd.json" >/dev/null <<EOF
{"file_format_version": "1.0.1",
 "ICD": {"library_path": "$root/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so", "api_version": "1.4.0"}}
EOF
    $sudo_cmd touch "$stamp"
}

run() {
    [[ -e "$stamp" ]] || {
        echo "no cooperative-matrix lavapipe at $root: run '$0 install'" >&2
        exit 1
    }
    local libs="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu"
    local program="$1"
    shift
    # A command name means the root's own tool (glslc, spirv-val).
    [[ "$program" == */* ]] || program="$root/usr/bin/$program"
    VK_DRIVER_FILES="$root/lvp_icd.json" VK_ICD_FILENAMES="$root/lvp_icd.json" \
        VK_LAYER_PATH="$root/usr/share/vulkan/explicit_layer.d" \
        exec "$root/lib64/ld-linux-x86-64.so.2" --library-path "$libs" "$program" "$@"
}

case "${1:-}" in
install) install ;;
exec)
    shift
    run "$@"
    ;;
*)
    echo "usage: $0 install | exec CMD [ARGS...]" >&2
    exit 2
    ;;
esac
