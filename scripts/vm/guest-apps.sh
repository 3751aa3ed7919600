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
# Tests: send_lat write_lat read_lat (-n $LAT_N), send_bw write_bw read_bw (-n $BW_N), each
# followed by perftest's ib_<test> with the same size and -n over rdma_cm (-R), then
# rpc_lat (inline, -n $RPC_N) over rxe. Each check needs both processes to exit 0 and the
# client to print the perftest header and a result row for the size and -n it ran (send_bw:
# the server too); the RPC checks also need "RPCs completed : n, errors 0" on the client and
# "RPCs served : n calls, n replies, errors 0, connections 1" on the server (replies: at most
# the client's in-flight window fewer, see served_ok).
#
# What only checks the apps as two processes runs on the host in `cargo test` over the
# user-space iWARP provider (apps/tests/iwarp_apps.rs: rpc_lat inline and with Read / Write
# chunks, rpc_bw -t 8 with 64 KiB calls, rpc_lat -s 8192 --chunks reply), so over rxe the
# per-connection RPC run here is rpc_lat only (the issue-15 and SRQ tables use its row); rxe's
# Read and Write chunks under memory windows run in rpc_bw-srq-rxe (the same client), its
# Reply chunks against Linux in the interop run.
#
# Then rpc_lat and rpc_bw once more over rxe and over siw with the server's connections on one
# shared receive queue (`--srq $RPCRDMA_VM_SRQ_DEPTH`, default 64, server only: rpc_lat-srq-rxe,
# rpc_bw-srq-rxe, rpc_lat-srq-siw, rpc_bw-srq-siw): the same checks, plus the server's banner
# "Using SRQ : ON" and its summary line " SRQ : depth N, ..."; a table puts them beside the
# per-connection runs of the same boot (printed, not checked).
#
# RPCRDMA_VM_APPS_VERBS=0 runs the RPC tests only (no verbs tests, no perftest).
#
# Over siw the latency tests between two of our processes on the rdma provider (send_lat,
# write_lat, read_lat, rpc_lat inline) run only with RPCRDMA_VM_APPS_SIW_LAT=1 (by hand, for the
# siw latency rows of the tables; perftest's siw latency runs with them): each is covered
# without them. The same tests with the same sizes and -n run in the siw-iwarp run with our
# rdma provider on siw as the server (siw-server way) and as the client (iwarp-server way), and
# server and client as two processes of ours run on the host in `cargo test`
# (apps/tests/iwarp_apps.rs: send_lat, write_lat, read_lat, rpc_lat inline, and send_bw,
# write_bw, read_bw); rpc_lat-srq-siw keeps the RPC client over siw here.
#
# At the end, one table puts ours beside perftest's (latency t_typical, bandwidth BW average,
# rpc_lat NULL against 2 x ib_send_lat) with issue 15's targets; it is printed, not checked.
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
PT_WAIT=${RPCRDMA_VM_PERFTEST_WAIT:-2}
SRQ_DEPTH=${RPCRDMA_VM_SRQ_DEPTH:-64}
SIW_LAT=${RPCRDMA_VM_APPS_SIW_LAT:-0}
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
		OURS[$t-$dev]=$row
	fi
}

# perftest DEV TEST: perftest's own ib_TEST over DEV with rdma_cm (-R), the same size and -n
# as verbs(): its row goes into the side-by-side table (the check fails only when perftest
# itself printed no row: then the table cannot be made).
perftest() {
	local dev=$1 t=$2 t0 kind size iters row reason=
	t0=$(now_ms)
	case $t in *_lat) kind=lat size=2 iters=$LAT_N ;; *) kind=bw size=65536 iters=$BW_N ;; esac
	if ! command -v "ib_$t" >/dev/null; then
		skip "ib_$t-$dev" "perftest's ib_$t is not installed in the VM"
		return
	fi
	local args=(-R -s "$size" -n "$iters")
	# perftest's server prints its "Waiting for client" banner through a buffered stdout, so
	# pair() cannot see it: the client starts after PT_WAIT s and tries again (perftest's client
	# gives up at once when nobody listens yet) while the server runs.
	# shellcheck disable=SC2016 # expanded by the inner bash
	local retry='for i in 1 2 3 4 5 6 7 8 9 10; do "$@" && exit 0; echo "(attempt $i failed)"; sleep 2; done; exit 1'
	local attempt
	for attempt in 1 2; do
		if [ "$dev" = rxe ]; then
			SERVER_WAIT=$PT_WAIT pair "ib_$t-$dev" "ib_$t" -d rxe0 "${args[@]}" \
				-- bash -c "$retry" retry "ib_$t" -d rxe0 "${args[@]}" "$RXE"
		else
			SERVER_WAIT=$PT_WAIT pair "ib_$t-$dev" ip netns exec peer "ib_$t" "${args[@]}" \
				-- bash -c "$retry" retry "ib_$t" "${args[@]}" "$SIW_PEER"
		fi
		# perftest measures the CPU clock before it reports; under TCG's emulated clock that
		# calibration can fail ("Correlation coefficient r^2: ... < 0.9", "Can't produce a
		# report") and the side that reports exits without one: perftest's own failure, run
		# once more. So is any other failure of the pair (both sides are perftest, the baseline
		# our tools are compared with, not our code): its client has been seen to crash on an
		# RDMA CM rejection when its server was not listening yet, leaving the server to time out.
		if [ "$attempt" = 1 ] && { grep -qs "Can't produce a report" "$CW/server.log" "$CW/client.log" ||
			[ "$PAIR_CLIENT_RC" -ne 0 ] || [ "$PAIR_SERVER_RC" -ne 0 ]; }; then
			echo "  (ib_$t-$dev: perftest failed (client exit $PAIR_CLIENT_RC, server exit $PAIR_SERVER_RC); running it once more)"
			continue
		fi
		break
	done
	if [ "$PAIR_CLIENT_RC" -ne 0 ] || [ "$PAIR_SERVER_RC" -ne 0 ]; then
		reason="client exit $PAIR_CLIENT_RC, server exit $PAIR_SERVER_RC"
	elif ! row=$(result_line "$CW/client.log" "$kind" "$size" "$iters"); then
		reason="perftest printed no result row for $size B x $iters"
	fi
	if [ -n "$reason" ]; then
		verdict "ib_$t-$dev" "$t0" 1 "$reason${PAIR_NOTE:+; $PAIR_NOTE}"
		show_log server "$CW/server.log"
		show_log client "$CW/client.log"
	else
		verdict "ib_$t-$dev" "$t0" 0 "$(echo "$row" | tr -s ' \t' ' ')"
		PT[$t-$dev]=$row
	fi
}

# col ROW N: the N-th column of a perftest row
col() { echo "$1" | awk -v n="$2" '{ print $n }'; }

# ratio_table: ours against perftest, one run (TCG: only ratios measured in one boot mean
# anything). Latency: t_typical (column 5), target <= 1.05; bandwidth: BW average (column 4),
# target >= 0.95; rpc_lat NULL's full round trip against ib_send_lat's (2 x its RTT/2),
# target <= 1.3. Printed for the reader; not a pass/fail check (issue 15's table,
# docs/performance-vm.md).
ratio_table() {
	local dev t k o p r col_n what target
	section "side by side with perftest (same boot, same sizes and -n)"
	printf '%-5s %-10s %-22s %12s %12s %8s %s\n' dev test measure ours perftest ratio target
	for dev in rxe siw; do
		for t in send_lat write_lat read_lat send_bw write_bw read_bw; do
			k=$t-$dev
			case $t in *_lat) col_n=5 what="t_typical [usec]" ;; *) col_n=4 what="BW average [MB/s]" ;; esac
			if [ -z "${OURS[$k]:-}" ] || [ -z "${PT[$k]:-}" ]; then
				printf '%-5s %-10s %-22s %12s %12s %8s\n' "$dev" "$t" "$what" "${OURS[$k]:+$(col "${OURS[$k]}" $col_n)}" "${PT[$k]:+$(col "${PT[$k]}" $col_n)}" "n/a"
				continue
			fi
			o=$(col "${OURS[$k]}" $col_n) p=$(col "${PT[$k]}" $col_n)
			r=$(awk -v o="$o" -v p="$p" 'BEGIN { if (p > 0) printf "%.2f", o / p; else print "n/a" }')
			case $t in *_lat) target="<= 1.05" ;; *) target=">= 0.95" ;; esac
			printf '%-5s %-10s %-22s %12s %12s %8s %s\n' "$dev" "$t" "$what" "$o" "$p" "$r" "$target"
		done
		if [ -n "${RPCLAT[$dev]:-}" ] && [ -n "${PT[send_lat-$dev]:-}" ]; then
			o=$(col "${RPCLAT[$dev]}" 5) p=$(col "${PT[send_lat-$dev]}" 5)
			r=$(awk -v o="$o" -v p="$p" 'BEGIN { if (p > 0) printf "%.2f", o / (2 * p); else print "n/a" }')
			printf '%-5s %-10s %-22s %12s %12s %8s %s\n' "$dev" "rpc_lat" "NULL RTT / 2x send_lat" "$o" "$(awk -v p="$p" 'BEGIN { printf "%.2f", 2 * p }')" "$r" "<= 1.3"
		fi
	done
	echo "(load average in the VM: $(cut -d' ' -f1-3 /proc/loadavg))"
}

# hw_counters DEV: the device's hardware counters (rxe: /sys/class/infiniband/rxe0/ports/1/
# hw_counters; siw has none), one "name=value" a line
hw_counters() {
	local d=/sys/class/infiniband/${1}0/ports/1/hw_counters f
	[ -d "$d" ] || return 0
	for f in "$d"/*; do echo "$(basename "$f")=$(cat "$f" 2>/dev/null)"; done
}
# hw_delta BEFORE AFTER: ", hw counters: name +N ..." for the counters that moved (RNR NAKs,
# retries, sequence errors: what a receive missing at the server would show)
hw_delta() {
	local out
	out=$(printf '%s\n--\n%s\n' "$1" "$2" | awk -F= '$0 == "--" { after = 1; next }
		!after { a[$1] = $2; next }
		($2 - a[$1]) > 0 && $1 !~ /^(sent_pkts|rcvd_pkts)$/ { printf " %s +%d", $1, $2 - a[$1] }')
	[ -z "$out" ] || echo ", hw counters:$out"
}

# rpc DEV NAME TEST SIZE KIND N ARGS...: an RPC benchmark over DEV (rxe or siw), N calls; the
# server alone also gets the words of RPC_SERVER_ARGS (e.g. "--srq 64": then its banner must say
# "Using SRQ : ON" and its summary show the SRQ's depth)
rpc() {
	local dev=$1 name=$2 t=$3 size=$4 kind=$5 n=$6 t0 row reason='' sa=()
	shift 6
	read -ra sa <<<"${RPC_SERVER_ARGS:-}"
	local hw0
	hw0=$(hw_counters "$dev")
	t0=$(now_ms)
	if [ "$dev" = rxe ]; then
		pair "$name" timeout -k 5 "$CHECK_TIMEOUT" "$PERF" "$t" --provider rdma --bind "$RXE" -n "$n" "$@" "${sa[@]}" \
			-- "$PERF" "$t" --provider rdma -n "$n" "$@" "$RXE"
	else
		pair "$name" ip netns exec peer timeout -k 5 "$CHECK_TIMEOUT" "$PERF" "$t" --provider rdma -n "$n" "$@" "${sa[@]}" \
			-- "$PERF" "$t" --provider rdma --persistent-stags -n "$n" "$@" "$SIW_PEER"
	fi
	if [ "$PAIR_CLIENT_RC" -ne 0 ] || [ "$PAIR_SERVER_RC" -ne 0 ]; then
		reason="client exit $PAIR_CLIENT_RC, server exit $PAIR_SERVER_RC"
	elif ! row=$(result_line "$CW/client.log" "$kind" "$size" "$n"); then
		reason="the client printed no perftest result row for $size B x $n"
	elif ! grep -q "^ RPCs completed  : $n, errors 0, credits granted [1-9]" "$CW/client.log"; then
		reason="the client's counters are not \"RPCs completed : $n, errors 0\""
	elif ! served_ok "$CW/server.log" "$n" "$(window_of "$@")"; then
		reason="the server's counters are not \"$n calls, $n replies (less at most the window of final replies), errors 0, connections 1\": $(grep '^ RPCs served' "$CW/server.log")"
	elif [ -n "${sa[*]}" ] && ! grep -q "Using SRQ      : ON" "$CW/server.log"; then
		reason="the server was given ${sa[*]} but its banner does not say \"Using SRQ : ON\""
	elif [ -n "${sa[*]}" ] && ! grep -q "^ SRQ             : depth [1-9]" "$CW/server.log"; then
		reason="the server was given ${sa[*]} but its summary shows no SRQ (\" SRQ : depth N\")"
	fi
	if [ -n "$reason" ]; then
		verdict "$name" "$t0" 1 "$reason${PAIR_NOTE:+; $PAIR_NOTE}"
		show_log server "$CW/server.log"
		show_log client "$CW/client.log"
	else
		verdict "$name" "$t0" 0 "$(echo "$row" | tr -s ' \t' ' ') |$(sed -n 's/^ Each call       ://p' "$CW/client.log") |$(sed -n 's/^ RPCs served     :/ server:/p; s/^ SRQ             :/ | SRQ:/p' "$CW/server.log" | tr -d '\n')"
		echo "  $name:$(sed -n 's/^ Server node     :/ server node:/p' "$CW/server.log")$(hw_delta "$hw0" "$(hw_counters "$dev")")"
		[ "$name" = "rpc_lat-$dev" ] && RPCLAT[$dev]=$row
		RPCROW[$name]=$row
	fi
}

# srq_table: per-connection receives against the shared receive queue, same boot (rpc_lat:
# t_typical; rpc_bw: BW average; rpc_bw over siw only: rxe's per-connection rpc_bw runs on the
# host, see above). Printed, not checked.
srq_table() {
	local dev t k o p r c
	section "RPC tests: per-connection receives vs a shared receive queue (--srq $SRQ_DEPTH), same boot"
	printf '%-5s %-8s %-22s %14s %14s %8s\n' dev test measure per-conn srq srq/conn
	for dev in rxe siw; do
		for t in rpc_lat rpc_bw; do
			[ "$dev-$t" != rxe-rpc_bw ] || continue
			case $t in rpc_lat) c=5 k="t_typical [usec]" ;; *) c=4 k="BW average [MB/s]" ;; esac
			o=${RPCROW[$t-$dev]:+$(col "${RPCROW[$t-$dev]}" $c)}
			p=${RPCROW[$t-srq-$dev]:+$(col "${RPCROW[$t-srq-$dev]}" $c)}
			r=$(awk -v o="$o" -v p="$p" 'BEGIN { if (o > 0 && p != "") printf "%.2f", p / o; else print "n/a" }')
			printf '%-5s %-8s %-22s %14s %14s %8s\n' "$dev" "$t" "$k" "${o:-n/a}" "${p:-n/a}" "$r"
		done
	done
}

declare -A OURS PT RPCLAT RPCROW
# Each of our verbs tests runs next to perftest's own (same device, sizes, -n, rdma_cm).
# RPCRDMA_VM_APPS_VERBS=0 skips them (the RPC tests only, e.g. while working on the RPC path).
if [ "${RPCRDMA_VM_APPS_VERBS:-1}" = 1 ]; then
	section "rpcrdma-perf verbs tests and perftest, rdma provider, two processes: rxe0 loopback ($RXE)"
	for t in send_lat write_lat read_lat send_bw write_bw read_bw; do
		verbs rxe "$t"
		perftest rxe "$t"
	done
	section "rpcrdma-perf verbs tests and perftest: siw0 (root netns) -> siw1 ($SIW_PEER, netns peer)"
	for t in send_lat write_lat read_lat send_bw write_bw read_bw; do
		case $t in *_lat) [ "$SIW_LAT" = 1 ] || continue ;; esac
		verbs siw "$t"
		perftest siw "$t"
	done
else
	skip verbs-and-perftest "RPCRDMA_VM_APPS_VERBS=0"
fi

section "rpcrdma-perf RPC tests (poller Client/Server API), rdma provider, two processes: rxe0"
rpc rxe rpc_lat-rxe rpc_lat 2 lat "$RPC_N"

# siw has no type-2 memory windows: the poller's client exposes its chunks through persistent
# STags there, opted in with --persistent-stags in rpc() (and neither side offers remote
# invalidation), docs/rdma-provider.md 2.4.
section "rpcrdma-perf RPC tests over siw (persistent STags): siw0 -> siw1 ($SIW_PEER, netns peer)"
if [ "$SIW_LAT" = 1 ]; then
	rpc siw rpc_lat-siw rpc_lat 2 lat "$RPC_N"
fi
rpc siw rpc_bw-siw rpc_bw 65536 bw "$BW_N" -t 8

# The same RPC tests with the server's connections on one shared receive queue (issue 16):
# `--srq $SRQ_DEPTH` on the server only (the client is unchanged), over rxe and siw.
section "rpcrdma-perf RPC tests, server on a shared receive queue (--srq $SRQ_DEPTH): rxe0, then siw0 -> siw1"
for dev in rxe siw; do
	RPC_SERVER_ARGS="--srq $SRQ_DEPTH" rpc "$dev" "rpc_lat-srq-$dev" rpc_lat 2 lat "$RPC_N"
	RPC_SERVER_ARGS="--srq $SRQ_DEPTH" rpc "$dev" "rpc_bw-srq-$dev" rpc_bw 65536 bw "$BW_N" -t 8
done
srq_table
ratio_table
finish
