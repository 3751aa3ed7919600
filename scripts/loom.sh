#!/usr/bin/env bash
# Model-checks the head/tail protocols of the project's lock-free rings with loom (issue 13 §3;
# docs/memory-model.md): every atomic of the ring code is loom's under `--cfg loom` (the `sync`
# shims in mempool/src/ring.rs and poller/src/ring.rs), and loom runs each small model under every
# interleaving up to the preemption bound, letting loads return any store the C11 model allows.
#   - mempool ring::loom_tests (the MPMC ring behind every shared pool): population conserved
#     with two threads taking and putting back; two producers / one consumer, capacity 2; bulk
#     all-or-nothing;
#   - poller tests/loom_rings.rs: the SPSC ring (single items, slice bulk/burst, iterator and
#     sink paths, wraparound at capacity 2) and the MPSC channel (two producers / one consumer,
#     capacity 2, bulk and burst dequeue), with loom's UnsafeCell tracking every slot access;
#   - engine verbs::soft::{qp::rq,cq::ring}::loom_tests: the soft provider's receive ring (SPSC,
#     entries written and read in place; capacity 2, three entries) and CQ ring (MPSC stamps: two
#     producers, capacity 2; a slot reused across laps at capacity 1), loom's UnsafeCell on every
#     slot;
#   - apps tests/loom_deleg_slots.rs: the handshake between an NFSv3 or NLM access and an
#     NFSv4.1 delegation grant (apps/src/nfs/v4/server/deleg_slots.rs: store, SeqCst fence,
#     load on each side): they never both miss each other;
#   - poller tests/loom_doorbell.rs: the doorbell handshake (arm, re-check, park / publish, ring)
#     over the SPSC ring: no lost wake-up with one or two rings, on a parking bell and on one in
#     eventfd mode, and a weakened copy of the handshake (no SeqCst fence pair) that loom must
#     catch (a deadlock).
#
# Builds in its own target directory (target/loom) so the `--cfg loom` build does not evict the
# normal one; release mode (loom runs orders of magnitude faster) without LTO to keep the build
# short. LOOM_MAX_PREEMPTIONS (default 3) bounds the preemptions per execution. Needs only the
# crates in Cargo.lock (works offline once they are fetched). Any failure exits non-zero; loom
# prints the failing interleaving (LOOM_LOG=trace, LOOM_LOCATION=1 for more detail).
#
# `scripts/loom.sh --mutants` checks the checker instead: it weakens one acquire or release of the
# ring code at a time (in place; the file is restored on exit), runs the models, and fails if any
# weakened protocol still passes (docs/memory-model.md lists the results). Not run in CI.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

export RUSTFLAGS="--cfg loom -D warnings ${RUSTFLAGS:-}"
export CARGO_TARGET_DIR="$ROOT/target/loom"
export CARGO_PROFILE_RELEASE_LTO=false
export CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
export CARGO_PROFILE_RELEASE_DEBUG=0
export LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-3}

MEMPOOL=(-p rpcrdma-mempool --lib ring::loom_tests)
POLLER=(-p rpcrdma-poller --test loom_rings)
DOORBELL=(-p rpcrdma-poller --test loom_doorbell)
SOFTRQ=(-p rpcrdma-engine --lib verbs::soft::qp::rq::loom_tests)
SOFTCQ=(-p rpcrdma-engine --lib verbs::soft::cq::ring::loom_tests)
DELEG=(-p rpcrdma-apps --test loom_deleg_slots)

if [ "${1:-}" = "--mutants" ]; then
    saved=$(mktemp -d)
    FILES="mempool/src/ring.rs poller/src/ring.rs poller/src/mpsc.rs poller/src/doorbell.rs engine/src/verbs/soft/qp/rq.rs engine/src/verbs/soft/cq/ring.rs apps/src/nfs/v4/server/deleg_slots.rs"
    restore() { for f in $FILES; do
        cp "$saved/$(echo "$f" | tr / _)" "$f"; done; rm -rf "$saved"; }
    for f in $FILES; do
        cp "$f" "$saved/$(echo "$f" | tr / _)"
    done
    trap restore EXIT
    survived=0
    mutant() { # name file sed-expression cargo-args...
        local name=$1 file=$2 expr=$3 orig
        shift 3
        orig="$saved/$(echo "$file" | tr / _)"
        sed "$expr" "$orig" >"$file"
        if cmp -s "$file" "$orig"; then
            echo "mutant $name: NOT APPLIED (pattern out of date)"
            survived=1
        elif cargo test --release -q "$@" >"$saved/$name.log" 2>&1; then
            echo "mutant $name: SURVIVED (the models did not notice)"
            survived=1
        elif ! grep -q 'error\[E' "$saved/$name.log"; then
            # A failed model; after a causality violation loom may also abort in a destructor.
            echo "mutant $name: killed ($(grep -m1 -E 'Causality|assert|spuriously|refused|exceeded' \
                "$saved/$name.log"))"
        else
            echo "mutant $name: BUILD OR RUN ERROR (see below)"
            tail -20 "$saved/$name.log"
            survived=1
        fi
        cp "$orig" "$file"
    }
    mutant mpmc-head-relaxed mempool/src/ring.rs \
        's/side.head.load(Ordering::Acquire)/side.head.load(Ordering::Relaxed)/; s/Ordering::AcqRel,/Ordering::Relaxed,/; /Ordering::Relaxed,$/{n;s/Ordering::Acquire,/Ordering::Relaxed,/}' \
        "${MEMPOOL[@]}"
    mutant mpmc-opposite-tail-relaxed mempool/src/ring.rs \
        's/let tail = opposite_tail.load(Ordering::Acquire)/let tail = opposite_tail.load(Ordering::Relaxed)/' \
        "${MEMPOOL[@]}"
    mutant mpmc-publish-relaxed mempool/src/ring.rs \
        's/side.tail.store(head.wrapping_add(k), Ordering::Release)/side.tail.store(head.wrapping_add(k), Ordering::Relaxed)/' \
        "${MEMPOOL[@]}"
    mutant mpmc-wait-for-tail-relaxed mempool/src/ring.rs \
        's/while tail.load(Ordering::Acquire) != expected/while tail.load(Ordering::Relaxed) != expected/' \
        "${MEMPOOL[@]}"
    mutant spsc-publish-relaxed poller/src/ring.rs \
        's/self.shared.prod.store(self.tail, Ordering::Release)/self.shared.prod.store(self.tail, Ordering::Relaxed)/' \
        "${POLLER[@]}"
    mutant spsc-available-relaxed poller/src/ring.rs \
        's/self.prod_cache = self.shared.prod.load(Ordering::Acquire)/self.prod_cache = self.shared.prod.load(Ordering::Relaxed)/' \
        "${POLLER[@]}"
    mutant spsc-release-relaxed poller/src/ring.rs \
        's/self.shared.cons.store(self.head, Ordering::Release)/self.shared.cons.store(self.head, Ordering::Relaxed)/' \
        "${POLLER[@]}"
    mutant spsc-free-space-relaxed poller/src/ring.rs \
        's/self.cons_cache = self.shared.cons.load(Ordering::Acquire)/self.cons_cache = self.shared.cons.load(Ordering::Relaxed)/' \
        "${POLLER[@]}"
    mutant mpsc-publish-relaxed poller/src/mpsc.rs \
        's/slot.seq.store(pos.wrapping_add(1), Ordering::Release)/slot.seq.store(pos.wrapping_add(1), Ordering::Relaxed)/' \
        "${POLLER[@]}"
    mutant mpsc-ready-relaxed poller/src/mpsc.rs \
        's/self.shared.slot(pos).seq.load(Ordering::Acquire)/self.shared.slot(pos).seq.load(Ordering::Relaxed)/' \
        "${POLLER[@]}"
    mutant mpsc-free-relaxed poller/src/mpsc.rs \
        's/slot.seq.store(pos.wrapping_add(cap), Ordering::Release)/slot.seq.store(pos.wrapping_add(cap), Ordering::Relaxed)/' \
        "${POLLER[@]}"
    mutant mpsc-producer-seq-relaxed poller/src/mpsc.rs \
        's/let seq = slot.seq.load(Ordering::Acquire)/let seq = slot.seq.load(Ordering::Relaxed)/' \
        "${POLLER[@]}"
    mutant softrq-publish-relaxed engine/src/verbs/soft/qp/rq.rs \
        's/self.tail.store(tail.wrapping_add(n), Ordering::SeqCst)/self.tail.store(tail.wrapping_add(n), Ordering::Relaxed)/' \
        "${SOFTRQ[@]}"
    mutant softrq-take-relaxed engine/src/verbs/soft/qp/rq.rs \
        's/if self.tail.load(Ordering::Acquire) == head/if self.tail.load(Ordering::Relaxed) == head/' \
        "${SOFTRQ[@]}"
    mutant softrq-len-head-relaxed engine/src/verbs/soft/qp/rq.rs \
        's/let head = self.head.load(Ordering::Acquire);/let head = self.head.load(Ordering::Relaxed);/' \
        "${SOFTRQ[@]}"
    mutant softrq-release-relaxed engine/src/verbs/soft/qp/rq.rs \
        's/self.head.store(head.wrapping_add(1), Ordering::Release)/self.head.store(head.wrapping_add(1), Ordering::Relaxed)/' \
        "${SOFTRQ[@]}"
    mutant softcq-publish-relaxed engine/src/verbs/soft/cq/ring.rs \
        's/slot.stamp.store(tail.wrapping_add(1), Ordering::Release)/slot.stamp.store(tail.wrapping_add(1), Ordering::Relaxed)/' \
        "${SOFTCQ[@]}"
    mutant softcq-ready-relaxed engine/src/verbs/soft/cq/ring.rs \
        's/if slot.stamp.load(Ordering::Acquire) == head.wrapping_add(1)/if slot.stamp.load(Ordering::Relaxed) == head.wrapping_add(1)/' \
        "${SOFTCQ[@]}"
    mutant softcq-free-relaxed engine/src/verbs/soft/cq/ring.rs \
        's/.store(head.wrapping_add(self.one_lap), Ordering::Release)/.store(head.wrapping_add(self.one_lap), Ordering::Relaxed)/' \
        "${SOFTCQ[@]}"
    mutant softcq-producer-stamp-relaxed engine/src/verbs/soft/cq/ring.rs \
        's/let stamp = slot.stamp.load(Ordering::Acquire);/let stamp = slot.stamp.load(Ordering::Relaxed);/' \
        "${SOFTCQ[@]}"
    # The doorbell: drop either side's SeqCst fence (the owner's after arming, the producer's
    # before loading the flag); each must let loom find a lost wake-up. `ring` is the second
    # `fence(Ordering::SeqCst)` of the file, `arm` the first.
    mutant doorbell-arm-no-fence poller/src/doorbell.rs \
        '0,/^        fence(Ordering::SeqCst);/s//        fence(Ordering::Release);/' \
        "${DOORBELL[@]}" -- --skip weak
    mutant doorbell-ring-no-fence poller/src/doorbell.rs \
        '/pub fn ring/,/^    }/s/^        fence(Ordering::SeqCst);/        fence(Ordering::Acquire);/' \
        "${DOORBELL[@]}" -- --skip weak
    # The delegation handshake: weaken either side's SeqCst fence; loom must find an access
    # and a grant that miss each other.
    mutant deleg-access-no-fence apps/src/nfs/v4/server/deleg_slots.rs \
        '/pub fn access/,/^    }/s/fence(Ordering::SeqCst);/fence(Ordering::Acquire);/' \
        "${DELEG[@]}"
    mutant deleg-grant-no-fence apps/src/nfs/v4/server/deleg_slots.rs \
        '/pub fn admits/,/^    }/s/fence(Ordering::SeqCst);/fence(Ordering::Acquire);/' \
        "${DELEG[@]}"
    [ "$survived" = 0 ] || { echo "== loom mutants: some survived"; exit 1; }
    echo "== loom mutants: all killed"
    exit 0
fi

start=$(date +%s)
echo "== loom (LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS): mempool MPMC ring"
cargo test --release -q "${MEMPOOL[@]}" -- --test-threads=2
echo "== loom: poller SPSC ring and MPSC channel"
cargo test --release -q "${POLLER[@]}" -- --test-threads=2
echo "== loom: poller doorbell handshake"
cargo test --release -q "${DOORBELL[@]}" -- --test-threads=2
echo "== loom: engine soft receive ring and CQ ring"
cargo test --release -q "${SOFTRQ[@]}" -- --test-threads=2
cargo test --release -q "${SOFTCQ[@]}" -- --test-threads=2
echo "== loom: apps delegation handshake"
cargo test --release -q "${DELEG[@]}" -- --test-threads=2
echo "== loom: OK ($(($(date +%s) - start)) s)"
