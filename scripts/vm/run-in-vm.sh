#!/bin/bash
# scripts/vm/run-in-vm.sh — run a command inside the RDMA test VM and return its status.
#
#   run-in-vm.sh 'ibv_devices && rdma link'    a shell command line (bash -c)
#   run-in-vm.sh FILE [ARGS...]                a script or a host-built executable
#   run-in-vm.sh -- PROGRAM [ARGS...]          an argv, run as-is (PROGRAM from the guest PATH)
#
# Boots Debian's 6.1 kernel under QEMU (TCG) with real kernel RDMA verbs:
# rxe0 (Soft-RoCE on eth0 10.0.2.15) and siw0 (10.0.3.1, root netns) <-> siw1
# (10.0.3.2, netns "peer"). The payload's stdout+stderr stream to stdout as
# they come; the exit status is the payload's. ~10-15 s of overhead per boot.
#
# The host directory $RPCRDMA_VM_SHARE (default: the current directory) is
# mounted in the guest over virtio-9p at the SAME absolute path, read-write, and
# the command starts in the same working directory (when inside the share), so
# host-built binaries (target/debug/...) run in place and results can be written
# back. A FILE outside the share, and every file in RPCRDMA_VM_FILES, is copied
# into the VM at its same absolute path.
#
# Knobs (environment):
#   RPCRDMA_VM_CACHE=dir     state directory (default ~/.cache/rpcrdma-vm)
#   RPCRDMA_VM_SHARE=dir     host directory shared at the same path ("" = none)
#   RPCRDMA_VM_FILES="f..."  extra host files to copy in (same absolute path)
#   RPCRDMA_VM_LIBS="l..."   extra host shared libraries, copied (dereferenced)
#                            into the guest's /usr/lib/x86_64-linux-gnu
#   RPCRDMA_VM_TIMEOUT=s     wall-clock limit for the whole VM (default 900)
#   RPCRDMA_VM_MEM=MiB       guest RAM (default 2048)   RPCRDMA_VM_SMP=n  vCPUs (default 2)
#   RPCRDMA_VM_SIW=0         no siw/veth/netns setup in the guest
#   RPCRDMA_VM_VERBOSE=1     whole serial console (kernel + init steps)
#   RPCRDMA_VM_LOG=file      keep the whole serial console log there
#   RPCRDMA_VM_ENV="A=1 B=2" more variables for the guest
#   RPCRDMA_VM_ACCEL=tcg     accelerator (kvm does not work on kvm_pvm hosts)
#   RPCRDMA_VM_APPEND="..."  more kernel command line parameters
# Passed into the guest unchanged: RPCRDMA_* (RPCRDMA_VM_* too: guest-stage.sh
# reads some), RUST_*.
# Exit status: the payload's; 124 timeout; 125 VM failure (setup failed, qemu
# failed, or the guest printed no exit status); 2 usage.
set -uo pipefail
. "$(dirname "$(readlink -f "$0")")/lib.sh"
# shellcheck disable=SC2034 # read by vm_log/vm_die in lib.sh
VM_TAG=run-in-vm
if [ $# -eq 0 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
	sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 2
fi

# ---- make sure the VM exists (fast no-op when ready) ------------------------------------
if ! vm_is_ready; then
	vm_log "VM not built (or out of date) in $VM_CACHE: running setup.sh"
	"$VM_SCRIPTS/setup.sh" >&2 || {
		vm_log "setup failed: cannot start the VM"
		exit 125
	}
fi
vm_qemu_env

SHARE=${RPCRDMA_VM_SHARE-$PWD}
[ -z "$SHARE" ] || SHARE=$(readlink -f "$SHARE")
under_share() { [ -n "$SHARE" ] && case "$1/" in "$SHARE"/*) true ;; *) false ;; esac; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rpcrdma-vm.XXXXXX")
QPID=
cleanup() {
	[ -n "$QPID" ] && kill "$QPID" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
P=$WORK/payload
mkdir -p "$P/vm"

# copy FILE into the payload at its own absolute path
add_file() {
	local f
	f=$(readlink -f "$1")
	mkdir -p "$P$(dirname "$f")"
	cp -p "$f" "$P$f"
}

# ---- payload: /vm/{cmd,env,cwd,share,nonce} ---------------------------------------------
q() { printf '%q ' "$@"; }
if [ "$1" = -- ]; then
	shift
	q "$@" >"$P/vm/cmd"
elif [ -f "$1" ]; then
	f=$(readlink -f "$1")
	shift
	under_share "$f" || add_file "$f"
	if [ -x "$f" ]; then
		echo "$(q "$f" "$@")" >"$P/vm/cmd"
	else
		echo "$(q bash "$f" "$@")" >"$P/vm/cmd"
	fi
else
	printf '%s\n' "$*" >"$P/vm/cmd"
fi
for f in ${RPCRDMA_VM_FILES:-}; do
	[ -f "$f" ] || {
		vm_log "RPCRDMA_VM_FILES: no such file: $f"
		exit 2
	}
	under_share "$(readlink -f "$f")" || add_file "$f"
done
for l in ${RPCRDMA_VM_LIBS:-}; do
	mkdir -p "$P/usr/lib/x86_64-linux-gnu"
	cp -L "$l" "$P/usr/lib/x86_64-linux-gnu/$(basename "$l")" || exit 2
done
if under_share "$PWD"; then echo "$PWD" >"$P/vm/cwd"; else echo / >"$P/vm/cwd"; fi
echo "$SHARE" >"$P/vm/share"
NONCE=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
echo "$NONCE" >"$P/vm/nonce"
{
	while IFS='=' read -r name _; do
		echo "export $name=$(printf '%q' "${!name}")"
	done < <(env | grep -E '^(RPCRDMA|RUST)_[A-Za-z0-9_]*=')
	for kv in ${RPCRDMA_VM_ENV:-}; do echo "export $(printf '%q' "$kv")"; done
} >"$P/vm/env"
(cd "$P" && find . -mindepth 1 | cpio -o -H newc --quiet) >"$WORK/payload.cpio" || exit 125
cat "$VM_CACHE/out/initrd" "$WORK/payload.cpio" >"$WORK/initrd"

# ---- qemu -------------------------------------------------------------------------------------
VERBOSE=${RPCRDMA_VM_VERBOSE:-0}
ACCEL=${RPCRDMA_VM_ACCEL:-tcg}
# tsc: the default (hpet) costs an emulated MMIO access per clock read;
# no crypto self-tests, audit, apparmor, watchdogs: boot work a test VM does not need
APPEND="console=ttyS0 panic=-1 oops=panic mitigations=off edd=off clocksource=tsc tsc=reliable"
APPEND="$APPEND cryptomgr.notests audit=0 apparmor=0 nowatchdog rpcrdma_vm.siw=${RPCRDMA_VM_SIW:-1} rpcrdma_vm.verbose=$VERBOSE"
[ "$VERBOSE" = 1 ] || APPEND="$APPEND quiet loglevel=3"
# the uncompressed vmlinux boots through its PVH entry point: no firmware
# real-mode dance, no xz decompression under TCG (saves ~5 s per boot)
KIMAGE=$VM_CACHE/kernel/boot/vmlinux
[ -f "$KIMAGE" ] || KIMAGE=$VM_CACHE/kernel/boot/vmlinuz
# shellcheck disable=SC2054 # the commas belong to qemu option values
ARGS=(-L "$VM_CACHE/fw" -accel "$ACCEL" -m "${RPCRDMA_VM_MEM:-2048}" -smp "${RPCRDMA_VM_SMP:-2}"
	-nographic -nodefaults -no-reboot -serial stdio
	-kernel "$KIMAGE" -initrd "$WORK/initrd"
	-netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0,romfile=
	-device virtio-rng-pci)
[ "$ACCEL" = tcg ] && ARGS+=(-cpu max)
[ -n "$SHARE" ] && ARGS+=(-virtfs "local,path=$SHARE,mount_tag=share,security_model=none,id=share")
ARGS+=(-append "$APPEND ${RPCRDMA_VM_APPEND:-}")

LOG=${RPCRDMA_VM_LOG:-$WORK/console.log}
: >"$LOG"
TIMEOUT=${RPCRDMA_VM_TIMEOUT:-900}
T0=$(date +%s%N)
mkfifo "$WORK/console"
timeout -k 5 "$TIMEOUT" "$QEMU" "${ARGS[@]}" </dev/null >"$WORK/console" 2>&1 &
QPID=$!
# Stream the payload's lines (between the markers) to stdout; keep everything in $LOG.
RC=
on=0
while IFS= read -r line || [ -n "$line" ]; do
	line=${line%$'\r'}
	printf '%s\n' "$line" >>"$LOG"
	case "$line" in
	*"@@RPCRDMA_VM_BEGIN $NONCE@@"*)
		on=1
		[ "$VERBOSE" = 1 ] && printf '%s\n' "$line"
		continue
		;;
	*"@@RPCRDMA_VM_EXIT $NONCE "*)
		rest=${line#*"@@RPCRDMA_VM_EXIT $NONCE "}
		RC=${rest%%@@*}
		pre=${line%%"@@RPCRDMA_VM_EXIT $NONCE "*}
		[ -n "$pre" ] && printf '%s\n' "$pre"
		on=0
		[ "$VERBOSE" = 1 ] && printf '%s\n' "$line"
		continue
		;;
	esac
	if [ "$on" = 1 ] || [ "$VERBOSE" = 1 ]; then printf '%s\n' "$line"; fi
done <"$WORK/console"
wait "$QPID"
QRC=$?
QPID=
T1=$(date +%s%N)
WALL=$(((T1 - T0) / 1000000))
vm_log "vm wall time $((WALL / 1000)).$(((WALL % 1000) / 100)) s, qemu rc $QRC, payload rc ${RC:-none}"
case "$RC" in
'' | *[!0-9]*)
	if [ "$QRC" = 124 ] || [ "$QRC" = 137 ]; then
		vm_log "TIMEOUT: the VM ran longer than RPCRDMA_VM_TIMEOUT=${TIMEOUT}s (exit 124); last console lines:"
		tail -n 20 "$LOG" | sed 's/^/  | /' >&2
		exit 124
	fi
	vm_log "VM FAILURE: no exit status from the guest (exit 125); last console lines:"
	tail -n 40 "$LOG" | sed 's/^/  | /' >&2
	exit 125
	;;
esac
exit "$RC"
