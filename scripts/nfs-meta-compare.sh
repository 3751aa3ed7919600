#!/bin/bash
# scripts/nfs-meta-compare.sh — a metadata-heavy workload (untar of a few thousand small files,
# diff, stat, rename, a walk after remount, rm -rf) from the Linux NFSv3 client against
# rpcrdma-nfsd and a reference in one VM boot (scripts/vm/nfs-meta.sh), both backends: the
# reference is the kernel's nfsd (RPCRDMA_NFSD_BASE_BIN=kernel) or an older build of ours (what
# the per-call checks cost). Not part of CI at this size: with the default 2 000 files about 8 min
# of TCG when calls run fast, 30 or more on a loaded host (the nfs-server stage runs a small
# tree against the kernel nfsd). docs/performance-nfs.md holds the results.
#
#   RPCRDMA_NFSD_BASE_BIN=kernel scripts/nfs-meta-compare.sh      ours / kernel nfsd
#   scripts/nfs-meta-compare.sh                                    ours / the build before the checks
#
# 1. the new binary: RPCRDMA_NFSD_BIN, or built from this tree
#      cargo build --release -p rpcrdma-apps --features rdma --bin rpcrdma-nfsd
# 2. the reference: RPCRDMA_NFSD_BASE_BIN (`kernel`: the kernel nfsd; or a binary), or built from revision RPCRDMA_META_BASE_REV (default
#    0ce4e21, the last one before the checks) exported with `git archive` into
#    target/nfs-meta-base/src and built there with its own target directory;
# 3. boots the VM once: scripts/vm/run-in-vm.sh scripts/vm/nfs-meta.sh NEW OLD|kernel;
# 4. prints the host's load average before and after, and the guest's table again.
# Knobs: everything scripts/vm/nfs-meta.sh reads (RPCRDMA_META_*: devices, backends, rounds, uids,
# tree size, caches dropped, a CPU hog, RPCRDMA_META_STRACE=1), RPCRDMA_VM_TIMEOUT (default 3000 s), RPCRDMA_VM_CACHE.
# Exit status: 0 every run passed its checks; 1 a check failed; 2 a build failed; 124 the VM timed
# out; 125 the VM could not be built or started.
set -uo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
cd "$ROOT" || exit 2
say() { echo "==== nfs-meta-compare: $*"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
BUILD=(cargo build --release -p rpcrdma-apps --features rdma --bin rpcrdma-nfsd)

NEW=${RPCRDMA_NFSD_BIN:-}
if [ -z "$NEW" ]; then
	say "${BUILD[*]}"
	"${BUILD[@]}" || exit 2
	NEW=${CARGO_TARGET_DIR:-$ROOT/target}/release/rpcrdma-nfsd
fi
OLD=${RPCRDMA_NFSD_BASE_BIN:-}
if [ -z "$OLD" ]; then
	REV=${RPCRDMA_META_BASE_REV:-0ce4e21}
	BASE=$ROOT/target/nfs-meta-base
	if [ "$(cat "$BASE/src/.rev" 2>/dev/null)" != "$(git rev-parse "$REV")" ]; then
		say "git archive $REV -> $BASE/src"
		rm -rf "$BASE/src"
		mkdir -p "$BASE/src" && git archive "$REV" | tar -x -C "$BASE/src" || exit 2
		git rev-parse "$REV" >"$BASE/src/.rev"
	fi
	say "${BUILD[*]} (in $BASE/src, revision $REV)"
	(cd "$BASE/src" && CARGO_TARGET_DIR=$BASE/target "${BUILD[@]}") || exit 2
	OLD=$BASE/target/release/rpcrdma-nfsd
fi
for b in "$NEW" "$OLD"; do
	[ "$b" = kernel ] && continue
	[ -x "$b" ] || {
		say "FAILED: $b is not an executable (exit 2)"
		exit 2
	}
done
NEW=$(readlink -f "$NEW")
[ "$OLD" = kernel ] || OLD=$(readlink -f "$OLD")

# shellcheck source=scripts/vm/lib.sh
. "$ROOT/scripts/vm/lib.sh"
SHARE=${RPCRDMA_VM_SHARE-$PWD}
[ -z "$SHARE" ] || SHARE=$(readlink -f "$SHARE")
for b in "$NEW" "$OLD"; do
	[ "$b" = kernel ] && continue
	case "$b" in
	"$SHARE"/*) ;;
	*) RPCRDMA_VM_FILES="${RPCRDMA_VM_FILES:-} $b" ;; # not visible over 9p: copied in
	esac
	# shared libraries the binary needs that the guest image lacks: the host's
	for l in $(ldd "$b" 2>/dev/null | awk '/=> \//{print $3}'); do
		[ -e "$VM_CACHE/initramfs/usr/lib/x86_64-linux-gnu/$(basename "$l")" ] ||
			RPCRDMA_VM_LIBS="${RPCRDMA_VM_LIBS:-} $l"
	done
done
export RPCRDMA_VM_FILES RPCRDMA_VM_LIBS
export RPCRDMA_VM_TIMEOUT=${RPCRDMA_VM_TIMEOUT:-3000}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
L0=$(load)
say "new $NEW; old $OLD; host load average $L0"
"$ROOT/scripts/vm/run-in-vm.sh" "$ROOT/scripts/vm/nfs-meta.sh" "$NEW" "$OLD" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo
say "host load average before $L0, after $(load) ($(nproc) host cores)"
sed -n '/^nfs-meta: medians/,$p' "$log"
case $rc in
0) say "PASSED" ;;
124) say "FAILED: the VM timed out (RPCRDMA_VM_TIMEOUT=$RPCRDMA_VM_TIMEOUT s)" ;;
125) say "FAILED: the VM could not be built or started (exit 125)" ;;
*) say "FAILED (exit $rc): a check failed (FAIL lines above)" ;;
esac
exit "$rc"
