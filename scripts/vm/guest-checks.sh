# shellcheck shell=bash
# scripts/vm/guest-checks.sh — helpers of the guest-side check scripts (guest-apps.sh,
# guest-interop.sh), sourced INSIDE the VM.
#
# Every check prints exactly one verdict line:
#   PASS <name> (<t> s)[: <note>]
#   FAIL <name> (<t> s): <reason>          (followed by the logs of the processes involved)
#   SKIP <name>: <why>
# and the script ends with "summary: N passed, N failed, N skipped" (the line
# scripts/ci-vm-stage.sh collects per run), exiting 1 when anything failed.
#
# Server/client pairs (pair): the server is started in the background (its command may begin
# with `ip netns exec peer`), the client starts once the server printed its "Waiting for client"
# line (or SERVER_WAIT s passed); both are limited by CHECK_TIMEOUT s; the server must exit by
# itself (status 0) within SERVER_GRACE s after the client, or the check fails.

CHECK_TIMEOUT=${RPCRDMA_VM_CHECK_TIMEOUT:-90}
SERVER_WAIT=${RPCRDMA_VM_SERVER_WAIT:-20}
SERVER_GRACE=${RPCRDMA_VM_SERVER_GRACE:-20}
NPASS=0 NFAIL=0 NSKIP=0
CW=$(mktemp -d /tmp/vm-checks.XXXXXX)

now_ms() { date +%s%3N; }
secs() { printf '%d.%d' $(($1 / 1000)) $((($1 % 1000) / 100)); }
section() { printf '\n---- %s\n' "$*"; }

# verdict NAME T0_MS STATUS(0 pass, else fail) [REASON/NOTE]
verdict() {
	local t
	t=$(secs $(($(now_ms) - $2)))
	if [ "$3" -eq 0 ]; then
		echo "PASS $1 ($t s)${4:+: $4}"
		NPASS=$((NPASS + 1))
	else
		echo "FAIL $1 ($t s): ${4:-failed}"
		NFAIL=$((NFAIL + 1))
	fi
}
skip() {
	echo "SKIP $1: $2"
	NSKIP=$((NSKIP + 1))
}
# show_log LABEL FILE: a process's output, indented (failures only)
show_log() {
	[ -s "$2" ] || return 0
	echo "  ---- $1:"
	sed 's/^/  | /' "$2"
}
finish() {
	rm -rf "$CW"
	echo
	echo "summary: $NPASS passed, $NFAIL failed, $NSKIP skipped"
	[ "$NFAIL" -eq 0 ]
}

# need_bin PATH: the binary exists here and ldd finds its libraries
need_bin() {
	if [ ! -x "$1" ]; then
		echo "FAIL preflight: $1 is not an executable file inside the VM"
		NFAIL=$((NFAIL + 1))
		return 1
	fi
	if ldd "$1" 2>/dev/null | grep -q 'not found'; then
		echo "FAIL preflight: $1 needs libraries the VM does not have:"
		ldd "$1" | grep 'not found'
		NFAIL=$((NFAIL + 1))
		return 1
	fi
}

# pair NAME SERVER_CMD... -- CLIENT_CMD...
# Runs the pair (NAME is for the reader of the call); leaves the outputs in $CW/server.log, $CW/client.log and the statuses in
# PAIR_SERVER_RC, PAIR_CLIENT_RC; returns 0 when both exited 0 (the caller checks the output).
pair() {
	local s=() c=() sp i
	shift # NAME
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		s+=("$1")
		shift
	done
	shift
	c=("$@")
	: >"$CW/server.log"
	: >"$CW/client.log"
	PAIR_NOTE=
	# setsid: the server leads its own process group (stopped whole if it hangs)
	setsid -w timeout -k 5 "$CHECK_TIMEOUT" "${s[@]}" >"$CW/server.log" 2>&1 &
	sp=$!
	for ((i = 0; i < SERVER_WAIT * 10; i++)); do
		grep -q "Waiting for client" "$CW/server.log" && break
		kill -0 "$sp" 2>/dev/null || break
		sleep 0.1
	done
	grep -q "Waiting for client" "$CW/server.log" ||
		PAIR_NOTE="no \"Waiting for client\" from the server after ${SERVER_WAIT}s"
	timeout -k 5 "$CHECK_TIMEOUT" "${c[@]}" >"$CW/client.log" 2>&1
	PAIR_CLIENT_RC=$?
	for ((i = 0; i < SERVER_GRACE * 10; i++)); do
		kill -0 "$sp" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$sp" 2>/dev/null; then
		PAIR_NOTE="${PAIR_NOTE:+$PAIR_NOTE; }the server was still running ${SERVER_GRACE}s after the client; stopped"
		kill -TERM -- -"$sp" 2>/dev/null
		sleep 1
		kill -KILL -- -"$sp" 2>/dev/null
		wait "$sp" 2>/dev/null
		PAIR_SERVER_RC=143
	else
		wait "$sp"
		PAIR_SERVER_RC=$?
	fi
	[ "$PAIR_CLIENT_RC" -eq 0 ] && [ "$PAIR_SERVER_RC" -eq 0 ]
}

# result_line FILE KIND SIZE ITERS: the perftest result row of SIZE and ITERS in FILE, after
# the header of KIND (lat: " #bytes #iterations    t_min[usec]", 9 numeric columns;
# bw: " #bytes     #iterations    BW peak[", 5 numeric columns). Prints the row.
result_line() {
	local hdr cols
	case $2 in
	lat) hdr=' #bytes #iterations    t_min[usec]' cols=9 ;;
	bw) hdr=' #bytes     #iterations    BW peak[' cols=5 ;;
	esac
	awk -v hdr="$hdr" -v cols="$cols" -v size="$3" -v iters="$4" '
		index($0, hdr) == 1 { on = 1; next }
		on && NF == cols && $1 == size && $2 == iters {
			ok = 1
			for (i = 1; i <= NF; i++) if ($i !~ /^[0-9]+(\.[0-9]+)?$/) ok = 0
			if (ok) { print; found = 1; exit }
		}
		END { exit !found }' "$1"
}

# window_of ARGS...: the calls a closed-loop RPC client keeps in flight (its -t, default 1)
window_of() {
	local w=1
	while [ $# -gt 0 ]; do
		if [ "$1" = -t ] && [ $# -gt 1 ]; then w=$2; fi
		shift
	done
	echo "$w"
}
# served_ok LOG N W: the server's summary says N calls, errors 0, connections 1 and between
# N - W and N replies. The server counts a reply when its Send completes; the client checks
# every reply it gets and disconnects as soon as the last one arrives, so the Sends of the
# last window of replies can still be completing at the server (siw completes a Send after
# handing it to TCP) when the disconnect flushes them: those count as flushed, not replied.
served_ok() {
	local line c='' r='' e='' k=''
	line=$(grep -m1 '^ RPCs served     : ' "$1") || return 1
	# (a here-string, not process substitution: the VM's initramfs has no /dev/fd)
	read -r c r e k <<<"$(sed -E 's/^ RPCs served     : ([0-9]+) calls, ([0-9]+) replies, errors ([0-9]+), connections ([0-9]+)$/\1 \2 \3 \4/' <<<"$line")"
	[ "$c" = "$2" ] && [ "$e" = 0 ] && [ "$k" = 1 ] && [ "$r" -le "$2" ] && [ "$r" -ge $(($2 - $3)) ]
}
