#!/usr/bin/env bash
# The conformance kit (`sandboxer drivers test`): every driver passes it (stub, docker against the
# real dockerd, e2b and modal against their local fakes, vm-packer on QEMU, the Python example),
# and it fails drivers broken on purpose: one that leaves resources behind, one that loses exit
# codes, one that drops labels.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip "python3 is missing"
require_docker
export SANDBOXER_DRIVER_PATH="$SANDBOXER_SOURCE_DIR/tests/data/drivers:$SANDBOXER_SOURCE_DIR/examples/python"
cd "$WORK"

# passes PROFILE: the kit passes every check the driver's capabilities allow.
passes() {
  local code=0
  OUT=$(sbx drivers test --profile "$1" -o json 2>"$WORK/stderr") || code=$?
  ERR=$(cat "$WORK/stderr")
  [ "$code" = 0 ] && [ "$(jq .failed <<<"$OUT")" = 0 ] ||
    fail "$1: exit $code: $(jq -c '.checks[] | select(.result == "fail")' <<<"$OUT" 2>&1) $ERR"
  [ "$(jq '.checks | length' <<<"$OUT")" -ge 19 ] || fail "$1: only $(jq '.checks | length' <<<"$OUT") checks ran"
  echo "$1: $(jq -r '"\(.passed) passed, \(.skipped) skipped"' <<<"$OUT")"
}
# fails PROFILE CHECK: the kit exits 1 and CHECK is among the failed checks.
fails() {
  expect_code 1 sbx drivers test --profile "$1" -o json
  jq -e --arg c "$2" '.checks[] | select(.name == $c and .result == "fail")' <<<"$OUT" >/dev/null \
    || fail "$1: check \"$2\" did not fail: $OUT"
}

stub_profile stub <<EOF2
  root: $WORK/stub
EOF2
passes stub
# The table: one line per check, then the summary.
expect_code 0 sbx drivers test --profile stub
expect_contains "$OUT" "exec exit codes"
expect_contains "$OUT" "driver stub (profile stub): 28 passed, 0 failed, 0 skipped"

cp "$SANDBOXER_SOURCE_DIR/profiles/default.yaml" "$PROFILES/docker.yaml"
passes docker
[ -z "$(docker ps -aq --filter label=sandboxer.profile=docker)" ] || fail "the kit left containers"
LEFT=$(docker images --format '{{.Repository}}:{{.Tag}}' | grep -e '-conformance$' || true)
[ -z "$LEFT" ] || fail "the kit left its snapshot image: $LEFT"

start_fake_e2b
export E2B_API_KEY="$KEY"
cat >"$PROFILES/e2b.yaml" <<'EOF2'
driver: e2b
secrets: { api_key: { env: E2B_API_KEY } }
e2b: { template: base, api_url: "${FAKE_URL}", envd_url: "${FAKE_URL}" }
EOF2
passes e2b

# modal against tests/fake_modal (its lifetime above the TTL, so that extend has room).
start_fake_modal
modal_profile modal
passes modal

# vm-packer on a real QEMU booting the tiny image.
tiny_vm_profile vm
passes vm

for name in pydir leaky noexit nolabels; do
  printf 'driver: %s\n%s: { root: %s }\n' "$name" "$name" "$WORK/$name" >"$PROFILES/$name.yaml"
done
passes pydir
fails leaky "destroy"
fails leaky "nothing left behind"
fails noexit "exec exit codes"
fails nolabels "labels carried"
echo "ok"
