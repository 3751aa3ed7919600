#!/usr/bin/env bash
# Deterministic cost benchmark (issue 15; docs/performance.md, "Instructions per RPC"):
# counts the instructions of N NULL RPCs and N 4 KiB DDP RPCs through the real client, server
# and soft provider on one reactor thread, and of N bare soft SEND round trips on one thread
# (kind send, the baseline), under callgrind, prints the split per RPC (client,
# server, provider, application, runtime) and the top functions, and fails when a kind costs
# more than its budget in bench/cost-budget.toml plus the tolerance stated there.
# Instruction counts do not depend on the machine's load; the load average is printed anyway.
#   COST_N=2000       measured RPCs per kind (warm-up: COST_WARMUP=200)
#   COST_OUT=DIR      where the callgrind files and the report go (default target/cost)
#   COST_NO_BUDGET=1  report only, never fail (to measure a change before setting the budget)
set -euo pipefail
cd "$(dirname "$0")/.."
N="${COST_N:-2000}"
WARMUP="${COST_WARMUP:-200}"
OUT="${COST_OUT:-target/cost}"
BUDGET=bench/cost-budget.toml
command -v valgrind >/dev/null || { echo "cost.sh: valgrind is not installed" >&2; exit 2; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# The release profile keeps line tables (debug = 1), so callgrind names every function.
cargo build --release -p rpcrdma-bench --bin cost
BIN=target/release/cost
mkdir -p "$OUT"
REPORT="$OUT/report.md"
: > "$REPORT"
status=0
for kind in null ddp send; do
  file="$OUT/callgrind.$kind.out"
  rm -f "$file"
  # Collection is off at start; the run's reactor thread turns it on when the last warm-up
  # call completes and off when the last measured one does (a callgrind client request).
  # --fair-sched=yes: valgrind runs one thread at a time under a lock that is not fair by
  # default, and the busy-polling reactor takes it back at the end of every time slice, so the
  # main thread (still registering memory) could wait minutes for a turn; with a fair lock the
  # run takes seconds. The counted instructions are the same (only the reactor's measured calls
  # are counted).
  valgrind --tool=callgrind --fair-sched=yes --collect-atstart=no --callgrind-out-file="$file" \
    "$BIN" run --kind "$kind" --warmup "$WARMUP" --n "$N" 2> "$OUT/valgrind.$kind.log" \
    || { cat "$OUT/valgrind.$kind.log" >&2; echo "cost.sh: the $kind run failed" >&2; exit 1; }
  args=(analyze --file "$file" --kind "$kind" --n "$N")
  [ "${COST_NO_BUDGET:-0}" = 1 ] || args+=(--budget "$BUDGET")
  "$BIN" "${args[@]}" | tee -a "$REPORT" || status=1
done
echo
grep '^BUDGET\|^### ' "$REPORT" || true
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) (report: $REPORT)"
if [ "$status" -ne 0 ]; then
  echo "cost.sh: over budget (see docs/performance.md, \"Instructions per RPC\")" >&2
fi
exit "$status"
