#!/usr/bin/env bash
# Runs the memory-model checks of the shared pools under Miri's weak-memory emulation, with
# several scheduling seeds each (issue 13 §2.1, §3):
#   - mempool ring::tests::accepts_concurrent_tokens_conserved (the MPMC ring behind every
#     shared pool: two threads move a fixed population of tokens, each must survive once);
#   - mempool tests/pool.rs accepts_two_thread_stress_no_double_handout (two caches and the
#     shared path on one pool: no object handed to two owners, none lost).
# Both shrink their sizes under cfg(miri). Before the ring's head loads were made Acquire (and
# its head CAS AcqRel/Acquire) both failed with seed 15; the seed ranges below include it.
# See docs/mempool.md ("Memory ordering of the ring").
#
# Needs a nightly toolchain; installs the miri and rust-src components when missing. Prints a
# SKIP banner and exits 0 only when no nightly toolchain can be obtained. Any test failure exits
# non-zero. About 3-4 minutes on two cores. RING_SEEDS / POOL_SEEDS override the seed ranges
# (Miri's a..b syntax).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

RING_SEEDS=${RING_SEEDS:-8..16}
POOL_SEEDS=${POOL_SEEDS:-12..18}

skip() {
    echo "################################################################"
    echo "### SKIP: Miri checks NOT RUN: $1"
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
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    rustup +nightly component add miri rust-src
fi
cargo +nightly miri --version

start=$(date +%s)
echo "== miri: mempool ring, seeds $RING_SEEDS"
MIRIFLAGS="-Zmiri-many-seeds=$RING_SEEDS" cargo +nightly miri test -q -p rpcrdma-mempool \
    --lib ring::tests::
echo "== miri: mempool pool two-thread stress, seeds $POOL_SEEDS"
MIRIFLAGS="-Zmiri-many-seeds=$POOL_SEEDS" cargo +nightly miri test -q -p rpcrdma-mempool \
    --test pool accepts_two_thread_stress_no_double_handout
echo "== miri: OK ($(($(date +%s) - start)) s)"
