#!/usr/bin/env bash
# pause and resume on a real Docker Engine (docs/pause.md): the freezer keeps a process's memory
# (its counter stands still, then goes on); `pause: {memory: false}` stops the container and keeps
# its files, and the engine's new host port is read back at the resume; a tmpfs refuses a stop; a
# paused container is destroyed; a container removed while paused: resume exits 3, the record stays
# paused, destroy closes it.
. "$(dirname "$0")/lib.sh"
require_docker
containers() { docker ps -aq --filter label=team=e2e-pause; }
at_exit 'containers | xargs -r docker rm -f >/dev/null 2>&1'
profile() {
  local name=$1 extra=$2 docker_extra=${3:-}
  cat >"$PROFILES/$name.yaml" <<EOF
driver: docker
ttl: { default: 10m }
labels: { team: e2e-pause }
$extra
docker: { image: sandboxer/busybox:local, pull: never, stop_timeout: 0s, command: [sleep, infinity] $docker_extra }
EOF
}
profile freeze ""
profile stop "pause: { memory: false }
ports: [8080]"
profile tmpfs "pause: { memory: false }" ", mounts: [{type: tmpfs, target: /scratch}]"

# The freezer: a counter stands still while paused and counts on after.
expect_code 0 sbx create --profile freeze --name frozen -o json
CONTAINER=$(jq -r .backend_id <<<"$OUT")
expect_code 0 sbx exec frozen -- sh -c \
  'echo kept > /tmp/note; (i=0; while [ $i -lt 600 ]; do i=$((i+1)); echo $i > /tmp/ticks.new; mv /tmp/ticks.new /tmp/ticks; sleep 0.1; done) >/dev/null 2>&1 </dev/null &'
sleep 0.5
expect_code 0 sbx pause frozen -o json
[ "$(jq -r '.[0] | "\(.how) \(.memory)"' <<<"$OUT")" = "freeze true" ] || fail "pause: $OUT"
[ "$(docker inspect -f '{{.State.Status}}' "$CONTAINER")" = paused ] || fail "the engine does not say paused"
expect_code 10 sbx exec frozen -- true
expect_contains "$ERR" "sandboxer resume"
expect_code 0 sbx list --state paused -q
expect_contains "$OUT" "$(sbx status frozen -o json | jq -r .id)"
expect_code 0 sbx resume frozen
expect_code 0 sbx exec frozen -- cat /tmp/ticks
BEFORE=$OUT
sleep 0.5
expect_code 0 sbx exec frozen -- cat /tmp/ticks /tmp/note
[ "$(head -1 <<<"$OUT")" -gt "$BEFORE" ] || fail "the counter did not go on: $BEFORE then $OUT"
[ "$(tail -1 <<<"$OUT")" = kept ] || fail "the file: $OUT"

# A stop: files kept, memory not; the port is published again where the engine now says.
expect_code 0 sbx create --profile stop --name stopped -o json
STOPPED=$(jq -r .backend_id <<<"$OUT")
expect_code 0 sbx exec stopped -- sh -c 'echo on-disk > /root/file'
expect_code 0 sbx pause stopped -o json
[ "$(jq -r '.[0] | "\(.how) \(.memory)"' <<<"$OUT")" = "stop false" ] || fail "pause: $OUT"
[ "$(docker inspect -f '{{.State.Status}}' "$STOPPED")" = exited ] || fail "not stopped"
expect_code 0 sbx resume stopped
expect_code 0 sbx exec stopped -- cat /root/file
[ "$OUT" = on-disk ] || fail "the file after a stop: $OUT"
[ "$(sbx port stopped 8080)" = "$(docker port "$STOPPED" 8080/tcp | head -1)" ] ||
  fail "port after resume: $(sbx port stopped 8080) vs $(docker port "$STOPPED" 8080/tcp)"

# A tmpfs's files would die with a stop: refused, nothing changed.
expect_code 0 sbx create --profile tmpfs --name scratch --quiet
expect_code 7 sbx pause scratch
expect_contains "$ERR" "tmpfs"
[ "$(sbx status scratch -o json | jq -r .state)" = running ] || fail "a refused pause changed it"

# A paused container is destroyed; one removed behind sandboxer's back cannot be resumed.
expect_code 0 sbx pause frozen --quiet
expect_code 0 sbx destroy frozen
[ -z "$(docker ps -aq --filter id="$CONTAINER")" ] || fail "the paused container is still there"
expect_code 0 sbx pause stopped --quiet
docker rm -f "$STOPPED" >/dev/null
expect_code 3 sbx resume stopped
expect_contains "$ERR" "vanished while it was paused"
[ "$(sbx status stopped -o json | jq -r .state)" = paused ] || fail "the record did not stay paused"
expect_code 0 sbx destroy stopped scratch
[ -z "$(containers)" ] || fail "containers left: $(containers)"
