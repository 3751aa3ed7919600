#!/bin/bash
# scripts/vm/idle-modes.sh — what the reactors' idle modes cost in latency, over rxe in the QEMU
# VM, in one boot (docs/performance-vm.md, "Idle modes").
#
#   cargo build --release -p rpcrdma-apps --features rdma --bin rpcrdma-perf
#   scripts/vm/idle-modes.sh [N]        N calls per mode (default 2000)
#
# For each of busy_poll, shared_cores and interrupt, three times (the second round reversed):
# an rpcrdma-perf rpc_lat server (`--backoff MODE`) over rxe0 (10.0.2.15) left idle for
# RPCRDMA_VM_IDLE_S s (default 3; its CPU time then is the "idle CPU" column), then the client
# (same mode, one call at a time, 2-octet payload, inline) as a second process; each run needs
# both to exit 0 and the client's perftest row. Then a table: per mode the median t_typical and
# t_avg of its runs and their ratios to busy_poll (TCG: only ratios of one boot mean anything),
# the idle CPU of each run, the host's load average (taken before the boot) and the guest's.
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
# ticks PID: the process's CPU time so far (user + system, clock ticks of 1/100 s)
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# run MODE: one server (idle for IDLE_S s first, its CPU time measured) and one client
declare -A TYP AVG IDLE
run() {
	local mode=$1 t0 sp pid i c0 c1 row
	t0=$(now_ms)
	: >"$CW/server.log"
	timeout -k 5 "$CHECK_TIMEOUT" "$PERF" rpc_lat --provider rdma --bind "$RXE" -n "$N" \
		--backoff "$mode" >"$CW/server.log" 2>&1 &
	sp=$!
	for ((i = 0; i < SERVER_WAIT * 10; i++)); do
		grep -q "Waiting for client" "$CW/server.log" && break
		sleep 0.1
	done
	pid=$(pgrep -P "$sp" | head -1)
	c0=$(ticks "$pid")
	sleep "$IDLE_S"
	c1=$(ticks "$pid")
	timeout -k 5 "$CHECK_TIMEOUT" "$PERF" rpc_lat --provider rdma -n "$N" --backoff "$mode" "$RXE" \
		>"$CW/client.log" 2>&1
	local crc=$?
	wait "$sp"
	local src=$?
	if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ]; then
		verdict "rpc_lat-$mode" "$t0" 1 "client exit $crc, server exit $src"
		show_log server "$CW/server.log"
		show_log client "$CW/client.log"
	elif ! row=$(result_line "$CW/client.log" lat 2 "$N"); then
		verdict "rpc_lat-$mode" "$t0" 1 "the client printed no result row for 2 B x $N"
		show_log client "$CW/client.log"
	else
		local idle=$(((c1 - c0) / IDLE_S))
		verdict "rpc_lat-$mode" "$t0" 0 "$(echo "$row" | tr -s ' \t' ' ') | idle server CPU ${idle}% of a core"
		TYP[$mode]="${TYP[$mode]:-} $(echo "$row" | awk '{ print $5 }')"
		AVG[$mode]="${AVG[$mode]:-} $(echo "$row" | awk '{ print $6 }')"
		IDLE[$mode]="${IDLE[$mode]:-} $idle"
	fi
}
IDLE_S=${RPCRDMA_VM_IDLE_S:-3}
MODES=(busy_poll shared_cores interrupt)
# Three rounds, the second in reverse order (a drift of the host's load hits every mode alike).
for mode in "${MODES[@]}" interrupt shared_cores busy_poll "${MODES[@]}"; do
	run "$mode"
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
# median WORDS...: their median
median() { echo "$@" | tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%.0f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '%-13s %30s %30s %9s %9s %16s\n' mode "t_typical us: median (runs)" "t_avg us: median (runs)" "typ/busy" "avg/busy" "idle CPU % (runs)"
btyp=$(median "${TYP[busy_poll]:-}") bavg=$(median "${AVG[busy_poll]:-}")
for mode in "${MODES[@]}"; do
	[ -n "${TYP[$mode]:-}" ] || continue
	typ=$(median "${TYP[$mode]}") avg=$(median "${AVG[$mode]}")
	printf '%-13s %30s %30s %9s %9s %16s\n' "$mode" "$typ ($(echo ${TYP[$mode]} | tr ' ' /))" \
		"$avg ($(echo ${AVG[$mode]} | tr ' ' /))" \
		"$(awk -v a="$typ" -v b="$btyp" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')" \
		"$(awk -v a="$avg" -v b="$bavg" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')" \
		"$(echo ${IDLE[$mode]} | tr ' ' /)"
done
finish
