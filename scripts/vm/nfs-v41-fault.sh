# shellcheck shell=bash
# scripts/vm/nfs-v41-fault.sh — sourced by nfs-server.sh (inside the VM, after nfs-v41.sh): the
# Linux NFSv4.1 client recovering from faults of `rpcrdma-nfsd --nfs4` (RFC 8881 §2.10.6 slots
# as the reply cache, §2.10.13 / §18.34 connections bound to a session, §8.4.2 reclaims in the
# grace period).
#
#   run_v41_fault DEV        part v41fault/DEV (DEV rxe or siw)
#
# One server (dir backend: files and handles outlive the process; --bind 0.0.0.0 so that a
# second client can reach it at a second address; --v4-state-dir on a fresh directory), one
# mount (client A, vers=4.1,proto=rdma,port=20049), two phases:
#   1. reconnection: the server runs with --drop-every N (RPCRDMA_NFSD_V41_DROP_EVERY, default
#      20: the connection is closed instead of answering every Nth COMPOUND whose reply a slot
#      caches, after running it). Workload: nfs-workload.sh churn (RPCRDMA_NFSD_V41_FAULT_CHURN
#      iterations, default 30: its renames, removes, links, mkdir / rmdir fail when one runs
#      twice; the final tree checked against a local reference) and RPCRDMA_NFSD_V41_RECORDS
#      records (default 20), each appended once with O_APPEND and each with an exclusive create
#      (O_EXCL) of its own: the log must hold every record exactly once, in order, and a second
#      exclusive create of each must fail. Checks: nfs4_dropped, nfs4_slot_replays (the client's
#      retransmissions answered from the slot) and nfs4_binds (BIND_CONN_TO_SESSION: Linux binds
#      its new connection when SEQUENCE reports the back channel down) > 0; one reconnection per
#      drop: conn.accepted = 1 + conn.kicked, and the client's mountstats "connects" the same.
#   2. restart with reclaim: A keeps a file open for write (a descriptor of this shell, one line
#      written) and a background `flock -x` holds a lock on another file; the tree's checksums
#      are taken; the server is stopped (SIGTERM, exit status 0) and started again at once on
#      the same directory and state directory without --drop-every; A's next call finds its
#      session gone, it creates a new one and reclaims (OPEN CLAIM_PREVIOUS, LOCK reclaim),
#      then RECLAIM_COMPLETE ends the grace period (A is the only recorded client). Checks: the
#      new server's nfs4_reclaims >= 3 (two opens, one lock), nfs4_reclaims_refused = 0,
#      nfs4_locks >= 1 and nfs4_opens >= 2 (state only reclaims could have made), nfs4_grace = 0
#      within 90 s; a second client B (its own UTS name and a second server address: 10.0.2.16
#      on eth0 for rxe, 10.0.3.3 on sw1 for siw) mounted after the restart: its `flock -n -x`
#      fails while A holds the lock, succeeds once A released it; A writes a second line
#      through the descriptor it kept: B reads both lines; the tree's checksums are the same.
# Output as every part of nfs-server.sh ("## nfs-server v41fault/DEV: PASS|FAIL"). Ours only
# (`kernel` mode: SKIP). Knobs: RPCRDMA_NFSD_V41_FAULT (devices, default "rxe siw"; empty:
# none), RPCRDMA_NFSD_V41_DROP_EVERY, RPCRDMA_NFSD_V41_FAULT_CHURN, RPCRDMA_NFSD_V41_RECORDS.

V41F_STATE=/run/nfs-server/v41fault-state
# v41f_addr DEV: the second server address for client B (added once per boot); prints it
v41f_addr() {
	case $1 in
	rxe)
		ip -4 addr show dev eth0 | grep -q ' 10\.0\.2\.16/' || ip addr add 10.0.2.16/24 dev eth0 || return 1
		echo 10.0.2.16
		;;
	siw) v41_addr && echo 10.0.3.3 ;;
	esac
}

# v41f_records DIR N: N records appended with O_APPEND and N exclusive creates; each once
v41f_records() {
	local d=$1 n=$2 i bad=0 want got
	for ((i = 1; i <= n; i++)); do
		printf 'record %03d\n' "$i" >>"$d/records.log" || bad=$((bad + 1))
		(set -C && : >"$d/excl.$i") 2>/dev/null || bad=$((bad + 1))
	done
	[ "$bad" -eq 0 ] || failc records-write "$bad of the appends and exclusive creates failed"
	sync
	echo 3 >/proc/sys/vm/drop_caches
	want=$(for ((i = 1; i <= n; i++)); do printf 'record %03d\n' "$i"; done)
	got=$(cat "$d/records.log")
	if [ "$got" = "$want" ]; then
		pass records-append "$n O_APPEND records, each exactly once, in order"
	else
		failc records-append "$(diff <(echo "$want") <(echo "$got") | grep -c '^[<>]') lines differ: $(diff <(echo "$want") <(echo "$got") | head -n 4 | tr '\n' ' ')"
	fi
	bad=0
	for ((i = 1; i <= n; i++)); do
		(set -C && : >"$d/excl.$i") 2>/dev/null && bad=$((bad + 1))
	done
	if [ "$bad" -eq 0 ] && [ "$(find "$d" -maxdepth 1 -name 'excl.*' | wc -l)" -eq "$n" ]; then
		pass records-excl "$n exclusive creates, each file there once; a second O_EXCL create of each fails"
	else
		failc records-excl "$bad second exclusive creates succeeded; $(find "$d" -maxdepth 1 -name 'excl.*' | wc -l) files"
	fi
}

# v41f_drops: phase 1's counter checks (CNT filled; CLI from client_stats)
v41f_drops() {
	cnt_positive nfs4_dropped nfs4_slot_replays nfs4_binds
	one_connection_per_drop "nfs4_dropped ${CNT[nfs4_dropped]:-?}"
}

# v41f_sums DIR: sha256 of every file under DIR but the two held ones, one line per file
v41f_sums() {
	(cd "$1" && find . -type f ! -name held ! -name lockf -print0 | sort -z | xargs -0 -r sha256sum)
}

# v41f_reclaimed T0: waits (90 s at most) until the restarted server's grace period ended
# after A's reclaims, then checks the counters
v41f_reclaimed() {
	local t0=$1 i
	for ((i = 0; i < 45; i++)); do
		counters || break
		[ "${CNT[nfs4_grace]:-1}" = 0 ] && [ "${CNT[nfs4_reclaims]:-0}" -ge 3 ] && break
		sleep 2
	done
	show_counters
	if [ "${CNT[nfs4_grace]:-1}" = 0 ]; then
		pass grace-ended "within $(($(now_ms) - t0)) ms of the restart (A's RECLAIM_COMPLETE)"
	else
		failc grace-ended "nfs4_grace=${CNT[nfs4_grace]:-?} $(($(now_ms) - t0)) ms after the restart"
	fi
	if [ "${CNT[nfs4_reclaims]:-0}" -ge 3 ] && [ "${CNT[nfs4_reclaims_refused]:-1}" = 0 ]; then
		pass reclaims "nfs4_reclaims=${CNT[nfs4_reclaims]} (the open file, the locked file's open, its lock), none refused"
	else
		failc reclaims "nfs4_reclaims=${CNT[nfs4_reclaims]:-?} (expected >= 3), nfs4_reclaims_refused=${CNT[nfs4_reclaims_refused]:-?}"
	fi
	if [ "${CNT[nfs4_locks]:-0}" -ge 1 ] && [ "${CNT[nfs4_opens]:-0}" -ge 2 ]; then
		pass reclaimed-state "the new server holds nfs4_opens=${CNT[nfs4_opens]}, nfs4_locks=${CNT[nfs4_locks]}"
	else
		failc reclaimed-state "nfs4_opens=${CNT[nfs4_opens]:-?} nfs4_locks=${CNT[nfs4_locks]:-?} after the reclaims"
	fi
}

# v41f_phase1 DEV MA: the workload under drops and its checks
v41f_phase1() {
	local ma=$2 wl rc
	wl=$(mktemp)
	mkdir -p "$ma/churn"
	RPCRDMA_NFS_CHURN_N=${RPCRDMA_NFSD_V41_FAULT_CHURN:-30} timeout -k 10 "$RUN_TIMEOUT" \
		"$HERE/nfs-workload.sh" churn "$ma/churn" | tee "$wl"
	rc=${PIPESTATUS[0]}
	[ "$rc" -ne 124 ] || echo "FAIL churn: timed out after $RUN_TIMEOUT s"
	grep -q '^workload: .* 0 failed' "$wl" || failc workload "$(grep '^workload:' "$wl" || echo "no summary (exit $rc)")"
	# shellcheck disable=SC2034 # read by part_end in nfs-server.sh
	PNOTES="$(grep '^workload:' "$wl" | head -n 1)"
	rm -f "$wl"
	v41f_records "$ma" "${RPCRDMA_NFSD_V41_RECORDS:-20}"
	client_stats "$ma"
	if counters; then
		show_counters
		v41f_drops
	else
		failc counters "no nfsd-stat lines after SIGUSR1"
	fi
}

# v41f_phase2 DEV MA MB ADDR-B: restart with reclaim
v41f_phase2() {
	local dev=$1 ma=$2 mb=$3 addr_b=$4 w pid sums t0 o41="vers=4.1,proto=rdma,port=$V41_PORT"
	# the lock held by flock itself (-o), long enough for the grace period and the checks;
	# started first, so that it inherits no descriptor of the shell's
	flock -o -x "$ma/lockf" sleep 600 </dev/null >/dev/null 2>&1 &
	pid=$!
	sleep 2
	exec {w}>>"$ma/held"
	printf 'before the restart\n' >&"$w"
	sums=$(v41f_sums "$ma")
	if [ -n "$(ls -A "$V41F_STATE" 2>/dev/null)" ]; then
		pass client-recorded "$V41F_STATE holds the client record"
	else
		failc client-recorded "$V41F_STATE is empty after A's RECLAIM_COMPLETE"
	fi
	v41f_stop
	t0=$(now_ms)
	# the server must not inherit the descriptor of a file on the mount: it would keep the mount
	# busy, and its exit would flush that file to itself (a hard mount: it would never end)
	if ! SRV_KEEP=1 V41_STATE=$V41F_STATE v41_server "$dev" dir --bind 0.0.0.0 {w}>&-; then
		exec {w}>&-
		v41_release "$pid"
		return
	fi
	# A's next call finds the session gone: the client recovers and reclaims
	sync
	echo 3 >/proc/sys/vm/drop_caches
	timeout -k 5 120 ls -l "$ma" >/dev/null || failc after-restart "ls -l $ma failed after the restart"
	v41f_reclaimed "$t0"
	if SRV_ADDR=$addr_b v41_mount "$mb" "$o41" unshare -u sh -c 'hostname v41-client-b; exec "$@"' sh; then
		if flock -n -x "$mb/lockf" true 2>/dev/null; then
			failc lock-kept "B got an exclusive lock while A held the lock it reclaimed"
		else
			pass lock-kept "A's reclaimed lock: B's flock -n -x fails"
		fi
		v41_release "$pid"
		pid=''
		if timeout -k 5 60 flock -n -x "$mb/lockf" true; then pass lock-released "A released: B's flock -n -x succeeds"; else failc lock-released "B could not lock after A released"; fi
		printf 'after the restart\n' >&"$w" || failc held-write "writing through the kept descriptor failed"
		exec {w}>&-
		echo 3 >/proc/sys/vm/drop_caches
		if [ "$(cat "$mb/held" 2>&1)" = "$(printf 'before the restart\nafter the restart')" ]; then
			pass held-file "B reads both lines A wrote through the descriptor it kept open"
		else
			failc held-file "B reads: $(tr '\n' '|' <"$mb/held" 2>&1)"
		fi
		v41f_umount "$mb"
	fi
	[ -z "$pid" ] || v41_release "$pid"
	{ exec {w}>&-; } 2>/dev/null
	if [ "$(v41f_sums "$ma")" = "$sums" ]; then
		pass tree-intact "$(wc -l <<<"$sums") files' checksums the same after the restart"
	else
		failc tree-intact "checksums differ after the restart: $(diff <(echo "$sums") <(v41f_sums "$ma") | head -n 4 | tr '\n' ' ')"
	fi
	rm -rf "${ma:?}"/* || failc rm "rm -rf failed"
}

# v41f_stop: srv_stop, bounded: a server still there 20 s after SIGTERM is a failure, and
# where its threads wait in the kernel is printed before SIGKILL (10 s more at most, never an
# unbounded wait: the parts after this one still run)
v41f_stop() {
	local i t
	[ -n "$SRV_PID" ] || return 0
	kill -TERM "$SRV_PID" 2>/dev/null
	for ((i = 0; i < 100; i++)); do
		kill -0 "$SRV_PID" 2>/dev/null || break
		sleep 0.2
	done
	if ! kill -0 "$SRV_PID" 2>/dev/null; then
		srv_stop # gone: its exit status checked
		return
	fi
	failc server-exit "still running 20 s after SIGTERM; its threads:"
	for t in /proc/"$SRV_PID"/task/*; do
		echo "  | task ${t##*/} $(cat "$t/comm" 2>/dev/null) $(awk '/^State/ {print $2}' "$t/status" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null)"
		sed 's/^/  |     /' "$t/stack" 2>/dev/null | head -n 12
	done
	dmesg | grep -v 'speed is unknown' | tail -n 15 | sed 's/^/  | dmesg: /'
	kill -KILL "$SRV_PID" 2>/dev/null
	for ((i = 0; i < 50; i++)); do
		kill -0 "$SRV_PID" 2>/dev/null || break
		sleep 0.2
	done
	if kill -0 "$SRV_PID" 2>/dev/null; then failc server-kill "still there 10 s after SIGKILL (blocked in the kernel)"; else wait "$SRV_PID" 2>/dev/null; fi
	SRV_PID=''
}

# v41f_umount DIR: umount; when it fails, what still uses DIR, and a lazy umount (bounded)
v41f_umount() {
	local out
	out=$(timeout -k 5 60 umount "$1" 2>&1) && return 0
	failc umount "umount $1: $out"
	echo "---- what uses $1:"
	fuser -vm "$1" 2>&1 | sed 's/^/  | /'
	timeout -k 5 30 umount -l "$1" 2>/dev/null
}

run_v41_fault() {
	local dev=$1 ma=/mnt/v41f mb=/mnt/v41fb addr_b every=${RPCRDMA_NFSD_V41_DROP_EVERY:-20}
	part_begin "v41fault/$dev" "the NFSv4.1 client against $KIND --nfs4 over $dev, dir backend: --drop-every $every, then a restart with reclaims"
	if [ "$KIND" = kernel ]; then
		echo "SKIP v41fault/$dev: the kernel nfsd of this boot serves NFSv3 only"
		part_end
		return
	fi
	if ! addr_b=$(v41f_addr "$dev"); then
		failc address "no second server address for client B on $dev"
		part_end
		return
	fi
	rm -rf "$V41F_STATE"
	V41_STATE=$V41F_STATE v41_server "$dev" dir --bind 0.0.0.0 --drop-every "$every" || {
		part_end
		return
	}
	if v41_mount "$ma" "vers=4.1,proto=rdma,port=$V41_PORT" && v41_check_mount "$ma" 4.1 mount-v41; then
		v41f_phase1 "$dev" "$ma"
		v41f_phase2 "$dev" "$ma" "$mb" "$addr_b"
		v41f_umount "$ma"
	fi
	say "v41fault/$dev: stopping the server"
	v41f_stop
	v41_tail
	part_end
}
