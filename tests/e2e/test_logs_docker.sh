#!/usr/bin/env bash
# `sandboxer logs` against a real Docker Engine: the container's main process's output, both
# streams apart, --tail, --since, -o json, and -f that ends by itself when the container stops.
. "$(dirname "$0")/lib.sh"
require_docker

# The main process prints a line on stderr, then (a second later: the engine reads the two pipes
# apart, so only time orders them) three on stdout, then "late" after a pause, then ends: a
# stopped container keeps its logs until it is removed.
cat >"$PROFILES/talker.yaml" <<'EOF2'
driver: docker
ttl: { default: 30m, max: 2h }
docker:
  image: sandboxer/busybox:local
  command: [sh, -c, "echo to-err >&2; sleep 1; echo line-1; echo line-2; echo line-3; sleep 6; echo late"]
  pull: never
  network: none
EOF2

LEDGER_ID=""
cleanup() {
  if [ -n "$LEDGER_ID" ]; then
    docker ps -aq --filter "label=sandboxer.ledger=$LEDGER_ID" | xargs -r docker rm -f >/dev/null
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

expect_code 0 sbx create --profile talker -o json
ID=$(jq -r .id <<<"$OUT")
LEDGER_ID=$(jq -r .ledger_id "$STATE/ledger.json")
HISTORY=$(record "$ID" '.history | length')
sleep 3
# A time after the first lines and before "late", for --since.
SINCE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
sleep 1

# Text: stdout lines on stdout, stderr lines on stderr, in order.
expect_code 0 sbx logs "$ID"
[ "$OUT" = $'line-1\nline-2\nline-3' ] || fail "logs stdout: $OUT"
[ "$ERR" = "to-err" ] || fail "logs stderr: $ERR"

# --tail counts lines of both streams, the last ones.
expect_code 0 sbx logs --tail 1 "$ID"
[ "$OUT" = "line-3" ] && [ -z "$ERR" ] || fail "logs --tail 1: $OUT / $ERR"

# -o json: one {time, stream, line} a line.
expect_code 0 sbx logs "$ID" -o json
[ "$(wc -l <<<"$OUT")" -eq 4 ] || fail "logs -o json: $OUT"
jq -e -s 'map(.stream) == ["stderr", "stdout", "stdout", "stdout"]
  and (map(.line) == ["to-err", "line-1", "line-2", "line-3"])
  and all(.time | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$"))' <<<"$OUT" >/dev/null \
  || fail "logs -o json: $OUT"

# -f: what is there, then the rest as it comes, and it ends when the container stops (bounded
# here by `timeout`: a follow that never ended would exit 124).
expect_code 0 timeout 60 "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" logs -f "$ID"
[ "$OUT" = $'line-1\nline-2\nline-3\nlate' ] || fail "logs -f: $OUT"

# --since: only what came after it, as a time and as a duration.
expect_code 0 sbx logs --since "$SINCE" "$ID"
[ "$OUT" = "late" ] && [ -z "$ERR" ] || fail "logs --since $SINCE: $OUT / $ERR"
expect_code 0 sbx logs --since 1h "$ID"
[ "$(wc -l <<<"$OUT")" -eq 4 ] || fail "logs --since 1h: $OUT"
expect_code 2 sbx logs --since yesterday "$ID"
expect_contains "$ERR" "--since \"yesterday\""

# Read-only: no history entry, no event.
[ "$(record "$ID" '.history | length')" -eq "$HISTORY" ] || fail "logs wrote history: $(record "$ID" '.history')"

# A destroyed sandbox's logs went with it (3), as did those of one that never was.
expect_code 0 sbx destroy "$ID"
expect_code 3 sbx logs "$ID"
expect_contains "$ERR" "is destroyed"
expect_code 3 sbx logs sbx-nosuchthing0
echo "ok"
