#!/usr/bin/env bash
# Runs the multi-threaded tests under ThreadSanitizer (issue 13 §3; docs/memory-model.md):
#   - poller tests/api_traffic.rs (servers and clients with several reactors and worker threads
#     over the soft provider: many connections, DDP both ways, connection loss mid-traffic,
#     graceful shutdown), tests/reactor.rs (reactors, control MPSC, stop), tests/rings.rs (SPSC
#     and MPSC stress) and tests/api_backchannel.rs (backward calls across reactors);
#   - mempool tests/pool.rs (per-core caches and the shared ring from two threads).
# TSan sees the real threads of the real code at full speed, so it covers far more code than
# Miri or loom (the reactors, the soft provider's queues, the API's handoffs), but only the
# interleavings that happen to occur, and only x86's strong memory order: it catches unordered
# plain accesses (data races), not a too-weak ordering that x86 hides (Miri and loom do that).
#
# std is rebuilt with the sanitizer (-Zbuild-std), so this needs a nightly toolchain with the
# rust-src component (installed when missing); prints a SKIP banner and exits 0 only when no
# nightly toolchain can be obtained. Own target directory (target/tsan). No suppressions are
# needed (none are used). Runs in .ci/run: about 1-3 minutes to build std and the crates on two
# cores, then about 15 s of tests (docs/memory-model.md). Exits non-zero on any report (TSan
# exits 66) or test failure.
#   scripts/tsan.sh --no-run   builds std and the tests only (.ci/background does, beside the VM
#                              stages; .ci/run then runs them, built, after the VM stages)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

skip() {
    echo "################################################################"
    echo "### SKIP: ThreadSanitizer checks NOT RUN: $1"
    echo "################################################################"
    exit 0
}
if ! command -v rustup >/dev/null 2>&1; then
    skip "rustup not found (no way to obtain a nightly toolchain)"
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal >/dev/null 2>&1 \
        || skip "no nightly toolchain and it cannot be installed"
fi
rustup +nightly component add rust-src >/dev/null 2>&1 || true

export RUSTFLAGS="-Zsanitizer=thread ${RUSTFLAGS:-}"
export RUSTDOCFLAGS="-Zsanitizer=thread"
export CARGO_TARGET_DIR="$ROOT/target/tsan"
export TSAN_OPTIONS=${TSAN_OPTIONS:-"second_deadlock_stack=1 history_size=4"}
# Panic backtraces are off: symbolising one in a sanitized debug binary takes seconds, longer
# than tests/reactor.rs' rejects_panicking_reactor_at_stop waits (2 s) for the panicking reactor
# to report itself stopped. TSan's own reports carry their stacks. TSAN_RUST_BACKTRACE=1 turns
# them back on.
export RUST_BACKTRACE=${TSAN_RUST_BACKTRACE:-0}
TARGET=$(rustc +nightly -vV | sed -n 's/^host: //p')

NO_RUN=()
if [ "${1:-}" = "--no-run" ]; then NO_RUN=(--no-run); fi

start=$(date +%s)
echo "== tsan: poller multi-reactor tests"
cargo +nightly test "${NO_RUN[@]}" -q -Zbuild-std --target "$TARGET" -p rpcrdma-poller \
    --test api_traffic --test reactor --test rings --test api_backchannel
echo "== tsan: mempool pools and STag pools"
cargo +nightly test "${NO_RUN[@]}" -q -Zbuild-std --target "$TARGET" -p rpcrdma-mempool --test pool
echo "== tsan: OK${NO_RUN:+ (built, not run)} ($(($(date +%s) - start)) s)"
