#!/usr/bin/env bash
# reap against a real Docker Engine: a sandbox created with --ttl 2s is gone from the engine after
# reap; a container without labels and one labelled with another ledger's id are left alone, even by
# --orphans=destroy; a container of this ledger without a record is an orphan.
. "$(dirname "$0")/lib.sh"
require_docker

cat >"$PROFILES/box.yaml" <<'EOF2'
driver: docker
ttl: { default: 30m, max: 2h }
docker:
  image: sandboxer/busybox:local
  command: [sleep, infinity]
  pull: never
  network: none
EOF2

TAG=sandboxer-reap-e2e-$$
LEDGER_ID=""
cleanup() {
  if [ -n "$LEDGER_ID" ]; then
    docker ps -aq --filter "label=sandboxer.ledger=$LEDGER_ID" | xargs -r docker rm -f >/dev/null
  fi
  docker ps -aq --filter "label=$TAG" | xargs -r docker rm -f >/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

expect_code 0 sbx create --profile box --ttl 2s -o json
ID=$(jq -r .id <<<"$OUT")
CID=$(jq -r .backend_id <<<"$OUT")
LEDGER_ID=$(ledger_jq .ledger_id)
KEEP=$(sbx create --profile box --ttl 1h --quiet)

# Bystanders: one without any label of ours, one with another ledger's labels (made with the
# Engine API, as another sandboxer would).
PLAIN=$(docker run -d --label "$TAG=1" --network none sandboxer/busybox:local sleep 300)
FOREIGN=$(curl -sf --unix-socket /var/run/docker.sock -H 'Content-Type: application/json' \
  -d '{"Image": "sandboxer/busybox:local", "Cmd": ["sleep", "300"], "HostConfig": {"NetworkMode": "none"},
       "Labels": {"'"$TAG"'": "1", "sandboxer.id": "sbx-foreign00000", "sandboxer.ledger": "ldg-another00000"}}' \
  http://localhost/v1.41/containers/create | jq -r .Id)
[ -n "$FOREIGN" ] && [ "$FOREIGN" != null ] || fail "could not create the foreign container"
curl -sf --unix-socket /var/run/docker.sock -X POST \
  "http://localhost/v1.41/containers/$FOREIGN/start" || fail "start foreign"

sleep 3
expect_code 0 sbx reap --skew 0s -o json
[ "$(jq -r '.items | map(.id + ":" + .outcome) | join(",")' <<<"$OUT")" = "$ID:destroyed" ] ||
  fail "reap: $OUT"
docker inspect "$CID" >/dev/null 2>&1 && fail "the expired container is still on the engine"
[ "$(ledger_jq --arg id "$ID" '.sandboxes[] | select(.id == $id) | .state')" = destroyed ] ||
  fail "record not destroyed"
docker inspect "$(sbx status "$KEEP" -o json | jq -r .backend_id)" >/dev/null || fail "live one gone"

# An orphan of this ledger: its record is lost (say, an old ledger.json.bak was restored).
ORPHAN=$(sbx create --profile box --quiet)
OCID=$(sbx status "$ORPHAN" -o json | jq -r .backend_id)
jq --arg id "$ORPHAN" '.sandboxes |= map(select(.id != $id))' "$STATE/ledger.json" >"$WORK/l.json"
cp "$WORK/l.json" "$STATE/ledger.json"
expect_code 0 sbx reap --skew 0s --orphans -o json
[ "$(jq -r '[.items[] | select(.action == "orphan")] | map(.id + ":" + .outcome) | join(",")' \
  <<<"$OUT")" = "$ORPHAN:reported" ] || fail "orphan report: $OUT"
docker inspect "$OCID" >/dev/null || fail "report removed the orphan"
expect_code 0 sbx reap --skew 0s --orphans=destroy -o json
[ "$(jq -r '[.items[] | select(.action == "orphan")] | map(.outcome) | join(",")' <<<"$OUT")" = \
  destroyed ] || fail "orphan destroy: $OUT"
docker inspect "$OCID" >/dev/null 2>&1 && fail "orphan container left"
# The bystanders are untouched, and running.
[ "$(docker inspect -f '{{.State.Running}}' "$PLAIN")" = true ] || fail "unlabelled container touched"
[ "$(docker inspect -f '{{.State.Running}}' "$FOREIGN")" = true ] || fail "foreign container touched"
docker inspect "$(sbx status "$KEEP" -o json | jq -r .backend_id)" >/dev/null || fail "live one gone"

# A container removed behind sandboxer's back: its record is closed as vanished.
docker rm -f "$(sbx status "$KEEP" -o json | jq -r .backend_id)" >/dev/null
# list shows what the engine says, not the record's "running".
expect_code 0 sbx list -o json
[ "$(jq -r --arg id "$KEEP" '.[] | select(.id == $id) | .state + "/" + .backend_state' <<<"$OUT")" = \
  running/missing ] || fail "list of a removed container: $OUT"
expect_code 0 sbx list
expect_contains "$(grep "$KEEP" <<<"$OUT")" missing
expect_contains "$ERR" "$KEEP: recorded running, but its backend says missing"
expect_code 0 sbx reap --skew 0s --orphans -o json
[ "$(ledger_jq --arg id "$KEEP" '.sandboxes[] | select(.id == $id) | .history[-1].reason')" = \
  vanished ] || fail "vanished: $OUT"
echo ok
