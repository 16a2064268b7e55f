#!/usr/bin/env bash
# A busy machine's week as an old version left it: a schema-1 ledger of 100k records (99,990
# destroyed, 10 live). Read-only commands read it as it is; the first change migrates it (keeping
# the old file as ledger.v1.json); an old record's history and evidence come out whole and check;
# the whole ledger verifies; retention then drops whole segments.
# Then schema 2 (live document and journal segments) -> 3: the journal is kept byte for byte, the
# chain's head stays, the next closing begins a schema-3 segment; a newer ledger is refused.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "no /usr/bin/python3"
# The schema this sandboxer writes (LedgerData::k_schema_version).
export NOW=4
stub_profile dev <<<'  root: '"$WORK/backend"
# The size of the old ledger: 100k records, fewer under ASan (the asan test preset sets it), where
# the scale is not what is checked and 100k cost 222 s of a CI run; the last 10 are live.
RECORDS=${SANDBOXER_E2E_LEDGER_RECORDS:-100000}
CLOSED=$((RECORDS - 10))
OLD=sbx-oldrecordaaa
mkdir -m 700 -p "$STATE"

"$PY" - "$STATE/ledger.json" "$OLD" "$RECORDS" <<'PY'
import json, sys

path, old, records = sys.argv[1], sys.argv[2], int(sys.argv[3])
alphabet = "abcdefghijklmnopqrstuvwxyz234567"

def b32(n, width):  # distinct ids, cheaper than random ones
    return "".join(alphabet[(n >> (5 * k)) & 31] for k in range(width))

# Each record is rendered from a template (filled by str.replace: 100k dicts would take seconds).
def template(live, with_events):
    def entry(hour, frm, to, reason, details, event, k):
        e = {"time": f"@DAY@T{hour:02d}:@MIN@:00Z", "from": frm, "to": to,
             "actor": "ci@build-7 pid 4242", "reason": reason, "details": details}
        if with_events:  # entries made since lifecycle events carry their kind and id
            e["event"] = event
            e["event_id"] = "evt-@ID@eventsfixed" + alphabet[k]
        return e
    history = [
        entry(8, None, "creating", "create", {"ttl": "1h", "ttl_max": "4h"}, "created", 0),
        entry(8, "creating", "running", "created", {"duration_ms": 40}, "ready", 1),
        entry(9, "running", "running", "exec make", {"exec": {"argv": ["make", "test"], "tty": False}},
              "exec.started", 2),
        entry(9, "running", "running", "exec make exited 5",
              {"exec": {"argv": ["make", "test"], "tty": False, "exit_code": 5}}, "exec.finished", 3),
    ]
    if not live:
        history += [entry(10, "running", "destroying", "ttl expired", {}, "destroying", 4),
                    entry(10, "destroying", "destroyed", "ttl expired", {}, "destroyed", 5)]
    return json.dumps({
        "id": "sbx-@ID@", "name": "sbx-@ID@", "state": "running" if live else "destroyed",
        "driver": "stub",
        "profile": {"name": "dev", "path": "/etc/sandboxer/dev.yaml", "hash": "sha256:" + "ab" * 32},
        "backend_id": "sbx-@ID@", "created_at": "@DAY@T08:@MIN@:00Z",
        "expires_at": "@DAY@T09:@MIN@:00Z", "max_expires_at": "@DAY@T12:@MIN@:00Z",
        "labels": {"team": "e2e"}, "env": {}, "secret_refs": {},
        "owner": {"user": "ci", "host": "build-7", "pid": 4242, "ci": {"GITHUB_RUN_ID": "@RUN@"}},
        "idempotency_key": None, "restored_from": None, "error": None, "snapshots": [],
        "history": history, "spec": {}, "info": {}}, separators=(",", ":"))

templates = {(live, ev): template(live, ev) for live in (False, True) for ev in (False, True)}

def record(i, short_id, live, with_events):
    return (templates[(live, with_events)].replace("@ID@", short_id)
            .replace("@DAY@", f"2026-11-{1 + i % 7:02d}").replace("@MIN@", f"{i % 60:02d}")
            .replace("@RUN@", str(i)))

parts = [record(1, old[4:], False, False)]  # the old one: from before events
for i in range(2, records + 1):
    parts.append(record(i, b32(i, 12), i > records - 10, i % 2 == 0))
with open(path, "w") as f:
    f.write('{"schema_version":1,"ledger_id":"ldg-migrationtst","event_seq":500000,"sandboxes":[')
    f.write(",".join(parts))
    f.write("]}\n")
PY
chmod 600 "$STATE/ledger.json"
cp "$STATE/ledger.json" "$WORK/v1.json"

# Read-only commands read schema 1 and write nothing.
expect_code 0 sbx list -q
[ "$(wc -l <<<"$OUT")" = 10 ] || fail "live records: $(wc -l <<<"$OUT")"
expect_code 0 sbx history "$OLD" -o json
[ "$(jq length <<<"$OUT")" = 6 ] || fail "history of schema 1: $OUT"
cmp -s "$STATE/ledger.json" "$WORK/v1.json" || fail "a read changed the schema-1 ledger"
[ ! -e "$STATE/journal" ] || fail "a read made the journal"

# The first change migrates.
START=$(date +%s%N)
expect_code 0 sbx create --profile dev --quiet
NEW=$OUT
echo "first create, with the migration of $RECORDS records: $((($(date +%s%N) - START) / 1000000)) ms"
cmp -s "$STATE/ledger.v1.json" "$WORK/v1.json" || fail "ledger.v1.json is not the old file"
[ "$(jq .schema_version "$STATE/ledger.json")" = "$NOW" ] || fail "not migrated"
[ "$(jq '.sandboxes | length' "$STATE/ledger.json")" = 11 ] || fail "live document: not just the live records"
[ "$(jq .closed.destroyed "$STATE/ledger.json")" = "$CLOSED" ] || fail "closed count"
[ "$(ls "$STATE"/journal/segment-*.jsonl | wc -l)" -ge 7 ] || fail "segments: $(ls "$STATE/journal")"
[ "$(stat -c %a "$STATE/ledger.json")" = 600 ] || fail "mode"

# The old record, from before events: its history, typed, and its evidence, checked.
expect_code 0 sbx history "$OLD" -o json
[ "$(jq -c '[.[].event]' <<<"$OUT")" = '["created","ready","exec.started","exec.finished","destroying","destroyed"]' ] ||
  fail "kinds of the old entries: $(jq -c '[.[].event]' <<<"$OUT")"
[ "$(jq -r '.[0].details.ttl' <<<"$OUT")" = 1h ] || fail "the old details are kept"
expect_code 0 sbx evidence "$OLD" -o json
printf '%s\n' "$OUT" >"$WORK/evidence.json"
sed -n '/^```python$/,/^```$/p' "$SANDBOXER_SOURCE_DIR/docs/evidence.md" | sed '1d;$d' >"$WORK/check.py"
[ "$("$PY" "$WORK/check.py" "$WORK/evidence.json")" = ok ] || fail "the evidence of the old record does not check"
[ "$(jq -c '[.execs[].exit_code]' "$WORK/evidence.json")" = "[5]" ] || fail "exec exit code"
[ "$(jq -r '.sandbox.policy.ttl' "$WORK/evidence.json")" = 1h ] || fail "creation policy"
[ "$(jq -r '.owner.ci.GITHUB_RUN_ID' "$WORK/evidence.json")" = 1 ] || fail "CI variables"

# Everything verifies; every record is listed once.
expect_code 0 sbx ledger verify -o json
[ "$(jq .records <<<"$OUT")" = $((RECORDS + 1)) ] || fail "verify: $OUT"
expect_code 0 sbx list -a -q
[ "$(wc -l <<<"$OUT")" = $((RECORDS + 1)) ] || fail "list -a: $(wc -l <<<"$OUT")"
[ "$(sort <<<"$OUT" | uniq -d | wc -l)" = 0 ] || fail "a record listed twice"

# Retention: a week after the last of them, whole segments go, the live ones stay.
SANDBOXER=$SANDBOXER_TESTCLOCK SANDBOXER_FAKE_NOW=2026-12-20T00:00:00Z expect_code 0 sbx reap -o json
[ "$(jq .pruned <<<"$OUT")" = "$CLOSED" ] || fail "pruned: $(jq .pruned <<<"$OUT")"
[ ! -e "$STATE/journal/segment-000001.jsonl" ] || fail "an old segment is still there"
expect_code 0 sbx ledger verify
expect_code 0 sbx status "$NEW" -o json

# ---- Schema 2 -> 3, in a state dir of its own.
STATE="$WORK/state2"
mkdir -m 700 -p "$STATE"
at() { SANDBOXER=$SANDBOXER_TESTCLOCK SANDBOXER_FAKE_NOW=$1 "${@:2}"; }
# Records closed on three days (three segments), and one live: what schema 2 wrote, but for the
# version numbers, set back below (schema 3 adds only what these records do not use).
for d in 01 02 03; do
  at "2026-11-${d}T10:00:00Z" expect_code 0 sbx create --profile dev --name "old-$d" --quiet
  at "2026-11-${d}T10:30:00Z" expect_code 0 sbx destroy "old-$d"
done
at "2026-11-03T11:00:00Z" expect_code 0 sbx create --profile dev --name keep --quiet
"$PY" - "$STATE" <<'PY'
import os, sys
state = sys.argv[1]
def set_back(path, old, new):
    with open(path, "rb") as f:
        text = f.read()
    assert text.startswith(old), (path, text[:40])
    with open(path + ".tmp", "wb") as f:
        f.write(new + text[len(old):])
    os.chmod(path + ".tmp", 0o600)
    os.replace(path + ".tmp", path)
now = os.environ["NOW"].encode()
set_back(f"{state}/ledger.json", b'{"schema_version":' + now + b',', b'{"schema_version":2,')
for name in sorted(os.listdir(f"{state}/journal")):
    set_back(f"{state}/journal/{name}", b'{"sandboxer_journal":' + now + b',',
             b'{"sandboxer_journal":2,')
PY
rm -f "$STATE/ledger.json.bak"
[ "$(ls "$STATE"/journal/segment-*.jsonl | wc -l)" = 3 ] || fail "segments: $(ls "$STATE/journal")"
cp "$STATE/ledger.json" "$WORK/v2.json"
(cd "$STATE/journal" && sha256sum segment-*.jsonl) >"$WORK/v2-segments.sha256"

# Read-only commands read schema 2, journal included, and write nothing.
expect_code 0 sbx list -a -q
[ "$(wc -l <<<"$OUT")" = 4 ] || fail "list -a of schema 2: $OUT"
expect_code 0 sbx history old-01 -o json
[ "$(jq -r '.[-1].event' <<<"$OUT")" = destroyed ] || fail "history from a schema-2 segment: $OUT"
expect_code 0 sbx ledger verify -o json
[ "$(jq .records <<<"$OUT")" = 4 ] || fail "verify of schema 2: $OUT"
expect_code 0 sbx ledger head
HEAD_BEFORE=$OUT
cmp -s "$STATE/ledger.json" "$WORK/v2.json" || fail "a read changed the schema-2 ledger"

# A ledger newer than this sandboxer is refused, and left alone.
mkdir -m 700 "$WORK/state4"
jq -c ".schema_version = $((NOW + 1))" "$WORK/v2.json" >"$WORK/state4/ledger.json"
chmod 600 "$WORK/state4/ledger.json"
expect_code 1 "$SANDBOXER" --state-dir "$WORK/state4" --profiles-dir "$PROFILES" list
expect_contains "$ERR" "has schema_version $((NOW + 1)), newer than this sandboxer understands ($NOW); upgrade sandboxer"
expect_code 1 "$SANDBOXER" --state-dir "$WORK/state4" --profiles-dir "$PROFILES" create --profile dev
[ "$(jq .schema_version "$WORK/state4/ledger.json")" = $((NOW + 1)) ] || fail "the newer ledger was written"

# The first change migrates: the old file kept, the journal untouched, the chain's head the same.
at "2026-11-03T11:10:00Z" expect_code 0 sbx extend keep --by 10m --quiet
cmp -s "$STATE/ledger.v2.json" "$WORK/v2.json" || fail "ledger.v2.json is not the old file"
[ "$(jq .schema_version "$STATE/ledger.json")" = "$NOW" ] || fail "not migrated to $NOW"
(cd "$STATE/journal" && sha256sum -c --quiet "$WORK/v2-segments.sha256") || fail "a schema-2 segment changed"
expect_code 0 sbx ledger head
[ "$OUT" = "$HEAD_BEFORE" ] || fail "the head moved: $HEAD_BEFORE -> $OUT"
expect_code 0 sbx ledger verify -o json
[ "$(jq .records <<<"$OUT")" = 4 ] || fail "verify after the migration: $OUT"
expect_code 0 sbx ledger migrate
expect_contains "$OUT$ERR" "already at schema_version $NOW"

# The next closing begins a schema-3 segment (the same day as the last schema-2 one or not).
at "2026-11-03T12:00:00Z" expect_code 0 sbx destroy keep
[ "$(ls "$STATE"/journal/segment-*.jsonl | wc -l)" = 4 ] || fail "segments: $(ls "$STATE/journal")"
[ "$(head -1 "$STATE/journal/segment-000004.jsonl" | jq .sandboxer_journal)" = "$NOW" ] ||
  fail "the new segment: $(head -1 "$STATE/journal/segment-000004.jsonl")"
(cd "$STATE/journal" && sha256sum -c --quiet "$WORK/v2-segments.sha256") || fail "a schema-2 segment changed"
expect_code 0 sbx ledger verify --head "$HEAD_BEFORE" -o json
[ "$(jq .records <<<"$OUT")" = 4 ] || fail "verify: $OUT"
expect_code 0 sbx list -a -q
[ "$(wc -l <<<"$OUT")" = 4 ] || fail "list -a after: $OUT"
echo ok
