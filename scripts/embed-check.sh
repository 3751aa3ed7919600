#!/usr/bin/env bash
# An embedder's build of the `rdma` provider, outside this repository: copies
# examples/embed-rdma to a scratch directory (so nothing of the repository's cargo setup
# applies), points its dependencies at this checkout, builds it with no libclang reachable
# (LIBCLANG_PATH at a directory that does not exist: rdma-sys's bindings are checked in,
# vendor/rdma-sys/README.md), and runs it. On a host without an RDMA device it must stop with
# the reason and status 1; with a device (rxe, siw, hardware) for RPCRDMA_EMBED_IP it must make
# its call. Also runs the checked-in bindings' layout tests.
# Usage: scripts/embed-check.sh            (RPCRDMA_EMBED_IP, default 127.0.0.1)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
ip=${RPCRDMA_EMBED_IP:-127.0.0.1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$repo/examples/embed-rdma" "$work/app"
rm -f "$work/app/Cargo.lock"
sed -i "s|path = \"../../engine\"|path = \"$repo/engine\"|; s|path = \"../../poller\"|path = \"$repo/poller\"|" \
  "$work/app/Cargo.toml"
grep -q "path = \"$repo/engine\"" "$work/app/Cargo.toml" || { echo "embed-check: paths not rewritten"; exit 1; }
target=${CARGO_TARGET_DIR:-$repo/target}/embed-check
(cd "$work/app" && LIBCLANG_PATH=/nonexistent CARGO_TARGET_DIR=$target cargo build)
set +e
out=$("$target/debug/embed-rdma" "$ip" 2>&1)
rc=$?
set -e
echo "$out"
case $rc in
  0) grep -q "ADD(40, 2) = \[0, 0, 0, 42\]" <<<"$out" || { echo "embed-check: wrong result"; exit 1; } ;;
  1) grep -q "no RDMA device for $ip" <<<"$out" || { echo "embed-check: unclear failure"; exit 1; } ;;
  *) echo "embed-check: exit status $rc"; exit 1 ;;
esac
CARGO_TARGET_DIR=$target cargo test --manifest-path "$repo/vendor/rdma-sys/Cargo.toml" --lib -q
echo "embed-check: an embedder's crate builds the rdma provider without libclang (exit $rc on $ip)"
