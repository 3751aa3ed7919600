#!/bin/bash
# scripts/nfs-interop-stage.sh — interoperability of our RPC-over-RDMA client with the Linux
# kernel NFS server (svcrdma), in the QEMU/TCG VM of scripts/vm/ (docs/interop-nfs.md).
#
#   scripts/nfs-interop-stage.sh [EXTRA CHECK ARGS...]      e.g. --probe-reply-chunk-limit
#
# 1. builds the check with the rdma provider:
#      cargo build --release -p rpcrdma-apps --features rdma --bin rpcrdma-nfs-check
# 2. boots the VM once and runs scripts/vm/nfs-interop.sh in it: kernel nfsd on "rdma 20049"
#    exporting a tmpfs with the test tree, then rpcrdma-nfs-check (NFSv4.0 COMPOUNDs: NULL,
#    LOOKUP/GETATTR, READ through Write chunks, WRITE through Read chunks, long calls, Reply
#    chunks, Send With Invalidate; NFSv4.1 with the client serving the session's backchannel:
#    CB_SEQUENCE + CB_RECALL of read delegations, across a reconnection) over
#      rxe  client and nfsd on rxe0 (10.0.2.15, loopback inside rxe);
#      siw  client on siw0 (10.0.3.1, root netns), nfsd in netns peer on siw1 (10.0.3.2);
#      siw-iwarp  the same nfsd on siw1, the client on our user-space iWARP provider
#           (`--provider iwarp`: MPA/DDP/RDMAP over a TCP socket from 10.0.3.1, no siw0);
# 3. prints a summary per run (checks passed / failed).
#
# Exit status: 0 every check of every run passed; 1 a check failed or a run did not
# finish; 2 the build failed; 124 the VM timed out; 125 the VM could not be built or started
# (outside reasons, e.g. the Debian archive unreachable on a fresh machine): a loud banner says
# so, it never passes.
#
# Knobs: RPCRDMA_SKIP_VM=1 skips the stage (says so, exits 0); RPCRDMA_NFS_RUNS (default
# "rxe siw siw-iwarp"); RPCRDMA_NFS_RUN_TIMEOUT (per run, s, default 300); RPCRDMA_VM_TIMEOUT (whole
# VM, default 600 s); RPCRDMA_VM_CACHE (VM cache dir, default ~/.cache/rpcrdma-vm);
# CARGO_TARGET_DIR; everything scripts/vm/run-in-vm.sh reads.
set -uo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
cd "$ROOT" || exit 2
T0=$(date +%s)
say() { printf '==== nfs-interop-stage [+%ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
banner() {
	{
		echo
		echo "################################################################################"
		local l
		for l in "$@"; do echo "## $l"; done
		echo "################################################################################"
	} >&2
}

if [ "${RPCRDMA_SKIP_VM:-0}" = 1 ]; then
	echo "nfs-interop-stage: SKIPPED (RPCRDMA_SKIP_VM=1): no interop check ran against the Linux NFS server"
	exit 0
fi

# ---- 1. build -------------------------------------------------------------------------------
say "cargo build --release -p rpcrdma-apps --features rdma --bin rpcrdma-nfs-check"
json=$(mktemp)
log=$(mktemp)
trap 'rm -f "$json" "$log"' EXIT
if ! cargo build --release -p rpcrdma-apps --features rdma --bin rpcrdma-nfs-check \
	--message-format=json-render-diagnostics >"$json"; then
	banner "nfs-interop-stage: FAILED: building rpcrdma-nfs-check with --features rdma failed (exit 2)" \
		"It needs libibverbs-dev, librdmacm-dev and pkg-config (vendor/rdma-sys/README.md)."
	exit 2
fi
BIN=$(sed -n 's/.*"executable":"\([^"]*rpcrdma-nfs-check\)".*/\1/p' "$json" | tail -n 1)
[ -n "$BIN" ] && [ -x "$BIN" ] || BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/rpcrdma-nfs-check
if [ ! -x "$BIN" ]; then
	banner "nfs-interop-stage: FAILED: cargo built no rpcrdma-nfs-check executable (exit 2)"
	exit 2
fi
BIN=$(readlink -f "$BIN")
say "built $BIN"

# ---- 2. the VM ------------------------------------------------------------------------------
# shellcheck source=scripts/vm/lib.sh
. "$ROOT/scripts/vm/lib.sh"
# shellcheck disable=SC2034 # read by vm_log in lib.sh
VM_TAG=nfs-interop-stage
if ! vm_is_ready; then
	say "building the VM (scripts/vm/setup.sh)"
	if ! "$ROOT/scripts/vm/setup.sh"; then
		banner "nfs-interop-stage: FAILED: the VM could not be built (exit 125)." \
			"This is an outside failure (see the messages above), NOT a pass: no interop check" \
			"ran. RPCRDMA_SKIP_VM=1 skips the stage deliberately."
		exit 125
	fi
fi
SHARE=${RPCRDMA_VM_SHARE-$PWD}
[ -z "$SHARE" ] || SHARE=$(readlink -f "$SHARE")
case "$BIN" in
"$SHARE"/*) ;;
*) export RPCRDMA_VM_FILES="${RPCRDMA_VM_FILES:-} $BIN" ;; # not visible over 9p: copy it in
esac
# Shared libraries the binary needs that the guest image lacks: bring the host's.
extra=$(ldd "$BIN" 2>/dev/null | awk '/=> \//{print $3}' | while read -r l; do
	[ -e "$VM_CACHE/initramfs/usr/lib/x86_64-linux-gnu/$(basename "$l")" ] || echo "$l"
done)
if [ -n "$extra" ]; then
	RPCRDMA_VM_LIBS="${RPCRDMA_VM_LIBS:-} $(tr '\n' ' ' <<<"$extra")"
	export RPCRDMA_VM_LIBS
fi
export RPCRDMA_VM_TIMEOUT=${RPCRDMA_VM_TIMEOUT:-600}
say "scripts/vm/run-in-vm.sh scripts/vm/nfs-interop.sh $BIN $*"
"$ROOT/scripts/vm/run-in-vm.sh" "$ROOT/scripts/vm/nfs-interop.sh" "$BIN" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

# ---- 3. summary per run ---------------------------------------------------------------------
# The guest prints "==== nfs-interop [...] run <run>: ..." before each run, the check ends it
# with "nfs-check: N passed, N failed", the guest with "## nfs-interop <run>: PASS|FAIL ...".
declare -A sums=() verdicts=()
run=
while IFS= read -r line; do
	case "$line" in
	"==== nfs-interop "*"] run "*)
		run=${line#*] run }
		run=${run%%:*}
		;;
	"nfs-check: "*) [ -n "$run" ] && sums[$run]=${line#nfs-check: } ;;
	"## nfs-interop "*)
		r=${line#"## nfs-interop "}
		verdicts[${r%%:*}]=${r#*: }
		;;
	esac
done <"$log"
echo
echo "==== nfs-interop-stage: our client against the Linux NFS server (svcrdma), per device"
missing=0
for r in ${RPCRDMA_NFS_RUNS:-rxe siw siw-iwarp}; do
	case $r in
	rxe) dev="rxe (Soft-RoCE, rxe0 loopback)" ;;
	siw) dev="siw (soft-iWARP, siw0 -> siw1 in netns peer)" ;;
	siw-iwarp) dev="siw-iwarp (our iWARP over TCP -> siw1)" ;;
	*) dev=$r ;;
	esac
	if [ -n "${sums[$r]:-}" ]; then
		printf '  %-46s %s — %s\n' "$dev" "${sums[$r]}" "${verdicts[$r]:-no verdict}"
	else
		printf '  %-46s %s\n' "$dev" "NO SUMMARY: the check did not finish (${verdicts[$r]:-no verdict})"
		missing=1
	fi
done
[ "$rc" -ne 0 ] || [ "$missing" -eq 0 ] || rc=1

case $rc in
0) say "PASSED: every interop check passed ($(($(date +%s) - T0)) s)" ;;
124) banner "nfs-interop-stage: FAILED: the VM timed out (RPCRDMA_VM_TIMEOUT=${RPCRDMA_VM_TIMEOUT}s, exit 124)" ;;
125)
	banner "nfs-interop-stage: FAILED: the VM could not be built or started (exit 125)." \
		"This is an outside failure (see the console tail above), NOT a pass: no interop" \
		"check ran. RPCRDMA_SKIP_VM=1 skips the stage deliberately."
	;;
*) banner "nfs-interop-stage: FAILED (exit $rc): an interop check failed or a run did not finish (FAIL lines above)" ;;
esac
exit "$rc"
