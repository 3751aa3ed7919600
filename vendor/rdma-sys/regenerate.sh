#!/usr/bin/env bash
# Regenerates src/bindings_x86_64_linux.rs: builds crates.io rdma-sys 0.3.0 (whose build.rs runs
# bindgen 0.59) in a scratch crate with libclang 14 and copies the bindings it wrote.
# Usage: vendor/rdma-sys/regenerate.sh [LIBCLANG_DIR]   (default /usr/lib/llvm-14/lib)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
clang_dir=${1:-/usr/lib/llvm-14/lib}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src"
printf '[package]\nname = "gen"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\nrdma-sys = "=0.3.0"\n' >"$tmp/Cargo.toml"
echo 'fn main() {}' >"$tmp/src/main.rs"
LIBCLANG_PATH=$clang_dir CARGO_TARGET_DIR=$tmp/target cargo build --manifest-path "$tmp/Cargo.toml"
out=$(ls "$tmp"/target/debug/build/rdma-sys-*/out/bindings.rs | head -1)
cp "$out" "$here/src/bindings_x86_64_linux.rs"
echo "regenerated $here/src/bindings_x86_64_linux.rs from $out"
