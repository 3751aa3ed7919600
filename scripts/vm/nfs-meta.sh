#!/bin/bash
# scripts/vm/nfs-meta.sh — guest payload (run INSIDE the VM by run-in-vm.sh): what rpcrdma-nfsd's
# per-call checks cost (export rules, AUTH_SYS identities and squashing, permission checks, the
# dir store acting as the caller, sealed handles; docs/nfs-server.md section 7), measured on a
# metadata-heavy workload against two builds of the server in one boot.
#
#   scripts/vm/run-in-vm.sh scripts/vm/nfs-meta.sh NEW-BINARY OLD-BINARY
#
# NEW-BINARY is started with `--export '/export:*(rw,no_root_squash)'`, OLD-BINARY (a build from
# before the checks) with `--export /export`: the same exposure. Both with `--provider rdma --bind
# 10.0.2.15 --port P --mount-port M --no-rpcbind` over rxe0 in the root netns, and
# `--backend memory` or `--backend dir:/srv/nfs-meta` (a guest tmpfs).
# For each backend, RPCRDMA_META_ROUNDS rounds (default 3); each round runs both binaries, the
# order swapped every round (old new, new old, old new: a drift of the host's load falls on both).
# One run: start the server, mount (vers=3,proto=rdma,...,mountproto=tcp,nolock), then for each
# uid of RPCRDMA_META_UIDS (default "0 1000"; a non-root uid runs under `setpriv --reuid=U
# --regid=U --clear-groups` in a directory it owns) the four phases, each after `sync` and
# dropping the client's caches (so its lookups and attributes come from the server):
#   untar    tar -xf of a tree of RPCRDMA_META_DIRS x RPCRDMA_META_FILES small files (default
#            40 x 50 = 2000, 1-1500 octets; the tarball is made once per boot in /run/nfs-meta)
#   stat     find TREE -print0 | xargs -0 stat
#   rename   find TREE -type f -print0 | xargs -0 rename.ul m- n- (one rename(2) per file)
#   rm       rm -rf TREE
# Each phase is timed (date +%s%3N) and its NFS calls counted (the client's RPC counter,
# /proc/net/rpc/nfs); after the run the server's calls.total (SIGUSR1) is printed beside the
# client's count. Checks: the server starts, the mount is "xprt: rdma", every phase exits 0,
# after rename the tree holds exactly the expected files all renamed, after rm nothing is left.
#
# Output: "meta BACKEND ROUND BIN UID PHASE MS CALLS" per phase, "server BACKEND ROUND BIN
# calls.total=N client=N" per run, then a table per backend x uid x phase: median ms per binary,
# new/old ratio of the medians, median calls, microseconds per call and their ratio, and the
# spread (the larger of the two binaries' (max - min) / median over the rounds), and the paired
# ratio: new / old of the two runs of one round (next to each other in time), its median and
# range over the rounds. A ratio means something only where it differs from 1 by more than the
# spread, and the paired range lies wholly on one side of 1. Last line "nfs-meta: N runs,
# N failed"; exit 1 when a check failed, 2 usage.
# Knobs: RPCRDMA_META_BACKENDS ("memory dir"), RPCRDMA_META_ROUNDS (3), RPCRDMA_META_UIDS
# ("0 1000"), RPCRDMA_META_DIRS (40), RPCRDMA_META_FILES (50 per directory),
# RPCRDMA_META_PHASE_TIMEOUT (s, 600), RPCRDMA_META_STRACE=1 (the last run of each binary runs
# under `strace -c -f`, its summary printed: where the server's system calls go).
set -u
if [ $# -ne 2 ]; then
	echo "usage: nfs-meta.sh NEW-BINARY OLD-BINARY" >&2
	exit 2
fi
HERE=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
# shellcheck source=scripts/vm/lib.sh
. "$HERE/lib.sh"
# shellcheck disable=SC2034 # read by vm_log in lib.sh
VM_TAG=nfs-meta
declare -A BIN=([new]=$1 [old]=$2)
BACKENDS=${RPCRDMA_META_BACKENDS:-memory dir}
ROUNDS=${RPCRDMA_META_ROUNDS:-3}
UIDS=${RPCRDMA_META_UIDS:-0 1000}
NDIRS=${RPCRDMA_META_DIRS:-40}
NFILES=${RPCRDMA_META_FILES:-50}
PHASE_TIMEOUT=${RPCRDMA_META_PHASE_TIMEOUT:-600}
ADDR=$VM_RXE_ADDR PORT=20051 MPORT=20050
STATE=/run/nfs-meta DIRB=/srv/nfs-meta MNT=/mnt/meta
RESULTS=$STATE/results
NRUNS=0 NFAILED=0 RFAIL=0
now_ms() { date +%s%3N; }
fail() {
	echo "FAIL $*"
	RFAIL=$((RFAIL + 1))
}

# ---- once per boot: modules, the backend's tmpfs, the tree and its tarball ----------------------
setup() {
	local d s
	modprobe -a rpcrdma nfsv3 || return 1
	[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
	mkdir -p "$STATE/src/tree" "$DIRB" "$MNT" || return 1
	mountpoint -q "$DIRB" || mount -t tmpfs -o size=512m,mode=0755 tmpfs "$DIRB" || return 1
	# one split per directory (an exec costs ~20 ms under TCG): NFILES files of one size each,
	# the size varying from directory to directory
	for ((d = 0; d < NDIRS; d++)); do
		mkdir "$STATE/src/tree/d$d" || return 1
		s=$(((d * 613 + 11) % 1500 + 1))
		head -c $((s * NFILES)) /dev/urandom | split -b "$s" -d -a 4 - "$STATE/src/tree/d$d/m-" || return 1
	done
	tar -C "$STATE/src" -cf "$STATE/tree.tar" tree || return 1
	NTOTAL=$(find "$STATE/src/tree" -type f | wc -l)
	[ "$NTOTAL" -eq $((NDIRS * NFILES)) ] || return 1
	echo "tree: $NTOTAL files in $NDIRS directories, $(du -sk "$STATE/src/tree" | cut -f1) KiB, tarball $(($(stat -c %s "$STATE/tree.tar") / 1024)) KiB"
}

# ---- one server ---------------------------------------------------------------------------------
SRV_PID='' SRV_LOG=''
srv_start() { # new|old BACKEND
	local exp be t0 line
	if [ "$1" = new ]; then exp='/export:*(rw,no_root_squash)'; else exp=/export; fi
	if [ "$2" = memory ]; then be=memory; else
		find "$DIRB" -mindepth 1 -delete
		be=dir:$DIRB
	fi
	SRV_LOG=$STATE/server-$1-$2.log
	: >"$SRV_LOG"
	t0=$(now_ms)
	"${SRV_PREFIX[@]}" "${BIN[$1]}" --provider rdma --bind "$ADDR" --port "$PORT" --mount-port "$MPORT" \
		--export "$exp" --backend "$be" --no-rpcbind >"$SRV_LOG" 2>&1 &
	SRV_PID=$!
	until line=$(grep -m1 '^rpcrdma-nfsd: ready ' "$SRV_LOG"); do
		if ! kill -0 "$SRV_PID" 2>/dev/null || [ $(($(now_ms) - t0)) -gt 30000 ]; then
			fail "server-start: $1 $2: no ready line: $(tail -n 5 "$SRV_LOG" | tr '\n' ' ')"
			kill -KILL "$SRV_PID" 2>/dev/null
			SRV_PID=''
			return 1
		fi
		sleep 0.2
	done
	echo "server $1 ($2): $line"
}
srv_calls() { # the server's calls.total (SIGUSR1 prints "nfsd-stat NAME VALUE" lines)
	local n0 i v=''
	n0=$(wc -l <"$SRV_LOG")
	kill -USR1 "$SRV_PID" 2>/dev/null || return 1
	for ((i = 0; i < 50; i++)); do
		sleep 0.2
		v=$(tail -n +$((n0 + 1)) "$SRV_LOG" | awk '$1 == "nfsd-stat" && $2 == "calls.total" {print $3; exit}')
		[ -z "$v" ] || break
	done
	echo "$v"
}
srv_stop() {
	local i
	[ -n "$SRV_PID" ] || return 0
	kill -TERM "$SRV_PID" 2>/dev/null
	for ((i = 0; i < 100; i++)); do
		kill -0 "$SRV_PID" 2>/dev/null || break
		sleep 0.2
	done
	if kill -KILL "$SRV_PID" 2>/dev/null; then
		fail "server-exit: still running 20 s after SIGTERM (killed)"
		wait "$SRV_PID" 2>/dev/null
	else
		wait "$SRV_PID" || fail "server-exit: exit status $? after SIGTERM"
	fi
	SRV_PID=''
}

# ---- the workload ---------------------------------------------------------------------------------
rpc_calls() { awk '$1 == "rpc" {print $2; exit}' /proc/net/rpc/nfs; }
# phase RECORD-PREFIX UID NAME CMD...: caches dropped, CMD run as UID, time and NFS calls recorded
phase() {
	local pre=$1 uid=$2 name=$3 c0 t0 ms rc as=()
	shift 3
	[ "$uid" -eq 0 ] || as=(setpriv --reuid="$uid" --regid="$uid" --clear-groups)
	sync
	echo 3 >/proc/sys/vm/drop_caches
	c0=$(rpc_calls)
	t0=$(now_ms)
	timeout -k 5 "$PHASE_TIMEOUT" "${as[@]}" "$@"
	rc=$?
	sync
	ms=$(($(now_ms) - t0))
	[ "$rc" -eq 0 ] || fail "phase $name as uid $uid: exit status $rc"
	echo "meta $pre $uid $name $ms $(($(rpc_calls) - c0))" | tee -a "$RESULTS"
}
workload() { # RECORD-PREFIX UID
	local w=$MNT/u$2 n
	mkdir "$w" && chown "$2:$2" "$w" || {
		fail "workdir $w"
		return
	}
	phase "$1" "$2" untar tar -xf "$STATE/tree.tar" -C "$w"
	# shellcheck disable=SC2016 # expanded by the inner shell
	phase "$1" "$2" stat bash -c 'find "$1" -print0 | xargs -0 stat -c "%i %s %Y %u" >/dev/null' _ "$w/tree"
	# shellcheck disable=SC2016
	phase "$1" "$2" rename bash -c 'find "$1" -type f -print0 | xargs -0 rename.ul m- n-' _ "$w/tree"
	n=$(find "$w/tree" -type f -name 'n-*' | wc -l)
	[ "$n" -eq "$NTOTAL" ] && [ -z "$(find "$w/tree" -name 'm-*' | head -n 1)" ] ||
		fail "after rename: $n files named n-*, expected $NTOTAL and no m-*"
	phase "$1" "$2" rm rm -rf "$w/tree"
	[ -z "$(ls -A "$w")" ] || fail "after rm -rf: $w still holds $(ls -A "$w" | head -n 3 | tr '\n' ' ')"
	rmdir "$w" || fail "rmdir $w"
}
run() { # BACKEND ROUND new|old
	local be=$1 r=$2 b=$3 c0 sc uid
	RFAIL=0
	NRUNS=$((NRUNS + 1))
	SRV_PREFIX=()
	if [ "${RPCRDMA_META_STRACE:-0}" = 1 ] && [ "$r" -eq "$ROUNDS" ]; then
		SRV_PREFIX=(strace -c -f -o "$STATE/strace-$b-$be.txt")
	fi
	vm_log "run $be round $r: $b"
	if srv_start "$b" "$be"; then
		c0=$(rpc_calls)
		if timeout -k 5 60 mount -t nfs -o "vers=3,proto=rdma,port=$PORT,mountport=$MPORT,mountproto=tcp,nolock" \
			"$ADDR:/export" "$MNT"; then
			if awk -v m="$MNT" '$1 == "device" {on = ($5 == m)} on && $1 == "xprt:" {print $2; exit}' \
				/proc/self/mountstats | grep -qx rdma; then
				for uid in $UIDS; do workload "$be $r $b" "$uid"; done
			else
				fail "mount: no 'xprt: rdma' in /proc/self/mountstats"
			fi
			sc=$(srv_calls)
			echo "server $be $r $b calls.total=${sc:-?} client=$(($(rpc_calls) - c0))"
			timeout -k 5 60 umount "$MNT" || {
				fail "umount"
				umount -f -l "$MNT"
			}
		else
			fail "mount $ADDR:/export failed"
		fi
		srv_stop
		if [ -n "${SRV_PREFIX[*]}" ]; then
			echo "---- strace -c -f of the $b server ($be backend, round $r):"
			sed 's/^/  | /' "$STATE/strace-$b-$be.txt"
		fi
	fi
	if [ "$RFAIL" -ne 0 ]; then
		NFAILED=$((NFAILED + 1))
		echo "---- server log (tail):"
		grep -v '^nfsd-stat ' "$SRV_LOG" | tail -n 20 | sed 's/^/  | /'
	fi
}

# ---- the table --------------------------------------------------------------------------------------
# Busy-box awk: the fields are plain integers (no leading zeros: "00010" would read as 8).
summary() {
	awk '
	function med(list,   n, a, i, j, t) {
		n = split(list, a, " ")
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
		if (n == 0) return 0
		if (n % 2) return a[(n + 1) / 2] + 0
		return (a[n / 2] + a[n / 2 + 1]) / 2
	}
	function spread(list,   n, a, i, lo, hi, m) {
		n = split(list, a, " ")
		lo = hi = a[1] + 0
		for (i = 2; i <= n; i++) { if (a[i] + 0 < lo) lo = a[i] + 0; if (a[i] + 0 > hi) hi = a[i] + 0 }
		m = med(list)
		return m > 0 ? (hi - lo) / m : 0
	}
	function add(k, ms, calls) { MS[k] = MS[k] " " ms; CALLS[k] = CALLS[k] " " calls }
	$1 == "meta" {
		be = $2; r = $3; b = $4; u = $5; p = $6
		add(be SUBSEP u SUBSEP p SUBSEP b, $7, $8)
		R[be SUBSEP u SUBSEP p SUBSEP b SUBSEP r] = $7; RS[r] = 1
		R[be SUBSEP u SUBSEP "total" SUBSEP b SUBSEP r] += $7
		T[be SUBSEP u SUBSEP r SUBSEP b] += $7; TC[be SUBSEP u SUBSEP r SUBSEP b] += $8
		if (!((be SUBSEP u) in SEEN)) { SEEN[be SUBSEP u] = 1; ORDER[++n] = be SUBSEP u }
		if (!(p in PSEEN)) { PSEEN[p] = 1; PH[++np] = p }
	}
	END {
		for (k in T) { split(k, f, SUBSEP); add(f[1] SUBSEP f[2] SUBSEP "total" SUBSEP f[4], T[k], TC[k]) }
		PH[++np] = "total"
		printf "%-7s %-5s %-7s %9s %9s %6s %8s %8s %8s %8s %6s %7s  %s\n", "backend", "uid", "phase", "old ms", "new ms", "ratio", "calls o", "calls n", "us/c old", "us/c new", "ratio", "spread", "paired: median (min-max)"
		for (i = 1; i <= n; i++) {
			split(ORDER[i], g, SUBSEP)
			for (j = 1; j <= np; j++) {
				ko = g[1] SUBSEP g[2] SUBSEP PH[j] SUBSEP "old"; kn = g[1] SUBSEP g[2] SUBSEP PH[j] SUBSEP "new"
				if (!(ko in MS) || !(kn in MS)) continue
				mo = med(MS[ko]); mn = med(MS[kn]); co = med(CALLS[ko]); cn = med(CALLS[kn])
				uo = co > 0 ? mo * 1000 / co : 0; un = cn > 0 ? mn * 1000 / cn : 0
				so = spread(MS[ko]); sn = spread(MS[kn])
				# new / old of the two runs of one round (next to each other in time)
				pl = ""; lo = 1e9; hi = 0
				for (r in RS) {
					a = R[g[1] SUBSEP g[2] SUBSEP PH[j] SUBSEP "old" SUBSEP r] + 0
					b = R[g[1] SUBSEP g[2] SUBSEP PH[j] SUBSEP "new" SUBSEP r] + 0
					if (a <= 0 || b <= 0) continue
					pl = pl " " b / a; if (b / a < lo) lo = b / a; if (b / a > hi) hi = b / a
				}
				printf "%-7s %-5s %-7s %9d %9d %6.2f %8d %8d %8.0f %8.0f %6.2f %6.0f%%  ", g[1], g[2], PH[j], mo, mn, (mo > 0 ? mn / mo : 0), co, cn, uo, un, (uo > 0 ? un / uo : 0), 100 * (so > sn ? so : sn)
				if (pl == "") print "-"; else printf "%.2f (%.2f-%.2f)\n", med(pl), lo, hi
			}
		}
	}' "$RESULTS"
}

# ---- main ---------------------------------------------------------------------------------------------
for b in new old; do
	[ -x "${BIN[$b]}" ] || {
		echo "nfs-meta: ${BIN[$b]} is not an executable inside the VM"
		exit 1
	}
	if ldd "${BIN[$b]}" 2>&1 | grep -q 'not found'; then
		echo "nfs-meta: ${BIN[$b]}: libraries missing in the VM: $(ldd "${BIN[$b]}" | grep 'not found' | tr '\n' ' ')"
		exit 1
	fi
done
command -v rename.ul >/dev/null && command -v setpriv >/dev/null || {
	echo "nfs-meta: the guest image lacks rename.ul or setpriv (util-linux)"
	exit 1
}
setup || {
	echo "nfs-meta: setup failed (modules, $DIRB, the tree in $STATE)"
	exit 1
}
: >"$RESULTS"
echo "guest: $(nproc) vCPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); backends: $BACKENDS; rounds: $ROUNDS; uids: $UIDS"
for be in $BACKENDS; do
	for ((r = 1; r <= ROUNDS; r++)); do
		order="old new"
		[ $((r % 2)) -eq 0 ] && order="new old"
		for b in $order; do run "$be" "$r" "$b"; done
	done
done
echo
echo "nfs-meta: medians over $ROUNDS rounds, $NTOTAL files; ratio = new / old (above 1: new is slower); us/c = microseconds per NFS call; spread = the larger of the two binaries' (max - min) / median; paired = new / old within each round"
summary
echo "nfs-meta: $NRUNS runs, $NFAILED failed"
[ "$NFAILED" -eq 0 ]
