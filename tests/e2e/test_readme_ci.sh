#!/usr/bin/env bash
# The README's CI snippet (issue 14.3, one `run` line since issue 38), run as written under the
# variables of several CI systems: each job's id is the key, the tests' status is the script's,
# the sandbox goes either way, a retried step finds a first attempt's live sandbox. An empty key is
# refused.
source "$(dirname "$0")/lib.sh"

SNIPPET=$(awk '/^In CI/ {on = 1; next} on && /^    / {print substr($0, 5); next} on && /^$/ && seen++ {exit}' \
  "$SANDBOXER_SOURCE_DIR/README.md")
expect_contains "$SNIPPET" "sandboxer run --profile ci"

mkdir -p "$WORK/bin"
ln -s "$SANDBOXER" "$WORK/bin/sandboxer"
stub_profile ci <<EOF2
  root: $WORK/backend
EOF2
# The stub's exec runs on this machine: `make` is a script here that says where it ran.
printf '#!/bin/sh\necho "make ran in $SANDBOXER_ID"\nexit "${MAKE_EXIT:-0}"\n' >"$WORK/bin/make"
chmod +x "$WORK/bin/make"

# whole MAKE_EXIT VAR=VALUE...: the snippet as written, under exactly these CI variables, with a
# `make` that exits MAKE_EXIT; prints its output.
whole() {
  local code=$1
  shift
  env -i PATH="$WORK/bin:$PATH" HOME="$WORK" SANDBOXER_STATE_DIR="$STATE" \
    SANDBOXER_PROFILES="$PROFILES" MAKE_EXIT="$code" "$@" bash -c "$SNIPPET"
}
# key_of OUTPUT: the idempotency key of the sandbox the output says make ran in.
key_of() { record "$(sed -n 's/^make ran in //p' <<<"$1")" '.idempotency_key'; }

# Each CI system's job id becomes the key; the tests' code is the script's, and the sandbox is
# destroyed either way.
declare -A KEYS=(["CI_JOB_ID=4242"]=4242 ["BUILDKITE_JOB_ID=0190-ab"]=0190-ab
  ["CIRCLE_WORKFLOW_JOB_ID=c1-77"]=c1-77 ["BUILD_TAG=jenkins-app-12"]=jenkins-app-12
  ["GITHUB_RUN_ID=99 GITHUB_RUN_ATTEMPT=1 GITHUB_JOB=test"]=gh-99-1-test)
for ci in "${!KEYS[@]}"; do
  for code in 0 3; do
    rc=0
    # shellcheck disable=SC2086 # word splitting of the variable list is meant
    OUT=$(whole "$code" $ci 2>"$WORK/whole.err") || rc=$?
    [ "$rc" = "$code" ] || fail "$ci: the snippet exited $rc, its tests $code: $(cat "$WORK/whole.err")"
    ID=$(sed -n 's/^make ran in //p' <<<"$OUT")
    [[ "$ID" == sbx-* ]] || fail "$ci: make did not run in a sandbox: $OUT"
    [ "$(record "$ID" .idempotency_key)" = "${KEYS[$ci]}" ] || fail "$ci: key $(record "$ID" .idempotency_key)"
    [ "$(record "$ID" .state)" = destroyed ] || fail "$ci: tests exiting $code left $ID $(record "$ID" .state)"
  done
done
# No CI variable: no key.
OUT=$(whole 0)
[ "$(key_of "$OUT")" = null ] || fail "a run without CI variables got a key: $(key_of "$OUT")"
# A retried step whose first attempt is still alive (its runner died) finds that sandbox.
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" create --profile ci --ttl 45m \
  --idempotency-key 5150 --quiet >"$WORK/first" 2>/dev/null
OUT=$(whole 0 CI_JOB_ID=5150)
expect_contains "$OUT" "make ran in $(cat "$WORK/first")"
# A failed create stops the script with its code; nothing runs, nothing is left.
stub_profile ci <<EOF2
  root: $WORK/backend
  fail: { create: always }
EOF2
rc=0
OUT=$(whole 0 CI_JOB_ID=broken 2>"$WORK/whole.err") || rc=$?
[ "$rc" = 4 ] || fail "a failed create: the snippet exited $rc: $(cat "$WORK/whole.err")"
! grep -q "make ran" <<<"$OUT" || fail "the tests ran after a failed create"
[ "$(ledger_jq '[.sandboxes[] | select(.idempotency_key == "broken") | .state] | join(",")')" = failed ] ||
  fail "a failed create left: $(ledger_jq '.sandboxes[] | select(.idempotency_key == "broken")')"
stub_profile ci <<EOF2
  root: $WORK/backend
EOF2

# The shipped ci profile isolates: a docker container with the checkout at /src.
(cd "$WORK" && "$SANDBOXER" --profiles-dir "$SANDBOXER_SOURCE_DIR/profiles" profiles show ci -o json) \
  >"$WORK/ci.json"
[ "$(jq -r '.profile | .driver + " " + .docker.workdir + " " + .docker.mounts[0].source' "$WORK/ci.json")" = \
  "docker /src $WORK" ] || fail "the shipped ci profile: $(cat "$WORK/ci.json")"
# The stub says at each create that it isolates nothing.
expect_code 0 sbx create --profile ci
expect_contains "$ERR" "isolates nothing"

# An empty key is a usage error, never a shared sandbox.
expect_code 2 sbx create --profile ci --idempotency-key ""
expect_contains "$ERR" "--idempotency-key is empty"
expect_code 2 sbx create --profile ci --ttl 0s
expect_contains "$ERR" "at least 1s"
echo "ok"
