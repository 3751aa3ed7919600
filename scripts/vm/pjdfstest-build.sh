#!/bin/bash
# scripts/vm/pjdfstest-build.sh — builds the external POSIX conformance suite pjdfstest (the Rust
# rewrite, crates.io crate `pjdfstest`, BSD-2-Clause, https://github.com/saidsay-so/pjdfstest)
# on the host, once, into the VM cache, and prints the path of its binary on stdout.
#
#   BIN=$(scripts/vm/pjdfstest-build.sh)
#
# `cargo install --locked --version V --root $RPCRDMA_VM_CACHE/pjdfstest-V pjdfstest`: the crate
# comes from crates.io through cargo (its own Cargo.lock pins the dependencies); nothing of it
# enters the repository. When the binary is already there the script only prints its path
# (~0.01 s). A first build takes ~2 min on 2 busy cores (clap, nix, exacl; needs libacl1, which
# every Debian has). The binary links only libc and libgcc_s, so it runs in the VM as it is.
#
# Exit status: 0 built (or cached); 1 cargo failed (the tail of its log goes to stderr: e.g.
# crates.io unreachable on a fresh machine — the caller must not treat that as a pass).
# Knobs: RPCRDMA_PJDFSTEST_VERSION (default 0.2.2), RPCRDMA_VM_CACHE.
set -uo pipefail
# shellcheck source=scripts/vm/lib.sh
. "$(dirname "$(readlink -f "$0")")/lib.sh"
# shellcheck disable=SC2034 # read by vm_log in lib.sh
VM_TAG=pjdfstest-build
V=${RPCRDMA_PJDFSTEST_VERSION:-0.2.2}
DEST=$VM_CACHE/pjdfstest-$V
BIN=$DEST/bin/pjdfstest
if [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -qx "pjdfstest $V"; then
	echo "$BIN"
	exit 0
fi
mkdir -p "$VM_CACHE/logs"
LOG=$VM_CACHE/logs/pjdfstest-build.log
vm_log "cargo install --locked --version $V --root $DEST pjdfstest (log: $LOG)"
t0=$(date +%s)
# Its own temporary target directory (not the project's CARGO_TARGET_DIR), removed afterwards.
if ! env -u CARGO_TARGET_DIR -u CARGO_BUILD_TARGET_DIR cargo install --locked --version "$V" \
	--root "$DEST" pjdfstest >"$LOG" 2>&1 || ! [ -x "$BIN" ]; then
	vm_log "FAILED: cargo install pjdfstest $V (crates.io reachable? log tail below)"
	tail -n 20 "$LOG" >&2
	exit 1
fi
vm_log "built $BIN in $(($(date +%s) - t0)) s"
echo "$BIN"
