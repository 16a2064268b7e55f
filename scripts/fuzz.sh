#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset: clang, ASan/UBSan) and runs each for a bounded
# time from its checked-in seed corpus (fuzz/corpus/NAME). Fails on any finding: the crashing
# input is left in build-fuzz/findings/ and its path printed; turn it into a unit test.
# Usage: scripts/fuzz.sh [seconds per target, default 60]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)"
findings=build-fuzz/findings
mkdir -p "$findings"
failed=()
targets=(profile json ledger duration_time journal protocol compose vm_agent keeper_wire)
for name in "${targets[@]}"; do
  target=build-fuzz/fuzz/fuzz_$name
  # The checked-in corpus is only read; what the run learns goes to a scratch copy.
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$name/." "$work/"
  echo "fuzz.sh: fuzz_$name for ${seconds}s from $(find "fuzz/corpus/$name" -type f | wc -l) seeds"
  if ! "$target" "$work" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$findings/fuzz_$name-" -print_final_stats=1 >"$findings/fuzz_$name.log" 2>&1; then
    failed+=("fuzz_$name")
    tail -40 "$findings/fuzz_$name.log" >&2
  fi
  grep -E '^stat::number_of_executed_units' "$findings/fuzz_$name.log" | sed "s/^/fuzz.sh: fuzz_$name /" || true
  rm -rf "$work"
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz.sh: findings in ${failed[*]}; inputs in $findings/" >&2
  ls "$findings" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets, no finding"
