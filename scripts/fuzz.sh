#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECS seconds each, starting from the checked-in
# seeds (fuzz/seeds/<target>/, written by fuzz/seeds/make.py) plus whatever an earlier run left
# in fuzz/corpus/<target>/ (not checked in). Prints libFuzzer's final stats line per target.
# Needs the nightly toolchain and cargo-fuzz (docs/fuzzing.md).
#   SECS=60 scripts/fuzz.sh                 # all targets, 60 s each
#   SECS=600 scripts/fuzz.sh conn_requester # one target
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
SECS=${SECS:-60}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list)
fi
cargo +nightly fuzz build >/dev/null
echo "load average: $(cat /proc/loadavg)"
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  cp -n "seeds/$t"/* "corpus/$t/" 2>/dev/null || true
  log=$(mktemp)
  if cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$SECS" -max_len=4096 \
      -print_final_stats=1 >"$log" 2>&1; then
    runs=$(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}')
    cov=$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -o 'cov: [0-9]*' || true)
    echo "$t: ${runs:-?} runs in ${SECS} s, ${cov:-cov ?}, nothing found"
  else
    echo "$t: FAILED — see artifacts/$t/ and the log below"
    tail -40 "$log"
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
done
