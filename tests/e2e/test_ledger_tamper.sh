#!/usr/bin/env bash
# The audit's tamperings of a local ledger (issue 34.4), each caught by `sandboxer ledger verify`
# (exit 8, saying what) and by the checker of docs/evidence.md run with --ledger: the fields a
# record keeps from its creation, its state, its history, whole closed records removed, added,
# reordered or put back in an older copy, and a journal rebuilt by someone who recomputed every
# hash, which only a head kept elsewhere (`sandboxer ledger head`) can catch.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || skip "no /usr/bin/python3"

stub_profile dev <<<'  root: '"$WORK/backend"
for name in a b c d e; do
  expect_code 0 sbx create --profile dev --name "$name" --quiet
  eval "ID_$name=\$OUT"
  expect_code 0 sbx exec "$name" -- true
  expect_code 0 sbx destroy "$name"
done
expect_code 0 sbx create --profile dev --name live --quiet
LIVE=$OUT
expect_code 0 sbx exec live -- true
expect_code 0 sbx ledger head
KEPT=$OUT
[[ $KEPT =~ ^5:sha256:[0-9a-f]{64}$ ]] || fail "ledger head: $KEPT"
expect_code 0 sbx ledger verify --head "$KEPT" -o json
[ "$(jq -r .ok <<<"$OUT")" = true ] && [ "$(jq -r .head <<<"$OUT")" = "$KEPT" ] || fail "verify: $OUT"

sed -n '/^```python$/,/^```$/p' "$SANDBOXER_SOURCE_DIR/docs/evidence.md" | sed '1d;$d' >"$WORK/check.py"
[ "$($PY "$WORK/check.py" --ledger "$STATE" --head "$KEPT")" = ok ] || fail "the checker refuses the ledger"
cp -a "$STATE" "$WORK/good"

# What a forger does to the files: python3 tamper.py OP ARGS (the journal is one segment here).
cat >"$WORK/tamper.py" <<'EOF'
import hashlib, json, os, sys
state, op, args = sys.argv[1], sys.argv[2], sys.argv[3:]
seg = os.path.join(state, "journal", "segment-000001.jsonl")
live_path = os.path.join(state, "ledger.json")
live = json.load(open(live_path, encoding="utf-8"))
header, *lines = open(seg, "rb").read().split(b"\n")[:-1]
def sha(b): return "sha256:" + hashlib.sha256(b).hexdigest()
def digest(v): return sha(json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
def dump(r): return json.dumps(r, separators=(",", ":"), ensure_ascii=False).encode()
def index(id_): return next(i for i, l in enumerate(lines) if json.loads(l)["id"] == id_)
if op == "edit":  # ID PYTHON: r is the closed record
    i = index(args[0]); r = json.loads(lines[i]); exec(args[1]); lines[i] = dump(r)
elif op == "live":  # ID PYTHON: r is the live record
    r = next(x for x in live["sandboxes"] if x["id"] == args[0]); exec(args[1])
elif op == "delete":
    del lines[index(args[0])]
elif op == "swap":
    i, j = index(args[0]), index(args[1]); lines[i], lines[j] = lines[j], lines[i]
elif op == "append-copy":  # an older copy of ID, as it was closed first
    r = json.loads(lines[index(args[0])]); r["history"] = r["history"][:-2]
    r["chain_head"] = digest(r["history"][-1]); r["state"] = r["history"][-1]["to"]
    lines.append(dump(r))
elif op == "header":
    h = json.loads(header); exec(args[0]); header = dump(h)
if "--rechain" in args:  # every journal_prev and the live head recomputed
    running = json.loads(header)["prev"]
    for i, l in enumerate(lines):
        r = json.loads(l); r["journal_prev"] = running; lines[i] = dump(r); running = sha(lines[i])
    live["journal"]["head"], live["journal"]["lines"] = running, len(lines)
open(seg, "wb").write(b"\n".join([header] + lines) + b"\n")
live["journal"]["offset"] = os.path.getsize(seg)
open(live_path, "w", encoding="utf-8").write(json.dumps(live, ensure_ascii=False) + "\n")
EOF
tamper() { "$PY" "$WORK/tamper.py" "$STATE" "$@"; }

COUNT=0
# caught NAME WORDS [--head HEAD]: verify exits 8 saying WORDS, the checker refuses; then the
# good copy comes back.
caught() {
  local name=$1 words=$2 rc=0 said
  shift 2
  expect_code 8 sbx ledger verify "$@"
  expect_contains "$OUT" "$words"
  said=$("$PY" "$WORK/check.py" --ledger "$STATE" "$@") || rc=$?
  [ "$rc" = 1 ] || fail "$name: the checker accepted it ($said)"
  rm -rf "$STATE"
  cp -a "$WORK/good" "$STATE"
  COUNT=$((COUNT + 1))
}

# 1-8. What a closed record keeps from its creation, and its state.
tamper edit "$ID_c" 'r["state"] = "running"'
caught state "its state is running, but its history ends in destroyed"
tamper edit "$ID_c" 'r["owner"]["user"] = "mallory"'
caught owner "its owner differs from the value sealed"
tamper edit "$ID_c" 'r["labels"] = {"team": "other"}'
caught labels "its labels differs from the value sealed"
tamper edit "$ID_c" 'r["profile"]["hash"] = "sha256:" + "0" * 64'
caught profile-hash "its profile differs from the value sealed"
tamper edit "$ID_c" 'r["profile"]["name"] = "prod"'
caught profile-name "its profile differs from the value sealed"
tamper edit "$ID_c" 'r["policy"]["ttl"] = "99h"'
caught policy "its policy differs from the value sealed"
tamper edit "$ID_c" 'r["created_at"] = "2020-01-01T00:00:00Z"'
caught created-at "its created_at differs from the value sealed"
tamper edit "$ID_c" 'r["driver"] = "docker"'
caught driver "its driver differs from the value sealed"
# 9-12. Its history, and what no history entry holds.
tamper edit "$ID_c" 'r["history"][1]["reason"] = "nothing ran"'
caught entry-edited "history[2].prev is"
tamper edit "$ID_c" 'del r["history"][2]'
caught entry-removed "history[2].prev is"
tamper edit "$ID_c" 'r["history"] = r["history"][:2]; r["chain_head"] = digest(r["history"][-1]); r["state"] = r["history"][-1]["to"]'
caught trailing-entries-dropped "journal_prev is"
tamper edit "$ID_c" 'r["backend_id"] = "elsewhere"'
caught backend-id "journal_prev is"
# 13-19. Whole closed records.
tamper delete "$ID_c"
caught record-deleted "journal_prev is"
tamper delete "$ID_e"
caught last-record-deleted "the journal's chain ends after line 4"
tamper swap "$ID_b" "$ID_d"
caught reordered "journal_prev is"
tamper append-copy "$ID_b"
caught older-copy-appended "this copy does not continue the copy before it"
tamper append-copy "$ID_b" --rechain
caught older-copy-appended-rechained "this copy does not continue the copy before it"
tamper edit "$ID_c" 'del r["journal_prev"]'
caught unchained-line "has no journal_prev"
tamper header 'h["prev"] = "sha256:" + "1" * 64'
caught segment-start "journal_prev is"
# 20-22. A live record.
tamper live "$LIVE" 'r["state"] = "failed"'
caught live-state "its state is failed"
tamper live "$LIVE" 'r["history"][0]["actor"] = "x"'
caught live-entry "history[1].prev is"
tamper live "$LIVE" 'r["labels"]["team"] = "x"'
caught live-labels "its labels differs from the value sealed"
# 23-25. A journal rebuilt with every hash recomputed: it holds on its own; the head kept elsewhere
# catches it.
tamper delete "$ID_e" --rechain
expect_code 0 sbx ledger verify
caught last-record-deleted-rechained "but the journal's chain has only 4 line(s)" --head "$KEPT"
tamper edit "$ID_b" 'r["backend_id"] = "elsewhere"' --rechain
expect_code 0 sbx ledger verify
caught rebuilt "the kept head $KEPT is not on the journal's chain" --head "$KEPT"
caught foreign-head "is not on the journal's chain" --head "5:sha256:$(printf '%064d' 7)"
[ "$COUNT" -ge 22 ] || fail "only $COUNT tamperings"

# The kept head stays good as the ledger goes on, and a bad one is a usage error.
expect_code 0 sbx destroy live
expect_code 0 sbx ledger verify --head "$KEPT"
expect_code 2 sbx ledger verify --head "sha256:abc"
expect_contains "$ERR" "is not a head printed by 'sandboxer ledger head'"
[ "$($PY "$WORK/check.py" --ledger "$STATE" --head "$KEPT")" = ok ] || fail "the checker after a destroy"
echo "ok: $COUNT tamperings caught"
