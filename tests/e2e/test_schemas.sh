#!/usr/bin/env bash
# The published schemas (`sandboxer schema NAME`, files under schemas/) describe what sandboxer
# really reads and writes: every shipped profile, every -o json output of a real run, the events
# of its jsonl sink, and the driver protocol traffic of the example drivers validate against them
# (python3-jsonschema). A document that breaks its schema is caught.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
"$PY" -c 'import jsonschema, yaml' 2>/dev/null || skip "python3-jsonschema or python3-yaml is missing"
# The profile schema also goes through a second validator: a jsonschema that resolves references
# through `referencing` (>= 4.18; Debian 12's 4.10 pushes every $id it meets and so misses a $ref
# that points nowhere). The machine image's python3 (pyenv's) has it: docs/profile-format.md,
# "The schema".
PY2=""
for candidate in $(type -ap python3 python3.13 python3.12 python3.11) \
  "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/python3; do
  if "$candidate" -c 'import jsonschema, referencing' 2>/dev/null; then PY2=$candidate; break; fi
done
[ -n "$PY2" ] || skip "no python3 whose jsonschema has referencing (>= 4.18)"
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
jq -e '.properties.stub and .properties.docker and .properties.pydir and ."$defs"["driver-pydir"].properties.root' \
  "$S/profile.json" >/dev/null || fail "the profile schema lacks a driver's section"
jq -e '.properties.driver | tostring | contains("\"pydir\"") and contains("\"stub\"")' "$S/profile.json" \
  >/dev/null || fail "the profile schema's driver does not list the drivers"
expect_code 3 sbx schema lst
expect_contains "$ERR" "did you mean 'list'?"
# A $id starts a schema resource only where a schema stands: in $defs, a driver's section is one;
# anywhere else (under a keyword that is not a schema) it is not, and the refs inside it resolve
# against the root (what python-jsonschema 4.18+ refused on modal profiles).
jq -e '[paths(type == "object" and has("$id")) | select(length > 0 and (length != 2 or .[0] != "$defs"))]
  | if length == 0 then true else error("$id below the root at \(map(join("/")))") end' \
  "$S/profile.json" >/dev/null || fail "a \$id where no schema resource can start"

to_json() { "$PY" -c 'import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)' "$1"; }
# both SCHEMA FILE...: every FILE is valid in both validators.
both() { "$PY" "$VALIDATE" "$@" && "$PY2" "$VALIDATE" "$@"; }
# neither SCHEMA FILE...: every FILE is invalid in both (and neither validator broke on the schema).
neither() { "$PY" "$VALIDATE" --invalid "$@" && "$PY2" "$VALIDATE" --invalid "$@"; }

# Every shipped profile, as written (YAML) and as resolved.
for file in "$SANDBOXER_SOURCE_DIR"/profiles/*.yaml; do
  to_json "$file" >"$WORK/out/profile-$(basename "$file" .yaml).json"
done
both "$S/profile.json" "$WORK"/out/profile-*.json || fail "a shipped profile"

# Wrong profiles that sandboxer refuses fail in both validators; each has a right twin, the same
# file with @ replaced by a value sandboxer takes, which passes (so each fails for its one value).
mkdir -p "$WORK/good" "$WORK/bad"
touch "$WORK/good/c.compose" "$WORK/bad/c.compose"
case_of() { # NAME GOOD BAD TEMPLATE
  sed "s|@|$2|" <<<"$4" >"$WORK/good/$1.yaml"
  sed "s|@|$3|" <<<"$4" >"$WORK/bad/$1.yaml"
}
case_of ttl-unit 45m 45mins $'driver: stub\nttl: @'
case_of ttl-max 2h '2 hours' $'driver: stub\nttl: { default: 30m, max: @ }'
case_of ttl-zero 1s 0s $'driver: stub\nttl: @'
case_of driver-typo stub dokcer $'driver: @\nttl: 30m'
case_of modal-timeout 2h '2 hours' $'driver: modal\nmodal: { image: x, timeout: @ }'
case_of docker-stop 10s '10 secs' $'driver: docker\ndocker: { image: x, stop_timeout: @ }'
case_of compose-ssh-command 500ms '5 sec' \
  $'driver: compose-ssh\ncompose-ssh: { host: h, compose_file: c.compose, command_timeout: @ }'
# External drivers' schemas are resources too: the first to claim an $id keeps it, a second one
# with the same $id gets its own (two resources cannot share one), and the "#/$defs/n" of each
# resolves inside itself (n is an integer for ida, text for idb).
mkdir -p "$WORK/drivers"
for name in ida idb; do
  [ "$name" = ida ] && n_type=integer || n_type=string
  cat >"$WORK/drivers/sandboxer-driver-$name" <<EOF2
#!/usr/bin/env python3
import sys
sys.path.insert(0, "$SANDBOXER_SOURCE_DIR/tests/data/drivers")
import pydir_variant
pydir = pydir_variant.load("$name")
initialize = pydir.METHODS["initialize"]
def with_schema(params):
    result = initialize(params)
    result["schema"] = {"\$id": "https://example.test/shared.schema.json", "type": "object",
                        "properties": {"n": {"\$ref": "#/\$defs/n"}},
                        "\$defs": {"n": {"type": "$n_type"}}}
    return result
pydir.METHODS["initialize"] = with_schema
pydir.main()
EOF2
  chmod +x "$WORK/drivers/sandboxer-driver-$name"
done
SANDBOXER_DRIVER_PATH="$WORK/drivers" expect_code 0 sbx schema profile
printf '%s\n' "$OUT" >"$S/profile-ids.json"
expect_contains "$ERR" "driver idb's schema \$id \"https://example.test/shared.schema.json\" replaced"
jq -e '."$defs"["driver-ida"]."$id" == "https://example.test/shared.schema.json"
  and ."$defs"["driver-idb"]."$id" == "https://sandboxer.dev/schemas/drivers/idb.schema.json"' \
  "$S/profile-ids.json" >/dev/null || fail "external drivers' \$id"
printf 'driver: ida\nida: { n: 1 }\nidb: { n: x }\n' >"$WORK/good/ids.yaml"
printf 'driver: ida\nida: { n: x }\n' >"$WORK/bad/ida.yaml"
printf 'driver: idb\nidb: { n: 1 }\n' >"$WORK/bad/idb.yaml"
for file in "$WORK"/good/ids.yaml "$WORK"/bad/id?.yaml; do to_json "$file" >"${file%.yaml}.json"; done
both "$S/profile-ids.json" "$WORK/good/ids.json" || fail "external drivers' sections"
neither "$S/profile-ids.json" "$WORK"/bad/id?.json || fail "a wrong external section passed"
rm "$WORK"/good/ids.* "$WORK"/bad/id?.*

# Files are validated as written: a value from ${VAR} is checked after expansion, by sandboxer.
printf 'driver: ${DRIVER:-stub}\nttl: { default: "${TTL:-30m}", max: 2h }\n' >"$WORK/good/expanded.yaml"
for file in "$WORK"/good/*.yaml "$WORK"/bad/*.yaml; do to_json "$file" >"${file%.yaml}.json"; done
for file in "$WORK"/good/*.yaml; do
  sbx profiles validate "$file" >/dev/null || fail "sandboxer refuses the right twin $file"
done
for file in "$WORK"/bad/*.yaml; do
  expect_code 2 sbx profiles validate "$file"
done
both "$S/profile.json" "$WORK"/good/*.json || fail "a right profile"
neither "$S/profile.json" "$WORK"/bad/*.json || fail "a wrong profile passed"

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
out port port a
out list list -a
out history history a
out evidence evidence a
out wait wait a --for running
printf 'copied\n' >"$WORK/copied.txt"
out cp cp --verify "$WORK/copied.txt" a:/
# (-o before the verb: what follows -- is the command's.)
sbx -o json run --profile dev --cp-in "$WORK/copied.txt:/" --cp-out "/copied.txt:$WORK/run-back.txt" \
  -- cat copied.txt >"$WORK/out/run.json" || fail "run -o json"
check run "$WORK/out/run.json"
[ "$(jq -r .stdout.text "$WORK/out/run.json")" = copied ] || fail "run: $(cat "$WORK/out/run.json")"
out destroy destroy --label team=e2e --dry-run
out destroy destroy b
out reap reap --dry-run
out ledger-verify ledger verify
out ledger-head ledger head
out ledger-info ledger info
out events-list events list
out usage usage --by label:team
cat >"$PROFILES/warm.yaml" <<EOF2
driver: stub
pool: { size: 1, max_age: 1h }
events: [ { type: jsonl, path: $WORK/events.jsonl } ]
stub: { root: $WORK/backend }
EOF2
out pool-fill pool fill --profile warm
out pool-status pool status
out create create --profile warm --name from-pool
[ "$(jq -r .pool.claimed_by "$WORK/out/create.json")" != null ] || fail "create did not claim"
out reap reap
[ "$(jq -r .filled "$WORK/out/reap.json")" = 1 ] || fail "reap did not refill the pool"
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
# The copy methods (stat_path, copy_in and copy_out with their chunks), spoken with the stub served
# by the SDK and recorded: every message matches its schema, and the bytes come back.
if [ -n "${SANDBOXER_STUB_EXTERNAL:-}" ]; then
  "$PY" "$SANDBOXER_SOURCE_DIR/tests/e2e/copy_conversation.py" "$SANDBOXER_STUB_EXTERNAL" \
    "$WORK/copyroot" "$WORK/copy-traffic.jsonl" || fail "the copy conversation"
  "$PY" "$VALIDATE" --protocol "$S/driver-protocol.json" "$WORK/copy-traffic.jsonl" \
    || fail "protocol traffic of the copy methods"
  grep -q '\\"stream\\":\\"tar\\"' "$WORK/copy-traffic.jsonl" || fail "no copy_out chunk recorded"
fi
echo "ok"
