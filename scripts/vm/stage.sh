#!/bin/bash
# scripts/vm/stage.sh — the project's VM test stage: run a host-built test
# binary against real kernel RDMA verbs (Soft-RoCE rxe, soft-iWARP siw).
#
#   scripts/vm/stage.sh BINARY [ARGS...]
#
# Builds the VM if needed (setup.sh: ~1 min from nothing, ~0 s when cached),
# boots it ONCE, and runs BINARY in it over rxe, then over siw (see
# guest-stage.sh for the exact environment of each run and the two siw shapes).
# BINARY is typically a test binary dynamically linked to libibverbs.so.1 and
# librdmacm.so.1 (rdma-sys); the guest has Debian 12's rdma-core with the rxe
# and siw providers. Output streams as it comes, with a header per run and a
# summary; the exit status is non-zero if any run failed.
#
# Knobs (environment):
#   RPCRDMA_SKIP_VM=1            skip the stage (prints that it is skipped, exits 0)
#   RPCRDMA_VM_RUNS="rxe siw"    which runs
#   RPCRDMA_VM_SIW_MODE=inproc   siw shape: inproc | split | both
#   RPCRDMA_VM_SERVE_ARGS=--serve  extra arguments of the split-mode server
#   RPCRDMA_VM_RUN_TIMEOUT=600   per-run limit inside the VM (s)
#   RPCRDMA_VM_TIMEOUT=1800      limit for the whole VM (s)
#   RPCRDMA_VM_SERVER_WAIT=20 RPCRDMA_VM_SERVER_GRACE=10   split-mode server start/stop (s)
#   RPCRDMA_VM_CACHE, RPCRDMA_VM_SHARE, RPCRDMA_VM_MEM, RPCRDMA_VM_SMP, ...  see run-in-vm.sh
#   RPCRDMA_*, RUST_* (e.g. RUST_BACKTRACE=1) are passed into the VM.
# Exit status: 0 all runs passed; 1 a run failed; 2 usage; 124 VM timeout;
# 125 the VM could not be built or started (e.g. the Debian archive is
# unreachable on a fresh machine: a loud banner says so).
set -uo pipefail
. "$(dirname "$(readlink -f "$0")")/lib.sh"
# shellcheck disable=SC2034 # read by vm_log/vm_die in lib.sh
VM_TAG=vm-stage

if [ "${RPCRDMA_SKIP_VM:-0}" = 1 ]; then
	echo "vm-stage: SKIPPED (RPCRDMA_SKIP_VM=1): no test ran against kernel RDMA verbs"
	exit 0
fi
if [ $# -lt 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
	sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 2
fi
BIN=$1
shift
if [ ! -f "$BIN" ] || [ ! -x "$BIN" ]; then
	echo "vm-stage: $BIN: not an executable file" >&2
	exit 2
fi
BIN=$(readlink -f "$BIN")

T0=$(date +%s)
echo "==== vm-stage: $BIN $* (cache $VM_CACHE)"
if ! vm_is_ready; then
	if ! "$VM_SCRIPTS/setup.sh"; then
		{
			echo "############################################################################"
			echo "## vm-stage: FAILED: the VM could not be built (exit 125); see the banner above."
			echo "## No test ran against kernel RDMA verbs. RPCRDMA_SKIP_VM=1 skips the stage deliberately."
			echo "############################################################################"
		} >&2
		exit 125
	fi
fi
echo "==== vm-stage: VM ready after $(($(date +%s) - T0)) s; booting"

SHARE=${RPCRDMA_VM_SHARE-$PWD}
[ -z "$SHARE" ] || SHARE=$(readlink -f "$SHARE")
case "$BIN" in
"$SHARE"/*) ;;
*) export RPCRDMA_VM_FILES="${RPCRDMA_VM_FILES:-} $BIN" ;; # not visible over 9p: copy it in
esac
# shared libraries BINARY needs that the guest image lacks: bring the host's
extra=$(ldd "$BIN" 2>/dev/null | awk '/=> \//{print $3}' | while read -r l; do
	[ -e "$VM_CACHE/initramfs/usr/lib/x86_64-linux-gnu/$(basename "$l")" ] || echo "$l"
done)
if [ -n "$extra" ]; then
	echo "==== vm-stage: copying libraries the VM lacks: $(echo $extra)"
	RPCRDMA_VM_LIBS="${RPCRDMA_VM_LIBS:-} $(echo $extra)"
	export RPCRDMA_VM_LIBS
fi
export RPCRDMA_VM_TIMEOUT=${RPCRDMA_VM_TIMEOUT:-1800}
"$VM_SCRIPTS/run-in-vm.sh" "$VM_SCRIPTS/guest-stage.sh" "$BIN" "$@"
rc=$?
case $rc in
0) echo "==== vm-stage: PASSED ($(($(date +%s) - T0)) s)" ;;
124) echo "==== vm-stage: FAILED: the VM timed out (RPCRDMA_VM_TIMEOUT=${RPCRDMA_VM_TIMEOUT}s)" ;;
125) echo "==== vm-stage: FAILED: the VM did not start or died (exit 125); console tail above" ;;
*) echo "==== vm-stage: FAILED (exit $rc, $(($(date +%s) - T0)) s)" ;;
esac
exit "$rc"
