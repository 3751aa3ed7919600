#!/usr/bin/env bash
# Side-by-side RPC benchmark of two git revisions (issue 14 "Done when", issue 15):
#
#   scripts/bench-compare.sh REV_A REV_B [bench args...]     (default args: --iters 20000 --secs 1)
#
# Builds `bench --bin rpc` (release) for each revision in a detached worktree under /tmp with its
# own CARGO_TARGET_DIR under /tmp, keeps only the binary, deletes the worktree and the target dir
# (disk is limited: one target dir exists at a time), then runs the two binaries alternately,
# A B A B A B (BENCH_ROUNDS rounds, default 3), so slow drifts of the machine's load hit both
# alike. Prints one table: per configuration, the median over the rounds of the NULL RPC round
# trip p50 and of the throughput (32 in flight), for A and B, and B / A; rows one binary does not
# have show "-". Also the load average before and after each run (read the ratios, not the
# absolute values, on a shared machine).
#
# Environment: BENCH_ROUNDS (3), BENCH_NICE (15: builds and runs at this niceness; the machine
# is shared), BENCH_KEEP_LOGS=DIR (copy each run's output there).
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 REV_A REV_B [bench args...]" >&2
    exit 2
fi
REV_A=$1
REV_B=$2
shift 2
ARGS=("$@")
[ ${#ARGS[@]} -gt 0 ] || ARGS=(--iters 20000 --secs 1)
ROUNDS=${BENCH_ROUNDS:-3}
NICE=${BENCH_NICE:-15}
ROOT=$(git rev-parse --show-toplevel)
WORK=$(mktemp -d /tmp/bench-compare.XXXXXX)

cleanup() {
    for s in a b; do
        if [ -d "$WORK/src-$s" ]; then
            git -C "$ROOT" worktree remove --force "$WORK/src-$s" >/dev/null 2>&1 || true
        fi
    done
    git -C "$ROOT" worktree prune >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

build() { # side rev
    local side=$1 rev=$2 sha
    sha=$(git -C "$ROOT" rev-parse --verify "$rev^{commit}")
    echo "== build $side: $rev ($sha)" >&2
    git -C "$ROOT" worktree add --detach "$WORK/src-$side" "$sha" >/dev/null 2>&1
    (cd "$WORK/src-$side" &&
        CARGO_INCREMENTAL=0 CARGO_TARGET_DIR="$WORK/target-$side" \
            nice -n "$NICE" cargo build --release -q -p rpcrdma-bench --bin rpc)
    cp "$WORK/target-$side/release/rpc" "$WORK/rpc-$side"
    rm -rf "$WORK/target-$side"
    git -C "$ROOT" worktree remove --force "$WORK/src-$side"
    echo "$sha" >"$WORK/sha-$side"
}

build a "$REV_A"
build b "$REV_B"

for r in $(seq 1 "$ROUNDS"); do
    for s in a b; do
        echo "== round $r/$ROUNDS, $s: load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        nice -n "$NICE" "$WORK/rpc-$s" "${ARGS[@]}" >"$WORK/out-$s-$r.txt"
        if [ -n "${BENCH_KEEP_LOGS:-}" ]; then
            mkdir -p "$BENCH_KEEP_LOGS"
            cp "$WORK/out-$s-$r.txt" "$BENCH_KEEP_LOGS/"
        fi
    done
done

python3 - "$WORK" "$ROUNDS" "$REV_A" "$REV_B" <<'EOF'
import statistics, sys

work, rounds, rev_a, rev_b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def parse(path):
    """NULL RPC p50 (ns) and throughput (calls/s) per configuration, and the load lines."""
    p50, tput, load, in_tput = {}, {}, "", False
    for line in open(path):
        line = line.rstrip()
        f = line.split()
        if line.startswith("NULL RPC throughput"):
            in_tput = True
        elif line.startswith("NULL RPC round trip, ") and len(f) >= 7 and "=" not in line:
            # name, then count, p50, p99, mean, ratio
            name = " ".join(f[:-5])[len("NULL RPC round trip, "):]
            p50[name] = float(f[-4])
        elif line.startswith("TCP loopback") and len(f) >= 7:
            p50["TCP loopback (128 B)"] = float(f[-4])
        elif in_tput and line.endswith("calls/s") and len(f) >= 3:
            tput[" ".join(f[:-2])] = float(f[-2])
        elif line.startswith("load average"):
            load = line
    return p50, tput, load

runs = {s: [parse(f"{work}/out-{s}-{r}.txt") for r in range(1, rounds + 1)] for s in "ab"}

def med(side, idx, name):
    vals = [run[idx][name] for run in runs[side] if name in run[idx]]
    return statistics.median(vals) if vals else None

names = []
for s in "ab":
    for run in runs[s]:
        for n in list(run[0]) + list(run[1]):
            if n not in names:
                names.append(n)

def fmt(v, unit=""):
    return "-" if v is None else f"{v:,.0f}".replace(",", " ") + unit

def ratio(a, b):
    return "-" if a is None or b is None or a == 0 else f"{b / a:.2f}"

sha = {s: open(f"{work}/sha-{s}").read().strip()[:10] for s in "ab"}
print(f"\nA = {rev_a} ({sha['a']}), B = {rev_b} ({sha['b']}); median of {rounds} alternating runs each")
print()
print("| configuration | A p50 RTT ns | B p50 RTT ns | B / A | A calls/s | B calls/s | B / A |")
print("|---|---:|---:|---:|---:|---:|---:|")
for n in names:
    a, b = med("a", 0, n), med("b", 0, n)
    ta, tb = med("a", 1, n), med("b", 1, n)
    print(f"| {n} | {fmt(a)} | {fmt(b)} | {ratio(a, b)} | {fmt(ta)} | {fmt(tb)} | {ratio(ta, tb)} |")
print()
for s in "ab":
    for r, run in enumerate(runs[s], 1):
        print(f"{s} run {r}: {run[2] or 'load average: not printed'}")
EOF
