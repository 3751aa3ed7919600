#!/bin/bash
# scripts/vm/nfs-interop.sh — guest payload (run INSIDE the VM by run-in-vm.sh): our
# RPC-over-RDMA client against the Linux kernel NFS server (svcrdma) on "rdma 20049".
#
#   scripts/vm/run-in-vm.sh scripts/vm/nfs-interop.sh BINARY [CHECK ARGS...]
#
# BINARY is rpcrdma-nfs-check (built with --features rdma). The script
# 1. exports a tmpfs at /srv/export (fsid=0, so it is the NFSv4 root; sec=sys:none so
#    AUTH_NONE calls are served) and creates the test tree in it with `BINARY --setup`;
# 2. rxe: starts nfsd in the root netns (rpcbind, exportfs, rpc.mountd, rpc.nfsd, then
#    "rdma 20049" into /proc/fs/nfsd/portlist), ends the NFSv4 grace period
#    (/proc/fs/nfsd/v4_end_grace: READ/WRITE with the anonymous stateid get NFS4ERR_GRACE
#    during it) and runs `BINARY 10.0.2.15 --local-tree /srv/export/nfsinterop` (client and
#    server on rxe0, loopback in rxe; the NFSv4.1 part writes the delegated files there so
#    that nfsd recalls them);
# 3. siw: nfsd runs in netns "peer" (siw creates its TCP sockets in the caller's namespace and
#    cannot talk to its own address, see docs/vm.md): an nfsd instance of that namespace
#    (NFSv4 only, so it needs no rpcbind there), its own rpc.mountd, the same tmpfs; then
#    `BINARY 10.0.3.2 --bind 10.0.3.1 --persistent-stags` from the root netns over siw0 -> siw1
#    (siw has no type-2 memory windows: the client must opt in to persistent STags);
# 4. siw-iwarp: the same nfsd in netns peer (started before the first run, so that its grace
#    period passes while the others run), the client on our
#    user-space iWARP provider: `BINARY 10.0.3.2 --provider iwarp` from the root netns, an
#    ordinary TCP socket from 10.0.3.1 that the kernel's siw terminates (MPA, DDP, RDMAP all
#    ours on this side; the provider has type-2 memory windows, so no --persistent-stags and
#    the R bit is set).
# Each run ends with "## nfs-interop <run>: PASS|FAIL (exit n)"; the script prints
# "nfs-interop: N passed, N failed" and exits 1 if any run failed.
#
# Knobs: RPCRDMA_NFS_RUNS (default "rxe siw siw-iwarp"), RPCRDMA_NFS_RUN_TIMEOUT (per run, s, default
# 300), RPCRDMA_NFS_DMESG=1 (print the kernel log tail after each run).
set -u
if [ $# -lt 1 ]; then
	echo "usage: nfs-interop.sh BINARY [CHECK ARGS...]" >&2
	exit 2
fi
BIN=$1
shift
RUNS=${RPCRDMA_NFS_RUNS:-rxe siw siw-iwarp}
RUN_TIMEOUT=${RPCRDMA_NFS_RUN_TIMEOUT:-300}
EXPORT=/srv/export
npass=0 nfail=0 SUMMARY=()
PEER_NFSD= # nfsd in netns peer: "" not started yet, "up", "failed" (started once per boot)

up() {
	local u _
	read -r u _ </proc/uptime
	echo "$u"
}
say() { echo "==== nfs-interop [uptime $(up)s] $*"; }
result() { # RUN STATUS NOTE
	local v=PASS
	[ "$2" -eq 0 ] || v="FAIL (exit $2)"
	echo "## nfs-interop $1: $v${3:+ — $3}"
	SUMMARY+=("$(printf '%-6s %s' "$1" "$v")")
	if [ "$2" -eq 0 ]; then npass=$((npass + 1)); else nfail=$((nfail + 1)); fi
}

# ---- common: modules, export, test tree ------------------------------------------------------
say "setting up the export"
if ! modprobe nfsd || ! modprobe rpcrdma; then
	echo "nfs-interop: cannot load nfsd / rpcrdma"
	exit 1
fi
mkdir -p /proc/fs/nfsd "$EXPORT" /var/lib/nfs/v4recovery /var/lib/nfs/rpc_pipefs /run/rpcbind
mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd
# The NLM grace period (lockd, started with NFSv3 in the root namespace) also keeps nfsd from
# granting delegations (locks_in_grace); 50 s by default, 3 s here (before lockd starts).
echo 3 >/proc/sys/fs/nfs/nlm_timeout 2>/dev/null || true
echo 3 >/proc/sys/fs/nfs/nlm_grace_period 2>/dev/null || true
mountpoint -q "$EXPORT" || mount -t tmpfs -o size=96m,mode=0755 tmpfs "$EXPORT"
echo "$EXPORT *(rw,fsid=0,insecure,no_subtree_check,no_root_squash,sec=sys:none)" >/etc/exports
if ! "$BIN" --setup "$EXPORT/nfsinterop" "$@"; then
	echo "nfs-interop: $BIN --setup failed"
	exit 1
fi

# ---- runs ------------------------------------------------------------------------------------
start_nfsd() { # how: "" (root netns) or "ip netns exec peer"
	local ns=$1 vers=()
	# In netns peer: NFSv4 only (no rpcbind there; NFSv4's registration is optional).
	[ -n "$ns" ] && vers=(-N 3)
	# The nfsd file system is per network namespace (keyed by the mounter's): inside
	# `ip netns exec` (a private mount namespace) the root namespace's mount is replaced, or
	# rpc.nfsd would configure the root namespace's nfsd.
	# shellcheck disable=SC2016 # the inner script expands its own variables
	$ns bash -c '
		set -e
		if [ -n "'"$ns"'" ]; then umount /proc/fs/nfsd 2>/dev/null || true; fi
		mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd
		exportfs -ra
		# The shortest grace period, in case ending it below is refused (it is in a
		# non-initial namespace: EBUSY); the check waits out NFS4ERR_GRACE.
		echo 10 >/proc/fs/nfsd/nfsv4leasetime
		echo 10 >/proc/fs/nfsd/nfsv4gracetime
		rpc.mountd '"${vers[*]}"'
		rpc.nfsd '"${vers[*]}"' 4
		# Only once per nfsd instance: a second "rdma 20049" makes Debian 6.1.192 oops
		# (NULL rdma_cm id in __svc_rdma_free, the failed listener is freed) and panic.
		grep -q "^rdma 20049" /proc/fs/nfsd/portlist || echo "rdma 20049" >/proc/fs/nfsd/portlist
		echo Y 2>/dev/null >/proc/fs/nfsd/v4_end_grace ||
			echo "(v4_end_grace refused: the check waits out the 10 s grace period)"
		echo "portlist: $(tr "\n" " " </proc/fs/nfsd/portlist)"
		echo "versions: $(cat /proc/fs/nfsd/versions)"
	'
}

peer_nfsd() { # starts nfsd in netns peer once; 0 when it runs
	if [ -z "$PEER_NFSD" ]; then
		if start_nfsd "ip netns exec peer"; then PEER_NFSD=up; else PEER_NFSD=failed; fi
	fi
	[ "$PEER_NFSD" = up ]
}

run_check() { # NAME ARGS...
	local name=$1 t0 rc
	shift
	say "run $name: $BIN $*"
	t0=$(date +%s%N)
	timeout "$RUN_TIMEOUT" "$BIN" "$@"
	rc=$?
	[ "$rc" -eq 124 ] && echo "nfs-interop: $name timed out after $RUN_TIMEOUT s"
	if [ "${RPCRDMA_NFS_DMESG:-0}" = 1 ] || [ "$rc" -ne 0 ]; then
		if dmesg | grep -q 'cut here'; then
			echo "---- kernel log: warnings"
			dmesg | sed -n '/cut here/,/end trace/p' | grep -v '^\[ *[0-9.]*\]  ? ' | head -n 60
		fi
		echo "---- kernel log (tail)"
		dmesg | grep -v 'speed is unknown' | tail -n 15
	fi
	result "$name" "$rc" "$((($(date +%s%N) - t0) / 1000000)) ms"
}

# The nfsd of netns peer waits out its NFSv4 grace period (10 s, v4_end_grace is refused
# there): started before the other runs, it does so while they run.
case " $RUNS " in
*" siw "* | *" siw-iwarp "*) peer_nfsd || true ;;
esac

for run in $RUNS; do
	case $run in
	rxe)
		say "rxe: nfsd in the root netns, rdma 20049 on 10.0.2.15 (rxe0)"
		rpcbind -w 2>/dev/null || true
		if start_nfsd ""; then
			run_check rxe 10.0.2.15 --local-tree "$EXPORT/nfsinterop" "$@"
		else
			result rxe 1 "nfsd did not start"
		fi
		;;
	siw)
		say "siw: nfsd in netns peer on 10.0.3.2 (siw1), client on siw0 (10.0.3.1)"
		if peer_nfsd; then
			# siw has no type-2 memory windows: the client opts in to persistent STags.
			run_check siw 10.0.3.2 --bind 10.0.3.1 --persistent-stags --local-tree "$EXPORT/nfsinterop" "$@"
		else
			result siw 1 "nfsd did not start in netns peer"
		fi
		;;
	siw-iwarp)
		say "siw-iwarp: nfsd in netns peer on 10.0.3.2 (siw1), client on our iWARP provider (TCP from 10.0.3.1)"
		if peer_nfsd; then
			run_check siw-iwarp 10.0.3.2 --provider iwarp --local-tree "$EXPORT/nfsinterop" "$@"
		else
			result siw-iwarp 1 "nfsd did not start in netns peer"
		fi
		;;
	*) result "$run" 2 "unknown run (rxe, siw, siw-iwarp)" ;;
	esac
done

echo
for l in "${SUMMARY[@]}"; do echo "  $l"; done
echo "nfs-interop: $npass passed, $nfail failed"
[ "$nfail" -eq 0 ]
