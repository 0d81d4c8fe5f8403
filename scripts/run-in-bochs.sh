#!/bin/bash
# run-in-bochs.sh — run a statically linked x86_64 Linux binary inside the Bochs
# emulator (CPU model with AVX-512 F/BW/VL/VNNI, default "tigerlake") and return
# its output and exit status.
#
# Usage: run-in-bochs.sh [options] BINARY [ARGS...]
#   --timeout SECS   wall-clock limit for the whole Bochs run (default 1200, env BOCHS_TIMEOUT)
#   --mem MB         guest RAM (default 1024, env BOCHS_MEM)
#   --cpu MODEL      Bochs cpu model (default tigerlake, env BOCHS_CPU); see `bochs-bin -help cpu`
#   --env NAME=VAL   set an environment variable for BINARY in the guest (repeatable)
#   --file PATH      copy an extra file into the guest's working directory (repeatable)
#   --gzip           gzip the initramfs (smaller ISO, slower guest unpack; default: uncompressed)
#   --keep           keep the per-run work directory (bochsrc, iso, logs)
#   -v               also print the full serial console (kernel messages) to stderr
#
# Output: BINARY's stdout+stderr (interleaved, as the guest wrote them to ttyS0)
# goes to our stdout. Exit status = BINARY's exit status (128+N if killed by
# signal N); 124 = timeout, 125 = infrastructure error (no end marker seen).
#
# Everything needed is fetched with `apt-get download` (Debian bookworm +
# bookworm-backports for the kernel, via a private apt config/lists dir) into
# $BOCHS_CACHE (default: ~/.cache/pagoda/bochs, ~270 MB) on first use; nothing is
# installed system-wide. Env knobs: BOCHS_KPKG (kernel package name),
# BOCHS_KERNEL (path to a bzImage to use instead), BOCHS_KARGS (extra kernel
# args), BOCHS_IPS (bochs ips= timing parameter, default 50000000).
set -euo pipefail

CACHE=${BOCHS_CACHE:-$HOME/.cache/pagoda/bochs}
DEBS=$CACHE/debs
ROOT=$CACHE/root

TIMEOUT=${BOCHS_TIMEOUT:-1200}
MEM=${BOCHS_MEM:-1024}
CPU=${BOCHS_CPU:-tigerlake}
GZIP_INITRD=0
KEEP=0
VERBOSE=0
GUEST_ENV=()
EXTRA_FILES=()

die() { echo "run-in-bochs: $*" >&2; exit 125; }

while [ $# -gt 0 ]; do
  case "$1" in
    --timeout) TIMEOUT=$2; shift 2;;
    --mem) MEM=$2; shift 2;;
    --cpu) CPU=$2; shift 2;;
    --env) GUEST_ENV+=("$2"); shift 2;;
    --file) EXTRA_FILES+=("$2"); shift 2;;
    --gzip) GZIP_INITRD=1; shift;;
    --keep) KEEP=1; shift;;
    -v) VERBOSE=1; shift;;
    --) shift; break;;
    -*) die "unknown option $1";;
    *) break;;
  esac
done
[ $# -ge 1 ] || die "usage: $0 [options] BINARY [ARGS...]"
BIN=$1; shift
[ -f "$BIN" ] || die "no such file: $BIN"

# ---------------------------------------------------------------- setup ----
# Packages (Debian bookworm). The kernel MUST come from bookworm-backports
# (6.12.x): bookworm's own 6.1 kernel hangs/crashes in early boot under Bochs 2.7.
PKGS=(bochs bochsbios vgabios libltdl7 busybox-static isolinux syslinux-common
      genisoimage libmagic1 libmagic-mgc cpio)
APT_DIR=$CACHE/apt
# a private apt configuration: nothing system-wide is read-modified besides the keyring
APT_OPTS=(-o "Dir::Etc::SourceList=$APT_DIR/sources.list" -o "Dir::Etc::SourceParts=$APT_DIR/sources.list.d"
          -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::Cache=$APT_DIR/cache"
          -o "Dir::State::status=$APT_DIR/status" -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")

setup() {
  mkdir -p "$DEBS" "$ROOT"
  exec 9>"$CACHE/.setup.lock"
  flock 9
  if [ -f "$ROOT/.complete" ]; then flock -u 9; return; fi
  echo "run-in-bochs: first-time setup in $CACHE" >&2
  mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial" "$APT_DIR/sources.list.d"
  : > "$APT_DIR/status"
  cat > "$APT_DIR/sources.list" <<EOS
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
deb http://deb.debian.org/debian bookworm-backports main
EOS
  apt-get "${APT_OPTS[@]}" -q update >&2 || die "apt-get update (private lists) failed"
  local kpkg=${BOCHS_KPKG:-}
  if [ -z "$kpkg" ]; then
    kpkg=$(apt-cache "${APT_OPTS[@]}" -t bookworm-backports depends linux-image-amd64 \
           | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  fi
  [ -n "$kpkg" ] || die "cannot resolve the bookworm-backports kernel package"
  ( cd "$DEBS" && apt-get "${APT_OPTS[@]}" -q download "${PKGS[@]}" "$kpkg" ) >&2 || die "apt-get download failed"
  for d in "$DEBS"/*.deb; do dpkg-deb -x "$d" "$ROOT"; done
  ls "$ROOT"/boot/vmlinuz-* >/dev/null 2>&1 || die "no kernel extracted"
  touch "$ROOT/.complete"
  flock -u 9
}
setup

BOCHS_BIN=$ROOT/usr/bin/bochs-bin
PLUGINS=$ROOT/usr/lib/x86_64-linux-gnu/bochs/plugins
KERNEL=${BOCHS_KERNEL:-$(ls "$ROOT"/boot/vmlinuz-* | sort -V | tail -n1)}
BUSYBOX=$ROOT/bin/busybox
CPIO=$ROOT/bin/cpio
export LD_LIBRARY_PATH=$ROOT/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LTDL_LIBRARY_PATH=$PLUGINS
export BXSHARE=$ROOT/usr/share/bochs
GENISO=$ROOT/usr/bin/genisoimage
export MAGIC=$ROOT/usr/lib/file/magic.mgc

# ----------------------------------------------------------- work dir -----
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bochs-run.XXXXXX")
BOCHS_PID=
cleanup() {
  if [ -n "$BOCHS_PID" ]; then kill "$BOCHS_PID" 2>/dev/null || true; wait "$BOCHS_PID" 2>/dev/null || true; fi
  if [ "$KEEP" = 1 ]; then echo "run-in-bochs: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ----------------------------------------------------------- initramfs ----
IR=$WORK/initramfs
mkdir -p "$IR"/{bin,sbin,proc,sys,dev,tmp,run,root,payload,etc}
cp "$BUSYBOX" "$IR/bin/busybox"
for a in sh mount umount poweroff reboot stty cat echo sync sleep mkdir ls env; do ln -s busybox "$IR/bin/$a"; done
BNAME=$(basename "$BIN")
cp "$BIN" "$IR/payload/$BNAME"; chmod 755 "$IR/payload/$BNAME"
for f in "${EXTRA_FILES[@]+"${EXTRA_FILES[@]}"}"; do cp -r "$f" "$IR/payload/"; done
echo "root:x:0:0:root:/root:/bin/sh" > "$IR/etc/passwd"
echo "root:x:0:" > "$IR/etc/group"

q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
CMDLINE="'/payload/$(printf '%s' "$BNAME" | sed "s/'/'\\\\''/g")'"
for a in "$@"; do CMDLINE+=" $(q "$a")"; done
ENVLINES=""
for e in "${GUEST_ENV[@]+"${GUEST_ENV[@]}"}"; do ENVLINES+="export $(q "$e")"$'\n'; done

cat > "$IR/init" <<EOF
#!/bin/sh
export PATH=/bin:/sbin HOME=/root TMPDIR=/tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
echo 1 > /proc/sys/kernel/printk 2>/dev/null
# raw output: no \n -> \r\n translation, so the payload's bytes arrive unchanged
stty -F /dev/ttyS0 raw -echo -onlcr 2>/dev/null
exec 0</dev/null 1>/dev/ttyS0 2>&1
$ENVLINES
cd /payload
printf '\n@@BOCHS-BEGIN@@\n'
$CMDLINE
rc=\$?
printf '\n@@BOCHS-EXIT %d@@\n' "\$rc"
# closing the last fd of ttyS0 waits until the UART has drained, so nothing is lost
exec >/dev/null 2>&1
sync
poweroff -f
sleep 5
echo o > /proc/sysrq-trigger
EOF
chmod 755 "$IR/init"

ISO=$WORK/iso
mkdir -p "$ISO/isolinux"
cp "$ROOT/usr/lib/ISOLINUX/isolinux.bin" "$ROOT/usr/lib/syslinux/modules/bios/ldlinux.c32" "$ISO/isolinux/"
cp "$KERNEL" "$ISO/vmlinuz"
if [ "$GZIP_INITRD" = 1 ]; then
  (cd "$IR" && find . | LC_ALL=C sort | "$CPIO" -o -H newc --quiet -R 0:0 | gzip -1) > "$ISO/initrd"
else
  (cd "$IR" && find . | LC_ALL=C sort | "$CPIO" -o -H newc --quiet -R 0:0) > "$ISO/initrd"
fi
# lpj= skips delay-loop calibration; tsc=reliable/no_timer_check avoid slow
# clocksource checks; many probes are disabled since the payload needs no devices.
# clearcpuid=pku,xsaves,xsavec is REQUIRED: Bochs 2.7 advertises PKRU in CPUID.0xD
# without describing it (size 0) and reports the standard (not compacted) size in
# CPUID.0xD.1.EBX, so Linux's XSAVE sanity check fails and it disables XSAVE => no AVX.
KARGS="console=ttyS0,115200 quiet loglevel=1 rdinit=/init mitigations=off nokaslr \
lpj=4000000 tsc=reliable no_timer_check nowatchdog nmi_watchdog=0 \
clearcpuid=pku,xsaves,xsavec nomodeset i8042.noaux audit=0 random.trust_cpu=on ${BOCHS_KARGS:-}"
cat > "$ISO/isolinux/isolinux.cfg" <<EOF
DEFAULT linux
PROMPT 0
TIMEOUT 0
LABEL linux
  KERNEL /vmlinuz
  INITRD /initrd
  APPEND $KARGS
EOF
"$GENISO" -quiet -o "$WORK/boot.iso" -b isolinux/isolinux.bin -c isolinux/boot.cat \
  -no-emul-boot -boot-load-size 4 -boot-info-table -J -R "$ISO" 2>"$WORK/geniso.err" \
  || { cat "$WORK/geniso.err" >&2; die "genisoimage failed"; }
rm -rf "$IR" "$ISO"

# -------------------------------------------------------------- bochs -----
SERIAL=$WORK/serial.out
: > "$SERIAL"
cat > "$WORK/bochsrc" <<EOF
# display: Debian's bochs has no 'nogui' plugin; rfb with timeout=0 never waits for a client
display_library: rfb, options="timeout=0"
romimage: file=$ROOT/usr/share/bochs/BIOS-bochs-latest
vgaromimage: file=$ROOT/usr/share/vgabios/vgabios.bin
cpu: model=$CPU, count=1, ips=${BOCHS_IPS:-50000000}, reset_on_triple_fault=0
memory: guest=$MEM, host=$MEM
clock: sync=none, time0=local
pci: enabled=1, chipset=i440fx
ata0: enabled=1, ioaddr1=0x1f0, ioaddr2=0x3f0, irq=14
ata0-master: type=cdrom, path=$WORK/boot.iso, status=inserted
boot: cdrom
com1: enabled=1, mode=file, dev=$SERIAL
speaker: enabled=0
sound: waveoutdrv=dummy, waveindrv=dummy, midioutdrv=dummy
mouse: enabled=0
log: $WORK/bochs.log
logprefix: %t%e%d
panic: action=fatal
error: action=report
info: action=ignore
debug: action=ignore
EOF
# Debian's bochs-bin is built with the internal debugger: feed it 'c' then 'quit'
printf 'c\nquit\n' > "$WORK/dbgrc"

START=$(date +%s.%N)
( cd "$WORK" && exec timeout -k 5 $((TIMEOUT + 30)) "$BOCHS_BIN" -q -f "$WORK/bochsrc" -rc "$WORK/dbgrc" </dev/null >"$WORK/bochs.stdout" 2>&1 ) &
BOCHS_PID=$!

status=running
deadline=$(( $(date +%s) + TIMEOUT ))
INIT_T=
while :; do
  if [ -z "$INIT_T" ] && grep -aq '@@BOCHS-BEGIN@@' "$SERIAL" 2>/dev/null; then
    INIT_T=$(awk -v s="$START" -v e="$(date +%s.%N)" 'BEGIN{printf "%.1f", e-s}'); fi
  if grep -aq '@@BOCHS-EXIT [0-9]*@@' "$SERIAL" 2>/dev/null; then status=done; break; fi
  if ! kill -0 "$BOCHS_PID" 2>/dev/null; then
    grep -aq '@@BOCHS-EXIT [0-9]*@@' "$SERIAL" && status=done || status=died; break; fi
  if [ "$(date +%s)" -ge "$deadline" ]; then status=timeout; break; fi
  sleep 0.5
done
# give the guest a moment to power off by itself, then stop bochs
for _ in 1 2 3 4 5 6; do kill -0 "$BOCHS_PID" 2>/dev/null || break; sleep 0.5; done
kill "$BOCHS_PID" 2>/dev/null || true; wait "$BOCHS_PID" 2>/dev/null || true; BOCHS_PID=
END=$(date +%s.%N)

[ "$VERBOSE" = 1 ] && { echo "----- serial console -----" >&2; tr -d '\r' < "$SERIAL" >&2; echo "--------------------------" >&2; }
BOOT_T=$(awk -v s="$START" -v e="$END" 'BEGIN{printf "%.1f", e-s}')
case $status in
  done)
    # payload output = everything between the markers (the leading/trailing \n we added are stripped)
    awk 'BEGIN{p=0} /@@BOCHS-BEGIN@@/{p=1; next} /@@BOCHS-EXIT [0-9]+@@/{sub(/\n?@@BOCHS-EXIT.*/,""); exit} p{print}' "$SERIAL" \
      | sed '${/^$/d}'
    rc=$(grep -ao '@@BOCHS-EXIT [0-9]*@@' "$SERIAL" | tail -n1 | tr -dc '0-9')
    echo "run-in-bochs: exit=$rc boot-to-payload=${INIT_T:-?}s wall(bochs)=${BOOT_T}s" >&2
    exit "$rc";;
  timeout)
    echo "run-in-bochs: TIMEOUT after ${TIMEOUT}s; serial tail:" >&2; tail -c 4000 "$SERIAL" | tr -d '\r' >&2
    exit 124;;
  *)
    echo "run-in-bochs: bochs exited without end marker; serial tail:" >&2; tail -c 4000 "$SERIAL" | tr -d '\r' >&2
    echo "--- bochs log tail:" >&2; tail -n 30 "$WORK/bochs.log" >&2 2>/dev/null || true
    tail -n 30 "$WORK/bochs.stdout" >&2 2>/dev/null || true
    exit 125;;
esac
