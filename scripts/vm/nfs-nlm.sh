# shellcheck shell=bash
# scripts/vm/nfs-nlm.sh — sourced by nfs-server.sh (inside the VM): the Linux NFSv3 client's file
# locks (a mount WITHOUT nolock) against rpcrdma-nfsd's lock manager (NLM version 4 over TCP) and
# its status monitor (NSM, program 100024: SM_NOTIFY both ways).
#
#   run_nlm DEV           part nlm/DEV (DEV siw; iwarp: the server on our user-space iWARP provider)
#   run_nlm_restart DEV   part nlm-restart/DEV: a server restart the client reclaims its lock
#                         across, then a client "reboot" (SM_NOTIFY) that releases its locks
#
# Topology. The client side's lockd (the kernel's, started by the first locking mount) serves
# the root netns and registers 100021 there, so our server runs in netns peer (10.0.3.2, siw1)
# with an rpcbind of its own: `ip netns exec peer unshare -m` with a fresh tmpfs on /run (the
# rpcbind of the root netns keeps its lock file and socket in the shared /run), `rpcbind -f`
# there, then rpcrdma-nfsd on the default ports WITHOUT --no-rpcbind: it registers NFS (rdma
# 20049), MOUNT (tcp 20048), NLM (tcp, any port) and its status monitor (100024 udp and tcp,
# any ports) with that rpcbind, where the client's mount.nfs, lockd and sm-notify look (in part
# nlm/DEV with --nfs4: NFSv4.1 on the same rdma port as well, for check 7.). Its state
# directory (--v4-state-dir, where it keeps the hosts that take locks: nlm-hosts) is
# $NLM_STATE (/srv/nlm-state: outside the server's own /run), removed at the start of each part:
# no part starts in a grace period left by the one before. The client side: the root netns's
# rpcbind (knfsd_setup starts it) and `rpc.statd --no-notify -F -d` (mount.nfs refuses a
# locking NFSv3 mount without it; the kernel's lockd asks it to monitor the server before its
# first lock, and it forwards the server's SM_NOTIFY to the kernel's lockd; its log:
# $LOGS/statd-PART.log).
# Checks of nlm/DEV:
#   1. the server's ready line names nlm=; `rpcinfo 10.0.3.2` shows 100021 v4 tcp at that port,
#      100024 v1 udp and tcp (the status monitor), 100003 v3 rdma and 100005 v3 tcp;
#   2. statd registered (100024) in the root netns;
#   3. two mounts of the export, `mount -t nfs -o vers=3,proto=rdma 10.0.3.2:/export` on A and
#      the same with nosharecache on B (no port options, no nolock): "xprt: rdma" in mountstats,
#      neither nolock nor local_lock=all|flock|posix in /proc/mounts (local_lock=none), the
#      kernel's lockd registered 100021 v4 tcp in the root netns. Two mounts because the client
#      settles a conflict between two processes on ONE inode locally, before any NLM call (its
#      nlmclnt_lock first checks the VFS's own locks): nosharecache gives B inodes of its own, so
#      both processes' requests reach the server, as two owners (svid) of one client host;
#   4. flock(1) (the Linux NFS client sends flock(2) as whole-file NLM locks): while A holds
#      LOCK_EX, B's `flock -n -x` and `flock -n -s` are refused (NLM4_DENIED), B's blocking
#      `flock -w 2 -x` gives up after 2 s (SIGALRM; the client CANCELs its blocked request: the
#      server must forget it, nlm.waiting = 0 with A's lock still held); once A released,
#      B's `flock -n -x` succeeds; while A holds LOCK_SH, B's `flock -n -s` succeeds and
#      `flock -n -x` is refused;
#   5. a BLOCKING `flock -x` by B while A holds LOCK_EX: B still waits after 3 s, the server holds
#      its request (nlm.waiting = 1, nlm.lock_blocked > 0: it answered NLM4_BLOCKED); A releases;
#      B must hold the lock within RPCRDMA_NFSD_NLM_GRANT_MAX s (default 10) of the release: the
#      server's NLMPROC4_GRANTED reached the client's lockd (found through the client's rpcbind at
#      10.0.3.1:111), which woke B; without it B would wait for its own re-poll, 30 s after it
#      blocked;
#   6. byte ranges (fcntl(2) locks, taken by scripts/vm/lockf.c: RPCRDMA_LOCKF_BIN, built static
#      on the host by scripts/nfs-server-stage.sh and copied in; SKIP without it): A's process
#      holds a write lock on [0, 10) and a read lock on [100, 110); B's F_SETLK write on [5, 6)
#      is refused, on [10, 15) (adjacent) granted, a read lock on [20, EOF) (l_len 0) granted;
#      B's F_GETLK on [0, 100) reports A's lock as "w 0 10" (the server's TEST holder; the pid
#      the client maps it to is printed); B's read lock on [100, 110) is granted beside A's and
#      its write on [105, 106) refused; A unlocks [0, 5) (the server splits its range): B's
#      write on [0, 5) granted, on [5, 6) still refused, F_GETLK reports "w 5 5"; B's BLOCKING
#      F_SETLKW on [5, 6) still waits after 2 s (nlm.waiting = 1) and is granted within
#      RPCRDMA_NFSD_NLM_GRANT_MAX s of A's unlock of the rest (the server's GRANTED, as in 5.);
#   7. NLM beside an NFSv4.1 delegation: `mount -t nfs -o vers=4.1,proto=rdma,port=20049
#      10.0.3.2:/export /mnt/nlm-v41` (a client of its own, from the root netns: "xprt: rdma",
#      "vers=4.1" in mountstats) writes d41 and keeps it open for reading: a read delegation
#      (nfs4_delegations >= 1); through mount A a `flock -n -s` of d41 is granted at once (a
#      shared lock does not conflict with a read delegation: nfs4_recalls and nlm.deleg_drops
#      unchanged); a `flock -n -x` of it must be granted within 150 s (its time printed): the
#      server sends CB_RECALL and leaves the NLM LOCK unanswered while the delegation is held
#      (as Linux nfsd's nlm_fopen), the NFSv4.1 client returns it, the client's lockd sends the
#      LOCK again after its RPC timeout (10 s) and is granted; then nlm.deleg_drops >= 1,
#      nfs4_recalls and nfs4_delegreturns up; the NFSv4.1 file closed and unmounted;
#   8. the server's counters: nlm.lock_granted, nlm.lock_denied, nlm.lock_blocked and
#      nlm.grants_sent > 0, nlm.grants_refused = nlm.grants_failed = 0; after both umounts
#      nlm.locks = 0 and nlm.waiting = 0; exit status 0 after SIGTERM, and 100021 / 100024 /
#      100003 / 100005 gone from the peer's rpcbind;
#   9. cleanup: the peer's rpcbind no longer answers, the statd started here and the client's
#      lockd (stopped with the last locking mount) left the root netns's rpcbind.
# Checks of nlm-restart/DEV (the dir backend on $NFSD_DIR: the file and its handle outlive the
# server process; `--nlm-grace RPCRDMA_NFSD_NLM_GRACE`, default 15 s), after 1.-3. as above:
#  10. restart: A holds `flock -x` on a file (its process runs on across the restart); the
#      state directory's nlm-hosts lists 10.0.3.1 with the client's caller_name (`uname -n`);
#      the server is stopped (SIGTERM, exit status 0) and started again (with a new rpcbind in
#      netns peer, as after a reboot; same ports for NFS and MOUNT, a new one for NLM) on the
#      same directory and state directory. Checks: its log says "NLM restarted: telling the
#      clients that held locks" and "SM_NOTIFY sent" to client=10.0.3.1 within 15 s, with a state
#      number odd and larger than the one nlm-hosts held before; the client's statd passes it
#      to the kernel's lockd ("Received SM_NOTIFY from 10.0.3.2", "Callback to ... succeeded" in
#      its log), which asks rpcbind for the new NLM port and reclaims: nlm.locks = 1 on the new
#      server within the grace period (only a LOCK with reclaim set is granted then); B's
#      `flock -n -x`, started in the grace period, returns only after the grace period ended
#      (the client retries NLM4_DENIED_GRACE_PERIOD every 5 s), refused (A's reclaimed lock);
#      B's `flock -n -x` after the grace period is refused at once; the server counted the
#      reclaim and the grace-period answers (nlm.reclaims, nlm.grace_denied >= 1); once A
#      released, B gets the lock; no lockd message in the client's kernel log (a refused
#      reclaim would print one);
#  11. client reboot: A holds `flock -x` again; SM_NOTIFY over UDP (the port from the peer's
#      rpcbind, 100024 v1 udp) from 10.0.3.1: one naming another host (a datagram written
#      here) is answered and frees nothing (nlm.locks = 1); then `sm-notify -d -f -P DIR` with a
#      copy of statd's record of the server (what the client's sm-notify sends after a reboot:
#      mon_name = the my_name the kernel gave statd, its `uname -n`) frees A's lock (nlm.locks
#      = 0, "a client rebooted: its locks released" in the log) while A's process still holds it
#      on the client: B's `flock -n -x` gets it; A holds again and a datagram naming the address
#      10.0.3.1 itself frees it too (every host at that address); B gets it;
#  12. after both umounts nlm.locks = nlm.waiting = 0; exit status 0 after SIGTERM, the
#      registrations gone; cleanup as 9.
# Byte ranges (6.) need lockf: the guest has no other tool that takes fcntl(2) locks (flock(1) of
# util-linux 2.38 has no --fcntl, and there is neither perl nor python).
# Cleanup: umount (the NFSv4.1 mount of 7. too), the server stopped, the peer's rpcbind and the
# statd started here killed (the client's lockd stops with the last locking mount). Ours only
# (in `kernel` mode: SKIP).
# Knobs: RPCRDMA_NFSD_NLM (runs of nlm/DEV, default "siw"; empty: none), RPCRDMA_NFSD_NLM_RESTART
# (runs of nlm-restart/DEV, default "siw"; empty: none), RPCRDMA_NFSD_NLM_GRANT_MAX (10),
# RPCRDMA_NFSD_NLM_GRACE (15), RPCRDMA_LOCKF_BIN (the lockf binary in the VM; set by the stage).

NLM_A=/mnt/nlm-a NLM_B=/mnt/nlm-b NLM_V41=/mnt/nlm-v41 NLM_STATE=/srv/nlm-state
NLM_HOLD='' NLM_RPCB_PID='' NLM_STATD_PID='' NLM_STATD_LOG='' NLM_V41_HOLD=''

# nlm_server DEV [SERVER-ARGS...]: our server in netns peer beside an rpcbind of its own
# (SRV_PID: the server, NLM_RPCB_PID: that rpcbind, SRV_NLM_PORT: the ready line's nlm port),
# state directory $NLM_STATE. Reads NLM_BACKEND (default memory) and NLM_LOG (the server's log,
# default $LOGS/server-nlm-DEV.log)
nlm_server() {
	local provider=rdma line t0 pidf=$LOGS/nlm-rpcbind.pid dev=$1
	shift
	[ "$dev" = iwarp ] && provider=iwarp
	SRV_ADDR=10.0.3.2 SRV_PATH=/export SRV_NLM_PORT=''
	SRV_LOG=${NLM_LOG:-$LOGS/server-nlm-$dev.log}
	: >"$SRV_LOG"
	: >"$pidf"
	t0=$(now_ms)
	# the server's mount namespace without the client's NFS mounts (see srv_start), a tmpfs on
	# /run for its rpcbind (lock file, socket); rpcbind's pid through fd 3 (opened before /run
	# is covered)
	# shellcheck disable=SC2016,SC2086 # the inner script expands its own variables; RPCRDMA_NFSD_ARGS split on purpose
	ip netns exec peer unshare -m sh -c '
		umount -a -i -l -t nfs,nfs4 2>/dev/null
		exec 3>"$1" || exit 1
		shift
		mount -t tmpfs -o mode=0755 tmpfs /run || { echo "nlm: cannot mount a tmpfs on /run"; exit 1; }
		mkdir -p /run/rpcbind && chown _rpc /run/rpcbind 2>/dev/null
		rpcbind -f </dev/null >/dev/null 2>&1 3>&- &
		echo $! >&3
		exec 3>&-
		i=0
		until rpcinfo -p 127.0.0.1 >/dev/null 2>&1; do
			i=$((i + 1))
			[ $i -le 100 ] || { echo "nlm: the rpcbind of netns peer does not answer"; exit 1; }
			sleep 0.1
		done
		exec "$@"' sh "$pidf" "$BIN" --provider "$provider" --bind 10.0.3.2 "${EXPORT_ROOT[@]}" \
		--backend "${NLM_BACKEND:-memory}" --v4-state-dir "$NLM_STATE" ${RPCRDMA_NFSD_ARGS:-} "$@" >"$SRV_LOG" 2>&1 &
	SRV_PID=$!
	srv_ready "$t0"
	local rc=$?
	NLM_RPCB_PID=$(cat "$pidf" 2>/dev/null)
	[ "$rc" = 0 ] || return 1
	echo "server: $line ($(($(now_ms) - t0)) ms, rpcbind of netns peer: pid ${NLM_RPCB_PID:-?})"
	SRV_NLM_PORT=$(sed -n 's/.* nlm=[^ ]*:\([0-9]*\).*/\1/p' <<<"$line")
	[ -n "$SRV_NLM_PORT" ]
}

# nlm_registered: 100021 v4 tcp (at the ready line's port), 100024 v1 udp and tcp (the status
# monitor; NLM_SM_UDP: its udp port), 100003 v3 rdma, 100005 v3 tcp in the peer's rpcbind, asked
# from the root netns as the client's mount.nfs, lockd and sm-notify ask it
nlm_registered() {
	local reg at sm
	reg=$(rpcinfo "$SRV_ADDR" 2>&1)
	at="$SRV_ADDR.$((SRV_NLM_PORT / 256)).$((SRV_NLM_PORT % 256))"
	sm=$(awk -v p="$SRV_ADDR." '$1 == 100024 && $2 == 1 && ($3 == "udp" || $3 == "tcp") && index($4, p) == 1 {
		n = split($4, o, "."); printf "%s %s %d\n", $3, $4, o[n - 1] * 256 + o[n]}' <<<"$reg")
	NLM_SM_UDP=$(awk '$1 == "udp" {print $3; exit}' <<<"$sm")
	if awk -v a="$at" '$1 == 100021 && $2 == 4 && $3 == "tcp" && $4 == a {f = 1} END {exit !f}' <<<"$reg" &&
		[ -n "$NLM_SM_UDP" ] && grep -q '^tcp ' <<<"$sm" &&
		awk '$1 == 100003 && $2 == 3 && $3 == "rdma" {n++} $1 == 100005 && $2 == 3 && $3 == "tcp" {m++} END {exit !(n && m)}' <<<"$reg"; then
		pass rpcbind-nlm "rpcinfo $SRV_ADDR: 100021 v4 tcp $at (nlm port $SRV_NLM_PORT), 100024 v1 $(awk '{printf "%s%s port %s", s, $1, $3; s = ", "}' <<<"$sm"), 100003 v3 rdma, 100005 v3 tcp"
	else
		failc rpcbind-nlm "rpcinfo $SRV_ADDR (expected 100021 4 tcp $at, 100024 1 udp and tcp, 100003 3 rdma, 100005 3 tcp): $(grep -E ' 1000(03|05|21|24) ' <<<"$reg" | tr -s ' ' | tr '\n' ';')"
		printf '%s\n' "$reg" | sed 's/^/  | /'
		return 1
	fi
}

# nlm_statd: rpc.statd in the root netns (NLM_STATD_PID when started here: in the foreground,
# its log in NLM_STATD_LOG), registered (100024)
nlm_statd() {
	local i
	NLM_STATD_PID='' NLM_STATD_LOG=$LOGS/statd-${PART//\//-}.log
	if ! rpcinfo -p 127.0.0.1 >/dev/null 2>&1; then
		mkdir -p /run/rpcbind
		rpcbind -w
	fi
	if rpcinfo -p 127.0.0.1 2>/dev/null | awk '$1 == 100024 {f = 1} END {exit !f}'; then
		pass statd "rpc.statd already running (100024 registered)"
		return 0
	fi
	mkdir -p /var/lib/nfs/sm /var/lib/nfs/sm.bak
	# -F -d: in the foreground, its log (the SM_MON of the kernel's lockd, the server's
	# SM_NOTIFY) on stderr
	rpc.statd --no-notify -F -d </dev/null >"$NLM_STATD_LOG" 2>&1 &
	NLM_STATD_PID=$! NLM_STATD_OURS=1
	for ((i = 0; i < 50; i++)); do
		rpcinfo -p 127.0.0.1 2>/dev/null | awk '$1 == 100024 {f = 1} END {exit !f}' && break
		kill -0 "$NLM_STATD_PID" 2>/dev/null || break
		sleep 0.1
	done
	if rpcinfo -p 127.0.0.1 2>/dev/null | awk '$1 == 100024 {f = 1} END {exit !f}'; then
		pass statd "rpc.statd --no-notify -F -d (pid $NLM_STATD_PID) registered 100024"
	else
		failc statd "rpc.statd --no-notify -F -d: 100024 is not registered: $(rpcinfo -p 127.0.0.1 2>&1 | tr -s ' ' | tr '\n' ';'); its log: $(tail -n 5 "$NLM_STATD_LOG" | tr '\n' ' ')"
		return 1
	fi
}

# nlm_mount NAME DIR [OPTION]: mount -t nfs -o vers=3,proto=rdma[,OPTION] SERVER:/export DIR (no
# nolock, no ports: rdma 20049, MOUNT through the peer's rpcbind); over rdma, locks not local
nlm_mount() {
	local name=$1 d=$2 o="vers=3,proto=rdma${3:+,$3}" out t0 opts
	mkdir -p "$d"
	t0=$(now_ms)
	if ! out=$(timeout -k 5 90 mount -t nfs -o "$o" "$SRV_ADDR:$SRV_PATH" "$d" 2>&1); then
		failc "$name" "mount -t nfs -o $o $SRV_ADDR:$SRV_PATH $d failed: $out"
		return 1
	fi
	opts=$(awk -v m="$d" '$2 == m {print $4}' /proc/mounts | tail -n 1)
	if [ "$(mstats "$d" | awk '$1 == "xprt:" {print $2; exit}')" != rdma ]; then
		failc "$name" "no 'xprt: rdma' in mountstats for $d: $(mstats "$d" | grep xprt:)"
		return 1
	fi
	case ",$opts," in
	*,nolock,* | *,local_lock=all,* | *,local_lock=flock,* | *,local_lock=posix,*)
		failc "$name" "$d mounted with local locks: $opts"
		return 1
		;;
	*,local_lock=none,*)
		pass "$name" "mount -t nfs -o $o $SRV_ADDR:$SRV_PATH $d ($(($(now_ms) - t0)) ms): xprt: rdma, $opts"
		;;
	*)
		failc "$name" "$d: no local_lock=none in /proc/mounts: $opts"
		return 1
		;;
	esac
}

# nlm_try NAME MODE FILE WANT: a non-blocking `flock -n MODE FILE`; WANT got (it must succeed) or
# refused (it must meet a conflict: flock's exit status 42 with -E 42, not an error or a hang)
nlm_try() {
	local name=$1 mode=$2 f=$3 want=$4 what=$5 rc out
	out=$(timeout -k 2 30 flock -n -E 42 "$mode" "$f" true 2>&1)
	rc=$?
	case "$want:$rc" in
	got:0 | refused:42) pass "$name" "$what" ;;
	got:42) failc "$name" "$what: flock -n $mode was refused" ;;
	refused:0) failc "$name" "$what: flock -n $mode got the lock" ;;
	*:124) failc "$name" "$what: flock -n $mode did not return within 30 s" ;;
	*) failc "$name" "$what: flock -n $mode exit status $rc: $out" ;;
	esac
}

# nlm_hold MODE FILE: a background `flock MODE FILE` (process A) holding the lock until
# nlm_release (its command waits on a fifo; -o: only flock itself keeps the file open)
nlm_hold() {
	local i fifo=$LOGS/nlm-hold.fifo mark=$LOGS/nlm-hold.held
	rm -f "$fifo" "$mark"
	mkfifo "$fifo"
	# shellcheck disable=SC2016 # the inner script expands its own arguments
	flock -o "$1" "$2" sh -c 'echo held >"$1"; read -r _ <"$2"' sh "$mark" "$fifo" &
	NLM_HOLD=$!
	for ((i = 0; i < 150; i++)); do
		[ -s "$mark" ] && return 0
		kill -0 "$NLM_HOLD" 2>/dev/null || break
		sleep 0.1
	done
	failc hold "A's flock $1 $2 did not get its lock within 15 s"
	nlm_release
	return 1
}
# nlm_release: A's command ends, flock closes the file: the client's NLM UNLOCK (synchronous)
nlm_release() {
	local i
	[ -n "$NLM_HOLD" ] || return 0
	# shellcheck disable=SC2016 # the inner script expands its own argument
	timeout -k 1 10 sh -c 'echo go >"$1"' sh "$LOGS/nlm-hold.fifo" 2>/dev/null || kill "$NLM_HOLD" 2>/dev/null
	for ((i = 0; i < 300; i++)); do
		kill -0 "$NLM_HOLD" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$NLM_HOLD" 2>/dev/null; then
		failc release "A's flock did not exit within 30 s of its release (its UNLOCK hangs?)"
		kill -KILL "$NLM_HOLD" 2>/dev/null
	fi
	wait "$NLM_HOLD" 2>/dev/null
	NLM_HOLD=''
}

# nlm_blocking FA FB: B's blocking flock -x waits for A's LOCK_EX and is woken by the server's
# GRANTED call soon after A releases
nlm_blocking() {
	local fa=$1 fb=$2 got=$LOGS/nlm-got bpid t0 trel tgot i max=${RPCRDMA_NFSD_NLM_GRANT_MAX:-10}
	nlm_hold -x "$fa" || return
	rm -f "$got"
	t0=$(now_ms)
	# shellcheck disable=SC2016 # the inner script expands its own argument
	flock -x "$fb" sh -c 'date +%s%3N >"$1"' sh "$got" &
	bpid=$!
	sleep 3
	if kill -0 "$bpid" 2>/dev/null && [ ! -s "$got" ]; then
		pass lock-waits "A holds LOCK_EX: B's blocking flock -x still waits after 3 s"
	else
		failc lock-waits "B's blocking flock -x returned while A held LOCK_EX ($(cat "$got" 2>/dev/null || echo 'no lock'))"
	fi
	if counters; then
		if [ "${CNT[nlm.waiting]:-0}" -eq 1 ] 2>/dev/null && [ "${CNT[nlm.lock_blocked]:-0}" -gt 0 ] 2>/dev/null; then
			pass server-waiting "the server holds B's request: nlm.waiting=${CNT[nlm.waiting]}, nlm.lock_blocked=${CNT[nlm.lock_blocked]} (answered NLM4_BLOCKED), nlm.locks=${CNT[nlm.locks]:-?}"
		else
			failc server-waiting "nlm.waiting=${CNT[nlm.waiting]:-missing} (expected 1), nlm.lock_blocked=${CNT[nlm.lock_blocked]:-missing} (expected > 0)"
		fi
	else
		failc counters "no nfsd-stat lines after SIGUSR1"
	fi
	trel=$(now_ms)
	nlm_release
	# up to 45 s: past the client's own 30 s re-poll, to tell a late grant from none
	for ((i = 0; i < 450; i++)); do
		kill -0 "$bpid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$bpid" 2>/dev/null; then
		failc lock-granted "B's blocking flock -x still waits 45 s after A released"
		kill "$bpid" 2>/dev/null
		wait "$bpid" 2>/dev/null
		return
	fi
	wait "$bpid"
	tgot=$(cat "$got" 2>/dev/null)
	if [ -z "$tgot" ]; then
		failc lock-granted "B's blocking flock -x ended without the lock"
	elif [ $((tgot - trel)) -le $((max * 1000)) ]; then
		pass lock-granted "B got LOCK_EX $((tgot - trel)) ms after A's release (it waited $((tgot - t0)) ms in all; the client re-polls after 30 s: the server's GRANTED woke it)"
	else
		failc lock-granted "B got LOCK_EX only $((tgot - trel)) ms after A's release (> $max s: no GRANTED callback; the client's own 30 s re-poll found it)"
	fi
	NLM_NOTE="grant after $((tgot - trel)) ms"
}

# nlm_cancel FB (A holds LOCK_EX): B's blocking flock -x given up after 2 s (flock -w 2: SIGALRM
# interrupts the wait, the client sends CANCEL): the server forgets the request (nlm.waiting = 0,
# A's lock still held); a request left waiting would be granted at A's release and refused by the
# client (nlm.grants_refused, checked at the end), and B's flock -n -x after the release refused
nlm_cancel() {
	local rc out
	out=$(timeout -k 2 30 flock -w 2 -E 42 -x "$1" true 2>&1)
	rc=$?
	if [ "$rc" -ne 42 ]; then
		failc lock-cancel "B's flock -w 2 -x while A holds LOCK_EX: exit status $rc (expected 42, a timeout): $out"
		return
	fi
	if ! counters; then
		failc counters "no nfsd-stat lines after SIGUSR1"
	elif [ "${CNT[nlm.waiting]:-x}" = 0 ] && [ "${CNT[nlm.locks]:-x}" = 1 ]; then
		pass lock-cancel "B's flock -w 2 -x gave up after 2 s: the server dropped its request (nlm.waiting=0, nlm.locks=1: A's)"
	else
		failc lock-cancel "after B's flock -w 2 -x gave up: nlm.waiting=${CNT[nlm.waiting]:-missing} (expected 0: CANCEL), nlm.locks=${CNT[nlm.locks]:-missing} (expected 1)"
	fi
}

# nlm_lf_line OUT PREFIX SECONDS: waits (every 0.1 s, SECONDS at most) for a line of the lockf
# output OUT starting with PREFIX and prints it without its " t=MS"; false when none came
nlm_lf_line() {
	local i line
	for ((i = 0; i < $3 * 10; i++)); do
		line=$(grep -m1 "^$2" "$1" 2>/dev/null) && {
			echo "${line% t=*}"
			return 0
		}
		sleep 0.1
	done
	return 1
}

# nlm_lf NAME STEP WANT WHAT: B's `lockf FB STEP` (one process, its locks released at its exit);
# its line (without t=) must match the extended regex WANT, whole
nlm_lf() {
	local out t0
	t0=$(now_ms)
	out=$(timeout -k 2 30 "$NLM_LF" "$NLM_LF_FB" "$2" 2>&1)
	out=${out% t=*}
	if [[ "$out" =~ ^$3$ ]]; then
		pass "$1" "$4: B's lockf $2 -> $out ($(($(now_ms) - t0)) ms)"
	else
		failc "$1" "$4: B's lockf $2 -> ${out:-nothing} (expected $3)"
	fi
}

# nlm_ranges FA FB: fcntl(2) byte-range locks (scripts/vm/lockf.c, RPCRDMA_LOCKF_BIN) between A
# (mount A) and B (mount B): overlapping, adjacent and to-EOF ranges, F_GETLK (the server's TEST
# holder), a partial unlock (the server splits A's range), shared read ranges, a blocking F_SETLKW
# woken by the server's GRANTED
nlm_ranges() {
	local fa=$1 d=$LOGS/nlm-lockf apid bpid line trel tgot i max=${RPCRDMA_NFSD_NLM_GRANT_MAX:-10} t0
	NLM_LF=${RPCRDMA_LOCKF_BIN:-} NLM_LF_FB=$2
	if [ -z "$NLM_LF" ] || [ ! -x "$NLM_LF" ]; then
		echo "SKIP byte ranges: no lockf in the VM (RPCRDMA_LOCKF_BIN=$NLM_LF; scripts/nfs-server-stage.sh builds scripts/vm/lockf.c with gcc -O2 -static when it can)"
		return 0
	fi
	rm -rf "$d"
	mkdir -p "$d"
	t0=$(now_ms)
	# A: a write lock on [0, 10) and a read lock on [100, 110); [0, 5) unlocked on go1, the rest
	# on go2
	"$NLM_LF" "$fa" w:0:10 r:100:10 wait:"$d/go1" u:0:5 wait:"$d/go2" u:0:0 >"$d/a" 2>&1 &
	apid=$!
	if ! line=$(nlm_lf_line "$d/a" 'r 100 10 ' 15) || [ "$line" != 'r 100 10 ok' ] || ! grep -q '^w 0 10 ok ' "$d/a"; then
		failc range-hold "A's lockf w:0:10 r:100:10: $(tr '\n' ';' <"$d/a")"
		kill "$apid" 2>/dev/null
		wait "$apid" 2>/dev/null
		return 1
	fi
	pass range-hold "A holds a write lock on [0, 10) and a read lock on [100, 110) (fcntl F_SETLK)"
	nlm_lf range-overlap w:5:1 'w 5 1 denied' "A's write lock on [0, 10) refuses B's write lock on [5, 6)"
	nlm_lf range-adjacent w:10:5 'w 10 5 ok' "B's write lock on [10, 15), adjacent to A's, is granted"
	nlm_lf range-eof r:20:0 'r 20 0 ok' "B's read lock on [20, EOF) (l_len 0), over A's read lock, is granted"
	nlm_lf range-test t:0:100 't 0 100 -> w 0 10 pid -?[0-9]+' "B's F_GETLK (write) on [0, 100) reports A's lock (the server's TEST holder)"
	nlm_lf range-shared r:100:10 'r 100 10 ok' "A's read lock on [100, 110) shares with B's read lock there"
	nlm_lf range-shared-w w:105:1 'w 105 1 denied' "A's read lock on [100, 110) refuses B's write lock on [105, 106)"
	# a partial unlock: the server must split A's range and keep [5, 10)
	touch "$d/go1"
	if ! line=$(nlm_lf_line "$d/a" 'u 0 5 ' 15) || [ "$line" != 'u 0 5 ok' ]; then
		failc range-unlock "A's unlock of [0, 5): ${line:-no line within 15 s}: $(tr '\n' ';' <"$d/a")"
	else
		pass range-unlock "A unlocked [0, 5) of its write lock on [0, 10)"
		nlm_lf range-split-free w:0:5 'w 0 5 ok' "after A's partial unlock: B's write lock on [0, 5) is granted"
		nlm_lf range-split-held w:5:1 'w 5 1 denied' "after A's partial unlock: A's [5, 10) still refuses B's write lock on [5, 6)"
		nlm_lf range-split-test t:0:100 't 0 100 -> w 5 5 pid -?[0-9]+' "after A's partial unlock: B's F_GETLK on [0, 100) reports A's lock on [5, 10)"
	fi
	# a blocking F_SETLKW by B on A's [5, 10): waits, granted soon after A's release (GRANTED)
	"$NLM_LF" "$2" W:5:1 >"$d/b" 2>&1 &
	bpid=$!
	sleep 2
	if ! kill -0 "$bpid" 2>/dev/null || [ -s "$d/b" ]; then
		failc range-waits "B's blocking lockf W:5:1 returned while A held [5, 10): $(tr '\n' ';' <"$d/b")"
	elif ! counters; then
		failc counters "no nfsd-stat lines after SIGUSR1"
	elif [ "${CNT[nlm.waiting]:-x}" = 1 ]; then
		pass range-waits "B's blocking F_SETLKW on [5, 6) still waits after 2 s; the server holds it (nlm.waiting=1, nlm.locks=${CNT[nlm.locks]:-?})"
	else
		failc range-waits "B's blocking F_SETLKW on [5, 6) waits, yet nlm.waiting=${CNT[nlm.waiting]:-missing} (expected 1)"
	fi
	touch "$d/go2"
	# up to 45 s: past the client's own 30 s re-poll, to tell a late grant from none
	for ((i = 0; i < 450; i++)); do
		kill -0 "$bpid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$bpid" 2>/dev/null; then
		failc range-granted "B's blocking F_SETLKW on [5, 6) still waits 45 s after go2: A: $(tr '\n' ';' <"$d/a")"
		kill "$bpid" 2>/dev/null
	fi
	wait "$bpid" 2>/dev/null
	for ((i = 0; i < 100; i++)); do
		kill -0 "$apid" 2>/dev/null || break
		sleep 0.1
	done
	kill "$apid" 2>/dev/null
	wait "$apid" 2>/dev/null
	trel=$(sed -n 's/^u 0 0 ok t=\([0-9]*\)$/\1/p' "$d/a")
	tgot=$(sed -n 's/^W 5 1 ok t=\([0-9]*\)$/\1/p' "$d/b")
	if [ -z "$trel" ] || [ -z "$tgot" ]; then
		failc range-granted "A: $(tr '\n' ';' <"$d/a") B: $(tr '\n' ';' <"$d/b") (expected 'u 0 0 ok' and 'W 5 1 ok')"
	elif [ $((tgot - trel)) -le $((max * 1000)) ]; then
		pass range-granted "B's blocking F_SETLKW on [5, 6) granted $((tgot - trel)) ms after A's unlock (the server's GRANTED; the client re-polls after 30 s)"
		NLM_NOTE="${NLM_NOTE:+$NLM_NOTE, }range grant after $((tgot - trel)) ms"
	else
		failc range-granted "B's blocking F_SETLKW on [5, 6) granted only $((tgot - trel)) ms after A's unlock (> $max s: no GRANTED callback)"
	fi
	echo "byte ranges: $(($(now_ms) - t0)) ms"
}

# nlm_locks FA FB: the lock matrix between A (mount A) and B (mount B) on one file
nlm_locks() {
	local fa=$1 fb=$2
	if nlm_hold -x "$fa"; then
		nlm_try lock-xx -x "$fb" refused "A holds LOCK_EX: B's flock -n -x is refused"
		nlm_try lock-xs -s "$fb" refused "A holds LOCK_EX: B's flock -n -s is refused"
		nlm_cancel "$fb"
		nlm_release
		nlm_try lock-free -x "$fb" got "A released: B's flock -n -x gets the lock"
	fi
	if nlm_hold -s "$fa"; then
		nlm_try lock-ss -s "$fb" got "A holds LOCK_SH: B's flock -n -s gets a shared lock"
		nlm_try lock-sx -x "$fb" refused "A holds LOCK_SH: B's flock -n -x is refused"
		nlm_release
	fi
	nlm_blocking "$fa" "$fb"
	nlm_ranges "$fa" "$fb"
}

# nlm_deleg M3: NLM locks meet an NFSv4.1 read delegation of the same file. An NFSv4.1 mount of
# the export ($NLM_V41, from the root netns over siw: a client of its own) writes d41 and keeps
# it open for reading (a read delegation); through the NFSv3 mount M3 a shared `flock -n -s` of
# d41 does not conflict with it (granted at once, no recall, nothing dropped), an exclusive
# `flock -n -x` does: the server sends CB_RECALL and leaves the NLM LOCK unanswered while the
# delegation is held (nlm.deleg_drops), the holder returns it, the client's lockd sends the
# LOCK again after its RPC timeout and gets the lock (150 s at most)
nlm_deleg() {
	local m3=$1 m4=$NLM_V41 o41="vers=4.1,proto=rdma,port=$V41_PORT" f=d41 d0 r0 dr0 dd0 t0 ms rc out k0 n0 after
	v41_mount "$m4" "$o41" && v41_check_mount "$m4" 4.1 mount-v41 || return 1
	if ! printf 'written through NFSv4.1\n' >"$m4/$f" || [ "$(cat "$m3/$f" 2>&1)" != 'written through NFSv4.1' ]; then
		failc deleg-file "cannot write $m4/$f and read it through $m3"
		do_umount "$m4"
		return 1
	fi
	sync
	echo 3 >/proc/sys/vm/drop_caches
	exec {NLM_V41_HOLD}<"$m4/$f"
	read -r _ <&"$NLM_V41_HOLD"
	counters && d0=${CNT[nfs4_delegations]:-0} r0=${CNT[nfs4_recalls]:-0} dr0=${CNT[nfs4_delegreturns]:-0} dd0=${CNT[nlm.deleg_drops]:-x}
	if [ "${d0:-0}" -ge 1 ] && [ "$dd0" != x ]; then
		pass deleg-held "the NFSv4.1 client holds $f open for reading: a read delegation (nfs4_delegations=$d0, nfs4_recalls=$r0, nfs4_delegreturns=$dr0, nlm.deleg_drops=$dd0)"
	else
		failc deleg-held "nfs4_delegations=${d0:-?} (expected >= 1), nlm.deleg_drops=${dd0:-?} after the NFSv4.1 OPEN of $f for read"
		exec {NLM_V41_HOLD}<&-
		NLM_V41_HOLD=''
		do_umount "$m4"
		return 1
	fi
	# a shared lock does not conflict with a read delegation: answered at once (a dropped LOCK
	# would wait for the client's re-send, 10 s)
	t0=$(now_ms)
	out=$(timeout -k 5 150 flock -n -E 42 -s "$m3/$f" true 2>&1)
	rc=$? ms=$(($(now_ms) - t0))
	counters
	if [ "$rc" = 0 ] && [ "$ms" -lt 10000 ] && [ "${CNT[nfs4_recalls]:-x}" = "$r0" ] && [ "${CNT[nlm.deleg_drops]:-x}" = "$dd0" ] && [ "${CNT[nfs4_delegations]:-0}" -ge 1 ]; then
		pass deleg-shared "the NFSv3 flock -n -s of $f while the NFSv4.1 client holds its read delegation: granted in $ms ms, no recall (nfs4_recalls=$r0, nlm.deleg_drops=$dd0, nfs4_delegations=${CNT[nfs4_delegations]})"
	else
		failc deleg-shared "the NFSv3 flock -n -s of $f under a read delegation: exit status $rc after $ms ms (expected 0 at once)${out:+: $out}; nfs4_recalls ${r0} -> ${CNT[nfs4_recalls]:-?}, nlm.deleg_drops $dd0 -> ${CNT[nlm.deleg_drops]:-?} (expected unchanged), nfs4_delegations=${CNT[nfs4_delegations]:-?}"
	fi
	# an exclusive one does: the server recalls the delegation and leaves the LOCK unanswered
	# until it is returned; the client's lockd sends it again after its RPC timeout
	k0=$(dmesg | wc -l) n0=$(wc -l <"$SRV_LOG")
	t0=$(now_ms)
	out=$(timeout -k 5 150 flock -n -E 42 -x "$m3/$f" true 2>&1)
	rc=$? ms=$(($(now_ms) - t0))
	case $rc in
	0)
		pass deleg-exclusive "the NFSv3 flock -n -x of $f while the NFSv4.1 client held its read delegation: granted after $ms ms (the server recalled the delegation, left the LOCK unanswered, answered the client's re-send)"
		NLM_NOTE="${NLM_NOTE:+$NLM_NOTE, }exclusive flock under a delegation after $ms ms"
		;;
	42) failc deleg-exclusive "the NFSv3 flock -n -x of $f under a read delegation was refused after $ms ms (expected granted once the delegation was returned)" ;;
	124 | 137) failc deleg-exclusive "the NFSv3 flock -n -x of $f under a read delegation did not return within 150 s ($ms ms): the client's lockd did not send the LOCK again, or the server dropped it again" ;;
	*) failc deleg-exclusive "the NFSv3 flock -n -x of $f under a read delegation: exit status $rc after $ms ms: $out" ;;
	esac
	counters
	echo "after the exclusive flock:$(for k in nlm.deleg_drops nlm.lock_granted nlm.locks nfs4_delegations nfs4_recalls nfs4_delegreturns nfs4_revoked nfs4_clients; do printf ' %s=%s' "$k" "${CNT[$k]:-?}"; done)"
	if [ "${CNT[nlm.deleg_drops]:-0}" -ge 1 ] && [ "${CNT[nlm.deleg_drops]:-0}" -gt "$dd0" ] &&
		[ "${CNT[nfs4_recalls]:-0}" -gt "$r0" ] && [ "${CNT[nfs4_delegreturns]:-0}" -gt "$dr0" ]; then
		pass deleg-recall "the exclusive LOCK recalled the delegation: nlm.deleg_drops $dd0 -> ${CNT[nlm.deleg_drops]}, nfs4_recalls $r0 -> ${CNT[nfs4_recalls]}, nfs4_delegreturns $dr0 -> ${CNT[nfs4_delegreturns]}, nfs4_delegations=${CNT[nfs4_delegations]:-?}"
	else
		failc deleg-recall "nlm.deleg_drops $dd0 -> ${CNT[nlm.deleg_drops]:-?} (expected >= 1, up), nfs4_recalls $r0 -> ${CNT[nfs4_recalls]:-?}, nfs4_delegreturns $dr0 -> ${CNT[nfs4_delegreturns]:-?} (expected up), nfs4_delegations=${CNT[nfs4_delegations]:-?}"
	fi
	if [ "$rc" != 0 ]; then
		echo "---- the server's log since the exclusive flock (no nfsd-stat lines):"
		tail -n +$((n0 + 1)) "$SRV_LOG" | grep -v '^nfsd-stat ' | tail -n 30 | sed 's/^/  | /'
		echo "---- the client's kernel log since the exclusive flock:"
		dmesg | tail -n +$((k0 + 1)) | grep -v 'speed is unknown' | tail -n 30 | sed 's/^/  | /'
	fi
	exec {NLM_V41_HOLD}<&-
	NLM_V41_HOLD=''
	after=$(cat "$m4/$f" 2>&1)
	[ "$after" = 'written through NFSv4.1' ] || failc deleg-read "$m4/$f after the recall: $after"
	do_umount "$m4"
}

run_nlm() {
	local dev=$1 reg k line
	part_begin "nlm/$dev" "the NFSv3 client's locks (mount without nolock) against rpcrdma-nfsd's lock manager (NLM v4), over $dev, server and its rpcbind in netns peer"
	if [ "$KIND" = kernel ]; then
		echo "SKIP nlm/$dev: it proves rpcrdma-nfsd's lock manager"
		part_end
		return
	fi
	case $dev in
	siw | iwarp) ;;
	*)
		failc run "unknown NLM run $dev (siw iwarp)"
		part_end
		return
		;;
	esac
	nlm_begin
	if ! nlm_server "$dev" --nfs4; then
		failc server-start "the server did not start (log below)"
		sed 's/^/  | /' "$SRV_LOG" | tail -n 30
	else
		pass server-start "$SRV_ADDR in netns peer with its own rpcbind, --nfs4, nlm port $SRV_NLM_PORT"
		if nlm_registered && nlm_statd && nlm_mount mount-a "$NLM_A" && nlm_mount mount-b "$NLM_B" nosharecache; then
			if line=$(rpcinfo -p 127.0.0.1 2>/dev/null | awk '$1 == 100021 && $2 == 4 && $3 == "tcp" {print "port " $4; exit}') && [ -n "$line" ]; then
				pass lockd "the client's lockd registered 100021 v4 tcp ($line) in the root netns"
			else
				failc lockd "no 100021 v4 tcp in the root netns's rpcbind after the mount"
			fi
			if echo lock-me >"$NLM_A/lockfile" && [ "$(cat "$NLM_B/lockfile")" = lock-me ]; then
				nlm_locks "$NLM_A/lockfile" "$NLM_B/lockfile"
			else
				failc lockfile "cannot write $NLM_A/lockfile and read it through $NLM_B"
			fi
			nlm_release
			rm -f "$NLM_A/lockfile"
			nlm_deleg "$NLM_A"
			rm -f "$NLM_A/d41"
		fi
		mountpoint -q "$NLM_B" && do_umount "$NLM_B"
		mountpoint -q "$NLM_A" && do_umount "$NLM_A"
		if counters; then
			line=''
			for k in "${!CNT[@]}"; do case $k in nlm.*) line="$line $k=${CNT[$k]}" ;; esac done
			echo "counters nlm/$dev:$(tr ' ' '\n' <<<"$line" | sort | tr '\n' ' ' | sed 's/ $//')"
			cnt_positive nlm.lock_granted nlm.lock_denied nlm.lock_blocked nlm.grants_sent
			for k in nlm.grants_refused nlm.grants_failed nlm.locks nlm.waiting; do
				if [ "${CNT[$k]:-x}" = 0 ]; then pass "counter-$k" "0 (after both umounts)"; else failc "counter-$k" "${CNT[$k]:-missing} after both umounts (expected 0)"; fi
			done
		else
			failc counters "no nfsd-stat lines after SIGUSR1"
		fi
		srv_stop
		nlm_unset
	fi
	[ "$PFAIL" -eq 0 ] || nlm_evidence "$SRV_LOG"
	nlm_cleanup
	nlm_cleaned
	# shellcheck disable=SC2034 # read by part_end (nfs-server.sh)
	PNOTES=$NLM_NOTE
	part_end
}

# nlm_begin: the part's start: no state directory left by a part before (its hosts would be told
# of a "restart" and the server would start in a grace period), whether the client's lockd ran
nlm_begin() {
	NLM_NOTE='' NLM_STATD_OURS=0 NLM_LOCKD_BEFORE=0
	rpcinfo -p 127.0.0.1 2>/dev/null | awk '$1 == 100021 {f = 1} END {exit !f}' && NLM_LOCKD_BEFORE=1
	rm -rf "$NLM_STATE"
}

# nlm_unset: after the server's exit, none of its programs left in the peer's rpcbind
nlm_unset() {
	local reg
	reg=$(rpcinfo "$SRV_ADDR" 2>&1)
	if grep -Eq '^ +1000(03|05|21|24) ' <<<"$reg"; then
		failc rpcbind-unset "still registered in netns peer after exit: $(grep -E '^ +1000(03|05|21|24) ' <<<"$reg" | tr -s ' ' | tr '\n' ';')"
	else
		pass rpcbind-unset "100003, 100005, 100021 and 100024 unregistered at exit"
	fi
}

# nlm_evidence LOG...: what a failed part leaves to read: the server logs, the client's statd's
# log, both rpcbinds, the state directory, the kernel's log
nlm_evidence() {
	local l seen=' '
	for l in "$@"; do
		if [ ! -s "$l" ] || [[ "$seen" == *" $l "* ]]; then continue; fi
		seen="$seen$l "
		echo "---- server log ${l##*/} (tail):"
		grep -v '^nfsd-stat ' "$l" | tail -n 30 | sed 's/^/  | /'
	done
	if [ -s "${NLM_STATD_LOG:-}" ]; then
		echo "---- the client's statd (${NLM_STATD_LOG##*/}, tail):"
		tail -n 25 "$NLM_STATD_LOG" | sed 's/^/  | /'
	fi
	echo "---- rpcinfo -p 127.0.0.1 (root netns):"
	rpcinfo -p 127.0.0.1 2>&1 | sed 's/^/  | /'
	echo "---- rpcinfo -p $SRV_ADDR (netns peer):"
	rpcinfo -p "$SRV_ADDR" 2>&1 | sed 's/^/  | /'
	echo "---- $NLM_STATE/nlm-hosts: $(nlm_hosts_file "$NLM_STATE" || echo none)"
	echo "---- /var/lib/nfs/sm: $(find /var/lib/nfs/sm -mindepth 1 -printf '%f ' 2>&1)"
	echo "---- kernel log (tail):"
	dmesg | grep -v 'speed is unknown' | tail -n 20 | sed 's/^/  | /'
}

# nlm_cleaned: nothing of the part is left for the parts after it: the peer's rpcbind does not
# answer, the statd started here is unregistered, and the client's lockd (unless it ran before
# the part) stopped with the last locking mount and left the root netns's rpcbind
nlm_cleaned() {
	local i left
	for ((i = 0; i < 100; i++)); do
		left=''
		rpcinfo -p 10.0.3.2 >/dev/null 2>&1 && left="$left the rpcbind of netns peer still answers;"
		if [ "$NLM_STATD_OURS" = 1 ] && rpcinfo -p 127.0.0.1 2>/dev/null | awk '$1 == 100024 {f = 1} END {exit !f}'; then
			left="$left 100024 (statd) still registered in the root netns;"
		fi
		if [ "$NLM_LOCKD_BEFORE" = 0 ] && rpcinfo -p 127.0.0.1 2>/dev/null | awk '$1 == 100021 {f = 1} END {exit !f}'; then
			left="$left 100021 (the client's lockd) still registered in the root netns;"
		fi
		[ -z "$left" ] && break
		sleep 0.1
	done
	if [ -z "$left" ]; then
		pass cleanup "the peer's rpcbind gone$([ "$NLM_STATD_OURS" = 1 ] && echo ", statd unregistered")$([ "$NLM_LOCKD_BEFORE" = 0 ] && echo ", the client's lockd unregistered")"
	else
		failc cleanup "10 s after the part:$left"
	fi
}

# nlm_cleanup: whatever is left of the part (the server first, then the peer's rpcbind it
# unregistered from, then the statd started here, after the umounts)
nlm_cleanup() {
	nlm_release
	if [ -n "$NLM_V41_HOLD" ]; then
		exec {NLM_V41_HOLD}<&-
		NLM_V41_HOLD=''
	fi
	mountpoint -q "$NLM_V41" && { umount "$NLM_V41" 2>/dev/null || umount -f -l "$NLM_V41"; }
	mountpoint -q "$NLM_B" && { umount "$NLM_B" 2>/dev/null || umount -f -l "$NLM_B"; }
	mountpoint -q "$NLM_A" && { umount "$NLM_A" 2>/dev/null || umount -f -l "$NLM_A"; }
	if [ -n "$SRV_PID" ]; then
		kill -KILL "$SRV_PID" 2>/dev/null
		wait "$SRV_PID" 2>/dev/null
		SRV_PID=''
	fi
	if [ -n "$NLM_RPCB_PID" ]; then
		kill "$NLM_RPCB_PID" 2>/dev/null
		NLM_RPCB_PID=''
	fi
	if [ -n "$NLM_STATD_PID" ]; then
		kill "$NLM_STATD_PID" 2>/dev/null
		wait "$NLM_STATD_PID" 2>/dev/null
		NLM_STATD_PID=''
	fi
}

# ---- part nlm-restart/DEV ---------------------------------------------------------------------

# nlm_hosts_file DIR: DIR/nlm-hosts decoded ("state=N hosts=K: ADDR/NAME ..."); false when
# missing. Its layout (apps/src/nfs/nlm/records.rs): magic (8 octets), state and count (u32),
# per host family 4|6, address, name length (u16) and name; a checksum (8)
nlm_hosts_file() {
	local f=$1/nlm-hosts b st n i k j len addr name out=''
	[ -f "$f" ] || return 1
	read -ra b <<<"$(od -An -v -tu1 "$f" | tr -s ' \n' '  ')"
	[ "${#b[@]}" -ge 24 ] || {
		echo "cut short (${#b[@]} octets)"
		return 0
	}
	st=$(((b[8] << 24) | (b[9] << 16) | (b[10] << 8) | b[11]))
	n=$(((b[12] << 24) | (b[13] << 16) | (b[14] << 8) | b[15]))
	i=16
	for ((k = 0; k < n && i + 3 < ${#b[@]}; k++)); do
		if [ "${b[i]}" = 4 ]; then
			addr="${b[i + 1]}.${b[i + 2]}.${b[i + 3]}.${b[i + 4]}" i=$((i + 5))
		else
			addr=ipv6 i=$((i + 17))
		fi
		len=$(((b[i] << 8) | b[i + 1])) i=$((i + 2)) name=''
		for ((j = 0; j < len && i + j < ${#b[@]}; j++)); do
			# shellcheck disable=SC2059 # the octet, written as an escape on purpose
			name+=$(printf "\\x$(printf %02x "${b[i + j]}")")
		done
		i=$((i + len)) out="$out $addr/$name"
	done
	echo "state=$st hosts=$n:${out:- none}"
}

# nlm_u32 N: N as 4 octets, big-endian (XDR)
nlm_u32() {
	# shellcheck disable=SC2059 # the octets, written as escapes on purpose
	printf "$(printf %08x "$1" | sed 's/../\\x&/g')"
}

# nlm_sm_notify ADDR PORT MON_NAME STATE: one SM_NOTIFY call (program 100024 v1, procedure 6,
# AUTH_NULL; stat_chge: mon_name, state) in one UDP datagram from this host to ADDR:PORT, as
# sm-notify sends it; true when answered MSG_ACCEPTED / SUCCESS
nlm_sm_notify() {
	local name=$3 f=$LOGS/nlm-sm-notify.bin fd reply i
	{
		nlm_u32 $(((RANDOM << 15) | RANDOM))
		for i in 0 2 100024 1 6 0 0 0 0 ${#name}; do nlm_u32 "$i"; done
		printf '%s' "$name"
		for ((i = ${#name}; i % 4; i++)); do printf '\0'; done
		nlm_u32 "$4"
	} >"$f"
	# a connected UDP socket of bash's: the datagram written in one write (cat), the answer read
	# with one read (dd), 3 s at most
	exec {fd}<>"/dev/udp/$1/$2" || return 1
	cat "$f" >&"$fd"
	reply=$(timeout 3 dd bs=2048 count=1 <&"$fd" 2>/dev/null | od -An -v -tx1 | tr -d ' \n')
	exec {fd}>&-
	# after the xid: REPLY (1), MSG_ACCEPTED (0), verifier AUTH_NULL (0, 0), SUCCESS (0)
	[ "${reply:8}" = 0000000100000000000000000000000000000000 ]
}

# nlm_locks_wait N SECONDS: counters until nlm.locks = N (every 0.5 s, SECONDS at most); true
# when it came (CNT holds the last counters)
nlm_locks_wait() {
	local t0
	t0=$(now_ms)
	while :; do
		counters && [ "${CNT[nlm.locks]:-x}" = "$1" ] && return 0
		[ $(($(now_ms) - t0)) -lt $(($2 * 1000)) ] || return 1
		sleep 0.5
	done
}

# nlm_restart DEV FA FB GRACE: A's lock across a restart of the server: recorded in nlm-hosts,
# told with SM_NOTIFY by the restarted server, reclaimed in its grace period; B meets the grace
# period, then A's lock
nlm_restart() {
	local dev=$1 fa=$2 fb=$3 grace=$4 me rec st1 st2 t0 tb te trec rc out i line port1 k0
	me=$(uname -n) k0=$(dmesg | wc -l)
	nlm_hold -x "$fa" || return 1
	rec=$(nlm_hosts_file "$NLM_STATE")
	if [[ " $rec " == *" 10.0.3.1/$me "* ]]; then
		pass host-recorded "$NLM_STATE/nlm-hosts after A's lock: $rec"
	else
		failc host-recorded "$NLM_STATE/nlm-hosts does not list 10.0.3.1/$me after A's lock: ${rec:-no file}"
	fi
	st1=$(sed -n 's/^state=\([0-9]*\) .*/\1/p' <<<"$rec")
	if counters && [ "${CNT[nlm.locks]:-x}" = 1 ]; then
		pass lock-before "A holds LOCK_EX: nlm.locks=1, nlm.hosts=${CNT[nlm.hosts]:-?}"
	else
		failc lock-before "A holds LOCK_EX, yet nlm.locks=${CNT[nlm.locks]:-missing} (expected 1)"
	fi
	say "nlm-restart/$dev: stopping the server (A's flock keeps running)"
	srv_stop
	# the server's "reboot": its rpcbind goes too (it held the old registrations' ports)
	kill "$NLM_RPCB_PID" 2>/dev/null
	NLM_RPCB_PID=''
	for ((i = 0; i < 50; i++)); do
		rpcinfo -p "$SRV_ADDR" >/dev/null 2>&1 || break
		sleep 0.1
	done
	port1=$SRV_NLM_PORT
	t0=$(now_ms)
	if ! NLM_BACKEND=dir:$NFSD_DIR NLM_LOG=$LOGS/server-nlm-restart-$dev-2.log nlm_server "$dev" --nlm-grace "$grace"; then
		failc server-restart "the server did not start again (log below)"
		sed 's/^/  | /' "$SRV_LOG" | tail -n 30
		return 1
	fi
	pass server-restart "$(($(now_ms) - t0)) ms to the ready line: same state directory and export directory, nlm port $port1 -> $SRV_NLM_PORT"
	nlm_registered
	# the notification: the server's log, then the state number kept
	for ((i = 0; i < 150; i++)); do
		line=$(grep -m1 'SM_NOTIFY sent' "$SRV_LOG" | grep 'client=10\.0\.3\.1')
		[ -n "$line" ] && break
		sleep 0.1
	done
	if [ -n "$line" ] && grep -q 'NLM restarted: telling the clients that held locks' "$SRV_LOG"; then
		pass notify-sent "$(($(now_ms) - t0)) ms after the restart: $(grep -m1 'NLM restarted' "$SRV_LOG" | sed 's/^.*NLM restarted/NLM restarted/') / SM_NOTIFY sent${line#*SM_NOTIFY sent}"
	else
		failc notify-sent "no 'NLM restarted' and 'SM_NOTIFY sent ... client=10.0.3.1' in the restarted server's log within 15 s"
	fi
	rec=$(nlm_hosts_file "$NLM_STATE")
	st2=$(sed -n 's/^state=\([0-9]*\) .*/\1/p' <<<"$rec")
	if [ -n "$st1" ] && [ -n "$st2" ] && [ "$st2" -gt "$st1" ] && [ $((st2 % 2)) = 1 ]; then
		pass state-number "nlm-hosts' state $st1 -> $st2 (odd, larger)"
	else
		failc state-number "nlm-hosts' state ${st1:-?} -> ${st2:-?} (expected odd and larger); now: ${rec:-no file}"
	fi
	# the client's statd passes the notification to its lockd, which reclaims A's lock
	if nlm_locks_wait 1 $((grace - 4)); then
		trec=$(($(now_ms) - t0))
		pass reclaimed "A's lock is back on the restarted server $trec ms after its start (nlm.locks=1, nlm.hosts=${CNT[nlm.hosts]:-?}), inside its $grace s grace period, when only a LOCK with reclaim set is granted"
		NLM_NOTE="reclaimed $trec ms after the restart"
	else
		failc reclaimed "nlm.locks=${CNT[nlm.locks]:-missing} $(($(now_ms) - t0)) ms after the restart (expected 1 within the $grace s grace period: the client's lockd did not reclaim)"
	fi
	# the client's side of it: statd received the notification and passed it to the kernel's lockd
	line=$(grep -E "Received SM_NOTIFY from $SRV_ADDR|Callback to .* succeeded" "$NLM_STATD_LOG" 2>/dev/null | sed 's/^rpc.statd: //' | tr '\n' ';')
	if [[ "$line" == *"Received SM_NOTIFY"*"Callback to"* ]]; then
		pass statd-notified "the client's statd: ${line%;}"
	else
		failc statd-notified "no 'Received SM_NOTIFY from $SRV_ADDR' then 'Callback to ... succeeded' in $NLM_STATD_LOG: $(grep -i 'notify\|callback\|downcall' "$NLM_STATD_LOG" 2>/dev/null | tail -n 6 | tr '\n' ';')"
	fi
	# B in the grace period: the client retries NLM4_DENIED_GRACE_PERIOD every 5 s
	tb=$(($(now_ms) - t0))
	if [ "$tb" -gt $(((grace - 3) * 1000)) ]; then
		failc grace-wait "B's flock -n -x would start $tb ms after the restart: too late to meet the $grace s grace period"
	else
		out=$(timeout -k 2 $((grace + 30)) flock -n -E 42 -x "$fb" true 2>&1)
		rc=$?
		te=$(($(now_ms) - t0))
		if [ "$rc" = 42 ] && [ "$te" -ge $((grace * 1000)) ]; then
			pass grace-wait "B's flock -n -x, started $tb ms after the restart (in the grace period), returned $te ms after it, refused: the client waited out NLM4_DENIED_GRACE_PERIOD, then met A's reclaimed lock"
		elif [ "$rc" = 42 ]; then
			failc grace-wait "B's flock -n -x started at $tb ms was refused at $te ms, before the $grace s grace period ended (the server answered NLM4_DENIED, not NLM4_DENIED_GRACE_PERIOD)"
		elif [ "$rc" = 0 ]; then
			failc grace-wait "B's flock -n -x started at $tb ms got the lock at $te ms: A's lock was not reclaimed"
		else
			failc grace-wait "B's flock -n -x started at $tb ms: exit status $rc at $te ms: $out"
		fi
	fi
	nlm_try lock-kept -x "$fb" refused "after the grace period: A's reclaimed lock refuses B's flock -n -x"
	# the server's own count: a LOCK with reclaim granted, B's retries answered with the grace
	counters >/dev/null
	if [ "${CNT[nlm.reclaims]:-0}" -ge 1 ] && [ "${CNT[nlm.grace_denied]:-0}" -ge 1 ]; then
		pass reclaim-counted "nlm.reclaims=${CNT[nlm.reclaims]}, nlm.grace_denied=${CNT[nlm.grace_denied]}"
	else
		failc reclaim-counted "nlm.reclaims=${CNT[nlm.reclaims]:-missing}, nlm.grace_denied=${CNT[nlm.grace_denied]:-missing} (expected >= 1 each)"
	fi
	nlm_release
	nlm_try lock-free-restart -x "$fb" got "A released after the restart: B's flock -n -x gets the lock"
	# a reclaim the server refused would show here ("failed to reclaim lock", "spurious grace
	# period reject")
	out=$(dmesg | tail -n +$((k0 + 1)) | grep -i 'lockd')
	if [ -z "$out" ]; then
		pass kernel-lockd "no lockd message in the client's kernel log since before the restart"
	else
		failc kernel-lockd "$(tr '\n' ';' <<<"$out")"
	fi
}

# nlm_reboot FA FB: the client "reboots": SM_NOTIFY from its address releases its locks on the
# server (A's process still holds its lock on the client, so B can take it only through that)
nlm_reboot() {
	local fa=$1 fb=$2 me port rec d=$LOGS/nlm-sm-notify out rc n0
	me=$(uname -n) port=$NLM_SM_UDP
	if [ -z "$port" ]; then
		failc notify-port "no 100024 v1 udp in the peer's rpcbind"
		return 1
	fi
	nlm_hold -x "$fa" || return 1
	# 1. from this address, naming another host: answered, nothing released
	if ! nlm_sm_notify "$SRV_ADDR" "$port" "not-$me" 7; then
		failc notify-other "SM_NOTIFY (mon_name not-$me) to $SRV_ADDR:$port over UDP: no MSG_ACCEPTED / SUCCESS answer within 3 s"
	elif counters && [ "${CNT[nlm.locks]:-x}" = 1 ]; then
		pass notify-other "SM_NOTIFY from 10.0.3.1 naming not-$me (udp port $port, answered): nothing released, nlm.locks=1"
	else
		failc notify-other "after SM_NOTIFY naming not-$me: nlm.locks=${CNT[nlm.locks]:-missing} (expected 1: A's lock)"
	fi
	# 2. what the client's sm-notify sends after a reboot: statd's record of the server (a file
	#    named by the server's canonical name, "peer" in the guest's /etc/hosts; its line ends
	#    with mon_name 10.0.3.2 and my_name, the name the kernel's lockd gave statd), sent from a
	#    state directory of its own (-P; -d: in the foreground, its log on stderr; -f: however
	#    recent)
	rec=$(grep -l -E " ${SRV_ADDR//./\\.} [^ ]+\$" /var/lib/nfs/sm/* 2>/dev/null | head -n 1)
	if [ -z "$rec" ]; then
		failc notify-reboot "no record of $SRV_ADDR in /var/lib/nfs/sm (statd's monitor list): it holds $(find /var/lib/nfs/sm -mindepth 1 -printf '%f ' 2>&1)"
	else
		echo "statd's record of the server: ${rec##*/}: $(cat "$rec")"
		rm -rf "$d"
		mkdir -p "$d/sm" "$d/sm.bak"
		cp "$rec" "$d/sm/"
		n0=$(grep -c 'a client rebooted: its locks released' "$SRV_LOG")
		out=$(timeout -k 2 30 sm-notify -d -f -P "$d" 2>&1)
		rc=$?
		if [ "$rc" = 0 ] && nlm_locks_wait 0 5 && [ "$(grep -c 'a client rebooted: its locks released' "$SRV_LOG")" -gt "$n0" ]; then
			pass notify-reboot "sm-notify -d -f -P DIR with statd's record of $SRV_ADDR (SM_NOTIFY over udp to the port the peer's rpcbind gave, mon_name = the record's my_name $(awk '{print $NF}' "$rec"); uname -n: $me; the record ${rec##*/}, sent to the address it resolves to): the server released the client's lock: nlm.locks=0, '$(grep 'a client rebooted' "$SRV_LOG" | tail -n 1 | sed 's/^.*a client rebooted/a client rebooted/')'"
			nlm_try reboot-free -x "$fb" got "after the notification: B's flock -n -x gets the lock A's process still holds on the client"
		else
			failc notify-reboot "sm-notify exit status $rc, nlm.locks=${CNT[nlm.locks]:-?} (expected 0), 'a client rebooted' lines $n0 -> $(grep -c 'a client rebooted' "$SRV_LOG")"
			printf '%s\n' "$out" | tail -n 15 | sed 's/^/  | sm-notify: /'
		fi
	fi
	nlm_release
	# 3. naming the client's address: every host at that address
	nlm_hold -x "$fa" || return 1
	if ! nlm_sm_notify "$SRV_ADDR" "$port" 10.0.3.1 9; then
		failc notify-addr "SM_NOTIFY (mon_name 10.0.3.1) to $SRV_ADDR:$port over UDP: no MSG_ACCEPTED / SUCCESS answer within 3 s"
	elif nlm_locks_wait 0 5; then
		pass notify-addr "SM_NOTIFY from 10.0.3.1 naming 10.0.3.1: every host at that address released, nlm.locks=0"
		nlm_try addr-free -x "$fb" got "after it: B's flock -n -x gets the lock A's process still holds on the client"
	else
		failc notify-addr "after SM_NOTIFY naming 10.0.3.1: nlm.locks=${CNT[nlm.locks]:-missing} (expected 0)"
	fi
	nlm_release
}

run_nlm_restart() {
	local dev=$1 grace=${RPCRDMA_NFSD_NLM_GRACE:-15} k line
	part_begin "nlm-restart/$dev" "the NFSv3 client's lock across a restart of rpcrdma-nfsd (SM_NOTIFY, reclaim in a $grace s grace period), then a client reboot (SM_NOTIFY releases its locks), over $dev, dir backend, netns peer"
	if [ "$KIND" = kernel ]; then
		echo "SKIP nlm-restart/$dev: it proves rpcrdma-nfsd's lock manager"
		part_end
		return
	fi
	case $dev in
	siw | iwarp) ;;
	*)
		failc run "unknown NLM restart run $dev (siw iwarp)"
		part_end
		return
		;;
	esac
	nlm_begin
	NLM_LOG1=''
	mkdir -p "$NFSD_DIR"
	find "$NFSD_DIR" -mindepth 1 -delete
	if ! NLM_BACKEND=dir:$NFSD_DIR NLM_LOG=$LOGS/server-nlm-restart-$dev-1.log nlm_server "$dev" --nlm-grace "$grace"; then
		failc server-start "the server did not start (log below)"
		sed 's/^/  | /' "$SRV_LOG" | tail -n 30
	else
		pass server-start "$SRV_ADDR in netns peer with its own rpcbind, dir:$NFSD_DIR, --v4-state-dir $NLM_STATE, --nlm-grace $grace, nlm port $SRV_NLM_PORT"
		NLM_LOG1=$SRV_LOG
		if nlm_registered && nlm_statd && nlm_mount mount-a "$NLM_A" && nlm_mount mount-b "$NLM_B" nosharecache; then
			if echo lock-me >"$NLM_A/lockfile" && [ "$(cat "$NLM_B/lockfile")" = lock-me ]; then
				nlm_restart "$dev" "$NLM_A/lockfile" "$NLM_B/lockfile" "$grace" && nlm_reboot "$NLM_A/lockfile" "$NLM_B/lockfile"
			else
				failc lockfile "cannot write $NLM_A/lockfile and read it through $NLM_B"
			fi
			nlm_release
			rm -f "$NLM_A/lockfile"
		fi
		mountpoint -q "$NLM_B" && do_umount "$NLM_B"
		mountpoint -q "$NLM_A" && do_umount "$NLM_A"
		if [ -n "$SRV_PID" ]; then
			if counters; then
				line=''
				for k in "${!CNT[@]}"; do case $k in nlm.*) line="$line $k=${CNT[$k]}" ;; esac done
				echo "counters nlm-restart/$dev:$(tr ' ' '\n' <<<"$line" | sort | tr '\n' ' ' | sed 's/ $//')"
				for k in nlm.locks nlm.waiting; do
					if [ "${CNT[$k]:-x}" = 0 ]; then pass "counter-$k" "0 (after both umounts)"; else failc "counter-$k" "${CNT[$k]:-missing} after both umounts (expected 0)"; fi
				done
			else
				failc counters "no nfsd-stat lines after SIGUSR1"
			fi
			srv_stop
			nlm_unset
		fi
	fi
	[ "$PFAIL" -eq 0 ] || nlm_evidence "$NLM_LOG1" "$SRV_LOG"
	nlm_cleanup
	nlm_cleaned
	# shellcheck disable=SC2034 # read by part_end (nfs-server.sh)
	PNOTES=$NLM_NOTE
	part_end
}
