#!/usr/bin/env bash
# Run every fuzz target for N seconds (default 30; the documented long run is 600).
# Uses cargo-fuzz (libFuzzer) on the stable toolchain (RUSTC_BOOTSTRAP enables the -Z flags
# cargo-fuzz passes); installs cargo-fuzz when missing. Seeds live in fuzz/corpus/<target>/;
# a crash, a panic, an input slower than 10 s, a run past its deadline or a run that executed
# nothing fails the script (after every target has run) and leaves the crashing input in
# fuzz/artifacts/<target>/.
# Usage: bash scripts/fuzz.sh [seconds] [target...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
[ $# -eq 0 ] || shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(peek_rules header_decode token_open sse_rewrite config_parse task_ids policy_filter stdio_wire learned_answer)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --version 0.13.2
export RUSTC_BOOTSTRAP=1
cargo fuzz build -s none -O

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
for t in "${targets[@]}"; do
  # Work on a copy of the committed seeds so a run does not rewrite the repository, with a
  # private TMPDIR for the files a target writes (config_parse's key rings).
  rm -rf "$work/corpus" "$work/tmp"
  mkdir "$work/corpus" "$work/tmp"
  cp -r "fuzz/corpus/$t/." "$work/corpus/"
  log="$work/$t.log"
  echo "== $t (${secs}s)"
  status=0
  TMPDIR="$work/tmp" timeout --kill-after=30 "$((secs + 180))" \
    cargo fuzz run -s none -O "$t" "$work/corpus" -- \
    -max_total_time="$secs" -timeout=10 -print_final_stats=1 >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n1)
  if [ "$status" -ne 0 ]; then
    [ "$status" -ne 124 ] || echo "fuzz target $t: no result within $((secs + 180))s"
    tail -n 80 "$log"
    echo "fuzz target $t FAILED (exit status $status)"
    failed+=("$t")
  elif [ -z "$execs" ] || [ "$execs" -eq 0 ]; then
    tail -n 40 "$log"
    echo "fuzz target $t FAILED: it reported no executed inputs"
    failed+=("$t")
  else
    sed -n -E "/^(#[0-9]+ *DONE|Done [0-9]+ runs)/p" "$log" | tail -n1
    echo "fuzz target $t: $execs inputs, no crash"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} of ${#targets[@]} targets failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${secs}s each, no crashes"
