#!/usr/bin/env bash
# Run every fuzz target for N seconds (default 30; the documented long run is 600).
# Uses cargo-fuzz (libFuzzer) on the stable toolchain (RUSTC_BOOTSTRAP enables the -Z flags
# cargo-fuzz passes); installs cargo-fuzz when missing. Seeds live in fuzz/corpus/<target>/;
# a crash fails the run and leaves its input in fuzz/artifacts/<target>/.
# Usage: bash scripts/fuzz.sh [seconds] [target...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(peek_rules header_decode token_open sse_rewrite config_parse)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --version 0.13.2
export RUSTC_BOOTSTRAP=1
cargo fuzz build -s none -O
for t in "${targets[@]}"; do
  # Work on a copy of the committed seeds so a run does not rewrite the repository.
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$t/." "$work/"
  echo "== $t (${secs}s)"
  cargo fuzz run -s none -O "$t" "$work" -- -max_total_time="$secs" -print_final_stats=1 2>&1 \
    | grep -E "^(#[0-9]+ *DONE|Done|stat::number_of_executed_units|==[0-9]+==|SUMMARY|thread .* panicked)" || true
  status=${PIPESTATUS[0]}
  rm -rf "$work"
  [ "$status" = 0 ] || { echo "fuzz target $t failed"; exit 1; }
done
echo "fuzz: ${#targets[@]} targets, ${secs}s each, no crashes"
