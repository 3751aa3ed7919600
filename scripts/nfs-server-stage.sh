#!/bin/bash
# scripts/nfs-server-stage.sh — the Linux kernel NFS client (NFSv3, proto=rdma) against our server
# rpcrdma-nfsd, in the QEMU/TCG VM of scripts/vm/ (issue 12, "Prove it against the kernel").
#
#   scripts/nfs-server-stage.sh
#
# 1. builds the server with the rdma provider:
#      cargo build --release -p rpcrdma-apps --features rdma --bin rpcrdma-nfsd --bin rpcrdma-perf
#    (rpcrdma-perf for part quickstart, which runs docs/quickstart.md's commands);
#    (RPCRDMA_NFSD_BIN=kernel skips the build and runs every part against the kernel's own nfsd:
#    how the scripts are validated, and the reference numbers; RPCRDMA_NFSD_BIN=PATH uses that
#    binary as it is);
# 2. boots the VM once and runs scripts/vm/nfs-server.sh in it: over rxe with the memory and the
#    dir:/srv/nfsd-dir backends, over siw with the memory backend, and (iwarp/memory) over siw
#    to the server on our user-space iWARP provider (`--provider iwarp`, no verbs device on the
#    server's side) (RPCRDMA_NFSD_RUNS; siw/dir on request), the kernel client mounts the server
#    (vers=3,proto=rdma, "xprt: rdma" in /proc/self/mountstats) and runs the checksummed
#    workload (scripts/vm/nfs-workload.sh: 1000-file tree + special sizes, umount/mount/verify,
#    ls -l of 5000 entries, rename/link/symlink/chmod/truncate/fsync, parallel writers, fio
#    verify=crc32c, rm -rf); the server's counters must show Read, Write and Reply chunks; then the
#    fault runs (fault/rxe, fault/siw, fault/iwarp: --drop-every N: one reconnection per deliberate drop,
#    retransmissions answered by the DRC, final tree = manifest); NFSv4.1 and NFSv4.2
#    (scripts/vm/nfs-v41.sh, `rpcrdma-nfsd --nfs4` on port 20049): parts v41/rxe/memory and
#    v41/siw/dir (mount vers=4.1,proto=rdma: "xprt: rdma" and "vers=4.1" in mountstats, the churn
#    workload and fio verify, an NFSv3 mount of the export beside it; a plain proto=rdma mount
#    settling on 4.2, on which fallocate (ALLOCATE), a punched hole (DEALLOCATE) reading back as
#    zeros, cp --sparse=always of a sparse file (SEEK) and cp of a file of data (COPY) work and
#    the client's per-op counters show ALLOCATE, DEALLOCATE, SEEK and COPY sent) and v41/deleg on
#    request (two kernel clients over
#    siw, the holder A with vers=4.2, B with vers=4.1: a read delegation recalled with CB_RECALL
#    over the holder's RDMA connection, in a CB_COMPOUND of minor version 2, and returned, flock
#    conflicts between the two, an NFSv3 write of a file under a read delegation answered
#    NFS3ERR_JUKEBOX until the holder returned it, the holder then reading the NFSv3 content) and
#    v41fault/rxe, v41fault/siw (scripts/vm/nfs-v41-fault.sh, dir backend: the server drops the
#    connection every Nth cached COMPOUND: slot replays, BIND_CONN_TO_SESSION, one reconnection
#    per drop, nothing run twice; then the server restarts on its --v4-state-dir and the client
#    reclaims its opens and lock, which a second client's flock still meets); part nlm/siw
#    (scripts/vm/nfs-nlm.sh: the NFSv3 client's flock locks, mounted without nolock, against
#    our lock manager, NLM v4, with the server and an rpcbind of its own in netns peer:
#    conflicts, a blocking lock woken by the server's NLMPROC4_GRANTED; fcntl byte ranges,
#    split by a partial unlock, through scripts/vm/lockf.c, built here with gcc -O2 -static:
#    SKIP without it; beside an NFSv4.1 mount's read delegation, --nfs4, a shared flock granted
#    at once, an exclusive one recalls it, unanswered until the client's lockd sends it again)
#    and part nlm-restart/siw
#    (the same client's lock reclaimed across a restart of the server, which tells it with
#    SM_NOTIFY and serves only reclaims in its grace period; a client reboot's SM_NOTIFY,
#    sent by sm-notify, releases its locks); and fio side by
#    side with the kernel nfsd over rxe (scripts/vm/nfs-fio.sh);
#    the memory-backend workload runs once more over rxe and over siw with the server's
#    connections on one shared receive queue (`rpcrdma-nfsd --srq N`: parts srq/rxe, srq/siw;
#    the server's srq.depth counter must be N);
#    then pjdfstest (the POSIX suite from crates.io, built once into the VM cache by
#    scripts/vm/pjdfstest-build.sh) as root on the mount (rxe) of the kernel nfsd (tmpfs,
#    no_root_squash: the reference) and of ours on both backends (parts pjdfstest/kernel,
#    pjdfstest/memory, pjdfstest/dir), and the export access checks (part exports,
#    scripts/vm/nfs-exports.sh; SKIP for a binary without --exports), POSIX ACLs through NFSACL
#    (part acl, scripts/vm/nfs-acl.sh: setfacl / getfacl -n of a named user, the mask after
#    chmod, which users may read, a non-owner's setfacl refused, default ACLs inherited,
#    setfacl -b, on the mount of the kernel nfsd (tmpfs) and of ours on both backends, every
#    step's outputs equal to the kernel nfsd's), and what the client
#    caches (part cache, scripts/vm/nfs-cache.sh: rpcrdma-nfs3-compare, built here, compares the
#    replies of the kernel nfsd and of ours field by field); then the metadata workload
#    of scripts/vm/nfs-meta.sh against the kernel nfsd and ours in turn, over rxe and siw, both
#    backends (part meta: the ours / kernel time table, and the client's GETATTR / LOOKUP / READ
#    counts per phase beside the kernel nfsd's); last, part quickstart (scripts/vm/quickstart.sh):
#    the commands of docs/quickstart.md as written, on devices of its own (rxe on a dummy
#    interface: two processes, the kernel NFS mount; siw between two namespaces);
# 3. prints the summary: per device x backend the workload result and the counters, the fault run,
#    the fio ratio table;
# 4. pjdfstest side by side (scripts/vm/pjdfstest-table.sh): the cases not ok on every server,
#    the pass counts; fails when ours fails a case the kernel nfsd passes that
#    scripts/vm/pjdfstest-known.txt does not list, or passes one it lists. Every case's result is
#    kept in $RPCRDMA_PJDFSTEST_OUT (default ${CARGO_TARGET_DIR:-target}/pjdfstest/results.txt,
#    the table beside it).
#
# Off by default (.ci/run turns the pjdfstest41 parts on; fio41 costs too much for CI), NFSv4.x
# against the kernel nfsd, which then serves NFSv4.x besides NFSv3 for the whole boot:
#  - pjdfstest41/kernel, pjdfstest41/memory, pjdfstest41/dir (RPCRDMA_NFSD_PJDFSTEST41, e.g.
#    "kernel memory dir"): pjdfstest on the vers=4.2,proto=rdma mount (rxe) of the kernel nfsd
#    (the reference) and of ours with --nfs4, with the posix_fallocate cases besides
#    (scripts/vm/pjdfstest42.toml: the client's fallocate sends ALLOCATE), compared as in 4.
#    against scripts/vm/pjdfstest41-known.txt; results in $RPCRDMA_PJDFSTEST_OUT/results41.txt
#    and table41.txt;
#  - fio41 (RPCRDMA_NFSD_FIO41=1): part fio over vers=4.1 mounts, the "fio ratios, NFSv4.1" table.
# Only these parts (about 11 min of a busy host; fio41 alone about 4):
#   RPCRDMA_NFSD_RUNS= RPCRDMA_NFSD_SRQ_RUNS= RPCRDMA_NFSD_FAULT=0 RPCRDMA_NFSD_RPCBIND=0 \
#     RPCRDMA_NFSD_FIO=0 RPCRDMA_NFSD_PJDFSTEST= RPCRDMA_NFSD_EXPORTS=0 RPCRDMA_NFSD_CACHE=0 \
#     RPCRDMA_NFSD_ACL=0 RPCRDMA_NFSD_META= RPCRDMA_NFSD_QUICKSTART=0 RPCRDMA_NFSD_V41= RPCRDMA_NFSD_V41_DELEG=0 \
#     RPCRDMA_NFSD_NLM= RPCRDMA_NFSD_NLM_RESTART= RPCRDMA_NFSD_PJDFSTEST41="kernel memory dir" \
#     RPCRDMA_NFSD_FIO41=1 scripts/nfs-server-stage.sh
#
# Exit status: 0 every part passed; 1 a check failed or a part did not finish; 2 the build
# failed; 124 the VM timed out; 125 the VM could not be built or started (outside reasons, e.g.
# the Debian archive unreachable on a fresh machine, or pjdfstest not buildable from crates.io):
# a loud banner says so, it never passes.
#
# Knobs: RPCRDMA_SKIP_VM=1 skips the stage (says so, exits 0); RPCRDMA_NFSD_BIN (see 1.);
# RPCRDMA_VM_TIMEOUT (whole VM, default 1800 s); RPCRDMA_VM_MEM (guest MiB, default here 3072:
# the memory backend, the kernel's tmpfs exports and the client's page cache share it);
# everything scripts/vm/nfs-server.sh reads (RPCRDMA_NFSD_RUNS, RPCRDMA_NFSD_SRQ_RUNS,
# RPCRDMA_NFSD_SRQ_DEPTH, RPCRDMA_NFSD_FAULT, RPCRDMA_NFSD_FAULT_RUNS,
# RPCRDMA_NFSD_DROP_EVERY, RPCRDMA_NFSD_FAULT_SIW_EVERY, RPCRDMA_NFSD_FAULT_HOG, RPCRDMA_NFSD_FIO, RPCRDMA_NFSD_FIO_ROUNDS, RPCRDMA_NFSD_ARGS,
# RPCRDMA_NFSD_PJDFSTEST (default "kernel memory dir"; empty: no pjdfstest, no build),
# RPCRDMA_NFSD_PJDFSTEST41 (default empty: no NFSv4.2 pjdfstest), RPCRDMA_NFSD_FIO41 (0, 1),
# RPCRDMA_NFSD_EXPORTS (auto, 1, 0), RPCRDMA_NFSD_ACL (1, 0), RPCRDMA_NFSD_CACHE (1, 0),
# RPCRDMA_NFS3_COMPARE_BIN, RPCRDMA_NFSD_META ("rxe siw"; empty: no meta part),
# RPCRDMA_NFSD_META_HOG, RPCRDMA_NFSD_META_COUNTS, RPCRDMA_NFSD_META_ROUNDS, RPCRDMA_NFSD_META_DIRS,
# RPCRDMA_NFSD_META_FILES, RPCRDMA_NFSD_QUICKSTART (1, 0), RPCRDMA_NFSD_V41 ("rxe/memory siw/dir";
# empty: none), RPCRDMA_NFSD_V41_DELEG (1, 0: no part v41/deleg), RPCRDMA_NFSD_V41_WORKLOAD (churn, full),
# RPCRDMA_NFSD_V41_CHURN (60), RPCRDMA_NFSD_V41_FAULT ("rxe siw"; empty: no v41fault part),
# RPCRDMA_NFSD_NLM ("siw"; empty: no nlm part), RPCRDMA_NFSD_NLM_GRANT_MAX (10),
# RPCRDMA_NFSD_NLM_RESTART ("siw"; empty: no nlm-restart part), RPCRDMA_NFSD_NLM_GRACE (15),
# RPCRDMA_NFSD_V41_DROP_EVERY (20), RPCRDMA_NFSD_V41_FAULT_CHURN (30), RPCRDMA_NFSD_V41_RECORDS (20),
# RPCRDMA_NFS_FIO_RUNTIME, ...) and scripts/vm/run-in-vm.sh reads; RPCRDMA_VM_CACHE;
# CARGO_TARGET_DIR.
# Only the SRQ parts (e.g. while working on the SRQ path):
#   RPCRDMA_NFSD_RUNS= RPCRDMA_NFSD_FAULT=0 RPCRDMA_NFSD_RPCBIND=0 RPCRDMA_NFSD_FIO=0 \
#     RPCRDMA_NFSD_PJDFSTEST= RPCRDMA_NFSD_EXPORTS=0 scripts/nfs-server-stage.sh
# Only the NFSv4.1 parts:
#   RPCRDMA_NFSD_RUNS= RPCRDMA_NFSD_SRQ_RUNS= RPCRDMA_NFSD_FAULT=0 RPCRDMA_NFSD_RPCBIND=0 \
#     RPCRDMA_NFSD_FIO=0 RPCRDMA_NFSD_PJDFSTEST= RPCRDMA_NFSD_EXPORTS=0 RPCRDMA_NFSD_CACHE=0 \
#     RPCRDMA_NFSD_ACL=0 RPCRDMA_NFSD_META= RPCRDMA_NFSD_QUICKSTART=0 RPCRDMA_NFSD_NLM= RPCRDMA_NFSD_NLM_RESTART= \
#     scripts/nfs-server-stage.sh
# Only the NFSv4.1 fault parts (add RPCRDMA_NFSD_V41_FAULT=rxe for one device):
#   RPCRDMA_NFSD_RUNS= RPCRDMA_NFSD_SRQ_RUNS= RPCRDMA_NFSD_FAULT=0 RPCRDMA_NFSD_RPCBIND=0 \
#     RPCRDMA_NFSD_FIO=0 RPCRDMA_NFSD_PJDFSTEST= RPCRDMA_NFSD_EXPORTS=0 RPCRDMA_NFSD_CACHE=0 \
#     RPCRDMA_NFSD_ACL=0 RPCRDMA_NFSD_META= RPCRDMA_NFSD_QUICKSTART=0 RPCRDMA_NFSD_V41= RPCRDMA_NFSD_V41_DELEG=0 \
#     RPCRDMA_NFSD_NLM= RPCRDMA_NFSD_NLM_RESTART= scripts/nfs-server-stage.sh
# Only parts nlm/siw and nlm-restart/siw (the NFSv3 client's locks against our lock manager;
# about 25 s + 40 s in the guest; RPCRDMA_NFSD_NLM="siw iwarp" and RPCRDMA_NFSD_NLM_RESTART="siw
# iwarp" for both providers):
#   RPCRDMA_NFSD_RUNS= RPCRDMA_NFSD_SRQ_RUNS= RPCRDMA_NFSD_FAULT=0 RPCRDMA_NFSD_RPCBIND=0 \
#     RPCRDMA_NFSD_FIO=0 RPCRDMA_NFSD_PJDFSTEST= RPCRDMA_NFSD_EXPORTS=0 RPCRDMA_NFSD_CACHE=0 \
#     RPCRDMA_NFSD_ACL=0 RPCRDMA_NFSD_META= RPCRDMA_NFSD_QUICKSTART=0 RPCRDMA_NFSD_V41= RPCRDMA_NFSD_V41_DELEG=0 \
#     RPCRDMA_NFSD_V41_FAULT= scripts/nfs-server-stage.sh
# Only part acl (POSIX ACLs: the kernel nfsd, then ours with each backend):
#   RPCRDMA_NFSD_RUNS= RPCRDMA_NFSD_SRQ_RUNS= RPCRDMA_NFSD_FAULT=0 RPCRDMA_NFSD_RPCBIND=0 \
#     RPCRDMA_NFSD_FIO=0 RPCRDMA_NFSD_PJDFSTEST= RPCRDMA_NFSD_EXPORTS=0 RPCRDMA_NFSD_CACHE=0 \
#     RPCRDMA_NFSD_META= RPCRDMA_NFSD_QUICKSTART=0 RPCRDMA_NFSD_V41= RPCRDMA_NFSD_V41_DELEG=0 \
#     RPCRDMA_NFSD_V41_FAULT= RPCRDMA_NFSD_NLM= RPCRDMA_NFSD_NLM_RESTART= scripts/nfs-server-stage.sh
# Only pjdfstest and the exports checks:
#   RPCRDMA_NFSD_RUNS= RPCRDMA_NFSD_SRQ_RUNS= RPCRDMA_NFSD_FAULT=0 RPCRDMA_NFSD_RPCBIND=0 \
#     RPCRDMA_NFSD_FIO=0 scripts/nfs-server-stage.sh
set -uo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
cd "$ROOT" || exit 2
T0=$(date +%s)
say() { printf '==== nfs-server-stage [+%ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
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
	echo "nfs-server-stage: SKIPPED (RPCRDMA_SKIP_VM=1): the kernel NFS client never mounted rpcrdma-nfsd"
	exit 0
fi

# ---- 1. build -------------------------------------------------------------------------------
BIN=${RPCRDMA_NFSD_BIN:-}
log=$(mktemp)
json=$(mktemp)
trap 'rm -f "$json" "$log"' EXIT
if [ "$BIN" = kernel ]; then
	say "RPCRDMA_NFSD_BIN=kernel: no build; every part runs against the kernel's own nfsd"
elif [ -n "$BIN" ]; then
	[ -x "$BIN" ] || {
		banner "nfs-server-stage: FAILED: RPCRDMA_NFSD_BIN=$BIN is not an executable (exit 2)"
		exit 2
	}
	BIN=$(readlink -f "$BIN")
	say "using $BIN (RPCRDMA_NFSD_BIN)"
else
	say "cargo build --release -p rpcrdma-apps --features rdma --bin rpcrdma-nfsd --bin rpcrdma-perf"
	if ! cargo build --release -p rpcrdma-apps --features rdma --bin rpcrdma-nfsd --bin rpcrdma-perf \
		--message-format=json-render-diagnostics >"$json"; then
		banner "nfs-server-stage: FAILED: building rpcrdma-nfsd with --features rdma failed (exit 2)" \
			"It needs libibverbs-dev, librdmacm-dev and pkg-config (vendor/rdma-sys/README.md)." \
			"RPCRDMA_NFSD_BIN=kernel runs the stage against the kernel nfsd instead."
		exit 2
	fi
	BIN=$(sed -n 's/.*"executable":"\([^"]*rpcrdma-nfsd\)".*/\1/p' "$json" | tail -n 1)
	[ -n "$BIN" ] && [ -x "$BIN" ] || BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/rpcrdma-nfsd
	if [ ! -x "$BIN" ]; then
		banner "nfs-server-stage: FAILED: cargo built no rpcrdma-nfsd executable (exit 2)"
		exit 2
	fi
	BIN=$(readlink -f "$BIN")
	say "built $BIN"
fi

# ---- 2. the VM ------------------------------------------------------------------------------
# shellcheck source=scripts/vm/lib.sh
# The reply comparison of part `cache` (scripts/vm/nfs-cache.sh) runs rpcrdma-nfs3-compare in
# the VM against the kernel nfsd and ours: built here unless RPCRDMA_NFS3_COMPARE_BIN names it.
if [ "${RPCRDMA_NFSD_CACHE:-1}" = 1 ] && [ -z "${RPCRDMA_NFS3_COMPARE_BIN:-}" ]; then
	say "cargo build --release -p rpcrdma-apps --features rdma --bin rpcrdma-nfs3-compare"
	if ! cargo build --release -p rpcrdma-apps --features rdma --bin rpcrdma-nfs3-compare \
		--message-format=json-render-diagnostics >"$json"; then
		banner "nfs-server-stage: FAILED: building rpcrdma-nfs3-compare with --features rdma failed (exit 2)"
		exit 2
	fi
	cmp=$(sed -n 's/.*"executable":"\([^"]*rpcrdma-nfs3-compare\)".*/\1/p' "$json" | tail -n 1)
	[ -n "$cmp" ] && [ -x "$cmp" ] || cmp=${CARGO_TARGET_DIR:-$ROOT/target}/release/rpcrdma-nfs3-compare
	RPCRDMA_NFS3_COMPARE_BIN=$(readlink -f "$cmp")
	export RPCRDMA_NFS3_COMPARE_BIN
fi
if [ -n "${RPCRDMA_NFS3_COMPARE_BIN:-}" ]; then
	case "$RPCRDMA_NFS3_COMPARE_BIN" in
	"$(readlink -f "${RPCRDMA_VM_SHARE-$PWD}")"/*) ;;
	*) export RPCRDMA_VM_FILES="${RPCRDMA_VM_FILES:-} $RPCRDMA_NFS3_COMPARE_BIN" ;;
	esac
fi

. "$ROOT/scripts/vm/lib.sh"
# shellcheck disable=SC2034 # read by vm_log in lib.sh
VM_TAG=nfs-server-stage
if ! vm_is_ready; then
	say "building the VM (scripts/vm/setup.sh)"
	if ! "$ROOT/scripts/vm/setup.sh"; then
		banner "nfs-server-stage: FAILED: the VM could not be built (exit 125)." \
			"This is an outside failure (see the messages above), NOT a pass: the kernel client" \
			"never mounted the server. RPCRDMA_SKIP_VM=1 skips the stage deliberately."
		exit 125
	fi
fi
if [ "$BIN" != kernel ]; then
	SHARE=${RPCRDMA_VM_SHARE-$PWD}
	[ -z "$SHARE" ] || SHARE=$(readlink -f "$SHARE")
	case "$BIN" in
	"$SHARE"/*) ;;
	*) export RPCRDMA_VM_FILES="${RPCRDMA_VM_FILES:-} $BIN" ;; # not visible over 9p: copy it in
	esac
	# part quickstart: rpcrdma-perf beside rpcrdma-nfsd (the page puts that directory on PATH)
	if [ -x "$(dirname "$BIN")/rpcrdma-perf" ]; then
		case "$BIN" in
		"$SHARE"/*) ;;
		*) export RPCRDMA_VM_FILES="${RPCRDMA_VM_FILES:-} $(dirname "$BIN")/rpcrdma-perf" ;;
		esac
	fi
	# Shared libraries the binary needs that the guest image lacks: bring the host's.
	extra=$(ldd "$BIN" 2>/dev/null | awk '/=> \//{print $3}' | while read -r l; do
		[ -e "$VM_CACHE/initramfs/usr/lib/x86_64-linux-gnu/$(basename "$l")" ] || echo "$l"
	done)
	if [ -n "$extra" ]; then
		RPCRDMA_VM_LIBS="${RPCRDMA_VM_LIBS:-} $(tr '\n' ' ' <<<"$extra")"
		export RPCRDMA_VM_LIBS
	fi
fi
# pjdfstest (crates.io), built once into the VM cache; copied into the VM
PJD_RUNS=${RPCRDMA_NFSD_PJDFSTEST-kernel memory dir}
PJD41_RUNS=${RPCRDMA_NFSD_PJDFSTEST41-}
PJD_OUT=${RPCRDMA_PJDFSTEST_OUT:-${CARGO_TARGET_DIR:-$ROOT/target}/pjdfstest}
pjd_unbuilt=0
if [ -n "$PJD_RUNS$PJD41_RUNS" ]; then
	if PJD=$("$ROOT/scripts/vm/pjdfstest-build.sh"); then
		export RPCRDMA_PJDFSTEST_BIN=$PJD
		export RPCRDMA_VM_FILES="${RPCRDMA_VM_FILES:-} $PJD"
		say "pjdfstest: $PJD"
	else
		pjd_unbuilt=1 PJD_RUNS='' PJD41_RUNS=''
		export RPCRDMA_NFSD_PJDFSTEST='' RPCRDMA_NFSD_PJDFSTEST41=''
		say "pjdfstest could not be built: its parts do not run (the stage cannot pass)"
	fi
fi
# part nlm's byte-range checks: scripts/vm/lockf.c (fcntl locks; the guest has no tool that
# takes them), built static here into the VM cache and copied into the VM; without gcc or a
# static libc the part says SKIP for them
if [ "$BIN" != kernel ] && [ -n "${RPCRDMA_NFSD_NLM-siw}" ]; then
	LOCKF=$VM_CACHE/lockf/lockf
	mkdir -p "$VM_CACHE/lockf"
	if out=$(gcc -O2 -static -Wall -o "$LOCKF.new" "$ROOT/scripts/vm/lockf.c" 2>&1) && mv -f "$LOCKF.new" "$LOCKF"; then
		export RPCRDMA_LOCKF_BIN=$LOCKF
		export RPCRDMA_VM_FILES="${RPCRDMA_VM_FILES:-} $LOCKF"
		say "lockf: $LOCKF"
	else
		unset RPCRDMA_LOCKF_BIN
		say "scripts/vm/lockf.c not built (gcc -O2 -static: $(head -n 3 <<<"$out" | tr '\n' ' ')): part nlm skips its byte-range checks"
	fi
fi
export RPCRDMA_VM_TIMEOUT=${RPCRDMA_VM_TIMEOUT:-1800}
export RPCRDMA_VM_MEM=${RPCRDMA_VM_MEM:-3072}
say "scripts/vm/run-in-vm.sh scripts/vm/nfs-server.sh $BIN"
# pjdfstest's per-case lines ("pjd ...") go to the log only: the table below sums them up
"$ROOT/scripts/vm/run-in-vm.sh" "$ROOT/scripts/vm/nfs-server.sh" "$BIN" 2>&1 | tee "$log" |
	grep --line-buffered -v -E '^pjd(41)?(-why)? '
rc=${PIPESTATUS[0]}

# ---- 3. summary -----------------------------------------------------------------------------
# The guest prints "counters P: ...", "client P: rsize=...", "## nfs-server P: PASS|FAIL ... —
# workload: N passed, N failed", "ratio JOB METRIC kernel=.. ours=.. ratio=.." and finally
# "nfs-server: N passed, N failed".
declare -A cnt=() cli=() verdict=()
ratios=() ratios41=() final=''
while IFS= read -r line; do
	case "$line" in
	"counters "*) cnt[${line%%:*}]=${line#*: } ;;
	"client "*": rsize="*) cli[${line%%:*}]=${line#*: } ;;
	"## nfs-server "*)
		r=${line#"## nfs-server "}
		verdict[${r%%:*}]=${r#*: }
		;;
	"ratio "*) ratios+=("${line#ratio }") ;;
	"ratio41 "*) ratios41+=("${line#ratio41 }") ;;
	"nfs-server: "*) final=$line ;;
	esac
done <"$log"
echo
echo "==== nfs-server-stage: the Linux NFSv3 client (proto=rdma) against ${BIN##*/}, per device x backend"
missing=0
srq_parts=
if [ "$BIN" != kernel ]; then
	for d in ${RPCRDMA_NFSD_SRQ_RUNS-rxe siw}; do srq_parts="$srq_parts srq/$d"; done
fi
pjd_parts=
for l in $PJD_RUNS; do pjd_parts="$pjd_parts pjdfstest/$l"; done
for l in $PJD41_RUNS; do pjd_parts="$pjd_parts pjdfstest41/$l"; done
# shellcheck disable=SC2086 # the part lists, split into words on purpose
fault_parts=
[ "${RPCRDMA_NFSD_FAULT:-1}" != 1 ] || for d in ${RPCRDMA_NFSD_FAULT_RUNS-rxe siw iwarp}; do fault_parts="$fault_parts fault/$d"; done
v41_parts=
if [ "$BIN" != kernel ]; then
	for r in ${RPCRDMA_NFSD_V41-rxe/memory siw/dir}; do v41_parts="$v41_parts v41/$r"; done
	for d in ${RPCRDMA_NFSD_V41_FAULT-rxe siw}; do v41_parts="$v41_parts v41fault/$d"; done
	[ "${RPCRDMA_NFSD_V41_DELEG:-1}" != 1 ] || v41_parts="$v41_parts v41/deleg"
	for d in ${RPCRDMA_NFSD_NLM-siw}; do v41_parts="$v41_parts nlm/$d"; done
	for d in ${RPCRDMA_NFSD_NLM_RESTART-siw}; do v41_parts="$v41_parts nlm-restart/$d"; done
fi
for p in ${RPCRDMA_NFSD_RUNS-rxe/memory rxe/dir siw/memory iwarp/memory} $srq_parts $fault_parts $v41_parts $pjd_parts exports acl cache fio fio41 meta; do
	[ "$p" = cache ] && [ "${RPCRDMA_NFSD_CACHE:-1}" != 1 ] && continue
	# the user-space iWARP provider's parts are ours only (nfs-server.sh skips them for the kernel)
	[ "$BIN" = kernel ] && case $p in iwarp/* | fault/iwarp) continue ;; esac
	[ "$p" = meta ] && [ -z "${RPCRDMA_NFSD_META-rxe siw}" ] && continue
	[ "$p" = fio ] && [ "${RPCRDMA_NFSD_FIO:-1}" != 1 ] && continue
	[ "$p" = fio41 ] && [ "${RPCRDMA_NFSD_FIO41:-0}" != 1 ] && continue
	case $p in
	srq/*) dev="$p (memory, --srq ${RPCRDMA_NFSD_SRQ_DEPTH:-128})" ;;
	pjdfstest/kernel) dev="$p (rxe, tmpfs, no_root_squash)" ;;
	pjdfstest/*) dev="$p (rxe, ${p#*/} backend)" ;;
	pjdfstest41/kernel) dev="$p (NFSv4.2, rxe, tmpfs)" ;;
	pjdfstest41/*) dev="$p (NFSv4.2, rxe, ${p#*/}, --nfs4)" ;;
	exports) dev="exports (rxe, dir backend)" ;;
	acl) dev="acl (rxe, POSIX ACLs, NFSACL)" ;;
	cache) dev="cache (rxe, replies and call counts)" ;;
	rxe/*) dev="$p (rxe0 loopback)" ;;
	siw/*) dev="$p (siw0 -> siw1, netns peer)" ;;
	iwarp/*) dev="$p (siw0 -> our iWARP provider, netns peer)" ;;
	fault/rxe) dev="fault/rxe (memory, --drop-every ${RPCRDMA_NFSD_DROP_EVERY:-50})" ;;
	fault/siw) dev="fault/siw (memory, --drop-every ${RPCRDMA_NFSD_FAULT_SIW_EVERY:-10})" ;;
	fault/iwarp) dev="fault/iwarp (memory, --drop-every ${RPCRDMA_NFSD_FAULT_SIW_EVERY:-10})" ;;
	v41/deleg) dev="v41/deleg (siw, two clients: 4.2, 4.1; recall, locks)" ;;
	v41fault/*) dev="$p (NFSv4.1, dir, drops, restart)" ;;
	nlm/*) dev="$p (NFSv3 locks, NLM, netns peer)" ;;
	nlm-restart/*) dev="$p (reclaim, reboot)" ;;
	v41/*) dev="$p (NFSv4.1, 4.2, --nfs4)" ;;
	fio) dev="fio side by side (rxe, memory)" ;;
	fio41) dev="fio41 side by side (NFSv4.1, rxe, memory)" ;;
	meta) dev="meta (metadata workload, ours / kernel)" ;;
	esac
	if [ -n "${verdict[$p]:-}" ]; then
		printf '  %-40s %s\n' "$dev" "${verdict[$p]}"
	else
		printf '  %-40s %s\n' "$dev" "NO VERDICT: the part did not finish"
		missing=1
	fi
	[ -z "${cnt["counters $p"]:-}" ] || printf '  %-40s   server: %s\n' "" "${cnt["counters $p"]}"
	[ -z "${cli["client $p"]:-}" ] || printf '  %-40s   client: %s\n' "" "${cli["client $p"]}"
done
if [ "${#ratios[@]}" -gt 0 ]; then
	echo "  fio ratios (best of the rounds; IOPS/bandwidth: higher is better, latency: lower):"
	for r in "${ratios[@]}"; do printf '    %s\n' "$r"; done
fi
if [ "${#ratios41[@]}" -gt 0 ]; then
	echo "  fio ratios, NFSv4.1 (best of the rounds; IOPS/bandwidth: higher is better, latency: lower):"
	for r in "${ratios41[@]}"; do printf '    %s\n' "$r"; done
fi
[ -n "$final" ] && echo "  $final"
[ "$rc" -ne 0 ] || [ "$missing" -eq 0 ] || rc=1

# ---- 4. pjdfstest: the servers side by side, ours against the reference ----------------------
# pjd_table TAG RUNS KNOWN NAME VERS: the table of one NFS version ("TAG ..." lines of the log),
# saved as $PJD_OUT/resultsNAME.txt and tableNAME.txt; rc=1 on a NEW failure or a stale line
pjd_table() {
	local tag=$1 runs=$2 kf=$3 name=$4 vers=$5 known=(--known "$3") pjd_rc
	[ -n "$runs" ] || return 0
	if ! grep -q "^$tag " "$log"; then
		[ "$rc" -ne 0 ] || rc=1
		say "pjdfstest (NFSv$vers): no per-case results in the log"
		return 0
	fi
	mkdir -p "$PJD_OUT"
	grep -E "^$tag(-why)? " "$log" >"$PJD_OUT/results$name.txt"
	echo
	echo "==== nfs-server-stage: pjdfstest $("${RPCRDMA_PJDFSTEST_BIN}" --version 2>/dev/null | cut -d' ' -f2) on the NFSv$vers mount (rxe), as root:" \
		"the kernel nfsd against ${BIN##*/} (cases not ok everywhere; every case in $PJD_OUT/results$name.txt)"
	# kernel mode: "memory" and "dir" are the kernel nfsd again; no case may differ, none is listed
	[ "$BIN" != kernel ] || known=(--known /dev/null)
	"$ROOT/scripts/vm/pjdfstest-table.sh" --tag "$tag" "${known[@]}" "$PJD_OUT/results$name.txt" | tee "$PJD_OUT/table$name.txt"
	pjd_rc=${PIPESTATUS[0]}
	if [ "$pjd_rc" -ne 0 ] && [ "$rc" -eq 0 ]; then
		rc=1
		say "pjdfstest check (NFSv$vers) FAILED: a NEW failure or a stale line of ${kf#"$ROOT"/} (above)"
	fi
}
pjd_table pjd "$PJD_RUNS" "$ROOT/scripts/vm/pjdfstest-known.txt" '' 3
pjd_table pjd41 "$PJD41_RUNS" "$ROOT/scripts/vm/pjdfstest41-known.txt" 41 4.2
if [ "$pjd_unbuilt" = 1 ] && [ "$rc" -eq 0 ]; then
	banner "nfs-server-stage: pjdfstest could not be built (cargo install from crates.io failed, above): exit 125." \
		"An outside failure, NOT a pass; RPCRDMA_NFSD_PJDFSTEST= (empty) leaves the part out deliberately."
	exit 125
fi

case $rc in
0) say "PASSED: every part passed ($(($(date +%s) - T0)) s)" ;;
124) banner "nfs-server-stage: FAILED: the VM timed out (RPCRDMA_VM_TIMEOUT=${RPCRDMA_VM_TIMEOUT}s, exit 124)" ;;
125)
	banner "nfs-server-stage: FAILED: the VM could not be built or started (exit 125)." \
		"This is an outside failure (see the console tail above), NOT a pass: the kernel client" \
		"never mounted the server. RPCRDMA_SKIP_VM=1 skips the stage deliberately."
	;;
*) banner "nfs-server-stage: FAILED (exit $rc): a check failed or a part did not finish (FAIL lines above)" ;;
esac
exit "$rc"
