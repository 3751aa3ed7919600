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
# The RPC tests over siw are a known gap (docs/interop.md): the poller's Client exposes chunk
# memory with type-2 memory windows only, which siw lacks, so its connection never starts.
# One short rpc_lat over siw checks that this is still so (it fails loudly once it works,
# so that the stage is updated to run the RPC tests over siw too).
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

# rpc NAME TEST SIZE KIND N ARGS...: an RPC benchmark over rxe, N calls
rpc() {
	local name=$1 t=$2 size=$3 kind=$4 n=$5 t0 row reason=
	shift 5
	t0=$(now_ms)
	pair "$name" timeout -k 5 "$CHECK_TIMEOUT" "$PERF" "$t" --provider rdma --bind "$RXE" -n "$n" "$@" \
		-- "$PERF" "$t" --provider rdma -n "$n" "$@" "$RXE"
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
rpc rpc_lat-rxe rpc_lat 2 lat "$RPC_N"
rpc rpc_bw-rxe rpc_bw 65536 bw "$BW_N" -t 8
rpc rpc_lat-reply-rxe rpc_lat 8192 lat "$BW_N" -s 8192 --chunks reply

section "RPC tests over siw: known gap (poller Client needs type-2 memory windows; siw has none)"
t0=$(now_ms)
pair rpc_lat-siw-gap ip netns exec peer timeout -k 5 12 "$PERF" rpc_lat --provider rdma -n 5 \
	-- timeout -k 5 12 "$PERF" rpc_lat --provider rdma -n 5 "$SIW_PEER"
if [ "$PAIR_CLIENT_RC" -eq 0 ]; then
	verdict rpc_lat-siw-gap "$t0" 1 "rpc_lat over siw now WORKS: the known gap is closed; run the \
RPC tests over siw in scripts/vm/guest-apps.sh and update docs/interop.md"
	show_log client "$CW/client.log"
elif grep -q "timed out waiting for the RPC connection" "$CW/client.log"; then
	skip rpc-siw "known gap, still present ($(secs $(($(now_ms) - t0))) s): the client never connected over siw \
(no type-2 memory windows for the poller's chunk exposure); see docs/interop.md"
else
	verdict rpc_lat-siw-gap "$t0" 1 "rpc_lat over siw failed differently than the known gap \
(client exit $PAIR_CLIENT_RC)"
	show_log server "$CW/server.log"
	show_log client "$CW/client.log"
fi
finish
