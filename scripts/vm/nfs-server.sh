#!/bin/bash
# scripts/vm/nfs-server.sh — guest payload (run INSIDE the VM by run-in-vm.sh): the Linux kernel
# NFS client (xprtrdma, NFSv3, proto=rdma) against our server rpcrdma-nfsd (issue 12).
#
#   scripts/vm/run-in-vm.sh scripts/vm/nfs-server.sh BINARY|kernel
#
# BINARY is rpcrdma-nfsd (built with --features rdma); `kernel` runs every part against the
# kernel's own nfsd instead (how the script is validated, and a reference for the numbers).
# Parts, in this order (each ends with "## nfs-server PART: PASS|FAIL ..."):
#   rxe/memory, rxe/dir, siw/memory, iwarp/memory   (RPCRDMA_NFSD_RUNS; siw/dir and iwarp/dir too
#       when asked: the dir backend is covered over rxe, the siw transport with the memory backend
#       and srq/siw)
#       server: rxe -> `rpcrdma-nfsd --bind 10.0.2.15` in the root netns (rxe0, loopback inside
#       rxe); siw -> `ip netns exec peer rpcrdma-nfsd --bind 10.0.3.2` (siw1), the client in the
#       root netns on siw0; iwarp (ours only) -> the same with `--provider iwarp`: our user-space
#       iWARP provider (MPA/DDP/RDMAP over a TCP socket on 10.0.3.2) serves, the kernel client's
#       siw0 connects to it as to any iWARP peer. Backends: memory; dir:/srv/nfsd-dir (a tmpfs). Then: the ready line,
#       mount -o vers=3,proto=rdma,port=P,mountport=M,mountproto=tcp,nolock, /proc/self/mountstats
#       must say "xprt: rdma", the workload (nfs-workload.sh full, over siw without ls-5000, with umount + mount + verify in
#       the middle), the client's view (mount options, xprtrdma chunk counters, NFSv3 calls per
#       procedure), SIGUSR1 -> the server's counters: chunks.read, chunks.write and chunks.reply
#       must be > 0 (replies.send_inv printed), umount, SIGTERM -> exit status 0.
#   srq/rxe, srq/siw   (RPCRDMA_NFSD_SRQ_RUNS, default "rxe siw"; ours only): the memory-backend
#       part again with `rpcrdma-nfsd --srq N` (RPCRDMA_NFSD_SRQ_DEPTH, default 128): the
#       connections take their receives from one shared receive queue; the same workload
#       without its longest check (nfs-workload.sh full --no-ls: no ls-5000; READ/WRITE with
#       chunks, READDIRPLUS through Reply chunks, parallel writers and fio with calls in flight
#       remain) and the same checks, plus the server's srq.depth counter = N (it ran on its SRQ).
#   fault/rxe, fault/siw, fault/iwarp   (RPCRDMA_NFSD_FAULT=1, RPCRDMA_NFSD_FAULT_RUNS, default
#       "rxe siw iwarp"; iwarp ours only):
#       memory backend, --drop-every N (rxe: RPCRDMA_NFSD_DROP_EVERY, default 50; siw and iwarp:
#       RPCRDMA_NFSD_FAULT_SIW_EVERY, default 10, with a shorter churn, RPCRDMA_NFSD_FAULT_SIW_CHURN,
#       default 60 iterations): nfs-workload.sh churn must see no error and end with the
#       reference tree; conn.dropped and drc.hits must be > 0; every deliberate drop costs exactly
#       one reconnection: conn.accepted = 1 (the mount) + conn.kicked, and the client's
#       mountstats "connects" equals conn.accepted.
#   v41/rxe/memory, v41/siw/dir, v41/deleg   (ours only; RPCRDMA_NFSD_V41, default
#       "rxe/memory siw/dir"; v41/deleg unless RPCRDMA_NFSD_V41_DELEG=0; nfs-v41.sh): the NFSv4.1 and
#       NFSv4.2 client against `rpcrdma-nfsd --nfs4` on port 20049: mounts (vers=4.1, and
#       negotiated: 4.2, with ALLOCATE, DEALLOCATE, SEEK, CLONE and COPY), workload, NFSv3 beside it, a mount point inside a dir: export listed and not crossed; two clients: delegation recall, flock conflicts, an NFSv3 write waiting for the recall (iwarp/memory, iwarp/dir and,
#       with RPCRDMA_NFSD_V41_DELEG_DEV=iwarp, v41/deleg against the server on our user-space
#       iWARP provider when asked).
#   v41/rxe/xfs, v41/siw/xfs   (ours only; in RPCRDMA_NFSD_V41 when asked; nfs-v41.sh): the
#       dir backend on an XFS image with reflink (a loop device in the guest): a 16 MiB file
#       cloned with cp --reflink=always on the vers=4.2 mount is the same and shares its extents
#       on the server's side (its XFS grew by far less than 16 MiB); CLONE without errors.
#   v41fault/rxe, v41fault/siw   (ours only; RPCRDMA_NFSD_V41_FAULT, default "rxe siw";
#       nfs-v41-fault.sh): the NFSv4.1 client through connections the server drops (slot replays,
#       BIND_CONN_TO_SESSION, one reconnection per drop, no operation run twice), then a server
#       restart in which the client reclaims its open files and its lock (a second client's lock
#       conflicts until it is released; the tree intact).
#   nlm/siw  (ours only; RPCRDMA_NFSD_NLM, default "siw", "iwarp" on request; empty: none;
#       nfs-nlm.sh): the NFSv3 client's file locks, mounted WITHOUT nolock, against our lock
#       manager (NLM v4 over TCP): the server (memory backend, default ports, registered with
#       rpcbind) runs in netns peer beside an rpcbind of its own (the client's lockd has the root
#       netns's); rpcinfo 10.0.3.2 shows 100021 v4 tcp at the ready line's nlm port; rpc.statd
#       in the root netns; two mounts of the export (vers=3,proto=rdma, the second nosharecache:
#       the client settles conflicts on one inode locally), local_lock=none; flock(1) between
#       them: LOCK_EX refuses B's -n -x and -n -s, B's flock -w 2 -x gives up (CANCEL: the server
#       forgets the request), LOCK_SH admits B's -s and refuses -x, a release admits B; a
#       blocking flock -x waits (nlm.waiting = 1) and gets the lock within
#       RPCRDMA_NFSD_NLM_GRANT_MAX s (10) of the release (the server's NLMPROC4_GRANTED, not the
#       client's 30 s re-poll); fcntl byte ranges between them (scripts/vm/lockf.c,
#       RPCRDMA_LOCKF_BIN; SKIP without it): overlapping ranges refused, adjacent and to-EOF ones
#       and shared reads granted, F_GETLK reports the holder's range, a partial unlock splits
#       it, a blocking F_SETLKW is granted soon after the release (GRANTED); with --nfs4, beside
#       an NFSv4.1 mount's read delegation, a shared flock granted at once and an exclusive one
#       recalling it (its LOCK unanswered until lockd sends it again); counters
#       nlm.lock_granted, lock_denied, lock_blocked, grants_sent > 0, grants_refused =
#       grants_failed = 0, nlm.locks = nlm.waiting = 0 after the umounts; exit status 0 after
#       SIGTERM and the registrations gone; the peer's rpcbind, the statd and the client's lockd
#       gone after the part. The server's state directory (--v4-state-dir) is a fresh
#       /srv/nlm-state; rpcinfo also shows its status monitor (100024 v1 udp and tcp).
#   nlm-restart/siw  (ours only; RPCRDMA_NFSD_NLM_RESTART, default "siw", "iwarp" on request;
#       empty: none; nfs-nlm.sh): the same setup with the dir backend and --nlm-grace
#       RPCRDMA_NFSD_NLM_GRACE (15 s). Restart: A holds flock -x (nlm-hosts in the state
#       directory lists 10.0.3.1 and the client's name); SIGTERM (exit status 0), the server and
#       its rpcbind started again; the log shows SM_NOTIFY sent to 10.0.3.1 (state number odd,
#       larger); the client's statd and lockd reclaim: nlm.locks = 1 within the grace period;
#       B's flock -n -x started in it returns only after it, refused; refused again after it;
#       A releases, B gets the lock. Client reboot: A holds flock -x; SM_NOTIFY over UDP from
#       10.0.3.1 naming another host releases nothing; `sm-notify -d -f -P DIR` with statd's
#       record of the server (mon_name = the client's name) releases A's lock on the server
#       (nlm.locks = 0, "a client rebooted") and B gets it while A's process still holds it;
#       so does SM_NOTIFY naming the address 10.0.3.1; nlm.locks = nlm.waiting = 0 after the
#       umounts, exit status 0, registrations gone, cleanup as nlm/siw.
#   rpcbind  (ours only, RPCRDMA_NFSD_RPCBIND=1): rxe, memory backend, default ports, registered
#       with the guest's rpcbind (rpcinfo shows 100003 v3 rdma and 100005 v3 tcp); a plain
#       `mount -o vers=3,proto=rdma,nolock IP:/export` works; SIGTERM unregisters both.
#   pjdfstest/kernel, pjdfstest/memory, pjdfstest/dir   (RPCRDMA_NFSD_PJDFSTEST, default
#       "kernel memory dir"; nfs-pjdfstest.sh): the POSIX suite pjdfstest as root on the mount (rxe)
#       of the kernel nfsd (tmpfs, no_root_squash: the reference) and of ours with each backend;
#       one "pjd LABEL RESULT CASE" line per case, compared on the host (pjdfstest-table.sh).
#   pjdfstest41/kernel, pjdfstest41/memory, pjdfstest41/dir   (RPCRDMA_NFSD_PJDFSTEST41, default
#       empty: by hand, e.g. "kernel memory dir"): the same over NFSv4.2 (vers=4.2,proto=rdma; the
#       kernel nfsd serving NFSv4.x, ours with --nfs4), with the posix_fallocate cases besides
#       (pjdfstest42.toml: fallocate sends ALLOCATE); "pjd41 LABEL RESULT CASE" lines.
#   exports  (RPCRDMA_NFSD_EXPORTS=auto; nfs-exports.sh): export options and mode bits enforced
#       by the server (root_squash, ro, a client list, a non-root user); runs against the kernel
#       nfsd, and against ours when `rpcrdma-nfsd --help` lists --exports (SKIP otherwise).
#   acl      (RPCRDMA_NFSD_ACL=1; nfs-acl.sh): POSIX ACLs through NFSACL (program 100227 v3,
#       GETACL / SETACL) over rxe, mounted without noacl: setfacl / getfacl -n of a named user,
#       the mask after chmod, what uid 1000 and 1001 may read, a non-owner's setfacl refused,
#       a directory's default ACL inherited by a new file and directory, setfacl -b; the same
#       sequence against the kernel nfsd (tmpfs, the reference) and ours (memory, dir backends;
#       dir: the ACL also seen by getfacl on /srv/nfsd-dir), each step's outputs equal to the
#       kernel nfsd's; in `kernel` mode the kernel nfsd against itself (its /srv/nfsd-dir export).
#   cache    (RPCRDMA_NFSD_CACHE=1; nfs-cache.sh): the replies of the kernel nfsd and of ours
#       (each backend) to one sequence of NFSv3 calls compared field by field
#       (rpcrdma-nfs3-compare, RPCRDMA_NFS3_COMPARE_BIN; a difference in a field that must match
#       fails the part), and the client's calls per procedure in the phases of a metadata
#       workload (untar, diff -r, find | xargs stat, again, again after a remount) against the
#       kernel nfsd and ours, with the ratios.
#   fio      (RPCRDMA_NFSD_FIO=1): over rxe, the same fio jobs (nfs-fio.sh: 1 MiB sequential
#       write/read bandwidth, 4 KiB random write/read IOPS + clat p50/p99, direct=1) against the
#       kernel nfsd (tmpfs export, /mnt/knfs) and against rpcrdma-nfsd (memory backend,
#       /mnt/onfs), both mounted at once, each job run on one then the other, in
#       RPCRDMA_NFSD_FIO_ROUNDS rounds (default 2, order swapped each round); the best of the
#       rounds is compared, one ratio ours/kernel per row ("ratio ..." lines and a table). With
#       two rounds of 5 s the kernel against itself came out within 0.92-1.08 (p99 latency:
#       0.74-1.07, the noisiest row).
#   fio41    (RPCRDMA_NFSD_FIO41=1; default 0: by hand): part fio over NFSv4.1 (vers=4.1 mounts of
#       the kernel nfsd serving NFSv4.x and of ours with --nfs4), "ratio41 ..." lines.
#   meta     (RPCRDMA_NFSD_META, default "rxe siw"; empty: none): nfs-meta.sh's metadata workload
#       (a tree of RPCRDMA_NFSD_META_DIRS x RPCRDMA_NFSD_META_FILES small files, default 10 x 30:
#       untar, diff, stat, rename, walk after remount, rm -rf) against the kernel nfsd and ours in
#       turn, both backends (and over rxe beside a CPU hog with RPCRDMA_NFSD_META_HOG=cpus); the
#       ours / kernel time table and the client's GETATTR / LOOKUP / READ counts per phase against
#       both; fails when a run fails its checks or (RPCRDMA_NFSD_META_COUNTS=1) a count is more
#       than 10 % (+ 5 calls) off the kernel nfsd's.
# With pjdfstest41 or fio41 asked for, the kernel nfsd of the boot serves NFSv4.x besides NFSv3
#   (KNFSD_V4=1, knfsd.sh), for every part that starts it.
# In `kernel` mode: the kernel nfsd of the root netns (rxe) and one in netns peer (siw) export
#   tmpfs directories (memory -> /srv/kexport, dir -> /srv/nfsd-dir); the server-side counters
#   are svc_rdma's (rdma_stat_read / rdma_stat_write; reply chunks are taken from the client's
#   xprtrdma counters), the fault part runs the churn workload with no faults (the kernel nfsd
#   cannot drop connections on demand) and the fio part compares the kernel with itself (the
#   ratios show the noise of the VM).
# Our server's export: `--export /export`, or, when it has export options, `--export
# '/export:*(rw,no_root_squash)'` (every part but `exports` expects root to act as root).
# Ports: the kernel nfsd uses rdma 20049 + mountd 20048 (tcp); ours uses RPCRDMA_NFSD_PORT
# (20051) and RPCRDMA_NFSD_MOUNT_PORT (20050) so both can run in the same boot, with
# --no-rpcbind (the mount names both ports). The kernel nfsd's max_block_size is set to 1 MiB
# (its default is 512 KiB on a 2 GiB guest) so that both servers offer the client rsize = wsize
# = 1 MiB.
#
# Output: PASS/FAIL lines per check, "workload: N passed, N failed" per workload, lines
#   counters PART: name=value ...        client PART: rsize=.. wsize=.. read_chunks=.. ...
#   ratio JOB METRIC kernel=X ours=Y ratio=Y/X
# and "nfs-server: N passed, N failed" (parts); exit 1 when a part failed, 2 usage.
# Knobs: RPCRDMA_NFSD_RUNS, RPCRDMA_NFSD_PJDFSTEST, RPCRDMA_NFSD_PJDFSTEST41, RPCRDMA_NFSD_FIO41, RPCRDMA_PJDFSTEST_BIN, RPCRDMA_PJDFSTEST_TIMEOUT,
# RPCRDMA_NFSD_EXPORTS, RPCRDMA_NFSD_ACL (1), RPCRDMA_NFSD_NLM, RPCRDMA_NFSD_NLM_GRANT_MAX, RPCRDMA_LOCKF_BIN, RPCRDMA_NFSD_NLM_RESTART,
# RPCRDMA_NFSD_NLM_GRACE, RPCRDMA_NFSD_SRQ_RUNS, RPCRDMA_NFSD_SRQ_DEPTH, RPCRDMA_NFSD_FAULT (1), RPCRDMA_NFSD_DROP_EVERY (50),
# RPCRDMA_NFSD_FAULT_RUNS (rxe siw), RPCRDMA_NFSD_FAULT_SIW_EVERY (10), RPCRDMA_NFSD_FAULT_SIW_CHURN (60),
# RPCRDMA_NFSD_FAULT_HOG (0; N or "cpus": busy loops in the guest beside the fault parts' churn),
# RPCRDMA_NFSD_FIO (1), RPCRDMA_NFSD_FIO_ROUNDS (2), RPCRDMA_NFSD_ARGS (more server arguments), RPCRDMA_NFSD_RUN_TIMEOUT
# (per workload, s, default 300), RPCRDMA_NFSD_READY_TIMEOUT (30 s), RPCRDMA_NFS_CHURN_N,
# RPCRDMA_NFS_FIO_RUNTIME, RPCRDMA_NFS_FIO_SIZE (nfs-workload.sh / nfs-fio.sh).
set -u
if [ $# -ne 1 ]; then
	echo "usage: nfs-server.sh BINARY|kernel" >&2
	exit 2
fi
BIN=$1
HERE=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
RUNS=${RPCRDMA_NFSD_RUNS-rxe/memory rxe/dir siw/memory iwarp/memory}
SRQ_RUNS=${RPCRDMA_NFSD_SRQ_RUNS-rxe siw}
SRQ_DEPTH=${RPCRDMA_NFSD_SRQ_DEPTH:-128}
PORT=${RPCRDMA_NFSD_PORT:-20051}
MPORT=${RPCRDMA_NFSD_MOUNT_PORT:-20050}
RUN_TIMEOUT=${RPCRDMA_NFSD_RUN_TIMEOUT:-300}
READY_TIMEOUT=${RPCRDMA_NFSD_READY_TIMEOUT:-30}
KEXPORT=/srv/kexport NFSD_DIR=/srv/nfsd-dir MNT=/mnt/nfs
LOGS=/run/nfs-server
PJD_RUNS=${RPCRDMA_NFSD_PJDFSTEST-kernel memory dir}
PJD41_RUNS=${RPCRDMA_NFSD_PJDFSTEST41-}
FIO41=${RPCRDMA_NFSD_FIO41:-0}
# the NFSv4.1 references need a kernel nfsd serving NFSv4.x (knfsd.sh; fixed when it starts)
KNFSD_V4=0
[ -z "$PJD41_RUNS" ] && [ "$FIO41" != 1 ] || KNFSD_V4=1
KIND=ours
[ "$BIN" = kernel ] && KIND=kernel
# shellcheck source=scripts/vm/lib.sh
. "$HERE/lib.sh"
# shellcheck source=scripts/vm/knfsd.sh
. "$HERE/knfsd.sh"
# shellcheck source=scripts/vm/nfs-pjdfstest.sh
. "$HERE/nfs-pjdfstest.sh"
# shellcheck source=scripts/vm/nfs-exports.sh
. "$HERE/nfs-exports.sh"
# shellcheck source=scripts/vm/nfs-acl.sh
. "$HERE/nfs-acl.sh"
# shellcheck source=scripts/vm/nfs-cache.sh
. "$HERE/nfs-cache.sh"
# shellcheck source=scripts/vm/quickstart.sh
. "$HERE/quickstart.sh"
# shellcheck source=scripts/vm/nfs-v41.sh
. "$HERE/nfs-v41.sh"
# shellcheck source=scripts/vm/nfs-v41-fault.sh
. "$HERE/nfs-v41-fault.sh"
# shellcheck source=scripts/vm/nfs-nlm.sh
. "$HERE/nfs-nlm.sh"
mkdir -p "$LOGS" "$MNT" "$KEXPORT" "$NFSD_DIR"
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd # process substitution (the guest has no udev)
NPARTS=0 NPFAIL=0 SUMMARY=() PFAIL=0 PNOTES=

up() {
	local u _
	read -r u _ </proc/uptime
	echo "$u"
}
say() { echo "==== nfs-server [uptime $(up)s] $*"; }
now_ms() { date +%s%3N; }
pass() { echo "PASS $1${2:+: $2}"; }
failc() { # NAME REASON: a failed check of the current part
	echo "FAIL $1: $2"
	PFAIL=$((PFAIL + 1))
}
part_begin() {
	PART=$1 PFAIL=0 PNOTES='' PT0=$(now_ms)
	say "part $PART: $2"
}
part_end() {
	local t v=PASS
	t=$(($(now_ms) - PT0))
	[ "$PFAIL" -eq 0 ] || v="FAIL ($PFAIL failed)"
	echo "## nfs-server $PART: $v in $((t / 1000)).$((t % 1000 / 100)) s${PNOTES:+ — $PNOTES}"
	SUMMARY+=("$(printf '%-11s %s in %d s' "$PART" "$v" $((t / 1000)))")
	NPARTS=$((NPARTS + 1))
	[ "$PFAIL" -eq 0 ] || NPFAIL=$((NPFAIL + 1))
}

# ---- the kernel side: modules, exports, kernel nfsd per namespace (knfsd.sh) --------------------
say "setup: modules, exports ($KIND server)"
if ! knfsd_setup; then
	echo "nfs-server: cannot load nfsd / rpcrdma / nfsv3 or set up the exports"
	exit 1
fi

# ---- our server / the kernel's, behind one interface --------------------------------------------
# The export of ours: every part acts as root and expects root to stay root (the workload's
# chown, pjdfstest), as with the kernel nfsd's no_root_squash exports. With the export options
# (`rpcrdma-nfsd --help` lists --exports) that must be asked for, since the default squashes root;
# before them the server never squashed.
HAS_EXPORTS=0
if [ "$KIND" = ours ] && "$BIN" --help 2>&1 | grep -q -- --exports; then HAS_EXPORTS=1; fi
if [ "$HAS_EXPORTS" = 1 ]; then EXPORT_ROOT=(--export '/export:*(rw,no_root_squash)'); else EXPORT_ROOT=(--export /export); fi
# srv_start DEV BACKEND [EXTRA SERVER ARGS]: sets SRV_ADDR SRV_PORT SRV_MPORT SRV_PATH SRV_PID
# SRV_LOG. Read: SRV_EXPORT_SET (non-empty: ours gets the export flags of the array SRV_EXPORT
# instead of EXPORT_ROOT), SRV_KEEP (non-empty: the exported directory's contents stay)
SRV_PID='' SRV_LOG=''
srv_start() {
	local dev=$1 be=$2 ns=() arg t0 line provider=rdma
	shift 2
	case $dev in
	rxe) SRV_ADDR=10.0.2.15 ;;
	siw | iwarp)
		SRV_ADDR=10.0.3.2
		# iwarp: our user-space iWARP provider (a TCP socket on 10.0.3.2, no verbs device) serves
		# the kernel client, whose siw0 connects to it as to any iWARP peer
		[ "$dev" = siw ] || provider=iwarp
		# `ip netns exec` gives the server a copy of the mount namespace: without the NFS mounts
		# of the moment (their private copies detached, no helper run), or the server's exit
		# would drop a mount's last reference once the client unmounted it, and that unmount
		# (DESTROY_SESSION to the exiting server itself) would never finish
		ns=(ip netns exec peer sh -c 'umount -a -i -l -t nfs,nfs4 2>/dev/null; exec "$@"' sh)
		;;
	esac
	SRV_LOG=$LOGS/server-${PART//\//-}.log
	: >"$SRV_LOG"
	if [ "$KIND" = kernel ]; then
		SRV_PORT=20049 SRV_MPORT=20048 SRV_PID=''
		if [ "$be" = memory ]; then SRV_PATH=$KEXPORT; else SRV_PATH=$NFSD_DIR; fi
		[ -n "${SRV_KEEP:-}" ] || find "$SRV_PATH" -mindepth 1 -delete
		local kns=root
		[ "$dev" = siw ] && kns=peer
		knfsd_start "$kns" || return 1
		KSTAT0=$(kstats)
		return 0
	fi
	SRV_PORT=$PORT SRV_MPORT=$MPORT SRV_PATH=/export
	local exp=("${EXPORT_ROOT[@]}")
	[ -z "${SRV_EXPORT_SET:-}" ] || exp=("${SRV_EXPORT[@]}")
	if [ "$be" = memory ]; then arg=memory; else
		[ -n "${SRV_KEEP:-}" ] || find "$NFSD_DIR" -mindepth 1 -delete
		arg=dir:$NFSD_DIR
	fi
	t0=$(now_ms)
	# shellcheck disable=SC2086 # RPCRDMA_NFSD_ARGS: more arguments, split on purpose
	"${ns[@]}" "$BIN" --provider "$provider" --bind "$SRV_ADDR" --port "$PORT" --mount-port "$MPORT" "${exp[@]}" \
		--backend "$arg" --no-rpcbind ${RPCRDMA_NFSD_ARGS:-} "$@" >"$SRV_LOG" 2>&1 &
	SRV_PID=$!
	srv_ready "$t0" || return 1
	echo "server: $line ($(($(now_ms) - t0)) ms)"
	# the ports it really uses
	arg=$(sed -n 's/.* nfs=[^ ]*:\([0-9]*\).*/\1/p' <<<"$line")
	[ -n "$arg" ] && SRV_PORT=$arg
	arg=$(sed -n 's/.* mount=[^ ]*:\([0-9]*\).*/\1/p' <<<"$line")
	[ -n "$arg" ] && SRV_MPORT=$arg
	return 0
}

# srv_ready T0: waits for the ready line of the server SRV_PID (log SRV_LOG), started at T0
# (ms), at most READY_TIMEOUT s; sets `line` to it; 1 (and says why) when the server exited or
# the time ran out
srv_ready() {
	while :; do
		line=$(grep -m1 '^rpcrdma-nfsd: ready ' "$SRV_LOG")
		[ -n "$line" ] && return 0
		if ! kill -0 "$SRV_PID" 2>/dev/null; then
			wait "$SRV_PID"
			echo "server exited with status $? before its ready line"
			SRV_PID=''
			return 1
		fi
		if [ $(($(now_ms) - $1)) -gt $((READY_TIMEOUT * 1000)) ]; then
			echo "no ready line within $READY_TIMEOUT s"
			return 1
		fi
		sleep 0.2
	done
}

# srv_stop: SIGTERM, the exit status must be 0 within 20 s (ours); nothing for the kernel nfsd
srv_stop() {
	local i st
	[ -n "$SRV_PID" ] || return 0
	kill -TERM "$SRV_PID" 2>/dev/null
	for ((i = 0; i < 100; i++)); do
		kill -0 "$SRV_PID" 2>/dev/null || break
		sleep 0.2
	done
	if kill -0 "$SRV_PID" 2>/dev/null; then
		kill -KILL "$SRV_PID"
		wait "$SRV_PID" 2>/dev/null
		failc server-exit "still running 20 s after SIGTERM (killed)"
	else
		wait "$SRV_PID"
		st=$?
		if [ "$st" -eq 0 ]; then pass server-exit "exit status 0 after SIGTERM"; else failc server-exit "exit status $st after SIGTERM"; fi
	fi
	SRV_PID=''
}

# kstats: svc_rdma's global counters and the nfsd's (root netns) call count, one line
kstats() {
	local f v out=''
	for f in read write recv; do
		v=$(cat "/proc/sys/sunrpc/svc_rdma/rdma_stat_$f" 2>/dev/null || echo 0)
		out="$out $f=$v"
	done
	echo "$out"
}
kstat_get() { sed -n "s/.* $2=\([0-9]*\).*/\1/p" <<<" $1"; }

# counters: fills CNT[name] from the server (SIGUSR1 -> "nfsd-stat NAME VALUE" lines) or, for the
# kernel, from svc_rdma's counters (deltas since srv_start) and the client's xprtrdma counters
declare -A CNT=()
counters() {
	local n0 n1 n2 i name value
	CNT=()
	if [ "$KIND" = kernel ]; then
		local k1
		k1=$(kstats)
		for name in read write recv; do
			CNT[svc_rdma.$name]=$(($(kstat_get "$k1" "$name") - $(kstat_get "$KSTAT0" "$name")))
		done
		CNT[chunks.read]=${CNT[svc_rdma.read]}
		CNT[chunks.write]=${CNT[svc_rdma.write]}
		CNT[chunks.reply]=${CLI[reply_chunks]:-0}
		CNT[calls.total]=${CNT[svc_rdma.recv]}
		return 0
	fi
	[ -n "$SRV_PID" ] || return 1
	n0=$(wc -l <"$SRV_LOG")
	kill -USR1 "$SRV_PID" || return 1
	# wait until the block of nfsd-stat lines stopped growing
	n1=0
	for ((i = 0; i < 50; i++)); do
		sleep 0.2
		n2=$(tail -n +$((n0 + 1)) "$SRV_LOG" | grep -c '^nfsd-stat ')
		[ "$n2" -gt 0 ] && [ "$n2" -eq "$n1" ] && break
		n1=$n2
	done
	while read -r _ name value; do CNT[$name]=$value; done < <(tail -n +$((n0 + 1)) "$SRV_LOG" | grep '^nfsd-stat ')
	[ "${#CNT[@]}" -gt 0 ]
}
show_counters() {
	local k line=''
	for k in calls.total calls.READ calls.WRITE calls.READDIRPLUS chunks.read chunks.write chunks.reply chunks.pz \
		read.ddp read.zero_copy read.inline replies.send_inv credits.granted drc.hits drc.inprogress conn.accepted conn.kicked conn.dropped svc_rdma.read \
		svc_rdma.write svc_rdma.recv srq.depth srq.held_max srq.low_water; do
		[ -n "${CNT[$k]:-}" ] && line="$line $k=${CNT[$k]}"
	done
	for k in "${!CNT[@]}"; do case $k in errors.* | nfs4_*) line="$line $k=${CNT[$k]}" ;; esac done
	echo "counters $PART:$line"
}
cnt_positive() { # NAME...: each counter > 0
	local k
	for k in "$@"; do
		if [ "${CNT[$k]:-0}" -gt 0 ] 2>/dev/null; then pass "counter-$k" "${CNT[$k]}"; else failc "counter-$k" "${CNT[$k]:-missing} (expected > 0)"; fi
	done
}

# ---- the client -----------------------------------------------------------------------------------
mount_cmd() { # DIR: the mount command line for the current server (NFSv3; NFSv4.x with MOUNT_VERS=4.1 or 4.2)
	if [ "${MOUNT_VERS:-3}" = 4.1 ] || [ "${MOUNT_VERS:-3}" = 4.2 ]; then
		echo "mount -t nfs -o vers=$MOUNT_VERS,proto=rdma,port=$SRV_PORT $SRV_ADDR:$SRV_PATH $1"
	else
		echo "mount -t nfs -o vers=3,proto=rdma,port=$SRV_PORT,mountport=$SRV_MPORT,mountproto=tcp,nolock $SRV_ADDR:$SRV_PATH $1"
	fi
}
do_mount() { # DIR
	local out t0
	mkdir -p "$1"
	t0=$(now_ms)
	# shellcheck disable=SC2046 # the command line, split into words on purpose
	if ! out=$(timeout -k 5 60 $(mount_cmd "$1") 2>&1); then
		failc mount "$(mount_cmd "$1") failed: $out"
		return 1
	fi
	local vers
	vers=$(mstats "$1" | awk '$1 == "opts:" {print $2; exit}' | tr ',' '\n' | sed -n 's/^vers=//p')
	if [ "$(mstats "$1" | awk '$1 == "xprt:" {print $2; exit}')" = rdma ] && [ "$vers" = "${MOUNT_VERS:-3}" ]; then
		pass mount "$(mount_cmd "$1") ($(($(now_ms) - t0)) ms), mountstats: xprt: rdma, vers=$vers"
	else
		failc mount "mountstats shows no 'xprt: rdma' and 'vers=${MOUNT_VERS:-3}' for $1: $(mstats "$1" | grep xprt:), vers=$vers"
		return 1
	fi
}
do_umount() { # DIR
	local out
	out=$(timeout -k 5 60 umount "$1" 2>&1) && return 0
	failc umount "umount $1: $out"
	umount -f -l "$1" 2>/dev/null
	return 1
}
mstats() { # DIR [FILE]: the mountstats block of that NFS mount point (default /proc/self/mountstats)
	awk -v m="$1" '$1 == "device" {on = ($5 == m && ($8 == "nfs" || $8 == "nfs4"))} on' "${2:-/proc/self/mountstats}"
}
# client_stats DIR [EARLIER-BLOCK-FILE]: CLI[...] from the xprt line (+ the one saved before the
# remount), the mount options; printed as "client PART: ..."
declare -A CLI=()
# one_connection_per_drop [NOTE]: one mount and exactly one reconnection per deliberate drop
# (CNT from counters: conn.accepted = 1 + conn.kicked), and the client's mountstats `connects`
# (CLI from client_stats) the same as the server's accepted connections
one_connection_per_drop() {
	local acc=${CNT[conn.accepted]:-0} kick=${CNT[conn.kicked]:-0} note=${1:+$1, }
	if [ "$kick" -gt 0 ] && [ "$acc" -eq $((kick + 1)) ] 2>/dev/null; then
		pass connections "accepted $acc = 1 mount + $kick deliberate drops (${note}conn.losses ${CNT[conn.losses]:-?})"
	else
		failc connections "accepted ${CNT[conn.accepted]:-?} for 1 mount + ${CNT[conn.kicked]:-?} deliberate drops (${note}conn.losses ${CNT[conn.losses]:-?}; expected exactly one reconnection per drop)"
		# the losses the server did not cause, with the lines around each: which side closed
		# the extra connection, and when
		awk '/connection closed/ && !/closed by a handler/ {
			for (i = NR - 3; i < NR; i++) if (i > 0) print i ": " l[i % 4]
			print NR ": " $0
		} {l[NR % 4] = $0}' "$SRV_LOG" 2>/dev/null | tail -n 40 | sed 's/^/  | not dropped by the server: /' || true
		# and every warning the server logged (a reply the engine refused names its error)
		grep -E ' (WARN|ERROR) ' "$SRV_LOG" 2>/dev/null | tail -n 20 | sed 's/^/  | server warning: /' || true
		# a call the client timed out on (xprtrdma disconnects on every RPC timeout): the
		# per-op lines of mountstats whose third column (timeouts) is not 0
		mstats "$MNT" | awk '/per-op statistics/ {on = 1; next} on && NF >= 4 && $4 > 0' |
			sed 's/^[[:space:]]*/  | client timeouts (op: ops trans timeouts ...): /' || true
	fi
	if [ "${CLI[connects]:-0}" -eq "$acc" ] 2>/dev/null; then
		pass client-connects "${CLI[connects]} = accepted"
	else
		failc client-connects "the client connected ${CLI[connects]:-?} times, the server accepted $acc"
	fi
}
XPRT_FIELDS="srcport bind_count connects connect_time idle sends recvs bad_xids req_u bklog_u read_chunks write_chunks reply_chunks rdma_req_bytes rdma_reply_bytes pullup_copy fixup_copy hardway_register failed_marshal bad_reply nomsg_calls mrs_recycled mrs_orphaned mrs_allocated local_inv_needed empty_sendctx_q reply_waits_for_send"
client_stats() {
	local blk opts i f names vals
	blk=$(mstats "$1")
	read -ra names <<<"$XPRT_FIELDS"
	CLI=()
	for f in "$blk" "$([ -z "${2:-}" ] || mstats "$1" "$2" 2>/dev/null)"; do
		read -ra vals <<<"$(awk '$1 == "xprt:" && $2 == "rdma" {$1 = $2 = ""; print; exit}' <<<"$f")"
		for ((i = 0; i < ${#vals[@]} && i < ${#names[@]}; i++)); do
			CLI[${names[i]}]=$((${CLI[${names[i]}]:-0} + vals[i]))
		done
	done
	opts=$(awk '$1 == "opts:" {print $2; exit}' <<<"$blk")
	CLI[rsize]=$(tr ',' '\n' <<<"$opts" | sed -n 's/^rsize=//p')
	CLI[wsize]=$(tr ',' '\n' <<<"$opts" | sed -n 's/^wsize=//p')
	echo "client $PART: rsize=${CLI[rsize]} wsize=${CLI[wsize]} connects=${CLI[connects]:-?} read_chunks=${CLI[read_chunks]:-?} write_chunks=${CLI[write_chunks]:-?} reply_chunks=${CLI[reply_chunks]:-?} local_inv_needed=${CLI[local_inv_needed]:-?} rpc_sends=${CLI[sends]:-?} bad_reply=${CLI[bad_reply]:-?}"
	echo "client $PART: mount options $opts"
}
# nfs3_calls: the client's NFSv3 calls per procedure since NFS3_0 (/proc/net/rpc/nfs, nfsstat -c)
NFS3_NAMES="null getattr setattr lookup access readlink read write create mkdir symlink mknod remove rmdir rename link readdir readdirplus fsstat fsinfo pathconf commit"
nfs3_line() { awk '$1 == "proc3" {$1 = $2 = ""; print}' /proc/net/rpc/nfs; }
rpc_line() { awk '$1 == "rpc" {print $2, $3}' /proc/net/rpc/nfs; }
nfs3_calls() {
	local a b out='' i=0 n
	read -ra a <<<"$NFS3_0"
	read -ra b <<<"$(nfs3_line)"
	for n in $NFS3_NAMES; do
		[ $((b[i] - a[i])) -gt 0 ] && out="$out ${n^^}=$((b[i] - a[i]))"
		i=$((i + 1))
	done
	read -ra a <<<"$RPC_0"
	read -ra b <<<"$(rpc_line)"
	echo "client $PART: NFSv3 calls$out; rpc calls $((b[0] - a[0])), retransmissions $((b[1] - a[1]))"
}

# ---- parts -----------------------------------------------------------------------------------------
# run_part DEV BACKEND [PART SERVER-ARGS...]: the full workload against one server (part name
# DEV/BACKEND unless given; SERVER-ARGS: more arguments of rpcrdma-nfsd)
run_part() {
	local dev=$1 be=$2 part=${3:-$1/$2} pre wl rc
	shift 2
	[ $# -eq 0 ] || shift
	pre=$LOGS/pre-remount-${part//\//-}.mountstats
	part_begin "$part" "$KIND server, $be backend, over $dev${*:+, $*}"
	if ! srv_start "$dev" "$be" "$@"; then
		failc server-start "the server did not start (log below)"
		sed 's/^/  | /' "$SRV_LOG" | tail -n 30
		part_end
		return
	fi
	pass server-start "$SRV_ADDR nfs port $SRV_PORT, mount port $SRV_MPORT"
	NFS3_0=$(nfs3_line) RPC_0=$(rpc_line)
	if do_mount "$MNT"; then
		local remount
		remount="cat /proc/self/mountstats >$pre && umount $MNT && $(mount_cmd "$MNT")"
		wl=$(mktemp)
		# shellcheck disable=SC2086 # WL_ARGS: more workload options, split on purpose
		timeout -k 10 "$RUN_TIMEOUT" "$HERE/nfs-workload.sh" full "$MNT" --remount "$remount" ${WL_ARGS:-} | tee "$wl"
		rc=${PIPESTATUS[0]}
		[ "$rc" -ne 124 ] || echo "FAIL workload: timed out after $RUN_TIMEOUT s"
		grep -q '^workload: .* 0 failed' "$wl" || failc workload "$(grep '^workload:' "$wl" || echo "no summary (exit $rc)")"
		PNOTES="$(grep '^workload:' "$wl" | head -n 1)"
		rm -f "$wl"
		client_stats "$MNT" "$pre"
		nfs3_calls
		if counters; then
			show_counters
			cnt_positive chunks.read chunks.write chunks.reply
			# memory backend: READs of large files go from the store's registered blocks
			if [ "$KIND" = ours ] && [ "$be" = memory ]; then cnt_positive read.zero_copy; fi
			# --srq N: the connections' receives came from the node's shared receive queue
			if [ -n "${SRQ_PART:-}" ]; then
				if [ "${CNT[srq.depth]:-0}" -eq "$SRQ_DEPTH" ] 2>/dev/null; then
					pass counter-srq.depth "$SRQ_DEPTH (held at most ${CNT[srq.held_max]:-?}, low-water events ${CNT[srq.low_water]:-?})"
				else
					failc counter-srq.depth "${CNT[srq.depth]:-missing} (expected $SRQ_DEPTH: the server ran without its SRQ)"
				fi
			fi
			echo "note: replies sent with Send With Invalidate: ${CNT[replies.send_inv]:-n/a (kernel: not counted; client local_inv_needed=${CLI[local_inv_needed]:-?})}"
		else
			failc counters "no nfsd-stat lines after SIGUSR1"
		fi
		# the client's own view of the chunks: all three kinds must have been used
		for v in read_chunks write_chunks reply_chunks; do
			[ "${CLI[$v]:-0}" -gt 0 ] || failc "client-$v" "xprtrdma counted ${CLI[$v]:-no} $v"
		done
		do_umount "$MNT"
	fi
	srv_stop
	if [ "$PFAIL" -ne 0 ] && [ -s "$SRV_LOG" ]; then
		echo "---- server log (tail):"
		grep -v '^nfsd-stat ' "$SRV_LOG" | tail -n 30 | sed 's/^/  | /'
		echo "---- kernel log (tail):"
		dmesg | grep -v 'speed is unknown' | tail -n 15 | sed 's/^/  | /'
	fi
	part_end
}

# fault_trace_on / fault_trace_off: the client's transport events (tracefs groups sunrpc's xprt_*
# and rpcrdma's connection, error and flush events) over a fault part; printed, the lines
# around each disconnection, when the part failed. Only where the guest kernel has tracefs.
TRACEFS=/sys/kernel/tracing
FAULT_EVENTS="sunrpc/xprt_disconnect_auto sunrpc/xprt_disconnect_force sunrpc/xprt_disconnect_done
sunrpc/xprt_timer sunrpc/xprt_retransmit sunrpc/xprt_reserve_cong sunrpc/xprt_connect
sunrpc/rpc_timeout_status sunrpc/rpc_call_status sunrpc/rpc_connect_status
rpcrdma/xprtrdma_connect rpcrdma/xprtrdma_disconnect rpcrdma/xprtrdma_qp_event rpcrdma/xprtrdma_op_connect
rpcrdma/xprtrdma_op_close rpcrdma/xprtrdma_wc_receive rpcrdma/xprtrdma_wc_send rpcrdma/xprtrdma_post_recvs
rpcrdma/xprtrdma_post_recvs_err rpcrdma/xprtrdma_reply_vers_err rpcrdma/xprtrdma_reply_rqst_err
rpcrdma/xprtrdma_reply_short_err rpcrdma/xprtrdma_reply_hdr_err rpcrdma/xprtrdma_err_vers
rpcrdma/xprtrdma_err_chunk rpcrdma/xprtrdma_err_unrecognized rpcrdma/xprtrdma_createmrs
rpcrdma/xprtrdma_remove rpcrdma/xprtrdma_inline_thresh rpcrdma/xprtrdma_marshal rpcrdma/xprtrdma_reply
sunrpc/xprt_transmit sunrpc/xprt_lookup_rqst"
FAULT_TRACING=0
fault_trace_on() {
	local e
	FAULT_TRACING=0
	[ -d "$TRACEFS/events" ] || mount -t tracefs nodev "$TRACEFS" 2>/dev/null || return 0
	[ -d "$TRACEFS/events/rpcrdma" ] || return 0
	echo 0 >"$TRACEFS/tracing_on"
	echo 16384 >"$TRACEFS/buffer_size_kb"
	: >"$TRACEFS/trace"
	for e in $FAULT_EVENTS; do
		[ -e "$TRACEFS/events/$e/enable" ] && echo 1 >"$TRACEFS/events/$e/enable"
	done
	# completions: only those that did not succeed
	for e in xprtrdma_wc_receive xprtrdma_wc_send; do
		[ -e "$TRACEFS/events/rpcrdma/$e/filter" ] && echo 'status != 0' >"$TRACEFS/events/rpcrdma/$e/filter" 2>/dev/null
	done
	echo 1 >"$TRACEFS/tracing_on"
	FAULT_TRACING=1
	# RPCRDMA_NFSD_FAULT_SIW_DEBUG=1: siw's own debug messages (dynamic debug) into the kernel
	# log, printed when the part fails
	if [ "${RPCRDMA_NFSD_FAULT_SIW_DEBUG:-0}" = 1 ] && [ -w /sys/kernel/debug/dynamic_debug/control ]; then
		local f
		for f in siw_qp_tx.c siw_qp.c siw_cm.c siw_qp_rx.c; do
			echo "file $f +pt" >/sys/kernel/debug/dynamic_debug/control 2>/dev/null || true
		done
	fi
}
fault_trace_off() {
	[ "$FAULT_TRACING" = 1 ] || return 0
	echo 0 >"$TRACEFS/tracing_on"
	echo 0 >"$TRACEFS/events/enable"
	# how often each event fired (a connection the client closed shows as xprt_disconnect_force
	# beyond the drops, a timed-out call as xprt_timer)
	echo "client transport events:$(grep -v '^#' "$TRACEFS/trace" | grep -v xprt_reserve_cong |
		awk '{for (i = 1; i < NF; i++) if ($i ~ /^[0-9]+\.[0-9]+:$/) {sub(/:$/, "", $(i + 1)); print $(i + 1); break}}' |
		sort | uniq -c | awk '{printf " %s=%s", $2, $1}')"
	if [ "$PFAIL" -ne 0 ]; then
		# around each call the client timed out on (xprt_timer) or a reply it could not use,
		# else the last lines
		local at=' xprt_timer: | xprtrdma_qp_event: |_err: '
		echo "---- client transport events (tracefs, $(grep -vc '^#' "$TRACEFS/trace") lines; around each of:$at):"
		if grep -Eq "$at" "$TRACEFS/trace"; then
			grep -v '^#' "$TRACEFS/trace" | grep -v 'xprt_reserve_cong' | grep -E -B 60 -A 15 "$at" | head -n 400
		else
			grep -v '^#' "$TRACEFS/trace" | grep -v 'xprt_reserve_cong' | tail -n 80
		fi | sed 's/^/  | /'
	fi
	FAULT_TRACING=0
	if [ "${RPCRDMA_NFSD_FAULT_SIW_DEBUG:-0}" = 1 ] && [ -w /sys/kernel/debug/dynamic_debug/control ]; then
		echo 'module siw -p' >/sys/kernel/debug/dynamic_debug/control 2>/dev/null || true
		if [ "$PFAIL" -ne 0 ]; then
			# the window from 20 ms before the transmission of each call the client timed
			# out on to 300 ms after it (trace and kernel log share the clock)
			local xid t
			for xid in $(grep -o ' xprt_timer: .* xid=0x[0-9a-f]*' "$TRACEFS/trace" | sed 's/.*xid=//'); do
				t=$(grep " xprt_transmit: .*xid=$xid " "$TRACEFS/trace" | tail -n 1 |
					awk '{for (i = 1; i < NF; i++) if ($i ~ /^[0-9]+\.[0-9]+:$/) {sub(/:$/, "", $i); print $i; exit}}')
				[ -n "$t" ] || continue
				echo "---- siw debug messages around the transmission of xid $xid at $t s:"
				dmesg | awk -v t="$t" '{x = $0; sub(/^\[ */, "", x); sub(/\].*/, "", x)} x + 0 >= t - 0.02 && x + 0 <= t + 0.3' |
					grep -i siw | head -n 200 | sed 's/^/  | /'
			done
		fi
	fi
	: >"$TRACEFS/trace"
}
# fault_hog_start / fault_hog_stop: RPCRDMA_NFSD_FAULT_HOG busy loops ("cpus": one per vCPU) in
# the guest beside the churn, to run the fault parts on a starved machine
FAULT_HOGS=()
fault_hog_start() {
	mapfile -t FAULT_HOGS < <(busy_loops "${RPCRDMA_NFSD_FAULT_HOG:-0}")
	[ ${#FAULT_HOGS[@]} -eq 0 ] || echo "note: ${#FAULT_HOGS[@]} busy loops beside the churn"
}
fault_hog_stop() {
	[ ${#FAULT_HOGS[@]} -eq 0 ] || kill "${FAULT_HOGS[@]}" 2>/dev/null
	FAULT_HOGS=()
}

# run_fault DEV: the churn workload while the server drops the connection every N-th
# non-idempotent call. Every deliberate drop costs exactly one reconnection: the server accepted
# one connection for the mount and one per drop (conn.accepted = 1 + conn.kicked), and the client
# connected as often (mountstats "connects"); its rpcrdma/siw/rxe kernel messages are printed.
run_fault() {
	local dev=$1 every=${RPCRDMA_NFSD_DROP_EVERY:-50} wl rc extra=() churn=${RPCRDMA_NFS_CHURN_N:-200} k0
	if [ "$dev" != rxe ]; then
		every=${RPCRDMA_NFSD_FAULT_SIW_EVERY:-10} churn=${RPCRDMA_NFSD_FAULT_SIW_CHURN:-60}
	fi
	part_begin "fault/$dev" "$dev, memory backend, the server drops the connection every $every-th non-idempotent call, churn $churn"
	[ "$KIND" = kernel ] || extra=(--drop-every "$every")
	if ! srv_start "$dev" memory "${extra[@]}"; then
		failc server-start "the server did not start"
		sed 's/^/  | /' "$SRV_LOG" | tail -n 30
		part_end
		return
	fi
	NFS3_0=$(nfs3_line) RPC_0=$(rpc_line)
	k0=$(dmesg | wc -l)
	fault_trace_on
	if do_mount "$MNT"; then
		wl=$(mktemp)
		fault_hog_start
		RPCRDMA_NFS_CHURN_N=$churn timeout -k 10 "$RUN_TIMEOUT" "$HERE/nfs-workload.sh" churn "$MNT" | tee "$wl"
		rc=${PIPESTATUS[0]}
		fault_hog_stop
		[ "$rc" -ne 124 ] || echo "FAIL churn: timed out after $RUN_TIMEOUT s"
		grep -q '^workload: .* 0 failed' "$wl" || failc workload "$(grep '^workload:' "$wl" || echo "no summary (exit $rc)")"
		PNOTES="$(grep '^workload:' "$wl" | head -n 1)"
		rm -f "$wl"
		client_stats "$MNT"
		nfs3_calls
		if counters; then
			show_counters
			if [ "$KIND" = kernel ]; then
				echo "SKIP counter-conn.dropped, counter-drc.hits, connections: the kernel nfsd cannot drop connections on demand (churn ran without faults)"
			else
				cnt_positive conn.dropped drc.hits
				one_connection_per_drop
			fi
		else
			failc counters "no nfsd-stat lines after SIGUSR1"
		fi
		do_umount "$MNT"
	fi
	# the kernel's rpcrdma / siw / rxe messages since the server started (none when all went well)
	dmesg | tail -n +$((k0 + 1)) | grep -E 'rpcrdma|siw|rxe' | grep -v 'speed is unknown' | tail -n 20 | sed 's/^/  | /'
	fault_trace_off
	srv_stop
	if [ "$PFAIL" -ne 0 ] && [ -s "$SRV_LOG" ]; then
		echo "---- server log (tail):"
		grep -v '^nfsd-stat ' "$SRV_LOG" | tail -n 30 | sed 's/^/  | /'
	fi
	part_end
}

# run_rpcbind (ours only): the server on its default ports (NFS/RDMA 20049, MOUNT 20048)
# registers with the guest's rpcbind, a plain `mount -o vers=3,proto=rdma` (no port options:
# the kernel uses 20049 for rdma, mount.nfs asks rpcbind for MOUNT) works, and the
# registrations are gone after SIGTERM. Runs before the fio part starts the kernel nfsd (which
# takes the same ports).
run_rpcbind() {
	local t0 line pid log=$LOGS/server-rpcbind.log reg
	part_begin rpcbind "rxe, memory backend, default ports, registered with rpcbind, plain mount"
	t0=$(now_ms)
	"$BIN" --provider rdma --bind 10.0.2.15 --backend memory "${EXPORT_ROOT[@]}" >"$log" 2>&1 &
	pid=$!
	until line=$(grep -m1 '^rpcrdma-nfsd: ready ' "$log"); do
		if ! kill -0 "$pid" 2>/dev/null || [ $(($(now_ms) - t0)) -gt $((READY_TIMEOUT * 1000)) ]; then
			failc server-start "no ready line: $(tail -n 5 "$log" | tr '\n' ' ')"
			kill -KILL "$pid" 2>/dev/null
			part_end
			return
		fi
		sleep 0.2
	done
	echo "server: $line"
	reg=$(rpcinfo 127.0.0.1 2>&1)
	if grep -Eq '^ +100003 +3 +rdma +10\.0\.2\.15\.78\.81 ' <<<"$reg" &&
		grep -Eq '^ +100005 +3 +tcp +10\.0\.2\.15\.78\.80 ' <<<"$reg"; then
		pass rpcbind-set "100003 v3 rdma 10.0.2.15.78.81 and 100005 v3 tcp 10.0.2.15.78.80 registered"
	else
		failc rpcbind-set "rpcinfo shows: $(grep -E ' 10000[35] ' <<<"$reg" | tr -s ' ' | tr '\n' ';')"
	fi
	mkdir -p /mnt/rpcb
	if timeout -k 5 60 mount -t nfs -o vers=3,proto=rdma,nolock 10.0.2.15:/export /mnt/rpcb 2>&1; then
		if [ "$(mstats /mnt/rpcb | awk '$1 == "xprt:" {print $2; exit}')" = rdma ] &&
			echo plain >/mnt/rpcb/p && [ "$(cat /mnt/rpcb/p)" = plain ]; then
			pass plain-mount "mount -t nfs -o vers=3,proto=rdma,nolock 10.0.2.15:/export: xprt: rdma, a file written and read"
		else
			failc plain-mount "mounted, but no 'xprt: rdma' or the file did not read back"
		fi
		do_umount /mnt/rpcb
	else
		failc plain-mount "mount -t nfs -o vers=3,proto=rdma,nolock 10.0.2.15:/export /mnt/rpcb failed"
	fi
	SRV_PID=$pid
	srv_stop
	reg=$(rpcinfo 127.0.0.1 2>&1)
	if grep -Eq ' (100003|100005) ' <<<"$reg"; then
		failc rpcbind-unset "still registered after exit: $(grep -E ' 10000[35] ' <<<"$reg" | tr -s ' ' | tr '\n' ';')"
	else
		pass rpcbind-unset "100003 and 100005 unregistered at exit"
	fi
	part_end
}

# fio_best FILE LABEL JOB: the best of the rounds ("fio-result LABEL JOB ..." lines): the highest
# IOPS and bandwidth, the lowest latencies (interference from the busy host only slows a run down)
fio_best() {
	awk -v l="$2" -v j="$3" '$1 == "fio-result" && $2 == l && $3 == j && $4 ~ /^iops=/ {
		for (i = 4; i <= NF; i++) {
			split($i, kv, "=")
			v = kv[2] + 0
			if (kv[1] == "iops" || kv[1] == "bw_kib") { if (!(kv[1] in b) || v > b[kv[1]]) b[kv[1]] = v }
			else if (kv[1] ~ /^clat/) { if (!(kv[1] in b) || v < b[kv[1]]) b[kv[1]] = v }
		}
		n++
	} END {
		if (n) printf "iops=%d bw_kib=%d clat_p50_us=%d clat_p99_us=%d\n", b["iops"], b["bw_kib"], b["clat_p50_us"], b["clat_p99_us"]
	}' "$1"
}
fio_get() { sed -n "s/.*\b$2=\([0-9.]*\).*/\1/p" <<<"$1"; }
# run_fio [3|4.1]: both servers mounted at once (kernel nfsd on /mnt/knfs, ours on /mnt/onfs) over
# that NFS version (part fio, or fio41: ours with --nfs4, the kernel nfsd started with KNFSD_V4=1),
# every job run against one then the other, RPCRDMA_NFSD_FIO_ROUNDS rounds (default 2, the order
# swapped each round), the best of the rounds compared; "ratio ..." lines (fio41: "ratio41 ...")
run_fio() {
	local f label=ours rounds=${RPCRDMA_NFSD_FIO_ROUNDS:-2} r job l order kmnt=/mnt/knfs omnt=/mnt/onfs ok=1 obe=memory
	local vers=${1:-3} part=fio rtag=ratio extra=()
	[ "$vers" = 3 ] || part=fio41 rtag=ratio41 extra=(--nfs4 --v4-state-dir none)
	[ "$KIND" = ours ] || extra=()
	part_begin "$part" "over rxe, NFSv$vers: the same fio jobs against the kernel nfsd (tmpfs) and against $KIND (memory backend), $rounds rounds"
	f=$LOGS/$part.log
	: >"$f"
	# 1. the kernel nfsd
	local kind_save=$KIND
	KIND=kernel
	srv_start rxe memory && MOUNT_VERS=$vers do_mount "$kmnt" || ok=0
	KIND=$kind_save
	# 2. ours (in kernel mode: the kernel nfsd again, on its other tmpfs export: the ratios then
	#    show the noise of the measurement)
	if [ "$KIND" = kernel ]; then
		label=kernel2 obe=dir
	fi
	if ! srv_start rxe "$obe" "${extra[@]}"; then
		failc server-start "the server did not start"
		sed 's/^/  | /' "$SRV_LOG" | tail -n 30
		ok=0
	elif ! MOUNT_VERS=$vers do_mount "$omnt"; then ok=0; fi
	if [ "$ok" = 1 ]; then
		for ((r = 1; r <= rounds; r++)); do
			order="kernel $label"
			[ $((r % 2)) -eq 0 ] && order="$label kernel"
			for job in seqwrite seqread randwrite randread; do
				for l in $order; do
					if [ "$l" = kernel ]; then d=$kmnt; else d=$omnt; fi
					"$HERE/nfs-fio.sh" "$d" "$l" "$job" >>"$f" || failc "fio-$l-$job" "$(grep "^fio-result $l $job" "$f" | tail -n 1)"
					grep "^fio-result $l $job " "$f" | tail -n 1 | sed "s/^/round $r: /"
				done
			done
		done
		rm -f "$kmnt/fio-perf.dat" "$omnt/fio-perf.dat"
	fi
	if [ -n "$SRV_PID" ] || [ "$KIND" = kernel ]; then counters && show_counters; fi
	mountpoint -q "$kmnt" && do_umount "$kmnt"
	mountpoint -q "$omnt" && do_umount "$omnt"
	srv_stop
	echo
	echo "fio over rxe, NFSv$vers, direct=1, libaio, ${RPCRDMA_NFS_FIO_RUNTIME:-5} s per job, best of $rounds rounds: $label / kernel"
	echo "(higher is better for IOPS and bandwidth, lower for latency)"
	printf '  %-34s %12s %12s %8s\n' "job" "kernel" "$label" "ratio"
	local kb ob k o row metric desc rt ratios=()
	for row in "seqwrite bw_kib 1 MiB sequential write, KiB/s" "seqread bw_kib 1 MiB sequential read, KiB/s" \
		"randwrite iops 4 KiB random write, IOPS" "randwrite clat_p50_us   clat p50, us" "randwrite clat_p99_us   clat p99, us" \
		"randread iops 4 KiB random read, IOPS" "randread clat_p50_us   clat p50, us" "randread clat_p99_us   clat p99, us"; do
		read -r job metric desc <<<"$row"
		kb=$(fio_best "$f" kernel "$job")
		ob=$(fio_best "$f" "$label" "$job")
		k=$(fio_get "$kb" "$metric")
		o=$(fio_get "$ob" "$metric")
		rt=$(awk -v k="$k" -v o="$o" 'BEGIN {if (k + 0 > 0 && o != "") printf "%.2f", o / k; else print "n/a"}')
		printf '  %-34s %12s %12s %8s\n' "$desc" "${k:-n/a}" "${o:-n/a}" "$rt"
		ratios+=("$rtag $job $metric kernel=${k:-n/a} $label=${o:-n/a} ratio=$rt")
	done
	printf '%s\n' "${ratios[@]}"
	part_end
}

# run_meta: the metadata workload of nfs-meta.sh (a small tree untarred, compared, walked, renamed,
# walked after a remount, removed) against the kernel nfsd and ours in turn, over the devices of
# RPCRDMA_NFSD_META, both backends; with RPCRDMA_NFSD_META_HOG (e.g. "cpus": one busy loop per
# vCPU; default empty: none) over rxe once more beside that CPU hog in the guest. Prints
# the time table (ours / kernel per phase) and the client's GETATTR / LOOKUP / READ counts per
# phase against both. Checks: every run passes nfs-meta.sh's own checks; with
# RPCRDMA_NFSD_META_COUNTS=1 also every row of counts within 10 % (+ 5 calls) of what the client
# sends to the kernel nfsd. By default the counts and times are reported, not checked: GETATTR
# counts follow the attribute cache timeouts, so they move with how long a phase takes (the
# kernel nfsd's own count for one phase ranged from 11 to 209 between boots of a shared host);
# docs/performance-nfs.md keeps the table of a quiet run.
run_meta() {
	local f hog label
	part_begin meta "the metadata workload against the kernel nfsd and $KIND over ${1// /, }, both backends"
	if [ "$KIND" = kernel ]; then
		echo "SKIP meta: it compares rpcrdma-nfsd with the kernel nfsd (here the kernel nfsd is the server under test)"
		part_end
		return
	fi
	local devs
	for hog in '' ${RPCRDMA_NFSD_META_HOG:-}; do
		label=plain devs=$1
		[ -z "$hog" ] || label=hog devs=rxe
		f=$LOGS/meta-$label.log
		RPCRDMA_META_DEVS=$devs RPCRDMA_META_HOG=${hog:-0} RPCRDMA_META_ROUNDS=${RPCRDMA_NFSD_META_ROUNDS:-1} \
			RPCRDMA_META_DIRS=${RPCRDMA_NFSD_META_DIRS:-10} RPCRDMA_META_FILES=${RPCRDMA_NFSD_META_FILES:-30} \
			"$HERE/nfs-meta.sh" "$BIN" kernel >"$f" 2>&1 || failc "meta-$label" "$(grep -E '^FAIL|^nfs-meta: [0-9]+ runs' "$f" | tr '\n' ' ')"
		sed -n '/^nfs-meta: medians/,$p' "$f"
		if [ "${RPCRDMA_NFSD_META_COUNTS:-0}" = 1 ] && grep -q -- '<- off' "$f"; then
			failc "meta-$label-counts" "the client's GETATTR / LOOKUP / READ counts differ from the kernel nfsd's by more than 10 % (rows marked '<- off')"
		fi
		PNOTES="$PNOTES $label: $(awk '$3 == "total" {printf "%s %.2f ", $1, $6}' "$f")"
	done
	part_end
}

# ---- main ----------------------------------------------------------------------------------------
if [ "$KIND" = ours ]; then
	if [ ! -x "$BIN" ]; then
		echo "nfs-server: $BIN is not an executable file inside the VM"
		exit 1
	fi
	if ldd "$BIN" 2>&1 | grep -q 'not found'; then
		echo "nfs-server: $BIN: libraries missing in the VM: $(ldd "$BIN" | grep 'not found' | tr '\n' ' ')"
		exit 1
	fi
fi
command -v fio >/dev/null || echo "note: fio is not in the guest image (scripts/vm/lib.sh vm_guest_pkgs): the fio checks will fail"
for r in $RUNS; do
	case $r in
	rxe/memory | rxe/dir) run_part "${r%/*}" "${r#*/}" ;;
	# ls-5000, the longest check under TCG, runs over rxe (its subject is the listing, not the
	# transport)
	siw/memory | siw/dir) WL_ARGS=--no-ls run_part "${r%/*}" "${r#*/}" ;;
	iwarp/memory | iwarp/dir)
		if [ "$KIND" = kernel ]; then
			echo "SKIP $r: the kernel nfsd has no user-space iWARP provider (siw/* is its reference)"
			continue
		fi
		WL_ARGS=--no-ls run_part "${r%/*}" "${r#*/}"
		;;
	*)
		echo "nfs-server: unknown run $r (rxe/memory rxe/dir siw/memory siw/dir iwarp/memory iwarp/dir)"
		NPFAIL=$((NPFAIL + 1))
		;;
	esac
done
# the SRQ parts: rpcrdma-nfsd --srq N (one shared receive queue for the connections' receives)
for d in $SRQ_RUNS; do
	case $d in
	rxe | siw)
		if [ "$KIND" = kernel ]; then
			echo "SKIP srq/$d: --srq is rpcrdma-nfsd's option (the kernel nfsd's parts above are the reference)"
			continue
		fi
		SRQ_PART=1 WL_ARGS=--no-ls run_part "$d" memory "srq/$d" --srq "$SRQ_DEPTH"
		;;
	*)
		echo "nfs-server: unknown SRQ run $d (rxe siw)"
		NPFAIL=$((NPFAIL + 1))
		;;
	esac
done
if [ "${RPCRDMA_NFSD_FAULT:-1}" = 1 ]; then
	for d in ${RPCRDMA_NFSD_FAULT_RUNS-rxe siw iwarp}; do
		case $d in
		rxe | siw) run_fault "$d" ;;
		iwarp)
			if [ "$KIND" = kernel ]; then
				echo "SKIP fault/iwarp: the kernel nfsd has no user-space iWARP provider"
				continue
			fi
			run_fault "$d"
			;;
		*)
			echo "nfs-server: unknown fault run $d (rxe siw iwarp)"
			NPFAIL=$((NPFAIL + 1))
			;;
		esac
	done
fi
# NFSv4.1 (nfs-v41.sh): port 20049, before anything starts the kernel nfsd (which takes it)
for r in ${RPCRDMA_NFSD_V41-rxe/memory siw/dir}; do
	case $r in
	rxe/memory | rxe/dir | siw/memory | siw/dir | iwarp/memory | iwarp/dir) run_v41 "${r%/*}" "${r#*/}" ;;
	rxe/xfs | siw/xfs) run_v41_xfs "${r%/*}" ;;
	*)
		echo "nfs-server: unknown NFSv4.1 run $r (rxe/memory rxe/dir siw/memory siw/dir iwarp/memory iwarp/dir rxe/xfs siw/xfs)"
		NPFAIL=$((NPFAIL + 1))
		;;
	esac
done
for d in ${RPCRDMA_NFSD_V41_FAULT-rxe siw}; do
	case $d in
	rxe | siw) run_v41_fault "$d" ;;
	*)
		echo "nfs-server: unknown NFSv4.1 fault run $d (rxe siw)"
		NPFAIL=$((NPFAIL + 1))
		;;
	esac
done
[ "${RPCRDMA_NFSD_V41_DELEG:-1}" = 1 ] && run_v41_deleg
# NFSv3 locks (nfs-nlm.sh): our server and an rpcbind of its own in netns peer, the client's
# lockd in the root netns; before anything starts the kernel nfsd (and its lockd)
for d in ${RPCRDMA_NFSD_NLM-siw}; do
	case $d in
	siw | iwarp) run_nlm "$d" ;;
	*)
		echo "nfs-server: unknown NLM run $d (siw iwarp)"
		NPFAIL=$((NPFAIL + 1))
		;;
	esac
done
for d in ${RPCRDMA_NFSD_NLM_RESTART-siw}; do
	case $d in
	siw | iwarp) run_nlm_restart "$d" ;;
	*)
		echo "nfs-server: unknown NLM restart run $d (siw iwarp)"
		NPFAIL=$((NPFAIL + 1))
		;;
	esac
done
[ "$KIND" = ours ] && [ "${RPCRDMA_NFSD_RPCBIND:-1}" = 1 ] && run_rpcbind
# pjdfstest, the exports and the ACL checks start the kernel nfsd: after the rpcbind part (same
# ports)
for l in $PJD_RUNS; do
	case $l in
	kernel | memory | dir) run_pjdfstest "$l" ;;
	*)
		echo "nfs-server: unknown pjdfstest run $l (kernel memory dir)"
		NPFAIL=$((NPFAIL + 1))
		;;
	esac
done
# the same over NFSv4.2 (RPCRDMA_NFSD_PJDFSTEST41, default empty; .ci/run asks for all three)
for l in $PJD41_RUNS; do
	case $l in
	kernel | memory | dir) run_pjdfstest "$l" 4.2 ;;
	*)
		echo "nfs-server: unknown NFSv4.2 pjdfstest run $l (kernel memory dir)"
		NPFAIL=$((NPFAIL + 1))
		;;
	esac
done
run_exports
run_acl
run_cache
[ "${RPCRDMA_NFSD_FIO:-1}" = 1 ] && run_fio
[ "$FIO41" = 1 ] && run_fio 4.1
[ -n "${RPCRDMA_NFSD_META-rxe siw}" ] && run_meta "${RPCRDMA_NFSD_META-rxe siw}"
# last: it stops the kernel nfsd and adds (then deletes) RDMA devices of its own
run_quickstart

echo
for l in "${SUMMARY[@]}"; do echo "  $l"; done
echo "nfs-server: $((NPARTS - NPFAIL)) passed, $NPFAIL failed"
[ "$NPFAIL" -eq 0 ]
