#!/usr/bin/env bash
# Sets up and runs the main job: build sandboxer, create a sandbox from the default profile, exec in
# it, snapshot it, restore the snapshot into a new sandbox, and destroy both.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)"

sandboxer() { build/sandboxer --profiles-dir profiles "$@"; }
export SANDBOXER_STATE_DIR=${SANDBOXER_STATE_DIR:-$PWD/build/demo-state}
set -x
ID=$(sandboxer create --profile default -o json | jq -r .id)
sandboxer exec "$ID" -- sh -c 'echo hello from $SANDBOXER_ID > greeting.txt; cat greeting.txt'
SNAP=$(sandboxer snapshot "$ID" --name first -o json | jq -r .id)
COPY=$(sandboxer restore "$SNAP" -o json | jq -r .id)
sandboxer exec "$COPY" -- cat greeting.txt
sandboxer list
sandboxer destroy "$ID" "$COPY"
sandboxer status "$ID"
