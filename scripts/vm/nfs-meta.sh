#!/bin/bash
# scripts/vm/nfs-meta.sh — guest payload (run INSIDE the VM by run-in-vm.sh): a metadata-heavy
# workload from the Linux NFSv3 client (proto=rdma) against two servers in one boot, alternately:
# rpcrdma-nfsd against the kernel's nfsd, or two builds of rpcrdma-nfsd against each other.
#
#   scripts/vm/run-in-vm.sh scripts/vm/nfs-meta.sh BINARY kernel      ours / kernel nfsd
#   scripts/vm/run-in-vm.sh scripts/vm/nfs-meta.sh NEW-BINARY OLD-BINARY   new / old
#
# Servers. `kernel`: the kernel nfsd (knfsd.sh) exporting a tmpfs (memory backend runs:
# /srv/kexport; dir backend runs: /srv/nfsd-dir; the same file system either way), emptied
# before each run. A BINARY is started with `--provider rdma --bind ADDR --port P --mount-port M
# --no-rpcbind`, `--backend memory` or `--backend dir:/srv/nfs-meta` (a guest tmpfs), and
# `--export '/export:*(rw,no_root_squash)'` (`--export /export` for a build without export
# options, which never squashed), plus RPCRDMA_META_SERVER_ARGS. Devices: rxe (server and
# client in the root netns, 10.0.2.15) and siw (server in netns peer on siw1 10.0.3.2, the client
# on siw0).
# Rounds: for each device x backend, RPCRDMA_META_ROUNDS rounds (default 3); each round runs both
# servers, the order swapped every round (A B, B A, A B: a drift of the host's load falls on
# both). With RPCRDMA_META_HOG=N, N busy loops (one per vCPU when N is "cpus") run in the guest
# for the whole script: the servers share their cores with other work.
# One run: start the server, mount (vers=3,proto=rdma,...,mountproto=tcp,nolock), then for each
# uid of RPCRDMA_META_UIDS (default "0"; a non-root uid runs under `setpriv --reuid=U --regid=U
# --clear-groups` in a directory it owns) these phases:
#   untar    tar -xf of a tree of RPCRDMA_META_DIRS x RPCRDMA_META_FILES small files (default
#            40 x 50 = 2000, 1-1500 octets; the tarball is made once per boot in /run/nfs-meta)
#   diff     diff -r of the source tree against the untarred one (the client's caches as the
#            untar left them: what it still trusts is not read again)
#   stat     find TREE -print0 | xargs -0 stat
#   rename   find TREE -type f -print0 | xargs -0 rename.ul m- n- (one rename(2) per file)
#   walk     after umount + mount (nothing cached): find TREE -print0 | xargs -0 stat
#   rm       rm -rf TREE
# With RPCRDMA_META_DROP=each the client's caches are dropped (sync; drop_caches 3) before
# every phase, so that every lookup and attribute comes from the server (the per-call cost
# alone); by default only before the untar. Each phase is timed (date +%s%3N) and its NFS calls
# counted from the client's /proc/net/rpc/nfs: all calls, and GETATTR, LOOKUP, READ, READDIR,
# READDIRPLUS. Checks: the server starts, the mount is "xprt: rdma", every phase exits 0, diff
# finds the trees equal, after rename the tree holds exactly the expected files all renamed,
# after rm nothing is left.
#
# Output: "meta DEV/BACKEND ROUND LABEL UID PHASE MS CALLS GETATTR LOOKUP READ READDIR
# READDIRPLUS" per phase, "server DEV/BACKEND ROUND LABEL calls=N client=N [on_reactor=N]" per
# run (on_reactor: rpcrdma-nfsd's calls of the `dir:` backend served on the reactor; then its
# reactors' counters: iterations, busy_iterations, idle_yields, idle_sleeps, idle_wakeups), then
# a table
# per device/backend x uid x phase: median ms per server, A / B ratio of the medians, median
# calls, microseconds per call, the spread (the larger of the two servers' (max - min) / median
# over the rounds) and the paired ratio (A / B of the two runs of one round, next to each other
# in time: median and range); then the client's GETATTR / LOOKUP / READ counts per phase for
# both servers and their ratios. A time ratio means something only where it differs from 1 by
# more than the spread and the paired range lies wholly on one side of 1. Last line "nfs-meta: N
# runs, N failed"; exit 1 when a check failed, 2 usage.
# Knobs: RPCRDMA_META_DEVS ("rxe"; "rxe siw"), RPCRDMA_META_BACKENDS ("memory dir"),
# RPCRDMA_META_ROUNDS (3), RPCRDMA_META_UIDS ("0"), RPCRDMA_META_DIRS (40), RPCRDMA_META_FILES
# (50 per directory), RPCRDMA_META_DROP (first|each), RPCRDMA_META_HOG (0), RPCRDMA_META_SERVER_ARGS,
# RPCRDMA_META_MOUNT_OPTS (more mount options, e.g. actimeo=600: attribute cache timeouts long
# enough that a phase's length does not decide which cached attributes expire),
# RPCRDMA_META_PHASE_TIMEOUT (s, 600), RPCRDMA_META_STRACE=1 (the last run of a binary runs under
# `strace -c -f`, its summary printed: where the server's system calls go),
# RPCRDMA_META_TRACE=1 or rename (the client's nfs trace events over untar and diff, or over
# stat and rename; see trace_on),
# RPCRDMA_META_SCHED=1 (per phase, the scheduler's view of the threads that serve the calls, from
# /proc/PID/task/TID/schedstat and status: CPU time, time runnable but waiting for a CPU, time
# slices, voluntary and involuntary switches, summed per group: rpcrdma-nfsd's threads by name
# ("srv:NAME"), the kernel nfsd's threads ("knfsd"), ksoftirqd/N ("ksoftirqd"), kworkers
# ("kworker"), the CPU hog ("hog"), and every CPU's run queue from /proc/schedstat ("cpus": the
# CPU time and run-queue wait of all tasks, where the kernel keeps that accounting); lines
# "sched DEV/BACKEND ROUND LABEL UID PHASE GROUP EXEC_US
# WAIT_US SLICES VOL INVOL" and a table per server and group: medians over the rounds of the
# six phases' totals and the wait per NFS call).
set -u
if [ $# -ne 2 ]; then
	echo "usage: nfs-meta.sh BINARY kernel | nfs-meta.sh NEW-BINARY OLD-BINARY" >&2
	exit 2
fi
HERE=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
# shellcheck source=scripts/vm/lib.sh
. "$HERE/lib.sh"
# shellcheck source=scripts/vm/knfsd.sh
. "$HERE/knfsd.sh"
# shellcheck disable=SC2034 # read by vm_log in lib.sh
VM_TAG=nfs-meta
if [ "$2" = kernel ]; then LA=ours LB=kernel; else LA=new LB=old; fi
declare -A BIN=([$LA]=$1 [$LB]=$2)
DEVS=${RPCRDMA_META_DEVS:-rxe}
BACKENDS=${RPCRDMA_META_BACKENDS:-memory dir}
ROUNDS=${RPCRDMA_META_ROUNDS:-3}
UIDS=${RPCRDMA_META_UIDS:-0}
NDIRS=${RPCRDMA_META_DIRS:-40}
NFILES=${RPCRDMA_META_FILES:-50}
DROP=${RPCRDMA_META_DROP:-first}
PHASE_TIMEOUT=${RPCRDMA_META_PHASE_TIMEOUT:-600}
PORT=20051 MPORT=20050
STATE=/run/nfs-meta DIRB=/srv/nfs-meta MNT=/mnt/meta
RESULTS=$STATE/results
NRUNS=0 NFAILED=0 RFAIL=0 HOGS=()
SCHED=${RPCRDMA_META_SCHED:-0}
now_ms() { date +%s%3N; }
fail() {
	echo "FAIL $*"
	RFAIL=$((RFAIL + 1))
}

# ---- once per boot: modules, the backends' file systems, the tree and its tarball ----------------
setup() {
	local d s
	knfsd_setup || return 1
	[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
	mkdir -p "$DIRB" "$MNT" || return 1
	mountpoint -q "$DIRB" || mount -t tmpfs -o size=512m,mode=0755 tmpfs "$DIRB" || return 1
	if [ ! -f "$STATE/tree.tar" ]; then
		rm -rf "$STATE/src"
		mkdir -p "$STATE/src/tree" || return 1
		# one split per directory (an exec costs ~20 ms under TCG): NFILES files of one size
		# each, the size varying from directory to directory
		for ((d = 0; d < NDIRS; d++)); do
			mkdir "$STATE/src/tree/d$d" || return 1
			s=$(((d * 613 + 11) % 1500 + 1))
			head -c $((s * NFILES)) /dev/urandom | split -b "$s" -d -a 4 - "$STATE/src/tree/d$d/m-" || return 1
		done
		tar -C "$STATE/src" -cf "$STATE/tree.tar" tree || return 1
	fi
	NTOTAL=$(find "$STATE/src/tree" -type f | wc -l)
	[ "$NTOTAL" -eq $((NDIRS * NFILES)) ] || return 1
	echo "tree: $NTOTAL files in $NDIRS directories, $(du -sk "$STATE/src/tree" | cut -f1) KiB, tarball $(($(stat -c %s "$STATE/tree.tar") / 1024)) KiB"
}

# ---- one server: LABEL DEV BACKEND; sets SRV_ADDR SRV_PORT SRV_MPORT SRV_PATH SRV_NS ---------------
SRV_PID='' SRV_LOG='' SRV_PREFIX=()
srv_start() {
	local l=$1 dev=$2 be=$3 ns=() exp line t0
	case $dev in
	rxe) SRV_ADDR=$VM_RXE_ADDR SRV_NS=root ;;
	siw)
		SRV_ADDR=$VM_SIW_PEER_ADDR SRV_NS=peer
		ns=(ip netns exec peer)
		;;
	esac
	if [ "${BIN[$l]}" = kernel ]; then
		SRV_PORT=20049 SRV_MPORT=20048 SRV_PID=''
		if [ "$be" = memory ]; then SRV_PATH=$KEXPORT; else SRV_PATH=$NFSD_DIR; fi
		find "$SRV_PATH" -mindepth 1 -delete
		knfsd_start "$SRV_NS" || {
			fail "server-start: kernel nfsd ($SRV_NS)"
			return 1
		}
		SRV_CALLS0=$(knfsd_calls "$SRV_NS")
		return 0
	fi
	SRV_PORT=$PORT SRV_MPORT=$MPORT SRV_PATH=/export
	if "${BIN[$l]}" --help 2>&1 | grep -q -- --exports; then exp='/export:*(rw,no_root_squash)'; else exp=/export; fi
	if [ "$be" = memory ]; then be=memory; else
		find "$DIRB" -mindepth 1 -delete
		be=dir:$DIRB
	fi
	SRV_LOG=$STATE/server-$l-$dev-${be%%:*}.log
	: >"$SRV_LOG"
	t0=$(now_ms)
	# shellcheck disable=SC2086 # RPCRDMA_META_SERVER_ARGS: more arguments, split on purpose
	"${ns[@]}" "${SRV_PREFIX[@]}" "${BIN[$l]}" --provider rdma --bind "$SRV_ADDR" --port "$PORT" \
		--mount-port "$MPORT" --export "$exp" --backend "$be" --no-rpcbind ${RPCRDMA_META_SERVER_ARGS:-} \
		>"$SRV_LOG" 2>&1 &
	SRV_PID=$!
	until line=$(grep -m1 '^rpcrdma-nfsd: ready ' "$SRV_LOG"); do
		if ! kill -0 "$SRV_PID" 2>/dev/null || [ $(($(now_ms) - t0)) -gt 30000 ]; then
			fail "server-start: $l $dev $be: no ready line: $(tail -n 5 "$SRV_LOG" | tr '\n' ' ')"
			kill -KILL "$SRV_PID" 2>/dev/null
			SRV_PID=''
			return 1
		fi
		sleep 0.2
	done
	echo "server $l ($dev $be): $line"
}
srv_calls() { # the calls the server answered in this run
	local n0 i v=''
	if [ -z "$SRV_PID" ]; then
		echo $(($(knfsd_calls "$SRV_NS") - SRV_CALLS0))
		return
	fi
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
do_mount() {
	timeout -k 5 60 mount -t nfs -o "vers=3,proto=rdma,port=$SRV_PORT,mountport=$SRV_MPORT,mountproto=tcp,nolock${RPCRDMA_META_MOUNT_OPTS:+,$RPCRDMA_META_MOUNT_OPTS}" \
		"$SRV_ADDR:$SRV_PATH" "$MNT" || {
		fail "mount $SRV_ADDR:$SRV_PATH"
		return 1
	}
	awk -v m="$MNT" '$1 == "device" {on = ($5 == m)} on && $1 == "xprt:" {print $2; exit}' \
		/proc/self/mountstats | grep -qx rdma || {
		fail "mount: no 'xprt: rdma' in /proc/self/mountstats"
		return 1
	}
}
# opstats RECORD-PREFIX WHEN: the client's per-operation counts and mean times on the mount
# (/proc/self/mountstats: operations, mean round trip and mean execution in microseconds; the
# round trip is the call on the wire to its reply, execution adds the client's queueing)
opstats() {
	awk -v m="$MNT" -v pre="$1" -v when="$2" '
	$1 == "device" {on = ($5 == m)}
	on && $1 ~ /^[A-Z]+:$/ && $2 > 0 && NF >= 9 {
		op = substr($1, 1, length($1) - 1)
		printf "ops %s %s %s %d rtt_us=%d exe_us=%d\n", pre, when, op, $2, $7 * 1000 / $2, $8 * 1000 / $2
	}' /proc/self/mountstats
}
do_umount() {
	timeout -k 5 60 umount "$MNT" || {
		fail "umount"
		umount -f -l "$MNT"
	}
}

# ---- the workload ---------------------------------------------------------------------------------
# the client's NFSv3 counters: all calls, GETATTR LOOKUP READ READDIR READDIRPLUS ("proc3 22 null
# getattr setattr lookup access readlink read write create mkdir symlink mknod remove rmdir rename
# link readdir readdirplus ...")
rpc_counts() { awk '$1 == "rpc" {c = $2} $1 == "proc3" {print c, $4, $6, $9, $19, $20; exit}' /proc/net/rpc/nfs; }
rpc_calls() { awk '$1 == "rpc" {print $2; exit}' /proc/net/rpc/nfs; }
# sched_snap: "GROUP EXEC_NS WAIT_NS SLICES VOL INVOL" per task of the groups RPCRDMA_META_SCHED
# describes (bash builtins only: no process started while a phase runs)
sched_snap() {
	local p t c g e w n v i line hogs=" ${HOGS[*]} "
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		read -r c <"/proc/$p/comm" 2>/dev/null || continue
		if [ -n "$SRV_PID" ] && [ "$p" = "$SRV_PID" ]; then g=srv
		elif [ "$c" = nfsd ]; then g=knfsd
		elif [ "${c#ksoftirqd/}" != "$c" ]; then g=ksoftirqd
		elif [ "${c#kworker/}" != "$c" ]; then g=kworker
		elif [ "${hogs/ $p /}" != "$hogs" ]; then g=hog
		else continue; fi
		for t in /proc/"$p"/task/[0-9]*; do
			read -r e w n <"$t/schedstat" 2>/dev/null || continue
			v=0 i=0
			while read -r line; do
				case $line in
				voluntary_ctxt_switches:*) v=${line##*[[:space:]]} ;;
				nonvoluntary_ctxt_switches:*) i=${line##*[[:space:]]} ;;
				esac
			done <"$t/status"
			if [ "$g" = srv ]; then read -r c <"$t/comm"; echo "srv:${c// /_} $e $w $n $v $i"
			else echo "$g $e $w $n $v $i"; fi
		done
	done
	# every CPU's run queue (/proc/schedstat, "cpuN" lines: fields 7-9 are the CPU time, run
	# delay and slices of all its tasks): the wait of everyone, ours and the neighbours'
	local name f1 f2 f3 f4 f5 f6 rest se=0 sw=0 sn=0
	while read -r name f1 f2 f3 f4 f5 f6 e w n rest; do
		case $name in cpu[0-9]*) se=$((se + e)) sw=$((sw + w)) sn=$((sn + n)) ;; esac
	done </proc/schedstat 2>/dev/null
	echo "cpus $se $sw $sn 0 0"
}
# sched_diff RECORD-PREFIX BEFORE AFTER: the groups' sums of AFTER - BEFORE (tasks by their line
# order within a group do not matter: sums), as "sched" records
sched_diff() {
	awk -v pre="$1" '
	FNR == NR { for (i = 2; i <= 6; i++) B[$1, i] += $i; G[$1] = 1; next }
	{ for (i = 2; i <= 6; i++) A[$1, i] += $i; G[$1] = 1 }
	END { for (g in G) printf "sched %s %s %d %d %d %d %d\n", pre, g, (A[g, 2] - B[g, 2]) / 1000, (A[g, 3] - B[g, 3]) / 1000, A[g, 4] - B[g, 4], A[g, 5] - B[g, 5], A[g, 6] - B[g, 6] }' "$2" "$3"
}
# phase RECORD-PREFIX UID NAME CMD...: CMD run as UID (caches dropped first when asked), time and
# NFS calls recorded
phase() {
	local pre=$1 uid=$2 name=$3 c0 c1 t0 ms rc as=() i d=''
	shift 3
	[ "$uid" -eq 0 ] || as=(setpriv --reuid="$uid" --regid="$uid" --clear-groups)
	if [ "$DROP" = each ] || [ "$name" = untar ]; then
		sync
		echo 3 >/proc/sys/vm/drop_caches
	fi
	read -ra c0 <<<"$(rpc_counts)"
	[ "$SCHED" = 1 ] && sched_snap >"$STATE/sched0"
	t0=$(now_ms)
	timeout -k 5 "$PHASE_TIMEOUT" "${as[@]}" "$@"
	rc=$?
	sync
	ms=$(($(now_ms) - t0))
	[ "$SCHED" = 1 ] && sched_snap >"$STATE/sched1"
	read -ra c1 <<<"$(rpc_counts)"
	[ "$rc" -eq 0 ] || fail "phase $name as uid $uid: exit status $rc"
	for ((i = 0; i < 6; i++)); do d="$d $((c1[i] - c0[i]))"; done
	echo "meta $pre $uid $name $ms$d" | tee -a "$RESULTS"
	[ "$SCHED" != 1 ] || sched_diff "$pre $uid $name" "$STATE/sched0" "$STATE/sched1" >>"$STATE/sched"
}
# RPCRDMA_META_TRACE=1 (or untar): the client's nfs trace events (tracefs events/nfs: attribute
# updates with the cached change attribute and cache_validity flags, setattr, writeback,
# invalidations) recorded over the untar and diff phases and printed as "trace PREFIX UID LINE"
# (for a small tree: RPCRDMA_META_DIRS=1 RPCRDMA_META_FILES=5); RPCRDMA_META_TRACE=rename: over
# the stat and rename phases instead
TRACEFS=/sys/kernel/tracing
trace_wanted() { # PHASES (untar or rename)
	case "${RPCRDMA_META_TRACE:-0}" in
	1 | untar) [ "$1" = untar ] ;;
	rename) [ "$1" = rename ] ;;
	*) return 1 ;;
	esac
}
trace_on() { # PHASES
	trace_wanted "$1" || return 0
	[ -d "$TRACEFS/events" ] || mount -t tracefs nodev "$TRACEFS" || return 0
	echo 0 >"$TRACEFS/tracing_on"
	echo 65536 >"$TRACEFS/buffer_size_kb"
	: >"$TRACEFS/trace"
	echo 1 >"$TRACEFS/events/nfs/enable"
	echo 1 >"$TRACEFS/tracing_on"
}
trace_off() { # PHASES RECORD-PREFIX UID
	trace_wanted "$1" && [ -d "$TRACEFS/events" ] || return 0
	local keep='.'
	# over the renames only what explains a GETATTR: the revalidations (each sends one), the
	# renames and the directories' cache flags
	[ "$1" = rename ] && keep='nfs_revalidate_inode_enter|nfs_rename_enter|type=4 \(DIR\)'
	shift
	echo 0 >"$TRACEFS/tracing_on"
	echo 0 >"$TRACEFS/events/nfs/enable"
	grep -v '^#' "$TRACEFS/trace" | grep -E "$keep" | sed "s|^|trace $1 $2 |"
}
workload() { # RECORD-PREFIX UID
	local w=$MNT/u$2 n
	mkdir "$w" && chown "$2:$2" "$w" || {
		fail "workdir $w"
		return
	}
	trace_on untar
	phase "$1" "$2" untar tar -xf "$STATE/tree.tar" -C "$w"
	phase "$1" "$2" diff diff -r "$STATE/src/tree" "$w/tree"
	trace_off untar "$1" "$2"
	trace_on rename
	# shellcheck disable=SC2016 # expanded by the inner shell
	phase "$1" "$2" stat bash -c 'find "$1" -print0 | xargs -0 stat -c "%i %s %Y %u" >/dev/null' _ "$w/tree"
	# shellcheck disable=SC2016
	phase "$1" "$2" rename bash -c 'find "$1" -type f -print0 | xargs -0 rename.ul m- n-' _ "$w/tree"
	trace_off rename "$1" "$2"
	opstats "$1" untar-to-rename
	do_umount
	do_mount || return
	# shellcheck disable=SC2016
	phase "$1" "$2" walk bash -c 'find "$1" -print0 | xargs -0 stat -c "%i %s %Y %u" >/dev/null' _ "$w/tree"
	n=$(find "$w/tree" -type f -name 'n-*' | wc -l)
	[ "$n" -eq "$NTOTAL" ] && [ -z "$(find "$w/tree" -name 'm-*' | head -n 1)" ] ||
		fail "after rename: $n files named n-*, expected $NTOTAL and no m-*"
	phase "$1" "$2" rm rm -rf "$w/tree"
	[ -z "$(ls -A "$w")" ] || fail "after rm -rf: $w still holds $(ls -A "$w" | head -n 3 | tr '\n' ' ')"
	rmdir "$w" || fail "rmdir $w"
}
run() { # DEV BACKEND ROUND LABEL
	local dev=$1 be=$2 r=$3 l=$4 c0 sc uid
	RFAIL=0
	NRUNS=$((NRUNS + 1))
	SRV_PREFIX=()
	if [ "${RPCRDMA_META_STRACE:-0}" = 1 ] && [ "$r" -eq "$ROUNDS" ] && [ "${BIN[$l]}" != kernel ]; then
		SRV_PREFIX=(strace -c -f -o "$STATE/strace-$l-$dev-$be.txt")
	fi
	vm_log "run $dev/$be round $r: $l"
	if srv_start "$l" "$dev" "$be"; then
		c0=$(rpc_calls)
		if do_mount; then
			for uid in $UIDS; do workload "$dev/$be $r $l" "$uid"; done
			sc=$(srv_calls)
			# rpcrdma-nfsd's calls served on the reactor by a worker-mode store (`--dir-calls`)
			onr=''
			# and its reactors' idle counters (iterations, busy ones, yields, sleeps, wake-ups by
			# a descriptor)
			[ -n "$SRV_PID" ] && onr=" on_reactor=$(awk '$1 == "nfsd-stat" && $2 == "reactor.calls" {v = $3} END {print v}' "$SRV_LOG")$(awk '
				$1 == "nfsd-stat" && $2 ~ /^reactors\./ {v[substr($2, 10)] = $3}
				END {for (k in v) printf " %s=%s", k, v[k]}' "$SRV_LOG")"
			echo "server $dev/$be $r $l calls=${sc:-?} client=$(($(rpc_calls) - c0))$onr"
			do_umount
		fi
		srv_stop
		if [ -n "${SRV_PREFIX[*]}" ]; then
			echo "---- strace -c -f of the $l server ($dev $be backend, round $r):"
			sed 's/^/  | /' "$STATE/strace-$l-$dev-$be.txt"
		fi
	fi
	if [ "$RFAIL" -ne 0 ]; then
		NFAILED=$((NFAILED + 1))
		if [ -n "$SRV_LOG" ] && [ "${BIN[$l]}" != kernel ]; then
			echo "---- server log (tail):"
			grep -v '^nfsd-stat ' "$SRV_LOG" | tail -n 20 | sed 's/^/  | /'
		fi
	fi
}
hog_start() {
	mapfile -t HOGS < <(busy_loops "${RPCRDMA_META_HOG:-0}")
	[ ${#HOGS[@]} -eq 0 ] || echo "hog: ${#HOGS[@]} busy loops beside the servers"
}
hog_stop() { [ ${#HOGS[@]} -eq 0 ] || kill "${HOGS[@]}" 2>/dev/null; }
# ---- the table --------------------------------------------------------------------------------------
# Busy-box awk: the fields are plain integers (no leading zeros: "00010" would read as 8).
# The median of a space-separated list (both tables use it).
AWK_MED='
	function med(list,   n, a, i, j, t) {
		n = split(list, a, " ")
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
		if (n == 0) return 0
		if (n % 2) return a[(n + 1) / 2] + 0
		return (a[n / 2] + a[n / 2 + 1]) / 2
	}'
summary() {
	awk "$AWK_MED"'
	function spread(list,   n, a, i, lo, hi, m) {
		n = split(list, a, " ")
		lo = hi = a[1] + 0
		for (i = 2; i <= n; i++) { if (a[i] + 0 < lo) lo = a[i] + 0; if (a[i] + 0 > hi) hi = a[i] + 0 }
		m = med(list)
		return m > 0 ? (hi - lo) / m : 0
	}
	function add(k, ms, calls) { MS[k] = MS[k] " " ms; CALLS[k] = CALLS[k] " " calls }
	$1 == "meta" {
		be = $2; r = $3; b = ($4 == la ? "a" : "b"); u = $5; p = $6
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
		printf "%-12s %-5s %-7s %9s %9s %6s %8s %8s %8s %8s %6s %7s  %s\n", "dev/backend", "uid", "phase", lb " ms", la " ms", "ratio", "calls " substr(lb, 1, 1), "calls " substr(la, 1, 1), "us/c " substr(lb, 1, 1), "us/c " substr(la, 1, 1), "ratio", "spread", "paired: median (min-max)"
		for (i = 1; i <= n; i++) {
			split(ORDER[i], g, SUBSEP)
			for (j = 1; j <= np; j++) {
				ko = g[1] SUBSEP g[2] SUBSEP PH[j] SUBSEP "b"; kn = g[1] SUBSEP g[2] SUBSEP PH[j] SUBSEP "a"
				if (!(ko in MS) || !(kn in MS)) continue
				mo = med(MS[ko]); mn = med(MS[kn]); co = med(CALLS[ko]); cn = med(CALLS[kn])
				uo = co > 0 ? mo * 1000 / co : 0; un = cn > 0 ? mn * 1000 / cn : 0
				so = spread(MS[ko]); sn = spread(MS[kn])
				# new / old of the two runs of one round (next to each other in time)
				pl = ""; lo = 1e9; hi = 0
				for (r in RS) {
					a = R[g[1] SUBSEP g[2] SUBSEP PH[j] SUBSEP "b" SUBSEP r] + 0
					b = R[g[1] SUBSEP g[2] SUBSEP PH[j] SUBSEP "a" SUBSEP r] + 0
					if (a <= 0 || b <= 0) continue
					pl = pl " " b / a; if (b / a < lo) lo = b / a; if (b / a > hi) hi = b / a
				}
				printf "%-12s %-5s %-7s %9d %9d %6.2f %8d %8d %8.0f %8.0f %6.2f %6.0f%%  ", g[1], g[2], PH[j], mo, mn, (mo > 0 ? mn / mo : 0), co, cn, uo, un, (uo > 0 ? un / uo : 0), 100 * (so > sn ? so : sn)
				if (pl == "") print "-"; else printf "%.2f (%.2f-%.2f)\n", med(pl), lo, hi
			}
		}
	}' la="$LA" lb="$LB" "$RESULTS"
}

# the client's GETATTR / LOOKUP / READ per phase against each server (medians over the rounds)
counts() {
	awk -v la="$LA" -v lb="$LB" "$AWK_MED"'
	function ratio(x, y) { return y > 0 ? sprintf("%.2f", x / y) : (x > 0 ? "inf" : "-") }
	# within 10 % of the reference, or a few calls off (small counts)
	function near(x, y) { return (x - y <= y / 10 + 5) && (y - x <= y / 10 + 5) }
	# the smallest and largest of a list of counts (one per round)
	function lo(l,   a, m, i, c) { c = split(l, a, " "); m = a[1] + 0; for (i = 2; i <= c; i++) if (a[i] + 0 < m) m = a[i] + 0; return m }
	function hi(l,   a, m, i, c) { c = split(l, a, " "); m = a[1] + 0; for (i = 2; i <= c; i++) if (a[i] + 0 > m) m = a[i] + 0; return m }
	# the reference agrees with itself: its rounds within 10 % + 5 calls of each other
	function steady(l) { return near(hi(l), lo(l)) }
	# x within the range the rounds of the reference span (widened by 10 % + 5 calls)
	function inside(x, l) { return x >= lo(l) - lo(l) / 10 - 5 && x <= hi(l) + hi(l) / 10 + 5 }
	$1 == "meta" {
		k = $2 SUBSEP $5 SUBSEP $6 SUBSEP $4
		G[k] = G[k] " " $9; L[k] = L[k] " " $10; R[k] = R[k] " " $11; D[k] = D[k] " " ($12 + $13)
		if (!(($2 SUBSEP $5 SUBSEP $6) in SEEN)) { SEEN[$2 SUBSEP $5 SUBSEP $6] = 1; ORDER[++n] = $2 SUBSEP $5 SUBSEP $6 }
	}
	END {
		printf "%-12s %-5s %-7s %17s %17s %17s %11s\n", "dev/backend", "uid", "phase", "GETATTR " lb "/" la, "LOOKUP " lb "/" la, "READ " lb "/" la, "READDIR(+)"
		for (i = 1; i <= n; i++) {
			split(ORDER[i], g, SUBSEP)
			kb = ORDER[i] SUBSEP lb; ka = ORDER[i] SUBSEP la
			if (!(kb in G) || !(ka in G)) continue
			ok = near(med(G[ka]), med(G[kb])) && near(med(L[ka]), med(L[kb])) && near(med(R[ka]), med(R[kb]))
			rows++; if (ok) near_rows++
			if (steady(G[kb]) && steady(L[kb]) && steady(R[kb])) self_rows++
			inr = inside(med(G[ka]), G[kb]) && inside(med(L[ka]), L[kb]) && inside(med(R[ka]), R[kb])
			if (inr) inside_rows++
			printf "%-12s %-5s %-7s %6d %5d %4s %6d %5d %4s %6d %5d %4s %5d %5d%s\n", g[1], g[2], g[3], \
				med(G[kb]), med(G[ka]), ratio(med(G[ka]), med(G[kb])), med(L[kb]), med(L[ka]), ratio(med(L[ka]), med(L[kb])), \
				med(R[kb]), med(R[ka]), ratio(med(R[ka]), med(R[kb])), med(D[kb]), med(D[ka]), (ok ? "" : (inr ? "  <- off, within the rounds of " lb : "  <- off"))
		}
		printf "nfs-meta: counts near the reference (GETATTR, LOOKUP and READ within 10 %% + 5 calls): %d of %d rows\n", near_rows, rows
		printf "nfs-meta: the reference against itself (its rounds within 10 %% + 5 calls of each other): %d of %d rows\n", self_rows, rows
		printf "nfs-meta: counts within the range of the rounds of the reference (widened by 10 %% + 5 calls): %d of %d rows\n", inside_rows, rows
	}' "$RESULTS"
}

# RPCRDMA_META_SCHED=1: per server and thread group, medians over the rounds of the six phases'
# totals (ms of CPU, ms waiting for a CPU, wait per NFS call in us, slices, switches)
sched_table() {
	echo "nfs-meta: the scheduler, totals of the six phases (medians over the rounds): exec / wait = ms of CPU used / spent runnable waiting for one; wait/call = us of wait per NFS call of the run"
	printf "%-12s %-6s %-22s %9s %9s %9s %8s %8s %8s\n" dev/backend server group "exec ms" "wait ms" wait/call slices vol invol
	awk -v la="$LA" -v lb="$LB" "$AWK_MED"'
	$1 == "meta" { C[$2 SUBSEP $4 SUBSEP $3] += $8; next }
	$1 == "sched" {
		k = $2 SUBSEP $4 SUBSEP $7
		S[k SUBSEP $3, 1] += $8; S[k SUBSEP $3, 2] += $9; S[k SUBSEP $3, 3] += $10; S[k SUBSEP $3, 4] += $11; S[k SUBSEP $3, 5] += $12
		RND[k SUBSEP $3] = 1; if (!(k in SEEN)) { SEEN[k] = 1; ORDER[++n] = k }
	}
	END {
		for (i = 1; i <= n; i++) {
			split(ORDER[i], g, SUBSEP)
			for (f = 1; f <= 6; f++) L[f] = ""
			for (rk in RND) {
				split(rk, h, SUBSEP)
				if (h[1] != g[1] || h[2] != g[2] || h[3] != g[3]) continue
				for (f = 1; f <= 5; f++) L[f] = L[f] " " S[rk, f]
				c = C[g[1] SUBSEP g[2] SUBSEP h[4]]
				L[6] = L[6] " " (c > 0 ? S[rk, 2] / c : 0)
			}
			printf "%-12s %-6s %-22s %9.0f %9.0f %9.1f %8d %8d %8d\n", g[1], g[2], g[3], med(L[1]) / 1000, med(L[2]) / 1000, med(L[6]), med(L[3]), med(L[4]), med(L[5])
		}
	}' "$RESULTS" "$STATE/sched" | sort -k1,1 -k2,2 -k3,3
}

# ---- main ---------------------------------------------------------------------------------------------
for l in "$LA" "$LB"; do
	[ "${BIN[$l]}" = kernel ] && continue
	[ -x "${BIN[$l]}" ] || {
		echo "nfs-meta: ${BIN[$l]} is not an executable inside the VM"
		exit 1
	}
	if ldd "${BIN[$l]}" 2>&1 | grep -q 'not found'; then
		echo "nfs-meta: ${BIN[$l]}: libraries missing in the VM: $(ldd "${BIN[$l]}" | grep 'not found' | tr '\n' ' ')"
		exit 1
	fi
done
command -v rename.ul >/dev/null && command -v setpriv >/dev/null || {
	echo "nfs-meta: the guest image lacks rename.ul or setpriv (util-linux)"
	exit 1
}
setup || {
	echo "nfs-meta: setup failed (modules, exports, $DIRB, the tree in $STATE)"
	exit 1
}
: >"$RESULTS"
: >"$STATE/sched"
trap hog_stop EXIT
hog_start
echo "guest: $(nproc) vCPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); devices: $DEVS; backends: $BACKENDS; rounds: $ROUNDS; uids: $UIDS; caches dropped: $DROP"
for dev in $DEVS; do
	for be in $BACKENDS; do
		for ((r = 1; r <= ROUNDS; r++)); do
			order="$LB $LA"
			[ $((r % 2)) -eq 0 ] && order="$LA $LB"
			for l in $order; do run "$dev" "$be" "$r" "$l"; done
		done
	done
done
hog_stop
echo
echo "nfs-meta: medians over $ROUNDS rounds, $NTOTAL files${RPCRDMA_META_HOG:+, hog ${RPCRDMA_META_HOG}}; ratio = $LA / $LB (above 1: $LA is slower); us/c = microseconds per NFS call; spread = the larger of the two servers' (max - min) / median; paired = $LA / $LB within each round"
summary
echo
echo "nfs-meta: the client's calls per phase (medians), $LB / $LA and the ratio $LA / $LB"
counts
[ "$SCHED" = 1 ] && sched_table
echo "nfs-meta: $NRUNS runs, $NFAILED failed"
[ "$NFAILED" -eq 0 ]
