#!/usr/bin/env bash
# `ports:` on a real Docker Engine (docs/ports.md): a busybox httpd in the offline image, its host
# port picked by the engine and read back, reachable, in status/list/port and the history, gone
# after destroy; a host port asked for; bad input refused before anything is made.
. "$(dirname "$0")/lib.sh"
require_docker
command -v curl >/dev/null || skip "curl is missing"
web_profile() {
  local name=$1 ports=$2
  cat >"$PROFILES/$name.yaml" <<EOF2
driver: docker
ttl: { default: 10m }
labels: { team: e2e-ports }
ports: $ports
docker:
  image: sandboxer/busybox:local
  pull: never
  stop_timeout: 0s
  command: [sh, -c, 'mkdir -p /www && echo hello > /www/index.html && exec httpd -f -p 8080 -h /www']
EOF2
}
containers() { docker ps -aq --filter label=team=e2e-ports; }
cleanup() {
  containers | xargs -r docker rm -f >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
# A free host port for the one asked for by number: the kernel's pick, released at once.
FREE=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
web_profile web "[8080, {port: 9090, host_port: $FREE}, 53/udp]"

expect_code 0 sbx create --profile web --name web -o json
CREATED=$OUT
ID=$(jq -r .id <<<"$CREATED")
HOST_PORT=$(jq -r '.ports[] | select(.port == 8080) | .host_port' <<<"$CREATED")
[ "$(jq -r '.ports[] | select(.port == 8080) | "\(.protocol) \(.host) \(.url)"' <<<"$CREATED")" = \
  "tcp 127.0.0.1 tcp://127.0.0.1:$HOST_PORT" ] || fail "create's ports: $CREATED"
[ "$(jq -r '.ports[] | select(.port == 9090) | .host_port' <<<"$CREATED")" = "$FREE" ] ||
  fail "the host port asked for: $CREATED"
[ "$(jq -r '.ports[] | select(.port == 53) | .protocol' <<<"$CREATED")" = udp ] || fail "udp: $CREATED"
# What the engine says is what was recorded.
[ "$(docker port "$ID" 8080/tcp | head -1)" = "127.0.0.1:$HOST_PORT" ] ||
  fail "docker port says $(docker port "$ID" 8080/tcp), the record $HOST_PORT"
# Reachable where it says.
for _ in $(seq 50); do curl -fs "http://127.0.0.1:$HOST_PORT/" >"$WORK/page" 2>/dev/null && break; sleep 0.1; done
[ "$(cat "$WORK/page")" = hello ] || fail "the httpd is not reached at 127.0.0.1:$HOST_PORT"

# port: docker port's form, one port, -o json, and a port it does not expose.
expect_code 0 sbx port web
expect_contains "$OUT" "8080/tcp -> 127.0.0.1:$HOST_PORT"
expect_contains "$OUT" "53/udp -> 127.0.0.1:"
expect_code 0 sbx port web 8080
[ "$OUT" = "127.0.0.1:$HOST_PORT" ] || fail "port web 8080: $OUT"
[ "$(curl -fs "http://$OUT/")" = hello ] || fail "curl http://\$(sandboxer port web 8080)/"
expect_code 0 sbx port web 9090/tcp -o json
[ "$(jq -c '[.[] | .port, .host_port]' <<<"$OUT")" = "[9090,$FREE]" ] || fail "port -o json: $OUT"
expect_code 3 sbx port web 8081
expect_contains "$ERR" "does not expose port 8081/tcp"
expect_code 3 sbx port web 8080/udp
expect_code 2 sbx port web 70000
expect_code 2 sbx port web 80/sctp
# status and list carry them; the history says who exposed what, until when.
expect_code 0 sbx status web -o json
[ "$(jq -c '[.ports[].port] | sort' <<<"$OUT")" = "[53,8080,9090]" ] || fail "status ports: $OUT"
expect_code 0 sbx list -o json
[ "$(jq -r --arg id "$ID" '.[] | select(.id == $id) | .ports | length' <<<"$OUT")" = 3 ] || fail "list ports: $OUT"
EXPOSED=$(record "$ID" '.history[] | select(.event == "ports.exposed")')
[ "$(jq -r '"\(.details.ports | length) \(.details.until != null) \(.actor != "")"' <<<"$EXPOSED")" = "3 true true" ] ||
  fail "the ports.exposed entry: $EXPOSED"

# forward: a relay on this machine, from a local port of the user's choosing to the engine's.
L1=$(free_port)
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" forward web "$L1:8080" -o json \
  >"$WORK/fwd.out" 2>"$WORK/fwd.err" &
FWD=$!
for _ in $(seq 100); do [ -s "$WORK/fwd.out" ] && break; sleep 0.1; done
[ "$(jq -c '[.proxied, .forwards[0].local_port, .forwards[0].to]' "$WORK/fwd.out")" = \
  "[true,$L1,\"tcp://127.0.0.1:$HOST_PORT\"]" ] || fail "forward -o json: $(cat "$WORK/fwd.out" "$WORK/fwd.err")"
for _ in 1 2 3; do # several connections, one after another, through the one relay
  [ "$(curl -fs "http://127.0.0.1:$L1/")" = hello ] || fail "the relay on 127.0.0.1:$L1 did not reach the httpd"
done
expect_code 10 sbx forward web "$L1:8080"
expect_contains "$ERR" "in use by sandboxer"
kill -INT "$FWD"
rc=0; wait "$FWD" || rc=$?
[ "$rc" = 130 ] || fail "forward after SIGINT exited $rc"
[ "$(record "$ID" '[.history[] | select(.event | startswith("ports.forward"))] | map(.event) | join(",")')" = \
  "ports.forwarded,ports.forward_ended" ] || fail "forward's history entries: $(record "$ID" '.history | map(.event)')"

# A host port that is taken: refused at create, naming the port and its holder; nothing made.
BEFORE=$(containers | wc -l)
web_profile taken "[{port: 8080, host_port: $FREE}]"
expect_code 10 sbx create --profile taken
expect_contains "$ERR" "taken.yaml:4"
expect_contains "$ERR" "host port $FREE/tcp on 127.0.0.1 is in use by docker-proxy"
[ "$(containers | wc -l)" = "$BEFORE" ] || fail "a refused create left a container"

# destroy: the ports go with the container.
expect_code 0 sbx destroy web
curl -fs --max-time 2 "http://127.0.0.1:$HOST_PORT/" >/dev/null 2>&1 && fail "the port still answers after destroy"
expect_code 10 sbx port web
expect_contains "$ERR" "destroyed"

# Bad input, each located, nothing made.
bad() {
  local name=$1 ports=$2 want=$3
  web_profile "$name" "$ports"
  expect_code 2 sbx profiles validate "$PROFILES/$name.yaml"
  expect_contains "$ERR" "$name.yaml:4"
  expect_contains "$ERR" "$want"
}
bad zero "[0]" "not a port number from 1 to 65535"
bad big "[{port: 70000}]" "not a port number from 1 to 65535"
bad twice "[8080, {port: 8080}]" "listed twice"
bad proto "[8080/sctp]" "expected tcp or udp"
bad bind "[{port: 8080, bind: localhost}]" "expected an IP address"
bad key "[{port: 8080, hostport: 1}]" "did you mean \"host_port\""
# An address this machine does not have (TEST-NET-1): refused at create, located.
web_profile elsewhere "[{port: 8080, bind: 192.0.2.1}]"
expect_code 2 sbx create --profile elsewhere
expect_contains "$ERR" "elsewhere.yaml:4"
expect_contains "$ERR" "192.0.2.1 is not an address of this machine"
# Every address: allowed, and warned about.
web_profile open "[{port: 8080, bind: 0.0.0.0}]"
expect_code 0 sbx profiles validate "$PROFILES/open.yaml"
expect_contains "$ERR" "warning: "
expect_contains "$ERR" "exposes port 8080/tcp on every network"
[ -z "$(containers)" ] || fail "bad input left containers: $(containers)"
# Readiness (docs/ports.md, "Readiness"): create returns once the port answers from here.
ready_profile() {
  local name=$1 ready=$2 command=$3
  cat >"$PROFILES/$name.yaml" <<EOF2
driver: docker
ttl: { default: 10m }
labels: { team: e2e-ports }
ports: [8080]
ready: $ready
docker:
  image: sandboxer/busybox:local
  pull: never
  stop_timeout: 0s
  command: [sh, -c, '$command']
EOF2
}
LATE='mkdir -p /www && echo late > /www/index.html && sleep 4 && exec httpd -f -p 8080 -h /www'
# Without ready: the same service is not there yet when create returns (what ready is for).
ready_profile unready "~" "$LATE"
expect_code 0 sbx create --profile unready -o json
HP=$(jq -r '.ports[0].host_port' <<<"$OUT")
curl -fs --max-time 1 "http://127.0.0.1:$HP/" >/dev/null 2>&1 &&
  fail "the delayed httpd answered at once: this test cannot tell a wait from none"
expect_code 0 sbx destroy "$(jq -r .id <<<"$OUT")"
# With ready: create returns only once it answers, and says how long that took.
ready_profile slow "{port: 8080, timeout: 30s}" "$LATE"
expect_code 0 sbx create --profile slow -o json
ID=$(jq -r .id <<<"$OUT")
HP=$(jq -r '.ports[0].host_port' <<<"$OUT")
[ "$(curl -fs --max-time 2 "http://127.0.0.1:$HP/")" = late ] ||
  fail "create returned before port 8080 answered at 127.0.0.1:$HP"
[ "$(jq -r .state <<<"$OUT")" = running ] || fail "state after a ready create: $OUT"
expect_code 0 sbx status "$ID" -o json
READY=$(jq -c '.history[] | select(.event == "ready") | .details.port_ready' <<<"$OUT")
[ "$(jq -r '"\(.port) \(.answered) \(.url)"' <<<"$READY")" = "8080 true tcp://127.0.0.1:$HP" ] ||
  fail "the ready entry's port_ready: $READY"
[ "$(jq -r '.after_ms > 1000' <<<"$READY")" = true ] || fail "it did not wait for the late httpd: $READY"
# A restore keeps the policy: it too returns once the port answers.
expect_code 0 sbx snapshot "$ID" --name s1
expect_code 0 sbx restore "$ID:s1" -o json
RID=$(jq -r .id <<<"$OUT")
RHP=$(jq -r '.ports[0].host_port' <<<"$OUT")
[ "$(curl -fs --max-time 2 "http://127.0.0.1:$RHP/")" = late ] ||
  fail "restore returned before port 8080 answered at 127.0.0.1:$RHP"
expect_code 0 sbx status "$RID" -o json
[ "$(jq -r '.history[] | select(.event == "restored") | .details.port_ready.answered' <<<"$OUT")" = true ] ||
  fail "the restored entry's port_ready: $(jq -c '.history' <<<"$OUT")"
expect_code 0 sbx destroy "$RID"
expect_code 0 sbx snapshots rm "$ID:s1"
expect_code 0 sbx destroy "$ID"
# Nothing ever listens: exit 11 after the timeout, the port named, nothing left, the record failed.
ready_profile deaf "{port: 8080, timeout: 3s}" 'exec sleep 600'
expect_code 11 sbx create --profile deaf -o json
expect_contains "$ERR" "port 8080/tcp did not answer at tcp://127.0.0.1:"
expect_contains "$ERR" "within 3s (ready.timeout of profile deaf)"
expect_contains "$ERR" "removed the 1 backend resource(s) it had made"
FID=$(jq -r .id <<<"$OUT")
[ -n "$FID" ] && [ "$FID" != null ] || fail "a failed create -o json prints its record: $OUT"
[ -z "$(docker ps -aq --filter "label=sandboxer.id=$FID")" ] ||
  fail "the create that never got ready left a container: $(docker ps -a --filter "label=sandboxer.id=$FID")"
expect_code 0 sbx status "$FID" -o json
[ "$(jq -r .state <<<"$OUT")" = failed ] || fail "state after the readiness timeout: $OUT"
expect_contains "$(jq -r .error <<<"$OUT")" "port 8080/tcp did not answer"
[ "$(jq -r '.history[-1].details.port_ready | "\(.answered) \(.timeout)"' <<<"$OUT")" = "false 3s" ] ||
  fail "the failed entry's port_ready: $(jq -c '.history[-1]' <<<"$OUT")"
# Bad input, located, nothing made.
ready_profile unexposed "{port: 9090}" 'exec sleep 600'
expect_code 2 sbx create --profile unexposed
expect_contains "$ERR" "unexposed.yaml:5:"
expect_contains "$ERR" "ready.port: port 9090/tcp is not exposed; add it to \`ports:\`"
ready_profile typo "{port: 8080, timout: 5s}" 'exec sleep 600'
expect_code 2 sbx profiles validate "$PROFILES/typo.yaml"
expect_contains "$ERR" "typo.yaml:5:"
expect_contains "$ERR" "did you mean \"timeout\""
[ -z "$(containers)" ] || fail "readiness left containers: $(containers)"
# A driver without the capability refuses, before anything is made.
stub_profile stubbed <<EOF2
  root: $WORK/backend
EOF2
printf 'ports: [8080]\n' >>"$PROFILES/stubbed.yaml"
expect_code 4 sbx create --profile stubbed
expect_contains "$ERR" "exposes ports (\`ports:\`), which driver stub does not support"
[ -z "$(ls "$WORK/backend/sandboxes" 2>/dev/null)" ] || fail "the refused stub create made a sandbox"
echo ok
