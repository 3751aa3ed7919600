#!/bin/bash
# scripts/vm/selftest.sh — check the VM stage itself, end to end, in one boot.
#
# Builds probe.c (a small rdma_cm client/server in C, dynamically linked to
# libibverbs.so.1 and librdmacm.so.1, like an rdma-sys Rust binary) on the host
# and runs it through stage.sh with RPCRDMA_VM_SIW_MODE=both, so that all three
# runs are exercised: rxe, siw-inproc (setns into netns peer), siw-split
# (server process in netns peer, --serve). Needs gcc and libibverbs-dev +
# librdmacm-dev (installed with apt-get when missing and root).
# Exit status: stage.sh's.
set -euo pipefail
. "$(dirname "$(readlink -f "$0")")/lib.sh"
# shellcheck disable=SC2034 # read by vm_log/vm_die in lib.sh
VM_TAG=vm-selftest
if [ "${RPCRDMA_SKIP_VM:-0}" = 1 ]; then
	echo "vm-selftest: SKIPPED (RPCRDMA_SKIP_VM=1)"
	exit 0
fi
if [ ! -e /usr/include/infiniband/verbs.h ] || [ ! -e /usr/include/rdma/rdma_cma.h ]; then
	[ "$(id -u)" = 0 ] || vm_die "libibverbs-dev and librdmacm-dev are missing (need root to install them)"
	vm_log "apt-get install libibverbs-dev librdmacm-dev"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends libibverbs-dev librdmacm-dev >/dev/null ||
		vm_die "apt-get install libibverbs-dev librdmacm-dev failed"
fi
mkdir -p "$VM_CACHE/selftest"
gcc -O2 -Wall -Wextra -Werror -o "$VM_CACHE/selftest/probe" "$VM_SCRIPTS/probe.c" -lrdmacm -libverbs -lpthread
RPCRDMA_VM_SIW_MODE=${RPCRDMA_VM_SIW_MODE:-both} exec "$VM_SCRIPTS/stage.sh" "$VM_CACHE/selftest/probe" "$@"
