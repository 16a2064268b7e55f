#!/usr/bin/env bash
# reap of N (default 100) expired Docker sandboxes with --parallel 1, 4 and 8, against
# `docker rm -f` of N such containers in one call. Prints each wall time and its ratio to
# `docker rm -f`. The sandboxes are made with sandboxer (30m TTL) and expired by running reap with
# SANDBOXER_FAKE_NOW two hours ahead, which only the test build (sandboxer-testclock) honours.
# Needs a Docker Engine and the image sandboxer/busybox:local (scripts/start-docker.sh makes both).
# Usage: bench/reap.sh [path/to/sandboxer-testclock] [count]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/tests/sandboxer-testclock}")
COUNT=${2:-100}
docker image inspect sandboxer/busybox:local >/dev/null
WORK=$(mktemp -d)
LEDGERS=()
cleanup() {
  for id in "${LEDGERS[@]}"; do
    docker ps -aq --filter "label=sandboxer.ledger=$id" | xargs -r docker rm -f >/dev/null
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/profiles"
cat >"$WORK/profiles/bench.yaml" <<'EOF2'
driver: docker
ttl: { default: 30m }
docker: { image: sandboxer/busybox:local, command: [sleep, infinity], pull: never, stop_timeout: 0s,
          network: none }
EOF2

# fill STATE: COUNT sandboxes, four creates at a time.
fill() {
  local state=$1
  seq "$COUNT" | xargs -P 4 -I{} "$BIN" --state-dir "$state" --profiles-dir "$WORK/profiles" \
    create --profile bench --quiet >/dev/null
  LEDGERS+=("$(jq -r .ledger_id "$state/ledger.json")")
}
now_ms() { date +%s%3N; }
LATER=$(date -u -d '+2 hours' +%Y-%m-%dT%H:%M:%SZ)

declare -A MS
for p in 1 4 8; do
  fill "$WORK/state-$p"
  start=$(now_ms)
  SANDBOXER_FAKE_NOW=$LATER "$BIN" --state-dir "$WORK/state-$p" reap --parallel "$p" --quiet \
    --log-level error >/dev/null
  MS[$p]=$(($(now_ms) - start))
  left=$(docker ps -aq --filter "label=sandboxer.ledger=${LEDGERS[-1]}" | wc -l)
  [ "$left" = 0 ] || { echo "reap --parallel $p left $left containers" >&2; exit 1; }
done

fill "$WORK/state-docker"
ids=$(docker ps -aq --filter "label=sandboxer.ledger=${LEDGERS[-1]}")
start=$(now_ms)
# shellcheck disable=SC2086 # one argument per id
docker rm -f $ids >/dev/null
MS[docker]=$(($(now_ms) - start))

printf '%-28s %9s %8s\n' "$COUNT expired containers" "wall ms" "vs rm -f"
for k in 1 4 8; do
  printf '%-28s %9d %7.2fx\n' "sandboxer reap --parallel $k" "${MS[$k]}" \
    "$(echo "${MS[$k]} / ${MS[docker]}" | bc -l)"
done
printf '%-28s %9d %7.2fx\n' "docker rm -f (one call)" "${MS[docker]}" 1
