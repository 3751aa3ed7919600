#!/bin/bash
# scripts/vm/guest-stage.sh — runs INSIDE the VM (stage.sh starts it through
# run-in-vm.sh): runs one test binary over each kernel RDMA provider in turn.
#
#   guest-stage.sh BINARY [ARGS...]
#
# Runs (RPCRDMA_VM_RUNS, default "rxe siw"):
#   rxe  Soft-RoCE, both sides on rxe0 in the root netns (loopback in rxe):
#          RPCRDMA_DEVICE=rxe0 RPCRDMA_PEER_DEVICE=rxe0
#          RPCRDMA_SERVER_ADDR=10.0.2.15 RPCRDMA_CLIENT_ADDR=10.0.2.15  BINARY ARGS
#   siw  soft-iWARP, client side siw0 (10.0.3.1, root netns), server side siw1
#        (10.0.3.2, netns peer), in one or both shapes (RPCRDMA_VM_SIW_MODE):
#     inproc  one process drives both sides (the server side must setns() into
#             RPCRDMA_PEER_NETNS=/run/netns/peer, also given as RPCRDMA_SERVER_NETNS,
#             before creating its rdma_cm ids):
#               RPCRDMA_DEVICE=siw0 RPCRDMA_PEER_DEVICE=siw1
#               RPCRDMA_SERVER_ADDR=10.0.3.2 RPCRDMA_CLIENT_ADDR=10.0.3.1  BINARY ARGS
#     split   two processes: first, in netns peer,
#               RPCRDMA_ROLE=server RPCRDMA_DEVICE=siw1 RPCRDMA_PEER_DEVICE=siw0 ...
#               ip netns exec peer BINARY $RPCRDMA_VM_SERVE_ARGS ARGS   (default --serve)
#             then, once it listens (RPCRDMA_READY_FILE appears, or a TCP
#             listener shows up in netns peer, or RPCRDMA_VM_SERVER_WAIT s pass),
#               RPCRDMA_ROLE=client RPCRDMA_DEVICE=siw0 RPCRDMA_PEER_DEVICE=siw1 ... BINARY ARGS
#             The client's status decides; a server that exits non-zero by itself
#             fails the run too; one still running RPCRDMA_VM_SERVER_GRACE s after
#             the client is stopped (SIGTERM) without failing the run.
#     both    inproc, then split
# Every run also gets RPCRDMA_VM_RUN (rxe, siw-inproc, siw-split) and is limited
# to RPCRDMA_VM_RUN_TIMEOUT s (default 600; the run fails with status 124).
# Extra runs (RPCRDMA_VM_EXTRA_RUNS="name=/path/script ..."): after the runs above, in the
# same boot, each script is run with bash (same limit, RPCRDMA_VM_RUN=name) and counts as a
# run named `name` (scripts/ci-vm-stage.sh runs guest-apps.sh, guest-interop.sh and
# guest-siw-iwarp.sh this way).
# Prints a summary and "vm-stage: N passed, N failed"; exits 1 if any run failed.
set -u
if [ $# -lt 1 ]; then
	echo "usage: guest-stage.sh BINARY [ARGS...]" >&2
	exit 2
fi
BIN=$1
shift
RUNS=${RPCRDMA_VM_RUNS:-rxe siw}
SIW_MODE=${RPCRDMA_VM_SIW_MODE:-inproc}
RUN_TIMEOUT=${RPCRDMA_VM_RUN_TIMEOUT:-600}
SERVE_ARGS=${RPCRDMA_VM_SERVE_ARGS---serve}
SERVER_WAIT=${RPCRDMA_VM_SERVER_WAIT:-20}
SERVER_GRACE=${RPCRDMA_VM_SERVER_GRACE:-10}
RXE_ADDR=10.0.2.15 SIW_ADDR=10.0.3.1 SIW_PEER_ADDR=10.0.3.2
SUMMARY=() npass=0 nfail=0
W=$(mktemp -d /tmp/vm-stage.XXXXXX)

now_ms() { date +%s%3N; }
secs() { printf '%d.%d' $(($1 / 1000)) $((($1 % 1000) / 100)); }
banner() {
	echo
	echo "################################################################################"
	local l
	for l in "$@"; do echo "## $l"; done
	echo "################################################################################"
}
# result NAME STATUS MS [NOTE]
result() {
	local verdict=PASS
	[ "$2" -eq 0 ] || verdict="FAIL (exit $2)"
	echo "## vm-stage $1: $verdict in $(secs "$3") s${4:+ — $4}"
	SUMMARY+=("$(printf '%-12s %-16s %6s s' "$1" "$verdict" "$(secs "$3")")")
	if [ "$2" -eq 0 ]; then npass=$((npass + 1)); else nfail=$((nfail + 1)); fi
}
need_devices() {
	local d missing=
	for d in "$@"; do [ -e "/sys/class/infiniband/$d" ] || missing="$missing $d"; done
	[ -z "$missing" ] && return 0
	echo "vm-stage: RDMA device(s)$missing missing in the VM (have: $(ls /sys/class/infiniband | tr '\n' ' '))"
	return 1
}

# ---- preflight -----------------------------------------------------------------------------
preflight=0
if [ ! -x "$BIN" ]; then
	echo "vm-stage: $BIN is not an executable file inside the VM"
	preflight=126
elif libs=$(ldd "$BIN" 2>/dev/null) && grep -q 'not found' <<<"$libs"; then
	echo "vm-stage: $BIN needs libraries the VM does not have:"
	echo "$libs" | grep 'not found'
	echo "(stage.sh copies the host's copies of missing libraries in; if the host lacks them too, add"
	echo " the Debian package to vm_guest_pkgs in scripts/vm/lib.sh)"
	preflight=127
fi

# ---- runs --------------------------------------------------------------------------------------
run_rxe() {
	local e=(RPCRDMA_VM_RUN=rxe RPCRDMA_DEVICE=rxe0 RPCRDMA_PEER_DEVICE=rxe0
		"RPCRDMA_SERVER_ADDR=$RXE_ADDR" "RPCRDMA_CLIENT_ADDR=$RXE_ADDR")
	banner "vm-stage run: rxe — Soft-RoCE (rdma_rxe) loopback on rxe0 (eth0 $RXE_ADDR), root netns" \
		"  $BIN $*" "${e[@]/#/    }"
	need_devices rxe0 || return 125
	env "${e[@]}" timeout -k 5 "$RUN_TIMEOUT" "$BIN" "$@"
}
run_siw_inproc() {
	local e=(RPCRDMA_VM_RUN=siw-inproc RPCRDMA_DEVICE=siw0 RPCRDMA_PEER_DEVICE=siw1
		"RPCRDMA_SERVER_ADDR=$SIW_PEER_ADDR" "RPCRDMA_CLIENT_ADDR=$SIW_ADDR" RPCRDMA_PEER_NETNS=/run/netns/peer
		RPCRDMA_SERVER_NETNS=/run/netns/peer)
	banner "vm-stage run: siw-inproc — soft-iWARP, one process: client siw0 ($SIW_ADDR, root netns)," \
		"  server side siw1 ($SIW_PEER_ADDR) reached through setns(RPCRDMA_PEER_NETNS)" \
		"  $BIN $*" "${e[@]/#/    }"
	need_devices siw0 siw1 || return 125
	env "${e[@]}" timeout -k 5 "$RUN_TIMEOUT" "$BIN" "$@"
}
listener_in_peer() { [ -n "$(ip netns exec peer ss -Hltn 2>/dev/null)" ]; }
run_siw_split() {
	local common=(RPCRDMA_VM_RUN=siw-split "RPCRDMA_SERVER_ADDR=$SIW_PEER_ADDR" "RPCRDMA_CLIENT_ADDR=$SIW_ADDR")
	local se=("${common[@]}" RPCRDMA_ROLE=server RPCRDMA_DEVICE=siw1 RPCRDMA_PEER_DEVICE=siw0
		"RPCRDMA_READY_FILE=$W/server.ready")
	local ce=("${common[@]}" RPCRDMA_ROLE=client RPCRDMA_DEVICE=siw0 RPCRDMA_PEER_DEVICE=siw1)
	local sp tp c s rc deadline ready
	banner "vm-stage run: siw-split — soft-iWARP, two processes" \
		"  server: ip netns exec peer $BIN $SERVE_ARGS $*" "${se[@]/#/    }" \
		"  client: $BIN $*" "${ce[@]/#/    }"
	need_devices siw0 siw1 || return 125
	rm -f "$W/server.ready"
	: >"$W/server.log"
	# setsid: the server leads its own process group, so it can be stopped whole
	# shellcheck disable=SC2086 # SERVE_ARGS is a word list
	setsid -w ip netns exec peer env "${se[@]}" timeout -k 5 "$RUN_TIMEOUT" "$BIN" $SERVE_ARGS "$@" \
		>"$W/server.log" 2>&1 &
	sp=$!
	tail -n +1 -f --pid="$sp" "$W/server.log" 2>/dev/null | sed -u 's/^/[server] /' &
	tp=$!
	deadline=$((SECONDS + SERVER_WAIT))
	ready=0
	while [ "$SECONDS" -lt "$deadline" ] && kill -0 "$sp" 2>/dev/null; do
		if [ -e "$W/server.ready" ] || listener_in_peer; then
			ready=1
			break
		fi
		sleep 0.2
	done
	if ! kill -0 "$sp" 2>/dev/null; then
		echo "vm-stage: the server exited before the client started"
	elif [ "$ready" = 0 ]; then
		echo "vm-stage: no sign of the server listening after ${SERVER_WAIT}s; starting the client anyway"
	fi
	env "${ce[@]}" timeout -k 5 "$RUN_TIMEOUT" "$BIN" "$@" 2>&1 | sed -u 's/^/[client] /'
	c=${PIPESTATUS[0]}
	deadline=$((SECONDS + SERVER_GRACE))
	while [ "$SECONDS" -lt "$deadline" ] && kill -0 "$sp" 2>/dev/null; do sleep 0.2; done
	if kill -0 "$sp" 2>/dev/null; then
		echo "vm-stage: server still running ${SERVER_GRACE}s after the client; stopping it (not a failure)"
		kill -TERM -- -"$sp" 2>/dev/null
		sleep 1
		kill -KILL -- -"$sp" 2>/dev/null
		wait "$sp" 2>/dev/null
		s=0
	else
		wait "$sp"
		s=$?
	fi
	wait "$tp" 2>/dev/null
	echo "vm-stage: client exit $c, server exit $s"
	rc=$c
	[ "$rc" -ne 0 ] || rc=$s
	return "$rc"
}

for run in $RUNS; do
	case "$run" in
	rxe) names=(rxe) ;;
	siw)
		case "$SIW_MODE" in
		inproc) names=(siw-inproc) ;;
		split) names=(siw-split) ;;
		both) names=(siw-inproc siw-split) ;;
		*)
			echo "vm-stage: RPCRDMA_VM_SIW_MODE must be inproc, split or both (not $SIW_MODE)"
			exit 2
			;;
		esac
		;;
	*)
		echo "vm-stage: unknown run '$run' in RPCRDMA_VM_RUNS (rxe, siw)"
		exit 2
		;;
	esac
	for name in "${names[@]}"; do
		t0=$(now_ms)
		if [ "$preflight" -ne 0 ]; then
			banner "vm-stage run: $name — not started: $BIN cannot run in the VM"
			rc=$preflight
		else
			"run_${name//-/_}" "$@"
			rc=$?
		fi
		note=
		[ "$rc" -eq 124 ] && note="timed out after RPCRDMA_VM_RUN_TIMEOUT=${RUN_TIMEOUT}s"
		result "$name" "$rc" $(($(now_ms) - t0)) "$note"
	done
done

# ---- extra runs: scripts in the same boot --------------------------------------------------
for spec in ${RPCRDMA_VM_EXTRA_RUNS:-}; do
	name=${spec%%=*}
	script=${spec#*=}
	t0=$(now_ms)
	banner "vm-stage run: $name — $script (extra run)"
	if [ ! -f "$script" ]; then
		echo "vm-stage: extra run $name: $script is not a file inside the VM"
		rc=127
	else
		RPCRDMA_VM_RUN=$name timeout -k 5 "$RUN_TIMEOUT" bash "$script"
		rc=$?
	fi
	note=
	[ "$rc" -eq 124 ] && note="timed out after RPCRDMA_VM_RUN_TIMEOUT=${RUN_TIMEOUT}s"
	result "$name" "$rc" $(($(now_ms) - t0)) "$note"
done

banner "vm-stage summary ($BIN)" "${SUMMARY[@]/#/  }"
rm -rf "$W"
echo "vm-stage: $npass passed, $nfail failed"
[ "$nfail" -eq 0 ]
