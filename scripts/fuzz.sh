#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset: clang, ASan/UBSan) and runs each for a bounded
# time from its checked-in seed corpus (fuzz/corpus/NAME). Fails on any finding: the crashing
# input is left in build-fuzz/findings/ and its path printed; turn it into a unit test.
#
# Usage: scripts/fuzz.sh [--build-only | --run-only] [SECONDS]
#   SECONDS is the whole run's fuzzing time, shared out by weight (below) and run on every core
#   at once: wall time is about SECONDS / nproc. Default 360 (CI: $SANDBOXER_FUZZ_SECONDS).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=all
case "${1:-}" in
--build-only | --run-only)
  mode=${1#--}
  shift
  ;;
esac
total=${1:-360}
[[ $total =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number, not $total" >&2; exit 2; }

if [ "$mode" != run-only ]; then
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "$(nproc)"
  [ "$mode" = build-only ] && exit 0
fi

# Weights: the parsers of what another party writes (a profile someone hands over, a journal on
# a shared disk, an external driver's stdout, the guest agent's frames, the keeper's wire, a tar
# stream out of a sandbox) get two shares; the rest, whose input sandboxer mostly wrote itself, one.
targets=(profile:2 journal:2 protocol:2 vm_agent:2 keeper_wire:2 tar:2 json:1 ledger:1
  duration_time:1 compose:1)
shares=0
for t in "${targets[@]}"; do shares=$((shares + ${t#*:})); done

findings=build-fuzz/findings
rm -rf "$findings"
mkdir -p "$findings"
# fuzz_one NAME SECONDS: one target from a scratch copy of its corpus (the checked-in one is only
# read); exit 1 on a finding, its log's tail on stderr.
fuzz_one() {
  local name=$1 seconds=$2 work rc=0
  [ -x "build-fuzz/fuzz/fuzz_$name" ] || { echo "fuzz.sh: fuzz_$name was not built" >&2; return 1; }
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$name/." "$work/" || { echo "fuzz.sh: no corpus for fuzz_$name" >&2; return 1; }
  "build-fuzz/fuzz/fuzz_$name" "$work" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$findings/fuzz_$name-" -print_final_stats=1 >"$findings/fuzz_$name.log" 2>&1 ||
    rc=$?
  rm -rf "$work"
  local runs
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$findings/fuzz_$name.log")
  echo "fuzz.sh: fuzz_$name ${seconds}s from $(find "fuzz/corpus/$name" -type f | wc -l) seeds: ${runs:-?} runs$([ "$rc" -ne 0 ] && echo ", FINDING")"
  if [ "$rc" -ne 0 ]; then
    tail -40 "$findings/fuzz_$name.log" >&2
    return 1
  fi
}
export -f fuzz_one
export findings

# Every core at once, longest first so that the last to finish is a short one.
failed=0
# At least a second each: libFuzzer reads -max_total_time=0 as no limit at all.
for t in "${targets[@]}"; do
  seconds=$((total * ${t#*:} / shares))
  echo "${t%%:*} $((seconds > 0 ? seconds : 1))"
done | sort -k2 -rn | xargs -P "$(nproc)" -L 1 bash -c 'fuzz_one "$0" "$1"' || failed=1
if [ "$failed" -ne 0 ]; then
  echo "fuzz.sh: a target found something; inputs in $findings/" >&2
  ls "$findings" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets, ${total}s shared by weight on $(nproc) cores, no finding"
