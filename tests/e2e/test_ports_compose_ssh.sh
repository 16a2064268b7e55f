#!/usr/bin/env bash
# `ports:` and `sandboxer forward` on compose-ssh (docs/ports.md): a busybox httpd published on the
# host's loopback by the override file (host port picked by the host's engine, read back), a port
# the compose file publishes itself, both reached through `forward` (ssh -L), which reconnects when
# the ssh connection is cut and ends with the sandbox; history and evidence say who forwarded what.
. "$(dirname "$0")/lib.sh"
require_docker
start_sshd
command -v curl >/dev/null || fail "curl is missing"
cd "$WORK"

cat >"$PROFILES/web.yml" <<'EOF2'
version: "3.8"
services:
  web:
    image: sandboxer/busybox:local
    init: true
    command: [sh, -c, 'mkdir -p /www && echo hello > /www/index.html && httpd -p 8081 -h /www && sleep 2 && exec httpd -f -p 8080 -h /www']
    ports: ["127.0.0.1::8081"]
EOF2
# ready: the port answers from the host (ssh -W), where forward connects: create waits the 2 s.
compose_profile web web.yml "ports: [8080]
ready: {port: 8080, timeout: 30s}"
PROJECTS=()
at_exit remove_compose_projects

expect_code 0 sbx create --profile web -o json
CREATED=$OUT
ID=$(jq -r .id <<<"$CREATED")
PROJECTS+=("$ID")
# The profile's port first, then the compose file's own; the host ports are the engine's.
[ "$(jq -c '[.ports[] | [.port, .protocol, .host]]' <<<"$CREATED")" = \
  '[[8080,"tcp","127.0.0.1"],[8081,"tcp","127.0.0.1"]]' ] || fail "create's ports: $CREATED"
HOST_PORT=$(jq -r '.ports[0].host_port' <<<"$CREATED")
[ "$(docker port "${ID}_web_1" 8080/tcp | head -1)" = "127.0.0.1:$HOST_PORT" ] ||
  fail "the host's engine says $(docker port "${ID}_web_1" 8080/tcp), the record $HOST_PORT"
[ "$(jq -r '.ports[0].url' <<<"$CREATED")" = "tcp://127.0.0.1:$HOST_PORT" ] || fail "url: $CREATED"
expect_code 0 sbx status "$ID" -o json
[ "$(jq -c .ports <<<"$OUT")" = "$(jq -c .ports <<<"$CREATED")" ] || fail "status's ports: $OUT"
READY=$(jq -c '.history[] | select(.event == "ready") | .details.port_ready' <<<"$OUT")
jq -e '.answered == true and .after_ms >= 1000' <<<"$READY" >/dev/null ||
  fail "create did not wait for port 8080 on the host: $READY"
expect_code 0 sbx port "$ID" 8081
[ "$OUT" = "$(jq -r '.ports[1] | "\(.host):\(.host_port)"' <<<"$CREATED")" ] || fail "port 8081: $OUT"

# forward: both ports on local ports of our choosing, through a connection of its own.
L1=$(free_port)
L2=$(free_port)
# Not through sbx(): a function runs in a subshell, which a SIGINT would not reach past.
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" forward "$ID" "$L1:8080" "$L2:8081" \
  -o json >"$WORK/fwd.out" 2>"$WORK/fwd.err" &
FWD=$!
at_exit "kill $FWD 2>/dev/null || true"
for _ in $(seq 100); do [ -s "$WORK/fwd.out" ] && break; sleep 0.1; done
[ "$(jq -c '[.proxied, (.forwards[] | .local_port)]' "$WORK/fwd.out")" = "[true,$L1,$L2]" ] ||
  fail "forward -o json: $(cat "$WORK/fwd.out" "$WORK/fwd.err")"
[ "$(curl -fs "http://127.0.0.1:$L1/")" = hello ] || fail "port 8080 not reached through forward: $(cat "$WORK/fwd.err")"
[ "$(curl -fs "http://127.0.0.1:$L2/")" = hello ] || fail "port 8081 not reached through forward"
# The port and its holder, for a second forward onto the same local port.
expect_code 10 sbx forward "$ID" "$L1:8080"
expect_contains "$ERR" "127.0.0.1:$L1"
expect_contains "$ERR" "in use"
# A host port the host already uses (here the forward's own listener): compose up fails with the
# engine's words, which name the port; the failed create leaves nothing on the host.
compose_profile taken web.yml "ports: [{port: 8080, host_port: $L1}]"
expect_code 4 sbx create --profile taken
expect_contains "$ERR" "$L1"
TAKEN=$(sbx list -a -o json | jq -r '.[] | select(.profile == "taken" or .profile.name? == "taken") | .id')
[ -n "$TAKEN" ] && [ -z "$(compose_leftovers "$TAKEN")" ] || fail "the failed create left: $TAKEN $(compose_leftovers "$TAKEN")"
expect_code 3 sbx forward "$ID" 9999
expect_contains "$ERR" "does not expose port 9999/tcp"
expect_code 2 sbx forward "$ID" 8080/udp
expect_code 2 sbx forward "$ID" x:8080

# Cut every ssh connection (the forward's is the only one left): it says so and comes back.
pkill -P "$SSHD_PID" || fail "no ssh connection to cut"
for _ in $(seq 100); do grep -q "reconnecting" "$WORK/fwd.err" && break; sleep 0.1; done
expect_contains "$(cat "$WORK/fwd.err")" "dropped"
ok=
for _ in $(seq 100); do
  [ "$(curl -fs "http://127.0.0.1:$L1/" 2>/dev/null)" = hello ] && { ok=1; break; }
  sleep 0.2
done
[ -n "$ok" ] || fail "forward did not come back after the connection was cut: $(cat "$WORK/fwd.err")"
alive "$FWD" || fail "forward ended when its connection was cut"

# Ctrl-C ends it: exit 130, and its end is in the history.
kill -INT "$FWD"
rc=0; wait "$FWD" || rc=$?
[ "$rc" = 130 ] || fail "forward after SIGINT exited $rc"
! curl -fs "http://127.0.0.1:$L1/" >/dev/null 2>&1 || fail "the local port still answers after Ctrl-C"
expect_code 0 sbx history "$ID" -o json
jq -e --arg l "127.0.0.1:$L1" 'any(.[]; .event == "ports.forwarded" and
  (.details.ports | map(.local) | index($l)) != null and .details.until != null)' <<<"$OUT" >/dev/null ||
  fail "no ports.forwarded entry: $OUT"
jq -e 'any(.[]; .event == "ports.forward_ended" and (.details.how | test("SIGINT")))' <<<"$OUT" >/dev/null ||
  fail "no ports.forward_ended entry: $OUT"
expect_code 0 sbx evidence "$ID" -o json
[ "$(jq -c '[.ports[] | .event]' <<<"$OUT")" = '["ports.exposed","ports.forwarded","ports.forward_ended"]' ] ||
  fail "evidence's ports: $(jq -c .ports <<<"$OUT")"

# The sandbox's end ends a forward: destroy it under a running one.
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" forward "$ID" "0:8080" \
  >"$WORK/fwd2.out" 2>"$WORK/fwd2.err" &
FWD2=$!
at_exit "kill $FWD2 2>/dev/null || true"
for _ in $(seq 100); do [ -s "$WORK/fwd2.out" ] && break; sleep 0.1; done
[ -s "$WORK/fwd2.out" ] || fail "the second forward did not start: $(cat "$WORK/fwd2.err")"
expect_code 0 sbx destroy "$ID"
rc=0
for _ in $(seq 100); do alive "$FWD2" || break; sleep 0.1; done
alive "$FWD2" && fail "forward outlived its sandbox"
wait "$FWD2" || rc=$?
[ "$rc" = 0 ] || fail "forward ended by the sandbox's end exited $rc: $(cat "$WORK/fwd2.err")"
expect_contains "$(cat "$WORK/fwd2.err")" "destroyed"
[ -z "$(compose_leftovers "$ID")" ] || fail "the project is left on the host"
expect_code 10 sbx forward "$ID" 8080
echo "ok: compose-ssh ports and forward"
