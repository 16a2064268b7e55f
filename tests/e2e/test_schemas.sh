#!/usr/bin/env bash
# The published schemas (`sandboxer schema NAME`, files under schemas/) describe what sandboxer
# really reads and writes: every shipped profile, every -o json output of a real run, the events
# of its jsonl sink, and the driver protocol traffic of the example drivers validate against them
# (python3-jsonschema). A document that breaks its schema is caught.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
"$PY" -c 'import jsonschema, yaml' 2>/dev/null || skip "python3-jsonschema or python3-yaml is missing"
VALIDATE="$SANDBOXER_SOURCE_DIR/tests/validate_json.py"
export SANDBOXER_DRIVER_PATH="$SANDBOXER_SOURCE_DIR/tests/data/recording:$SANDBOXER_SOURCE_DIR/examples/python"
export RECORD_TARGET="$SANDBOXER_SOURCE_DIR/examples/python/sandboxer-driver-pydir"
export RECORD_FILE="$WORK/traffic.jsonl"
S="$WORK/schemas"
mkdir -p "$S" "$WORK/out"

# Every name `sandboxer schema` lists is a valid Draft 2020-12 schema; the files under schemas/
# are what the binary prints.
expect_code 0 sbx schema -o json
for name in $(jq -r '.[]' <<<"$OUT"); do
  sbx schema "$name" >"$S/${name//\//_}.json" || fail "schema $name"
done
[ -s "$S/driver-protocol.json" ] && [ -s "$S/drivers-test.json" ] && [ -s "$S/event.json" ] || fail "schemas missing"
cmp <(jq -S . "$S/ledger.json") <(jq -S . "$SANDBOXER_SOURCE_DIR/schemas/ledger.schema.json") \
  || fail "sandboxer schema ledger differs from schemas/ledger.schema.json"
jq -e '.properties.stub and .properties.docker and .properties.pydir and ."$defs".drivers.pydir.properties.root' \
  "$S/profile.json" >/dev/null || fail "the profile schema lacks a driver's section"
expect_code 3 sbx schema lst
expect_contains "$ERR" "did you mean 'list'?"

# Every shipped profile, as written (YAML) and as resolved.
for file in "$SANDBOXER_SOURCE_DIR"/profiles/*.yaml; do
  "$PY" -c 'import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)' "$file" \
    >"$WORK/out/profile-$(basename "$file" .yaml).json"
done
"$PY" "$VALIDATE" "$S/profile.json" "$WORK"/out/profile-*.json || fail "a shipped profile"

# A real run with the stub driver: each output against its schema.
out() { local name=$1; shift; sbx "$@" -o json >"$WORK/out/$name.json" || fail "$*"; check "$name" "$WORK/out/$name.json"; }
check() { "$PY" "$VALIDATE" "$S/$1.json" "$2" || fail "$2 does not match schema $1"; }
cat >"$PROFILES/dev.yaml" <<EOF2
driver: stub
labels: { team: e2e }
events: [ { type: jsonl, path: $WORK/events.jsonl } ]
stub: { root: $WORK/backend }
EOF2
out create create --profile dev --name a
out snapshot snapshot a --name s1
out snapshots snapshots
out restore restore a:s1 --name b
out extend extend a --by 10m
out status status a
out list list -a
out history history a
out evidence evidence a
out destroy destroy b
out reap reap --dry-run
out ledger-verify ledger verify
out ledger-head ledger head
out ledger-info ledger info
out events-list events list
out events-flush events flush
out profiles-list profiles list
out profiles-show profiles show dev
out profiles-validate profiles validate "$PROFILES/dev.yaml"
out drivers drivers
out version version
out drivers-test drivers test --profile dev
"$PY" "$VALIDATE" --lines "$S/event.json" "$WORK/events.jsonl" || fail "an event does not match"
"$PY" "$VALIDATE" "$S/profile.json" <(jq .profile "$WORK/out/profiles-show.json") || fail "a resolved profile"

# The schemas are not blind: a broken document fails.
jq '.state = "sleeping"' "$WORK/out/create.json" >"$WORK/bad.json"
"$PY" "$VALIDATE" "$S/create.json" "$WORK/bad.json" >/dev/null && fail "a bad state passed"
jq '.checks[0].result = "maybe"' "$WORK/out/drivers-test.json" >"$WORK/bad.json"
"$PY" "$VALIDATE" "$S/drivers-test.json" "$WORK/bad.json" >/dev/null && fail "a bad check result passed"

# The driver protocol: the conformance kit's whole conversation with the Python example, and with
# the C++ SDK example when it is built, recorded on the pipe.
record_kit() {
  : >"$RECORD_FILE"
  printf 'driver: recorded\nrecorded: %s\n' "$2" >"$PROFILES/rec.yaml"
  RECORD_TARGET=$1 expect_code 0 sbx drivers test --profile rec -o json
  "$PY" "$VALIDATE" --protocol "$S/driver-protocol.json" "$RECORD_FILE" || fail "protocol traffic of $1"
  grep -q '"method": *"output"\|\\"method\\":\\"output\\"' "$RECORD_FILE" || fail "no output notification recorded"
}
record_kit "$SANDBOXER_SOURCE_DIR/examples/python/sandboxer-driver-pydir" "{ root: $WORK/pydir }"
if [ -n "${SANDBOXER_SAAS_STUB:-}" ]; then
  # saas-stub needs its service: the kit's first create fails without it, which is still traffic
  # worth checking, but the whole conversation needs the fake.
  KEY=k-$$; printf '%s\n' "$KEY" >"$WORK/key"
  python3 "$SANDBOXER_SOURCE_DIR/examples/saas-stub/fake_saas.py" --key-file "$WORK/key" \
    >"$WORK/fake.out" 2>"$WORK/fake.err" &
  FAKE_PID=$!
  trap 'kill "$FAKE_PID" 2>/dev/null || true; wait "$FAKE_PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT
  SAAS_PORT=$(announced_port "$WORK/fake.out" "$WORK/fake.err" "the fake SaaS")
  export SAAS_KEY="$KEY"
  : >"$RECORD_FILE"
  printf 'driver: recorded\nsecrets: { api_key: { env: SAAS_KEY } }\nrecorded: { api_url: "http://127.0.0.1:%s" }\n' \
    "$SAAS_PORT" >"$PROFILES/rec.yaml"
  RECORD_TARGET=$SANDBOXER_SAAS_STUB expect_code 0 sbx drivers test --profile rec -o json
  "$PY" "$VALIDATE" --protocol "$S/driver-protocol.json" "$RECORD_FILE" || fail "protocol traffic of saas-stub"
fi
echo "ok"
