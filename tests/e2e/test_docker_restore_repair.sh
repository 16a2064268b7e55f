#!/usr/bin/env bash
# restore --in-place killed half-way, against a real Docker Engine: the driver settles what the
# swap left (the old container renamed <id>-replaced and stopped, the new one under the sandbox's
# name) the next time it is asked about that sandbox: by reap's repair (status), by status, and by
# destroy. The kill is real (kill -9 while the new container waits for its readiness command); the
# one state a kill cannot be timed into is made by hand with the docker CLI.
. "$(dirname "$0")/lib.sh"
require_docker

# Ready at once, unless /snapshotted exists and /ready does not: a container restored from a
# snapshot taken after `touch /snapshotted` never gets ready, and its restore waits (60 s) in the
# readiness loop, where it is killed.
cat >"$PROFILES/swap.yaml" <<'EOF2'
driver: docker
ttl: { default: 30m }
docker:
  image: sandboxer/busybox:local
  command: [sleep, infinity]
  pull: never
  stop_timeout: 0s
  readiness:
    command: [sh, -c, "test -e /ready || test ! -e /snapshotted"]
    timeout: 60s
    interval: 100ms
EOF2

LEDGER_ID=""
RESTORE_PID=""
ID=""
ID2=""
cleanup() {
  if [ -n "$RESTORE_PID" ]; then kill -9 "$RESTORE_PID" 2>/dev/null || true; fi
  if [ -n "$LEDGER_ID" ]; then
    docker ps -aq --filter "label=sandboxer.ledger=$LEDGER_ID" | xargs -r docker rm -f >/dev/null
  fi
  for image in ${ID:+"sandboxer/snap:$ID-s1"} ${ID2:+"sandboxer/snap:$ID2-s2"}; do
    docker rmi -f "$image" >/dev/null 2>&1 || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

container_of_name() { docker inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }

# Starts `restore s1 --in-place` in the background and kills it -9 once the new container runs
# under the sandbox's name (so: old one set aside and stopped, new one made, ledger not updated).
restore_and_kill() {
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" restore "$ID:s1" --in-place "$ID" \
    >"$WORK/restore.out" 2>&1 &
  RESTORE_PID=$!
  for _ in $(seq 200); do
    NEW=$(container_of_name "$ID")
    if [ -n "$NEW" ] && [ "$NEW" != "$CID" ] &&
      [ "$(docker inspect -f '{{.State.Running}}' "$NEW")" = true ]; then
      break
    fi
    sleep 0.1
  done
  kill -9 "$RESTORE_PID" 2>/dev/null || fail "the restore ended before it was killed: $(cat "$WORK/restore.out")"
  wait "$RESTORE_PID" 2>/dev/null || true
  RESTORE_PID=""
  [ -n "$NEW" ] && [ "$NEW" != "$CID" ] || fail "the restore never made its new container"
  [ "$(docker inspect -f '{{.Name}}' "$CID")" = "/$ID-replaced" ] || fail "old container not aside"
  [ "$(docker inspect -f '{{.State.Running}}' "$CID")" = false ] || fail "old container running"
  [ "$(ledger_jq --arg id "$ID" '.sandboxes[] | select(.id == $id) | .state')" = creating ] ||
    fail "the killed restore did not leave its record in creating"
}

# The old container is back under the sandbox's name, running, and is the only one of the sandbox.
expect_old_back() {
  [ "$(container_of_name "$ID")" = "$CID" ] || fail "$1: the sandbox's name is not on $CID"
  [ "$(docker inspect -f '{{.State.Running}}' "$CID")" = true ] || fail "$1: $CID is not running"
  [ -z "$(container_of_name "$ID-replaced")" ] || fail "$1: $ID-replaced is still there"
  [ "$(docker ps -aq --no-trunc --filter "label=sandboxer.id=$ID")" = "$CID" ] ||
    fail "$1: other containers of $ID: $(docker ps -a --filter "label=sandboxer.id=$ID")"
}

expect_code 0 sbx create --profile swap -o json
ID=$(jq -r .id <<<"$OUT")
CID=$(jq -r .backend_id <<<"$OUT")
LEDGER_ID=$(ledger_jq .ledger_id)
expect_code 0 sbx exec "$ID" -- sh -c 'echo kept >/data.txt && touch /snapshotted'
expect_code 0 sbx snapshot "$ID" --name s1

# 1. Killed mid-swap, settled by reap's repair, which asks the driver for the status.
restore_and_kill
expect_code 0 sbx reap --stuck-after 0s -o json
[ "$(ledger_jq --arg id "$ID" '.sandboxes[] | select(.id == $id) | .state')" = running ] ||
  fail "repair did not settle the record to running: $OUT"
[ "$(ledger_jq --arg id "$ID" '.sandboxes[] | select(.id == $id) | .backend_id')" = "$CID" ] ||
  fail "repair changed the backend id"
expect_old_back "after repair"
expect_code 0 sbx exec "$ID" -- cat /data.txt
[ "$OUT" = kept ] || fail "the old container lost its file: $OUT"

# 2. Killed before the new container was made (set aside and stopped by hand, as the restore's
# first two steps do), settled by a plain status.
docker rename "$CID" "$ID-replaced"
docker stop -t 0 "$CID" >/dev/null
expect_code 0 sbx status "$ID" -o json
expect_contains "$OUT" "brought back under its name after an interrupted restore --in-place"
expect_old_back "after status"

# 3. Killed mid-swap again, then destroyed before any repair: both containers go.
restore_and_kill
expect_code 0 sbx destroy "$ID"
[ -z "$(docker ps -aq --filter "label=sandboxer.id=$ID")" ] ||
  fail "destroy left containers: $(docker ps -a --filter "label=sandboxer.id=$ID")"

# 4. A restore that is not interrupted still swaps, and leaves nothing aside.
expect_code 0 sbx create --profile swap -o json
ID2=$(jq -r .id <<<"$OUT")
expect_code 0 sbx exec "$ID2" -- touch /ready /snapshotted
expect_code 0 sbx snapshot "$ID2" --name s2
expect_code 0 sbx restore "$ID2:s2" --in-place "$ID2" -o json
[ "$(docker ps -aq --filter "label=sandboxer.id=$ID2" | wc -l)" = 1 ] || fail "restore left two"
[ -z "$(container_of_name "$ID2-replaced")" ] || fail "restore left $ID2-replaced"
expect_code 0 sbx destroy "$ID2"
expect_code 0 sbx snapshots rm "$ID2:s2"
expect_code 0 sbx snapshots rm "$ID:s1"
echo ok
