#!/usr/bin/env bash
# compose-ssh end to end: a throwaway sshd on loopback (its own host and client keys) in front of
# this machine's dockerd, a user whose shell is /bin/sh, and Debian's docker-compose on the "host".
# The full lifecycle (labels on every container, readiness with a healthcheck, exec with split
# streams, stdin, a terminal, exit codes, snapshot of every service, restore, destroy twice), one
# ssh connection per command, reap --orphans, a SIGKILLed `run` collected after its lease, and the
# conformance kit.
. "$(dirname "$0")/lib.sh"
require_docker
start_sshd
cd "$WORK"

cat >"$PROFILES/stack.yml" <<'EOF2'
version: "3.8"
services:
  web:
    image: sandboxer/busybox:local
    command: ["sleep", "3600"]
    init: true
    environment: { ROLE: web }
    volumes: [ "data:/data" ]
  db:
    image: sandboxer/busybox:local
    command: ["sleep", "3600"]
    init: true
    healthcheck: { test: ["CMD", "true"], interval: 1s }
volumes:
  data: {}
EOF2
# compose_file is relative: it resolves against the profile's directory, not the working one.
compose_profile compose stack.yml "env: { GREETING: hello }"
PROJECTS=()
at_exit remove_compose_projects

accepted() { grep -c "Accepted publickey" "$SSHD_LOG" || true; }
# Remote commands (sshd logs one "Starting session" per command, multiplexed or not).
sessions() { sleep 0.1; grep -c "Starting session" "$SSHD_LOG" || true; }
CACHE="$STATE/drivers/compose-ssh/compose.$SSH_USER@127.0.0.1%3a$SSH_PORT"

# create: every container labelled, the healthcheck passed, one ssh connection for the command.
BEFORE=$(accepted)
expect_code 0 sbx create --profile compose --label team=e2e -o json
[ "$(cat "$CACHE")" = v1 ] || fail "which compose the host has is not kept: $(ls "$STATE/drivers/compose-ssh")"
ID=$(jq -r .id <<<"$OUT")
PROJECTS+=("$ID")
[ "$(jq -r .state <<<"$OUT")" = running ] || fail "not running: $OUT"
[ "$(jq -r .backend_id <<<"$OUT")" = "$ID" ] || fail "the project is not named after the id: $OUT"
[ "$(($(accepted) - BEFORE))" = 1 ] || fail "create opened $(($(accepted) - BEFORE)) ssh connections, expected 1"
LEDGER=$(jq -r .ledger_id "$STATE/ledger.json")
[ "$(docker ps -q --filter "label=sandboxer.id=$ID" --filter "label=sandboxer.ledger=$LEDGER" \
  --filter "label=team=e2e" | wc -l)" = 2 ] || fail "the two services do not carry sandboxer's labels"
[ "$(docker inspect -f '{{.State.Health.Status}}' "${ID}_db_1")" = healthy ] ||
  fail "create returned before the healthcheck passed"
# The shared connection ends with the command: sshd has no session left.
for _ in $(seq 30); do [ -z "$(pgrep -P "$SSHD_PID" || true)" ] && break; sleep 0.1; done
[ -z "$(pgrep -P "$SSHD_PID" || true)" ] || fail "an ssh connection outlived its command"
expect_code 0 sbx status "$ID"
expect_contains "$OUT" "docker-compose 1.29.2"
expect_contains "$OUT" "running"

# logs: `docker-compose logs` of the services over ssh, each line with its service's prefix.
# The web service's main process (docker-init, `init: true`) gets a line on its stdout.
expect_code 0 sbx exec "$ID" -- sh -c 'echo from-web-main >/proc/1/fd/1'
expect_code 0 sbx logs "$ID" -o json
jq -e -s 'any(.line | test("web.* [|] from-web-main$")) and all(.time != null)' <<<"$OUT" >/dev/null \
  || fail "compose logs: $OUT"
expect_code 0 sbx logs --since 2099-01-01T00:00:00Z "$ID"
[ -z "$OUT" ] || fail "compose logs --since the future: $OUT"

# exec: the first service by default; split streams, exit codes, stdin, env, workdir.
expect_code 3 sbx exec "$ID" -- sh -c 'echo "out $ROLE $GREETING"; echo err >&2; exit 3'
[ "$OUT" = "out web hello" ] || fail "stdout: $OUT"
[ "$ERR" = "err" ] || fail "stderr: $ERR"
expect_code 0 sbx exec "$ID" -- sh -c 'printf "%s|" "$@"' x 'a b' "it's" '$HOME' ';' '*'
[ "$OUT" = "a b|it's|\$HOME|;|*|" ] || fail "arguments were reparsed on the host: $OUT"
OUT=$(printf 'line1\nline2\n' | sbx exec -i "$ID" -- wc -l)
[ "$OUT" = 2 ] || fail "stdin: $OUT"
expect_code 0 sbx exec --env K=v --workdir /tmp "$ID" -- sh -c 'echo $K $(pwd)'
[ "$OUT" = "v /tmp" ] || fail "env/workdir: $OUT"
expect_code 127 sbx exec "$ID" -- no-such-program
expect_contains "$ERR" "command not found"
# A terminal: -it from a pty gets one on the host, with the local size.
/usr/bin/python3 "$SANDBOXER_SOURCE_DIR/tests/e2e/run_on_pty.py" "$WORK/pty.out" \
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" exec -it "$ID" -- sh -c 'tty; i=0
    while s=$(stty size 2>/dev/null); { [ -z "$s" ] || [ "$s" = "0 0" ]; } && [ $i -lt 50 ]; do
      i=$((i + 1)); sleep 0.1
    done
    echo "size=$s"; exit 5'
OUT=$(cat "$WORK/pty.out")
expect_contains "$OUT" "/dev/pts/"
# docker gives an exec's terminal its size a moment after the command starts (API 1.41).
expect_contains "$OUT" "size=33 111"
expect_contains "$OUT" "exit=5"

# cp: natively through `docker cp` on the host (no tar needed in the container for the stream);
# without --owner the files are the exec user's (root here), with it the given ids.
mkdir -p "$WORK/cpin/sub" && printf 'one\n' >"$WORK/cpin/a.txt" && printf 'two' >"$WORK/cpin/sub/b"
chmod 750 "$WORK/cpin/sub/b" && ln -s a.txt "$WORK/cpin/link"
expect_code 0 sbx cp -o json "$WORK/cpin" "$ID:/tmp/cpin"
[ "$(jq -r '"\(.via) \(.files)"' <<<"$OUT")" = "native 2" ] || fail "cp in: $OUT"
expect_code 0 sbx exec "$ID" -- sh -c 'cat /tmp/cpin/a.txt /tmp/cpin/sub/b; readlink /tmp/cpin/link
  stat -c "%a %u" /tmp/cpin/sub/b'
[ "$OUT" = "$(printf 'one\ntwoa.txt\n750 0')" ] || fail "cp in landed as: $OUT"
expect_code 0 sbx cp --owner 123:45 "$WORK/cpin/a.txt" "$ID:/tmp/owned"
expect_code 0 sbx exec "$ID" -- stat -c "%u:%g" /tmp/owned
[ "$OUT" = "123:45" ] || fail "cp --owner: $OUT"
expect_code 0 sbx cp -o json "$ID:/tmp/cpin" "$WORK/cpout"
[ "$(jq -r .via <<<"$OUT")" = native ] || fail "cp out: $OUT"
diff -r "$WORK/cpin" "$WORK/cpout" || fail "cp out differs from what went in"
[ "$(readlink "$WORK/cpout/link")" = a.txt ] || fail "the link came out as $(ls -l "$WORK/cpout")"
expect_code 3 sbx cp "$ID:/no/such/path" "$WORK/none"
expect_contains "$ERR" "/no/such/path"
expect_code 0 sbx cp --via exec "$WORK/cpin/a.txt" "$ID:/tmp/by-exec"

# snapshot: one image per service on the host, one snapshot in the ledger, a manifest beside.
sbx exec "$ID" -- sh -c 'echo kept > /root/marker; echo vol > /data/v'
expect_code 0 sbx snapshot "$ID" --name s1 -o json
SNAP=$(jq -r .id <<<"$OUT")
REF=$(jq -r .backend_ref <<<"$OUT")
[ "$REF" = "sandboxer-snapshot/$SNAP" ] || fail "backend ref: $OUT"
[ "$(docker image ls --format '{{.Tag}}' "$REF" | sort | tr '\n' ' ')" = "db web " ] ||
  fail "snapshot images: $(docker image ls "$REF")"
[ "$(record "$ID" '.snapshots | length')" = 1 ] || fail "the ledger holds more than one snapshot"
MANIFEST="/home/$SSH_USER/.sandboxer/compose-ssh/snapshots/$SNAP/manifest.json"
[ "$(jq -r '.services | keys | join(",")' "$MANIFEST")" = "db,web" ] || fail "manifest: $(cat "$MANIFEST")"

# restore: a new project from those images, the file written before is there.
expect_code 0 sbx restore "$ID:s1" -o json
RID=$(jq -r .id <<<"$OUT")
PROJECTS+=("$RID")
[ "$RID" != "$ID" ] || fail "restore reused the id"
expect_code 0 sbx exec "$RID" -- cat /root/marker
[ "$OUT" = kept ] || fail "restored: $OUT"
[ "$(docker inspect -f '{{.Config.Image}}' "${RID}_db_1")" = "$REF:db" ] || fail "db not from its snapshot"

# destroy: containers, networks, volumes and the project's files go, in one remote command; a
# second destroy succeeds.
RT=$(sessions)
expect_code 0 sbx destroy "$ID"
[ "$(($(sessions) - RT))" = 1 ] || fail "destroy ran $(($(sessions) - RT)) remote commands, expected 1"
[ -z "$(compose_leftovers "$ID")" ] || fail "destroy left: $(compose_leftovers "$ID")"
[ ! -e "/home/$SSH_USER/.sandboxer/compose-ssh/projects/$ID" ] || fail "destroy left the project's files"
expect_code 0 sbx destroy "$ID"
expect_code 0 sbx status "$ID" -o json

# Round trips, without a healthcheck (whose interval sets its own pace): create is one remote
# command for upload, compose up and the first look (no settle time: the default); with
# `settle: 1s`, one more that finds every service still up at the end of it; destroy is one.
cat >"$PROFILES/plain.yml" <<'EOF2'
services:
  web: { image: sandboxer/busybox:local, command: ["sleep", "3600"], init: true }
  db: { image: sandboxer/busybox:local, command: ["sleep", "3600"], init: true }
EOF2
compose_profile plain plain.yml
RT=$(sessions)
expect_code 0 sbx create --profile plain --quiet
PLAIN=$OUT
PROJECTS+=("$PLAIN")
[ "$(($(sessions) - RT))" = 1 ] || fail "create ran $(($(sessions) - RT)) remote commands, expected 1"
RT=$(sessions)
expect_code 0 sbx destroy "$PLAIN"
[ "$(($(sessions) - RT))" = 1 ] || fail "destroy ran $(($(sessions) - RT)) remote commands, expected 1"
compose_profile settled plain.yml "  settle: 1s"
RT=$(sessions)
expect_code 0 sbx create --profile settled --quiet
PLAIN=$OUT
PROJECTS+=("$PLAIN")
[ "$(($(sessions) - RT))" -le 2 ] || fail "create with settle ran $(($(sessions) - RT)) remote commands, expected <= 2"
# It returned only once every container had been up for the settle time, by the host's clock.
STARTED=$(docker ps -q --filter "label=com.docker.compose.project=$PLAIN" |
  xargs docker inspect -f '{{.State.StartedAt}}' | sort | tail -1)
[ $(($(date +%s%N) / 1000000 - $(date -d "$STARTED" +%s%N) / 1000000)) -ge 1000 ] ||
  fail "create with settle: 1s returned before its youngest container had been up 1 s ($STARTED)"
expect_code 0 sbx destroy "$PLAIN"
[ -z "$(compose_leftovers "$PLAIN")" ] || fail "destroy left: $(compose_leftovers "$PLAIN")"
# A kept answer that is wrong (the host lost the plugin): the create asks again, once.
echo plugin >"$CACHE"
RT=$(sessions)
expect_code 0 sbx create --profile plain --quiet
PROJECTS+=("$OUT")
[ "$(($(sessions) - RT))" -le 3 ] || fail "create ran $(($(sessions) - RT)) remote commands, expected <= 3"
[ "$(cat "$CACHE")" = v1 ] || fail "the wrong answer was kept: $(cat "$CACHE")"
expect_code 0 sbx destroy "$OUT"

# reap --orphans: a project of this ledger whose record is lost is found by its labels.
expect_code 0 sbx create --profile compose --quiet
ORPHAN=$OUT
PROJECTS+=("$ORPHAN")
jq --arg id "$ORPHAN" '.sandboxes |= map(select(.id != $id))' "$STATE/ledger.json" >"$WORK/l.json"
cp "$WORK/l.json" "$STATE/ledger.json"
expect_code 0 sbx reap --skew 0s --orphans=destroy -o json
[ "$(jq -r '[.items[] | select(.action == "orphan")] | map(.id + ":" + .outcome) | join(",")' \
  <<<"$OUT")" = "$ORPHAN:destroyed" ] || fail "orphan: $OUT"
[ -z "$(compose_leftovers "$ORPHAN")" ] || fail "the orphan's project is still there"
# A project removed behind sandboxer's back: its record is closed as vanished.
docker rm -f $(docker ps -aq --filter "label=com.docker.compose.project=$RID") >/dev/null
expect_code 0 sbx status "$RID" -o json
[ "$(jq -r .backend.state <<<"$OUT")" = missing ] || fail "status of a removed project: $OUT"
# destroy then removes what the hand-removal left (its network and volume).
expect_code 0 sbx destroy "$RID"
[ -z "$(compose_leftovers "$RID")" ] || fail "destroy left parts of $RID: $(compose_leftovers "$RID")"

# delete the snapshot: its images and manifest go.
expect_code 0 sbx snapshots rm "$ID:s1"
[ -z "$(docker image ls -q "$REF")" ] || fail "snapshot images left"
[ ! -e "$MANIFEST" ] || fail "manifest left"

# A `run` SIGKILLed while its command runs: after the lease, one reap removes the whole project.
killed_run_reaped compose killed
PROJECTS+=("$KILLED_ID")
[ -z "$(compose_leftovers "$KILLED_ID")" ] || fail "reap left parts of the killed run: $(compose_leftovers "$KILLED_ID")"

# The conformance kit, through the same sshd.
KIT_CODE=0
OUT=$(sbx drivers test --profile compose -o json 2>"$WORK/kit-stderr") || KIT_CODE=$?
[ "$KIT_CODE" = 0 ] && [ "$(jq .failed <<<"$OUT")" = 0 ] ||
  fail "kit: exit $KIT_CODE: $(jq -c '.checks[] | select(.result == "fail")' <<<"$OUT" 2>&1) $(cat "$WORK/kit-stderr")"
[ "$(jq .skipped <<<"$OUT")" = 0 ] || fail "kit skipped checks: $OUT"
echo ok
