#!/usr/bin/env bash
# The README's CI snippet (issue 14.3), run as written under the variables of several CI systems:
# a retried step of a job gets its sandbox back, two jobs never share one, and without any CI
# variable every run gets its own. An empty key is refused.
source "$(dirname "$0")/lib.sh"

SNIPPET=$(awk '/^In CI/ {on = 1; next} on && /^    / {print substr($0, 5); next} on && /^$/ && seen++ {exit}' \
  "$SANDBOXER_SOURCE_DIR/README.md")
expect_contains "$SNIPPET" "sandboxer create --profile ci"
expect_contains "$SNIPPET" "trap 'sandboxer destroy \"\$ID\"' EXIT"
# The snippet up to the create (the trap and the exec are run as a whole below).
CREATE=$(sed '/^ID=/q' <<<"$SNIPPET")

mkdir -p "$WORK/bin"
ln -s "$SANDBOXER" "$WORK/bin/sandboxer"
printf '#!/bin/sh\necho "make ran in $SANDBOXER_ID"\n' >"$WORK/bin/make"
chmod +x "$WORK/bin/make"
stub_profile ci <<EOF2
  root: $WORK/backend
EOF2

# in_ci VAR=VALUE...: the snippet's create under exactly these CI variables; prints the id.
in_ci() {
  env -i PATH="$WORK/bin:$PATH" HOME="$WORK" SANDBOXER_STATE_DIR="$STATE" \
    SANDBOXER_PROFILES="$PROFILES" "$@" bash -euo pipefail -c "$CREATE"' && echo "$ID"'
}

declare -A FIRST
for ci in "CI_JOB_ID=4242" "BUILDKITE_JOB_ID=0190-ab" "CIRCLE_WORKFLOW_JOB_ID=c1-77" \
  "BUILD_TAG=jenkins-app-12" "GITHUB_RUN_ID=99 GITHUB_RUN_ATTEMPT=1 GITHUB_JOB=test"; do
  # shellcheck disable=SC2086 # word splitting of the variable list is meant
  a=$(in_ci $ci)
  # shellcheck disable=SC2086
  b=$(in_ci $ci)
  [[ "$a" == sbx-* ]] || fail "$ci: no sandbox id: $a"
  [ "$a" = "$b" ] || fail "$ci: a retried step got another sandbox ($a, $b)"
  FIRST[$ci]=$a
done
[ "$(printf '%s\n' "${FIRST[@]}" | sort -u | wc -l)" = 5 ] || fail "two CI systems shared a sandbox"
# Another job of the same pipeline gets its own.
other=$(in_ci GITHUB_RUN_ID=99 GITHUB_RUN_ATTEMPT=1 GITHUB_JOB=lint)
[ "$other" != "${FIRST[GITHUB_RUN_ID=99 GITHUB_RUN_ATTEMPT=1 GITHUB_JOB=test]}" ] ||
  fail "two GitHub jobs shared a sandbox"
# No CI variable: no key, one sandbox per run.
a=$(in_ci)
b=$(in_ci)
[ "$a" != "$b" ] || fail "runs without CI variables shared a sandbox"

# The whole snippet: the tests' code is the script's, and the sandbox is destroyed either way.
# whole MAKE_EXIT VAR=VALUE...: runs it with a `make` that exits MAKE_EXIT; prints its output.
whole() {
  local code=$1
  shift
  env -i PATH="$WORK/bin:$PATH" HOME="$WORK" SANDBOXER_STATE_DIR="$STATE" \
    SANDBOXER_PROFILES="$PROFILES" MAKE_EXIT="$code" "$@" bash -c "$SNIPPET"
}
printf '#!/bin/sh\necho "make ran in $SANDBOXER_ID"\nexit "${MAKE_EXIT:-0}"\n' >"$WORK/bin/make"
for code in 0 3; do
  rc=0
  OUT=$(whole "$code" CI_JOB_ID="whole-$code" 2>"$WORK/whole.err") || rc=$?
  [ "$rc" = "$code" ] || fail "the snippet exited $rc, its tests $code: $(cat "$WORK/whole.err")"
  ID=$(ledger_jq '.sandboxes[] | select(.idempotency_key == "whole-'"$code"'") | .id')
  expect_contains "$OUT" "make ran in $ID"
  [ "$(record "$ID" .state)" = destroyed ] || fail "tests exiting $code left $ID $(record "$ID" .state)"
done
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
