#!/usr/bin/env bash
# A sandbox lives on the engine that made it: with two Docker Engines (the test's own second one,
# B, beside the usual one, A), every verb and reap reach a sandbox on the engine its record names,
# whatever DOCKER_HOST says now; a 404 from the wrong engine never closes a record.
. "$(dirname "$0")/lib.sh"
require_docker
command -v unshare >/dev/null || skip "unshare is missing"

# Engine B, in a network namespace of its own: a second dockerd on the host network would take
# the first one's docker0 bridge away. The short path keeps containerd's socket under 108 bytes.
D=$(mktemp -d /tmp/sbx-e2.XXXX)
B="unix://$D/sock"
stop_engine_b() {
  docker -H "$B" ps -aq 2>/dev/null | xargs -r docker -H "$B" rm -f >/dev/null 2>&1 || true
  if [ -f "$D/pid" ]; then
    local pid
    pid=$(cat "$D/pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do alive "$pid" || break; sleep 0.1; done
  fi
  rm -rf "$D"
}
at_exit stop_engine_b
setsid unshare --net dockerd --data-root "$D/data" --exec-root "$D/exec" --pidfile "$D/pid" \
  -H "$B" --iptables=false --ip-masq=false --log-level warn >"$D/log" 2>&1 &
for _ in $(seq 150); do docker -H "$B" version >/dev/null 2>&1 && break; sleep 0.2; done
docker -H "$B" version >/dev/null 2>&1 || fail "engine B did not come up: $(tail -5 "$D/log")"
docker save sandboxer/busybox:local | docker -H "$B" load -q >/dev/null # nothing is pulled

cat >"$PROFILES/box.yaml" <<'EOF2'
driver: docker
ttl: { default: 30m, max: 2h }
docker: { image: sandboxer/busybox:local, command: [sleep, infinity], pull: never, network: none }
EOF2
on_b() { docker -H "$B" "$@"; }
LEDGER_ID=""
remove_on_a() {
  [ -z "$LEDGER_ID" ] || docker ps -aq --filter "label=sandboxer.ledger=$LEDGER_ID" |
    xargs -r docker rm -f >/dev/null
}
at_exit remove_on_a
unset DOCKER_HOST

# 1. Made on B; its record says so; with DOCKER_HOST unset (engine A) every verb still goes to B.
ID=$(DOCKER_HOST=$B sbx create --profile box --quiet)
LEDGER_ID=$(ledger_jq .ledger_id)
[ "$(record "$ID" .info.engine)" = "$B" ] || fail "info.engine: $(record "$ID" .info)"
on_b inspect "$ID" >/dev/null || fail "the container is not on engine B"
expect_code 0 sbx status "$ID" -o json
[ "$(jq -r .backend.state <<<"$OUT")" = running ] || fail "status asked the wrong engine: $OUT"
expect_contains "$ERR" "$B"
expect_code 0 sbx exec "$ID" -- echo reached # the container exists on B only
[ "$OUT" = reached ] || fail "exec: $OUT"
expect_code 0 sbx snapshot "$ID" --name s1
expect_code 0 sbx restore "$ID:s1" -o json
RID=$(jq -r .id <<<"$OUT")
on_b inspect "$RID" >/dev/null || fail "a restore of a snapshot on B went elsewhere"
# Stopped behind sandboxer's back, on B: list and status show it.
on_b stop -t 0 "$RID" >/dev/null
expect_code 0 sbx list -o json
[ "$(jq -r --arg id "$RID" '.[] | select(.id == $id) | .backend_state' <<<"$OUT")" = stopped ] ||
  fail "list of a stopped container on B: $OUT"
[ "$(jq -r --arg id "$ID" '.[] | select(.id == $id) | .backend_state' <<<"$OUT")" = running ] ||
  fail "list of a running container on B: $OUT"
expect_code 0 sbx status "$RID"
expect_contains "$OUT" "stopped (recorded running)"
expect_code 0 sbx destroy "$ID" "$RID"
if on_b inspect "$ID" >/dev/null 2>&1; then fail "destroy left the container on engine B"; fi
[ "$(record "$ID" .state)" = destroyed ] || fail "record not destroyed"

# 2. cron's reap, with DOCKER_HOST unset, destroys an expired sandbox on B.
SANDBOXER="$SANDBOXER_TESTCLOCK"
SHORT=$(DOCKER_HOST=$B SANDBOXER_FAKE_NOW=2026-12-06T10:00:00Z sbx create --profile box --ttl 1m --quiet)
SANDBOXER_FAKE_NOW=2026-12-06T10:05:00Z expect_code 0 sbx reap --skew 0s -o json
if on_b inspect "$SHORT" >/dev/null 2>&1; then fail "reap left the expired container on B: $OUT"; fi
[ "$(record "$SHORT" .state)" = destroyed ] || fail "reap: $OUT"

# 3. reap --orphans lists each engine on its own: B's orphan is found, A's sandbox is left alone.
KEEP_A=$(sbx create --profile box --quiet)
LOST_B=$(DOCKER_HOST=$B sbx create --profile box --quiet)
KEEP_B=$(DOCKER_HOST=$B sbx create --profile box --quiet)
jq --arg id "$LOST_B" '.sandboxes |= map(select(.id != $id))' "$STATE/ledger.json" >"$WORK/l.json"
cp "$WORK/l.json" "$STATE/ledger.json"
expect_code 0 sbx reap --skew 0s --orphans -o json
[ "$(jq -r '[.items[] | select(.action == "orphan")] | map(.id) | join(",")' <<<"$OUT")" = \
  "$LOST_B" ] || fail "orphans across two engines: $OUT"
[ "$(jq -r '[.items[] | select(.action == "vanished")] | length' <<<"$OUT")" = 0 ] ||
  fail "a live sandbox was taken for vanished: $OUT"
[ "$(record "$KEEP_A" .state)" = running ] && [ "$(record "$KEEP_B" .state)" = running ] ||
  fail "reap --orphans closed a live record"
expect_code 0 sbx reap --skew 0s --orphans=destroy -o json
if on_b inspect "$LOST_B" >/dev/null 2>&1; then fail "the orphan on B was not destroyed: $OUT"; fi

# 4. Engine B unreachable (its socket moved away): destroy is a backend error naming it, and the
# record stays for a retry; once B answers again, the retry destroys it.
mv "$D/sock" "$D/sock.away"
expect_code 4 sbx destroy "$KEEP_B"
expect_contains "$ERR" "$D/sock"
[ "$(record "$KEEP_B" .state)" != destroyed ] || fail "a destroy on an unreachable engine closed the record"
mv "$D/sock.away" "$D/sock"
expect_code 0 sbx destroy "$KEEP_B" "$KEEP_A"
if on_b inspect "$KEEP_B" >/dev/null 2>&1; then fail "the retried destroy left the container on B"; fi
echo ok
