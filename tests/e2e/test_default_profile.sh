#!/usr/bin/env bash
# The repository's default profile on a real Docker Engine: `create` with no --profile makes a
# container of the offline-built image with the profile's limits, the sandbox knows its own id,
# and the container's PID 1 ends on SIGTERM (so destroy does not wait out the grace period).
. "$(dirname "$0")/lib.sh"
require_docker

cp "$SANDBOXER_SOURCE_DIR/profiles/default.yaml" "$PROFILES/"
CID=""
cleanup() {
  [ -z "$CID" ] || docker rm -f "$CID" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

expect_code 0 sbx create -o json
ID=$(jq -r .id <<<"$OUT")
CID=$(jq -r .backend_id <<<"$OUT")
[ "$(jq -r .driver <<<"$OUT")" = docker ] || fail "default driver: $OUT"
[ "$(jq -r .profile.name <<<"$OUT")" = default ] || fail "profile: $OUT"
INSPECT=$(docker inspect "$CID")
[ "$(jq -r '.[0].Config.Image' <<<"$INSPECT")" = sandboxer/busybox:local ] || fail "image"
[ "$(jq -r '.[0].HostConfig.Memory' <<<"$INSPECT")" = $((512 * 1024 * 1024)) ] || fail "memory"
[ "$(jq -r '.[0].HostConfig.PidsLimit' <<<"$INSPECT")" = 256 ] || fail "pids limit"
[ "$(jq -r '.[0].Config.Labels["sandboxer.id"]' <<<"$INSPECT")" = "$ID" ] || fail "label"

expect_code 0 sbx exec "$ID" -- sh -c 'echo "$SANDBOXER_ID $(pwd)"'
[ "$OUT" = "$ID /root" ] || fail "id and workdir inside: $OUT"

# SIGTERM to the container ends it cleanly, as `docker stop` does first.
docker kill --signal TERM "$CID" >/dev/null
for _ in $(seq 50); do
  [ "$(docker inspect -f '{{.State.Running}}' "$CID")" = false ] && break
  sleep 0.1
done
[ "$(docker inspect -f '{{.State.Running}} {{.State.ExitCode}}' "$CID")" = "false 0" ] ||
  fail "PID 1 did not end on SIGTERM: $(docker inspect -f '{{.State.Status}}' "$CID")"
expect_code 0 sbx status "$ID" -o json
[ "$(jq -r .backend.state <<<"$OUT")" = stopped ] || fail "status after stop: $OUT"

expect_code 0 sbx destroy "$ID"
[ "$(sbx status "$ID" -o json | jq -r .state)" = destroyed ] || fail "not destroyed"
docker inspect "$CID" >/dev/null 2>&1 && fail "container left behind"
CID=""
echo ok
