#!/usr/bin/env bash
# The README's CI snippet (issue 14.3), run as written under the variables of several CI systems:
# a retried step of a job gets its sandbox back, two jobs never share one, and without any CI
# variable every run gets its own. An empty key is refused.
source "$(dirname "$0")/lib.sh"

SNIPPET=$(awk '/^In CI/ {on = 1; next} on && /^    / {print substr($0, 5); next} on && /^$/ && seen++ {exit}' \
  "$SANDBOXER_SOURCE_DIR/README.md")
expect_contains "$SNIPPET" "sandboxer create --profile ci"
# The create line alone (the exec and destroy are run separately below).
CREATE=$(grep -v '^sandboxer ' <<<"$SNIPPET")

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

# The rest of the snippet: exec and destroy work on the id.
ID=${FIRST[CI_JOB_ID=4242]}
OUT=$(env PATH="$WORK/bin:$PATH" SANDBOXER_STATE_DIR="$STATE" SANDBOXER_PROFILES="$PROFILES" \
  ID="$ID" bash -euo pipefail -c "$(grep '^sandboxer ' <<<"$SNIPPET")")
expect_contains "$OUT" "make ran in $ID"
[ "$(ledger_jq --arg id "$ID" '.sandboxes[] | select(.id == $id) | .state')" = destroyed ] ||
  fail "the snippet's destroy did not destroy"

# An empty key is a usage error, never a shared sandbox.
expect_code 2 sbx create --profile ci --idempotency-key ""
expect_contains "$ERR" "--idempotency-key is empty"
expect_code 2 sbx create --profile ci --ttl 0s
expect_contains "$ERR" "at least 1s"
echo "ok"
