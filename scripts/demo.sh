#!/usr/bin/env bash
# Sets up and runs the main job: build sandboxer, create a sandbox from the default profile, exec in
# it, snapshot it, restore the snapshot into a new sandbox, and destroy both. The default profile is a
# container on the local Docker Engine: start-docker.sh starts dockerd if none answers and builds its
# image offline. The snapshot stays afterwards, as snapshots do: `sandboxer snapshots rm` removes it.
# Only what the job needs is installed and built: the packages that configure and build the
# binary, and the `sandboxer` target; scripts/test.sh installs and builds the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh build
scripts/start-docker.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target sandboxer

sandboxer() { build/sandboxer --profiles-dir profiles "$@"; }
export SANDBOXER_STATE_DIR=${SANDBOXER_STATE_DIR:-$PWD/build/demo-state}
set -x
ID=$(sandboxer create --profile default -o json | jq -r .id)
sandboxer exec "$ID" -- sh -c 'echo hello from $SANDBOXER_ID > greeting.txt; cat greeting.txt'
SNAP=$(sandboxer snapshot "$ID" --name first -o json | jq -r .id)
COPY=$(sandboxer restore "$SNAP" -o json | jq -r .id)
sandboxer exec "$COPY" -- cat greeting.txt
sandboxer list
sandboxer snapshots
sandboxer destroy "$ID" "$COPY"
sandboxer status "$ID"
