#!/bin/bash
# scripts/vm/idle-modes.sh — what the reactors' idle modes cost in latency, over rxe in the QEMU
# VM, in one boot (docs/performance.md, "Idle modes").
#
#   cargo build --release -p rpcrdma-apps --features rdma --bin rpcrdma-perf
#   scripts/vm/idle-modes.sh [N]        N calls per mode (default 2000)
#
# For each of busy_poll, shared_cores and interrupt: rpcrdma-perf rpc_lat (one call at a time,
# 2-octet payload, inline) over rxe0 (10.0.2.15), server and client as two processes, both with
# `--backoff MODE`; the check needs both to exit 0 and the client's perftest row. Then a table:
# t_typical and t_avg per mode and their ratios to busy_poll (TCG: only ratios of one boot
# mean anything), with the host's load average (taken before the boot) and the guest's.
# RPCRDMA_ENGINE_TEST=path also runs that engine unit-test binary (built with
# `cargo test -p rpcrdma-engine --features rdma --lib --no-run`) on rxe0 for the completion
# channel test (RPCRDMA_TEST_RDMA_IP=10.0.2.15, filter `completion_waking`).
# Exit status: 0 every run passed; 1 otherwise; run-in-vm.sh's statuses for VM failures.
set -uo pipefail
if [ "${1:-}" != --guest ]; then
	ROOT=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
	PERF=${RPCRDMA_VM_PERF:-${CARGO_TARGET_DIR:-$ROOT/target}/release/rpcrdma-perf}
	[ -x "$PERF" ] || {
		echo "idle-modes: $PERF is missing: build it first (see the header)" >&2
		exit 2
	}
	cd "$ROOT" || exit 2
	exec "$ROOT/scripts/vm/run-in-vm.sh" "$ROOT/scripts/vm/idle-modes.sh" --guest "${1:-2000}" \
		"$PERF" "$(cut -d' ' -f1-3 /proc/loadavg)" "${RPCRDMA_ENGINE_TEST:-}"
fi
N=$2 PERF=$3 HOST_LOAD=$4 ENGINE_TEST=${5:-}
. "$(dirname "$(readlink -f "$0")")/guest-checks.sh"
RXE=10.0.2.15
cd /tmp || exit 1
need_bin "$PERF" || {
	finish
	exit 1
}
declare -A ROW
for mode in busy_poll shared_cores interrupt; do
	t0=$(now_ms)
	pair "rpc_lat-$mode" "$PERF" rpc_lat --provider rdma --bind "$RXE" -n "$N" --backoff "$mode" \
		-- "$PERF" rpc_lat --provider rdma -n "$N" --backoff "$mode" "$RXE"
	if [ "$PAIR_CLIENT_RC" -ne 0 ] || [ "$PAIR_SERVER_RC" -ne 0 ]; then
		verdict "rpc_lat-$mode" "$t0" 1 "client exit $PAIR_CLIENT_RC, server exit $PAIR_SERVER_RC${PAIR_NOTE:+; $PAIR_NOTE}"
		show_log server "$CW/server.log"
		show_log client "$CW/client.log"
	elif ! row=$(result_line "$CW/client.log" lat 2 "$N"); then
		verdict "rpc_lat-$mode" "$t0" 1 "the client printed no result row for 2 B x $N"
		show_log client "$CW/client.log"
	else
		verdict "rpc_lat-$mode" "$t0" 0 "$(echo "$row" | tr -s ' \t' ' ')"
		ROW[$mode]=$row
	fi
done
if [ -n "$ENGINE_TEST" ]; then
	t0=$(now_ms)
	if RPCRDMA_TEST_RDMA_IP=$RXE "$ENGINE_TEST" completion_waking >"$CW/engine.log" 2>&1 &&
		grep -q '^test result: ok. 1 passed' "$CW/engine.log"; then
		verdict engine-completion-channel "$t0" 0 "$(grep -m1 '^test .*completion_waking' "$CW/engine.log")"
	else
		verdict engine-completion-channel "$t0" 1 "the unit test failed"
		show_log engine "$CW/engine.log"
	fi
fi
section "rpc_lat over rxe0, $N calls per mode, one boot (load average: host $HOST_LOAD, guest $(cut -d' ' -f1-3 /proc/loadavg))"
col() { echo "$1" | awk -v n="$2" '{ print $n }'; }
printf '%-13s %12s %12s %10s %10s\n' mode "t_typical" "t_avg" "typ/busy" "avg/busy"
for mode in busy_poll shared_cores interrupt; do
	[ -n "${ROW[$mode]:-}" ] || continue
	typ=$(col "${ROW[$mode]}" 5) avg=$(col "${ROW[$mode]}" 6)
	btyp=$(col "${ROW[busy_poll]:-}" 5) bavg=$(col "${ROW[busy_poll]:-}" 6)
	printf '%-13s %12s %12s %10s %10s\n' "$mode" "$typ" "$avg" \
		"$(awk -v a="$typ" -v b="$btyp" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')" \
		"$(awk -v a="$avg" -v b="$bavg" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')"
done
finish
