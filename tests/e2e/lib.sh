# Shared helpers of the end-to-end tests: a fresh state dir and profiles dir per test, the binary
# under test as $SANDBOXER, and small assertions. Tests return 125 to be counted as skipped.
set -euo pipefail

: "${SANDBOXER:?set SANDBOXER to the sandboxer binary (CTest does)}"
command -v jq >/dev/null || { echo "jq is missing"; exit 125; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sandboxer-e2e.XXXXXX")
STATE="$WORK/state"
PROFILES="$WORK/profiles"
mkdir -p "$PROFILES"
trap 'rm -rf "$WORK"' EXIT

# sbx ARGS...: the binary with this test's state and profiles.
sbx() { "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" "$@"; }

fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_code N CMD...: runs CMD, fails unless it exits with N. Its stdout is in $OUT, stderr in $ERR.
expect_code() {
  local want=$1; shift
  local rc=0
  OUT=$("$@" 2>"$WORK/stderr") || rc=$?
  ERR=$(cat "$WORK/stderr")
  [ "$rc" -eq "$want" ] || fail "expected exit $want, got $rc from: $* (stderr: $ERR)"
}

# expect_contains HAYSTACK NEEDLE
expect_contains() {
  case "$1" in *"$2"*) ;; *) fail "expected to find \"$2\" in: $1" ;; esac
}

# ledger_jq FILTER: runs jq over the ledger file.
ledger_jq() { jq -r "$@" "$STATE/ledger.json"; }

# A stub profile named $1 with extra YAML from stdin appended to its stub section.
stub_profile() {
  local name=$1
  {
    printf 'driver: stub\nttl: { default: 30m, max: 2h }\nlabels: { team: e2e }\nstub:\n'
    cat
  } >"$PROFILES/$name.yaml"
}
