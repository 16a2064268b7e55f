#!/usr/bin/env bash
# schemas/ledger.schema.json describes what sandboxer writes: the goldens, and the files of a real
# run (live document, journal header lines and records) validate against it; a record with a
# field the schema does not know, or without one it requires, does not.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
"$PY" -c 'import jsonschema' 2>/dev/null || skip "python3-jsonschema is missing"

SCHEMA="$SANDBOXER_SOURCE_DIR/schemas/ledger.schema.json"
GOLDEN="$SANDBOXER_SOURCE_DIR/tests/data/golden"

stub_profile dev <<<'  root: '"$WORK/backend"
expect_code 0 sbx create --profile dev --name a --quiet
expect_code 0 sbx exec a -- true
expect_code 0 sbx snapshot a --quiet
expect_code 0 sbx create --profile dev --name b --quiet
expect_code 0 sbx destroy b
stub_profile broken <<<'  fail: { create: 1 }'
expect_code 4 sbx create --profile broken --quiet

cat >"$WORK/validate.py" <<'PY'
import json, sys
import jsonschema

schema = json.load(open(sys.argv[1]))
validator = jsonschema.Draft202012Validator(schema)
jsonschema.Draft202012Validator.check_schema(schema)
record = {"$ref": "#/$defs/record", "$defs": schema["$defs"]}
header = {"$ref": "#/$defs/segment_header", "$defs": schema["$defs"]}
failures = 0

def check(what, instance, against):
    global failures
    errors = list(jsonschema.Draft202012Validator(against).iter_errors(instance))
    for e in errors[:3]:
        print(f"{what}: {'/'.join(map(str, e.absolute_path))}: {e.message}")
    failures += bool(errors)
    return not errors

for kind, path in zip(sys.argv[2::2], sys.argv[3::2]):
    if kind == "document":
        check(path, json.load(open(path)), schema)
    elif kind == "record":
        check(path, json.load(open(path)), record)
    elif kind == "segment":
        lines = open(path).read().splitlines()
        check(f"{path}:1", json.loads(lines[0]), header)
        for n, line in enumerate(lines[1:], 2):
            check(f"{path}:{n}", json.loads(line), record)
    elif kind == "bad-record":  # must be refused
        if check(path, json.load(open(path)), record):
            print(f"{path}: accepted, but should not be")
            failures += 1
        else:
            failures -= 1
sys.exit(1 if failures else 0)
PY

set -- document "$GOLDEN/ledger_v2.json" record "$GOLDEN/journal_record_v2.json" \
  document "$GOLDEN/ledger_v3.json" record "$GOLDEN/journal_record_v3.json" \
  document "$GOLDEN/ledger_v4.json" record "$GOLDEN/journal_record_v4.json" \
  document "$STATE/ledger.json"
for segment in "$STATE"/journal/segment-*.jsonl; do set -- "$@" segment "$segment"; done
jq '. + {secret: "hunter2"}' "$GOLDEN/journal_record_v2.json" >"$WORK/extra.json"
jq 'del(.chain_head)' "$GOLDEN/journal_record_v2.json" >"$WORK/missing.json"
jq '.history[0].event = "teleported"' "$GOLDEN/journal_record_v2.json" >"$WORK/kind.json"
set -- "$@" bad-record "$WORK/extra.json" bad-record "$WORK/missing.json" bad-record "$WORK/kind.json"
"$PY" "$WORK/validate.py" "$SCHEMA" "$@" || fail "the schema and the files disagree (above)"
[ "$(ls "$STATE"/journal/segment-*.jsonl | wc -l)" -ge 1 ] || fail "no journal segment was checked"
echo ok
