#!/bin/bash
# scripts/vm/guest-apps.sh — runs INSIDE the VM (an extra run of guest-stage.sh, see
# scripts/ci-vm-stage.sh): the apps' rdma provider paths on kernel verbs, server and client as
# two processes, as perftest runs.
#
#   RPCRDMA_VM_PERF=/path/to/rpcrdma-perf guest-apps.sh
#
# rxe: server `rpcrdma-perf T --provider rdma --bind 10.0.2.15`, client
#      `rpcrdma-perf T --provider rdma 10.0.2.15` (both on rxe0, loopback inside rxe);
# siw: server `ip netns exec peer rpcrdma-perf T --provider rdma` (picks siw1, 10.0.3.2),
#      client `rpcrdma-perf T --provider rdma 10.0.3.2` (siw0, root netns).
# Tests: send_lat write_lat read_lat (-n $LAT_N), send_bw write_bw read_bw (-n $BW_N), then
# rpc_lat (inline, -n $RPC_N), rpc_bw (64 KiB: Read + Write chunks, -n $BW_N) and rpc_lat
# --chunks reply (8 KiB long replies through the Reply chunk, -n $BW_N) over rxe. Each check needs both processes to exit 0 and the
# client to print the perftest header and a result row for the size and -n it ran (send_bw:
# the server too); the RPC checks also need "RPCs completed : n, errors 0" on the client and
# "RPCs served : n calls, n replies, errors 0, connections 1" on the server.
#
# The RPC tests run over siw too: without type-2 memory windows the poller's client exposes
# chunks through endpoint-wide persistent STags, which it refuses unless told: the siw client
# gets --persistent-stags (it prints the exposure; docs/rdma-provider.md).
set -u
. "$(dirname "$(readlink -f "$0")")/guest-checks.sh"
PERF=${RPCRDMA_VM_PERF:?RPCRDMA_VM_PERF: the rpcrdma-perf binary}
LAT_N=${RPCRDMA_VM_LAT_N:-100}
BW_N=${RPCRDMA_VM_BW_N:-32}
RPC_N=${RPCRDMA_VM_RPC_N:-100}
RXE=10.0.2.15 SIW_PEER=10.0.3.2
cd /tmp || exit 1
need_bin "$PERF" || {
	finish
	exit 1
}

# verbs DEV TEST ARGS...: one verbs benchmark over DEV (rxe or siw)
verbs() {
	local dev=$1 t=$2 t0 kind size iters row srow reason=
	shift 2
	t0=$(now_ms)
	case $t in *_lat) kind=lat size=2 iters=$LAT_N ;; *) kind=bw size=65536 iters=$BW_N ;; esac
	local srv=(timeout -k 5 "$CHECK_TIMEOUT" "$PERF" "$t" --provider rdma -n "$iters" "$@")
	local cli=("$PERF" "$t" --provider rdma -n "$iters" "$@")
	if [ "$dev" = rxe ]; then
		pair "$t-$dev" "${srv[@]}" --bind "$RXE" -- "${cli[@]}" "$RXE"
	else
		pair "$t-$dev" ip netns exec peer "${srv[@]}" -- "${cli[@]}" "$SIW_PEER"
	fi
	if [ "$PAIR_CLIENT_RC" -ne 0 ] || [ "$PAIR_SERVER_RC" -ne 0 ]; then
		reason="client exit $PAIR_CLIENT_RC, server exit $PAIR_SERVER_RC"
	elif ! row=$(result_line "$CW/client.log" "$kind" "$size" "$iters"); then
		reason="the client printed no perftest result row for $size B x $iters"
	elif [ "$t" = send_bw ] && ! srow=$(result_line "$CW/server.log" bw "$size" "$iters"); then
		reason="the send_bw server printed no result row"
	fi
	if [ -n "$reason" ]; then
		verdict "$t-$dev" "$t0" 1 "$reason${PAIR_NOTE:+; $PAIR_NOTE}"
		show_log server "$CW/server.log"
		show_log client "$CW/client.log"
	else
		verdict "$t-$dev" "$t0" 0 "$(echo "$row" | tr -s ' \t' ' ')${srow:+ | server:$(echo "$srow" | tr -s ' \t' ' ')}"
	fi
}

# rpc DEV NAME TEST SIZE KIND N ARGS...: an RPC benchmark over DEV (rxe or siw), N calls
rpc() {
	local dev=$1 name=$2 t=$3 size=$4 kind=$5 n=$6 t0 row reason=
	shift 6
	t0=$(now_ms)
	if [ "$dev" = rxe ]; then
		pair "$name" timeout -k 5 "$CHECK_TIMEOUT" "$PERF" "$t" --provider rdma --bind "$RXE" -n "$n" "$@" \
			-- "$PERF" "$t" --provider rdma -n "$n" "$@" "$RXE"
	else
		pair "$name" ip netns exec peer timeout -k 5 "$CHECK_TIMEOUT" "$PERF" "$t" --provider rdma -n "$n" "$@" \
			-- "$PERF" "$t" --provider rdma --persistent-stags -n "$n" "$@" "$SIW_PEER"
	fi
	if [ "$PAIR_CLIENT_RC" -ne 0 ] || [ "$PAIR_SERVER_RC" -ne 0 ]; then
		reason="client exit $PAIR_CLIENT_RC, server exit $PAIR_SERVER_RC"
	elif ! row=$(result_line "$CW/client.log" "$kind" "$size" "$n"); then
		reason="the client printed no perftest result row for $size B x $n"
	elif ! grep -q "^ RPCs completed  : $n, errors 0, credits granted [1-9]" "$CW/client.log"; then
		reason="the client's counters are not \"RPCs completed : $n, errors 0\""
	elif ! grep -q "^ RPCs served     : $n calls, $n replies, errors 0, connections 1$" "$CW/server.log"; then
		reason="the server's counters are not \"$n calls, $n replies, errors 0, connections 1\""
	fi
	if [ -n "$reason" ]; then
		verdict "$name" "$t0" 1 "$reason${PAIR_NOTE:+; $PAIR_NOTE}"
		show_log server "$CW/server.log"
		show_log client "$CW/client.log"
	else
		verdict "$name" "$t0" 0 "$(echo "$row" | tr -s ' \t' ' ') |$(sed -n 's/^ Each call       ://p' "$CW/client.log") |$(sed -n 's/^ RPCs served     :/ server:/p' "$CW/server.log")"
	fi
}

section "rpcrdma-perf verbs tests, rdma provider, two processes: rxe0 loopback ($RXE)"
for t in send_lat write_lat read_lat send_bw write_bw read_bw; do verbs rxe "$t"; done
section "rpcrdma-perf verbs tests: siw0 (root netns) -> siw1 ($SIW_PEER, netns peer)"
for t in send_lat write_lat read_lat send_bw write_bw read_bw; do verbs siw "$t"; done

section "rpcrdma-perf RPC tests (poller Client/Server API), rdma provider, two processes: rxe0"
rpc rxe rpc_lat-rxe rpc_lat 2 lat "$RPC_N"
rpc rxe rpc_bw-rxe rpc_bw 65536 bw "$BW_N" -t 8
rpc rxe rpc_lat-reply-rxe rpc_lat 8192 lat "$BW_N" -s 8192 --chunks reply

# siw has no type-2 memory windows: the poller's client exposes its chunks through persistent
# STags there, opted in with --persistent-stags in rpc() (and neither side offers remote
# invalidation), docs/rdma-provider.md 2.4.
section "rpcrdma-perf RPC tests over siw (persistent STags): siw0 -> siw1 ($SIW_PEER, netns peer)"
rpc siw rpc_lat-siw rpc_lat 2 lat "$RPC_N"
rpc siw rpc_bw-siw rpc_bw 65536 bw "$BW_N" -t 8
finish
