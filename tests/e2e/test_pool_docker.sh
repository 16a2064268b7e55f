#!/usr/bin/env bash
# Warm pools on a real Docker Engine (docs/pools.md): members are running containers with the
# ownership labels; a claim hands over one of them (same container, the claim's name, labels and
# TTL in the ledger) and exec works in it; a container removed behind our back is found dead at
# claim and destroyed, and the create goes on cold (-v says so); reap --dry-run lists the fill and
# reap makes it; an edited profile's members are recycled; destroy leaves no container.
. "$(dirname "$0")/lib.sh"
require_docker
command -v jq >/dev/null || skip "jq is missing"
containers() { docker ps -aq --filter label=team=e2e-pool; }
at_exit 'containers | xargs -r docker rm -f >/dev/null 2>&1'
cat >"$PROFILES/warm.yaml" <<'EOF'
driver: docker
ttl: { default: 10m }
labels: { team: e2e-pool }
pool: { size: 2, max_age: 1h }
docker: { image: sandboxer/busybox:local, pull: never, stop_timeout: 0s, command: [sleep, infinity] }
EOF
pooled() { ledger_jq -r '[.sandboxes[] | select(.state == "pooled")] | sort_by(.created_at) | .[].id'; }

expect_code 0 sbx pool fill --profile warm -o json
[ "$(jq -r '.[0] | "\(.made) \(.errors | length)"' <<<"$OUT")" = "2 0" ] || fail "pool fill: $OUT"
MEMBERS=($(pooled))
[ "${#MEMBERS[@]}" = 2 ] || fail "members: ${MEMBERS[*]}"
for id in "${MEMBERS[@]}"; do
  [ "$(docker inspect -f '{{.State.Running}} {{index .Config.Labels "sandboxer.id"}}' \
    "$(record "$id" .backend_id)")" = "true $id" ] || fail "member $id's container"
done
expect_code 0 sbx list -q
[ -z "$OUT" ] || fail "list shows members: $OUT"

# The claim: the oldest member's container, with the claim's name, labels and deadline.
expect_code 0 sbx create --profile warm --name job --label run=42 -o json
[ "$(jq -r '"\(.id) \(.state) \(.name) \(.labels.run)"' <<<"$OUT")" = "${MEMBERS[0]} running job 42" ] ||
  fail "the claim: $OUT"
[ "$(record "${MEMBERS[0]}" '[.history[].event] | join(" ")')" = "created pooled claimed" ] ||
  fail "history: $(record "${MEMBERS[0]}" '[.history[].event]')"
expect_code 0 sbx exec job -- sh -c 'echo $SANDBOXER_ID; cat /proc/1/cmdline | tr "\0" " "'
[ "$(head -1 <<<"$OUT")" = "${MEMBERS[0]}" ] || fail "exec in the claimed member: $OUT"
expect_contains "$OUT" "sleep infinity"
expect_code 0 sbx list -l run=42 -q
[ "$OUT" = "${MEMBERS[0]}" ] || fail "list by the claim's label: $OUT"

# A member whose container went: destroyed at claim, the create goes on cold.
docker rm -f "$(record "${MEMBERS[1]}" .backend_id)" >/dev/null
expect_code 0 sbx -v create --profile warm --name cold -o json
COLD=$(jq -r .id <<<"$OUT")
[ "$COLD" != "${MEMBERS[1]}" ] && [ "$(jq -r .pool <<<"$OUT")" = null ] || fail "cold create: $OUT"
expect_contains "$ERR" "pool member dead at claim"
expect_contains "$ERR" "cold create"
[ "$(record "${MEMBERS[1]}" .state)" = destroyed ] || fail "the dead member: $(record "${MEMBERS[1]}" .state)"

# reap: a dry run lists the fill, the run makes it.
expect_code 0 sbx reap --dry-run -o json
expect_contains "$(jq -r '.items[] | select(.action == "fill") | .reason' <<<"$OUT")" "would make 2"
[ -z "$(pooled)" ] || fail "a dry run made members"
expect_code 0 sbx reap -o json
[ "$(jq -r .filled <<<"$OUT")" = 2 ] || fail "reap's refill: $OUT"
OLD=($(pooled))

# An edited profile (another command): its members are recycled by the next fill.
sed -i 's/command: \[sleep, infinity\]/command: [sleep, "3600"]/' "$PROFILES/warm.yaml"
expect_code 0 sbx pool status -o json
[ "$(jq -r '.[0] | "\(.ready) \(.stale)"' <<<"$OUT")" = "0 2" ] || fail "stale members: $OUT"
expect_code 0 sbx pool fill -o json
[ "$(jq -r '.[0] | "\(.recycled) \(.made)"' <<<"$OUT")" = "2 2" ] || fail "recycling: $OUT"
for id in "${OLD[@]}"; do
  [ -z "$(docker ps -aq --filter "label=sandboxer.id=$id")" ] || fail "recycled $id's container is left"
done
expect_code 0 sbx create --profile warm --name fresh
expect_code 0 sbx exec fresh -- sh -c 'tr "\0" " " </proc/1/cmdline'
expect_contains "$OUT" "sleep 3600"

expect_code 0 sbx ledger verify
expect_code 0 sbx destroy --all --yes
[ -z "$(containers)" ] || fail "containers left: $(containers)"
