# The store conformance suite: one set of checks of what a user sees of the ledger (`history`,
# `evidence`, `ledger verify`, `list`/`list --all`/`status`, `usage` and their -o json, the errors
# of an unknown id, idempotency keys, live names, closed records, tampering), run unchanged on each
# ledger store: the local files (test_store_conformance_local.sh) and PostgreSQL
# (test_store_conformance_pg.sh). docs/fleet.md promises that `ledger verify`, `history` and
# `evidence` "work unchanged" on the shared store; this is where that promise is checked. Not a
# test by itself (the name does not match test_*.sh): the wrappers source it after lib.sh.
#
# A wrapper sets SANDBOXER to the test-clock build (the scenario's times are fixed with
# SANDBOXER_FAKE_NOW) and defines:
#   on_store ARGS...    sandboxer on the store under test (its ledger, $PROFILES)
#   STORE_WHERE         how that store's messages name the ledger (the ledger.json path, the URI)
#   tamper_history ID   (for conformance_tamper) edits record ID's history[1] in the store's own
#                       storage, as a hand edit would, without resealing the chain: the first
#                       letter of its `reason` upper-cased, nothing else changed
# and calls:
#   conformance_scenario DIR   a fixed scenario on a fresh ledger (a lifecycle with execs, an
#                              extend, a snapshot and a restore; a refused name; a destroyed, a
#                              failed, a reaped sandbox; one idempotency key twice; a name reused),
#                              checked as it goes; DIR gets its outputs (-o json, and the history,
#                              evidence, verify and status tables) normalized (see keep below).
#                              The same scenario normalizes to the same files on any store, so the
#                              PostgreSQL wrapper diffs its files against the local store's
#                              (compare_normalized).
#   conformance_tamper         after conformance_scenario, on the same store: a hand-edited
#                              history is reported by `ledger verify` and `evidence` (exit 8).
# Behaviour that differs by design (what `status` without an id says, list's HOST column on a
# shared ledger, where verify locates a problem) is checked by each wrapper, not here.

PY=/usr/bin/python3
[ -x "$PY" ] || skip "no /usr/bin/python3 (the checker of docs/evidence.md)"
sed -n '/^```python$/,/^```$/p' "$SANDBOXER_SOURCE_DIR/docs/evidence.md" | sed '1d;$d' \
  >"$WORK/check_evidence.py"
grep -q "def problem" "$WORK/check_evidence.py" || fail "no checker in docs/evidence.md"

# What docs/json-output.md and docs/evidence.md promise, whatever the store.
RECORD_KEYS='["backend_id","created_at","driver","error","expires_at","id","idempotency_key","labels","max_expires_at","name","owner","ports","profile","restored_from","seconds_left","snapshots","state"]'
STATUS_KEYS='["backend","backend_id","created_at","driver","error","expires_at","history","id","idempotency_key","labels","max_expires_at","name","owner","ports","profile","restored_from","seconds_left","snapshots","state"]'
CREATE_KEYS='["backend_id","created_at","driver","error","expires_at","id","idempotency_key","labels","max_expires_at","name","notices","owner","ports","profile","restored_from","reused","seconds_left","snapshots","state"]'
ENTRY_KEYS='["actor","details","event","event_id","from","prev","reason","time","to"]'
EVIDENCE_KEYS='["chain","copies","event_ids","evidence_version","execs","generated_at","ledger","owner","ports","profile","sandbox","snapshots","transitions"]'
VERIFY_KEYS='["entries","head","kept_head","ledger","ok","problems","records"]'
SNAPSHOT_KEYS='["backend_ref","created_at","driver","id","name","sandbox","size_bytes"]'

# at MINUTE: the clock of the commands that follow, MINUTE (0-59) minutes past 2026-12-02 12:00 UTC.
at() { export SANDBOXER_FAKE_NOW; SANDBOXER_FAKE_NOW=$(printf '2026-12-02T12:%02d:00Z' "$1"); }

# sha256_of: "sha256:" and the hex SHA-256 of stdin.
sha256_of() { printf 'sha256:%s' "$(sha256sum | cut -d' ' -f1)"; }

# expect_keys WHAT JSON WANT: JSON's keys (of the object, or of every item of the array) are WANT.
expect_keys() {
  local got
  got=$(jq -c 'if type == "array" then map(keys) | unique else [keys] end' <<<"$2")
  [ "$got" = "[$3]" ] || fail "$1: keys $got, expected [$3]"
}

# expect_chain ID HISTORY_JSON: the hash chain of docs/evidence.md recomputed here (jq -S -c is
# its canonical form for ASCII text): the first prev hashes {"sandbox":ID}, each next prev the
# entry before. Sets CHAIN_END, the hash of the last entry.
expect_chain() {
  local id=$1 history=$2 i=0 expected entry prevs
  expected=$(printf '{"sandbox":"%s"}' "$id" | sha256_of)
  mapfile -t prevs < <(jq -r '.[].prev' <<<"$history")
  while IFS= read -r entry; do
    [ "${prevs[$i]}" = "$expected" ] ||
      fail "$id history[$i].prev is ${prevs[$i]}, expected $expected"
    expected=$(printf '%s' "$entry" | sha256_of)
    i=$((i + 1))
  done < <(jq -cS '.[]' <<<"$history")
  [ "$i" = "${#prevs[@]}" ] || fail "$id: $i entries hashed, ${#prevs[@]} in its history"
  CHAIN_END=$expected
}

# expect_steps ID HISTORY_JSON STEPS: the history's entries as "event:from>to@minute", one per
# entry, space-separated; and each entry starts where the one before ended.
expect_steps() {
  local got broken keys
  { read -r got; read -r broken; read -r keys; } < <(jq -r '
    ([.[] | "\(.event):\(.from // "-")>\(.to)@\(.time[14:16])"] | join(" ")),
    ([range(1; length) as $i | select(.[$i].from != .[$i - 1].to)] | length),
    (map(keys) | unique | tojson)' <<<"$2")
  [ "$got" = "$3" ] || fail "history of $1:
  got      $got
  expected $3"
  [ "$broken" = 0 ] || fail "history of $1: an entry does not start where the one before ended: $2"
  [ "$keys" = "[$ENTRY_KEYS]" ] || fail "history of $1: keys $keys, expected [$ENTRY_KEYS]"
}

# The scenario's outputs are kept raw as they come (keep), then normalized once the scenario is
# over (normalize_outputs), when every id is known: each sandbox id becomes its role in the
# scenario (sbx-<agent>, sbx-<gone>, ...), the snapshot snp-<s1>, the ledger id ldg-<ledger>, each
# event id the history entry it belongs to (evt-<agent.3>); hashes are numbered in order of first
# appearance in each file, pids and durations masked, the ledger's location replaced by <ledger>.
# So a file does not depend on the order of anything but what it prints itself. A JSON document
# is kept as one line per value, `PATH = VALUE` (the lines diff well); DIR/unordered/ has the same
# with every array sorted, and every table's lines sorted.

# keep NAME CODE ARGS...: on_store ARGS... must exit CODE; its stdout is kept as DIR/raw/NAME
# (.json or .txt), and left in $OUT.
keep() {
  local name=$1 code=$2
  shift 2
  expect_code "$code" on_store "$@"
  printf '%s\n' "$OUT" >"$KEEP_DIR/raw/$name"
}

# normalize_outputs: DIR/raw/* normalized into DIR and DIR/unordered, with the labels of ROLES
# ("id role ..."), SNAP, SNAP2, LEDGER_ID and the histories in DIR/histories/ROLE.json.
normalize_outputs() {
  local names file
  names=$(jq -n -c --arg roles "$ROLES" --arg s "$SNAP" --arg s2 "$SNAP2" --arg l "$LEDGER_ID" '
    ($roles | [splits("\\s+") | select(. != "")] | [range(0; length; 2) as $i | {(.[$i]): "sbx-<\(.[$i + 1])>"}] | add)
    + {($s): "snp-<s1>", ($s2): "snp-<keep>", ($l): "ldg-<ledger>"}
    + reduce inputs as $h ({};
        (input_filename | sub(".*/"; "") | sub("[.]json$"; "")) as $r
        | . + ($h | to_entries | map({key: .value.event_id, value: "evt-<\($r).\(.key)>"}) | from_entries))
  ' "$KEEP_DIR"/histories/*.json)
  mkdir -p "$KEEP_DIR/unordered"
  jq -r --arg where "$STORE_WHERE" --arg state "${STORE_STATE:-$STATE}" --arg work "$WORK" --argjson names "$names" '
    def masked_keys: ["duration_ms", "driver_ms", "duration_seconds", "pid"];
    def ids: "(?<m>(?:sbx|snp|evt|ldg)-[a-z2-7]{12,}|sha256:[0-9a-f]{64})";
    def lines: paths((type != "array" and type != "object") or length == 0) as $p
      | "\($p | map(tostring) | join(".")) = \(getpath($p) | tojson)";
    (input_filename | sub(".*/"; "")) as $f
    | walk(if type == "object" then to_entries | sort_by(.key) | from_entries else . end)
    | walk(if type == "string" then split($where) | join("<ledger>") | split($state) | join("<state>")
             | split($work) | join("<work>")
           else . end)
    | ([.. | strings | scan(ids) | .[0] | select($names[.] == null)]
       | reduce .[] as $s ({}; if has($s) then . else .[$s] = length end)) as $n
    | walk(if type == "string" then
             gsub(ids; $names[.m] // "\(.m | if startswith("sha256:") then "sha256:" else .[0:4] end)#\($n[.m])")
             | gsub(" pid [0-9]+"; " pid N")
           elif type == "object" then
             with_entries(if (.key as $k | masked_keys | index($k)) != null
                             and (.value | type) == "number" then .value = 0 else . end)
           else . end)
    | ("\($f)\t# \($f)", "unordered/\($f)\t# \($f)"),
      (lines | "\($f)\t\(.)"),
      (walk(if type == "array" then sort else . end) | lines | "unordered/\($f)\t\(.)")
  ' "$KEEP_DIR"/raw/*.json | awk -F'\t' -v dir="$KEEP_DIR" '{ print substr($0, length($1) + 2) > (dir "/" $1) }' ||
    fail "the outputs in $KEEP_DIR/raw are not all JSON"
  jq -r 'to_entries[] | "\(.key) \(.value)"' <<<"$names" >"$KEEP_DIR/names.txt"
  for file in "$KEEP_DIR"/raw/*.txt; do
    sed -e "s#$STORE_WHERE#<ledger>#g" -e "s#$WORK#<work>#g" -E -e 's/ pid [0-9]+/ pid N/g' "$file" |
      awk -v names="$KEEP_DIR/names.txt" '
        BEGIN { while ((getline line < names) > 0) { split(line, f, " "); label[f[1]] = f[2] } }
        {
          out = ""
          while (match($0, /(sbx|snp|evt|ldg)-[a-z2-7]+|sha256:[0-9a-f]+/)) {
            m = substr($0, RSTART, RLENGTH)
            if (m in label) r = label[m]
            else {
              if (!(m in seen)) seen[m] = n++
              r = (m ~ /^sha256:/ ? "sha256:" : substr(m, 1, 4)) "#" seen[m]
            }
            out = out substr($0, 1, RSTART - 1) r
            $0 = substr($0, RSTART + RLENGTH)
          }
          print out $0
        }' | tr -s ' ' >"$KEEP_DIR/${file##*/}"
    sort "$KEEP_DIR/${file##*/}" >"$KEEP_DIR/unordered/${file##*/}"
  done
  rm "$KEEP_DIR/names.txt"
}

conformance_scenario() {
  KEEP_DIR=$1
  mkdir -p "$KEEP_DIR/raw"
  stub_profile dev <<<"  root: $WORK/backend"
  stub_profile broken <<<'  fail: { create: 1 }'

  # --- a lifecycle: create, exec twice, extend, snapshot, restore, destroy
  at 0
  keep create-agent.json 0 create --profile dev --name agent --ttl 45m --label job=e2e -o json
  AGENT=$(jq -r .id <<<"$OUT")
  expect_keys "create -o json" "$OUT" "$CREATE_KEYS"
  [ "$(jq -c '[.name, .state, .labels.job, .expires_at, .max_expires_at, .reused]' <<<"$OUT")" = \
    '["agent","running","e2e","2026-12-02T12:45:00Z","2026-12-02T14:00:00Z",false]' ] ||
    fail "create: $OUT"
  at 1
  expect_code 3 on_store exec agent -- sh -c 'echo hi; exit 3'
  [ "$OUT" = hi ] || fail "exec: stdout $OUT"
  at 2
  expect_code 0 on_store exec "$AGENT" -- true
  at 3
  keep extend-agent.json 0 extend agent --by 10m -o json
  [ "$(jq -r .expires_at <<<"$OUT")" = 2026-12-02T12:55:00Z ] || fail "extend: $OUT"
  at 4
  keep snapshot.json 0 snapshot agent --name s1 -o json
  SNAP=$(jq -r .id <<<"$OUT")
  expect_keys "snapshot -o json" "$OUT" "$SNAPSHOT_KEYS"
  [ "$(jq -r '.sandbox + " " + .name' <<<"$OUT")" = "$AGENT s1" ] || fail "snapshot: $OUT"
  at 5
  keep restore-copy.json 0 restore agent:s1 --name copy -o json
  COPY=$(jq -r .id <<<"$OUT")
  [ "$(jq -c '[.name, .state, .restored_from, .expires_at]' <<<"$OUT")" = \
    "[\"copy\",\"running\",\"$SNAP\",\"2026-12-02T12:50:00Z\"]" ] || fail "restore: $OUT"

  # --- a name is unique among live records
  at 6
  expect_code 10 on_store create --profile dev --name copy --quiet
  expect_contains "$ERR" "the name \"copy\" is taken by $COPY (running)"

  # --- closed records: destroyed without snapshots, and a failed create
  at 7
  expect_code 0 on_store create --profile dev --name gone --quiet
  GONE=$OUT
  keep destroy-gone.json 0 destroy gone -o json
  [ "$(jq -c . <<<"$OUT")" = "[{\"error\":null,\"id\":\"$GONE\",\"state\":\"destroyed\"}]" ] ||
    fail "destroy -o json: $OUT"
  at 8
  keep create-broken.json 4 create --profile broken --name broken -o json
  BROKEN=$(jq -r .id <<<"$OUT")
  [ "$(jq -r .state <<<"$OUT")" = failed ] || fail "a failed create: $OUT"
  expect_contains "$(jq -r .error <<<"$OUT")" "injected failure of create"
  expect_contains "$ERR" "injected failure of create"

  # --- one idempotency key, two creates: one sandbox
  at 9
  keep idem-1.json 0 create --profile dev --idempotency-key job-42 -o json
  IDEM=$(jq -r .id <<<"$OUT")
  keep idem-2.json 0 create --profile dev --idempotency-key job-42 -o json
  [ "$(jq -c '[.id, .reused, .idempotency_key]' <<<"$OUT")" = "[\"$IDEM\",true,\"job-42\"]" ] ||
    fail "the same key made another sandbox, or did not say reused: $OUT"
  expect_contains "$ERR" "idempotency key matches $IDEM"

  # --- a short TTL, reaped
  at 10
  expect_code 0 on_store create --profile dev --name short --ttl 5m --quiet
  SHORT=$OUT
  at 11
  keep destroy-agent.json 0 destroy agent -o json
  # Destroying what is already destroyed is done (docs/exit-codes.md, issue 14).
  expect_code 0 on_store destroy agent
  at 20
  keep reap.json 0 reap -o json
  [ "$(jq -c '[.destroyed, .failures, [.items[] | .id + " " + .outcome]]' <<<"$OUT")" = \
    "[1,0,[\"$SHORT destroyed\"]]" ] || fail "reap: $OUT"
  LEDGER_ID=$(jq -r .ledger_id <<<"$OUT")

  # --- a closed record's key passes to the next create; a closed record's name is free again
  at 21
  expect_code 0 on_store destroy "$IDEM"
  keep idem-3.json 0 create --profile dev --idempotency-key job-42 -o json
  IDEM2=$(jq -r .id <<<"$OUT")
  [ "$IDEM2" != "$IDEM" ] && [ "$(jq -r .reused <<<"$OUT")" = false ] ||
    fail "a destroyed sandbox's key still answered: $OUT"
  at 22
  expect_code 0 on_store create --profile dev --name agent --quiet
  AGENT2=$OUT
  # Two closed records of one name: the first keeps a snapshot (so the local store keeps it in
  # ledger.json), the second went to the journal; the name answers with the newer.
  at 23
  expect_code 0 on_store create --profile dev --name twin --quiet
  TWIN1=$OUT
  expect_code 0 on_store snapshot twin --name keep --quiet
  SNAP2=$OUT
  expect_code 0 on_store destroy twin
  at 24
  expect_code 0 on_store create --profile dev --name twin --quiet
  TWIN2=$OUT
  expect_code 0 on_store destroy twin

  # --- what the ledger holds now, at one instant
  at 30
  # The ledger alone (--no-backend): what the store holds, not what the backends say.
  keep list.json 0 list --no-backend -o json
  expect_keys "list -o json" "$OUT" "$RECORD_KEYS"
  [ "$(jq -c '[.[] | .name + " " + .state]' <<<"$OUT")" = \
    "[\"copy running\",\"$IDEM2 running\",\"agent running\"]" ] || fail "list: $OUT"
  [ "$(jq -c '[.[].seconds_left]' <<<"$OUT")" = '[1200,1260,1320]' ] ||
    fail "list seconds_left: $(jq -c '[.[].seconds_left]' <<<"$OUT")"
  keep list-all.json 0 list --all --no-backend -o json
  ALL=$OUT
  expect_keys "list --all -o json" "$OUT" "$RECORD_KEYS"
  [ "$(jq -c 'map(.id) | sort' <<<"$OUT")" = \
    "$(jq -nc --arg a "$AGENT" --arg b "$COPY" --arg c "$GONE" --arg d "$BROKEN" --arg e "$IDEM" \
      --arg f "$SHORT" --arg g "$IDEM2" --arg h "$AGENT2" --arg i "$TWIN1" --arg j "$TWIN2" \
      '[$a,$b,$c,$d,$e,$f,$g,$h,$i,$j] | sort')" ] || fail "list --all does not hold the ten records: $OUT"
  [ "$(jq -c 'map(.state) | group_by(.) | map("\(.[0])=\(length)")' <<<"$OUT")" = \
    '["destroyed=6","failed=1","running=3"]' ] || fail "list --all states: $OUT"
  keep list-destroyed.json 0 list --all --state destroyed -o json
  [ "$(jq -c 'map(.id) | sort' <<<"$OUT")" = \
    "$(jq -nc --arg a "$AGENT" --arg c "$GONE" --arg e "$IDEM" --arg f "$SHORT" --arg i "$TWIN1" \
      --arg j "$TWIN2" '[$a,$c,$e,$f,$i,$j] | sort')" ] ||
    fail "list --all --state destroyed: $OUT"
  keep list-label.json 0 list --all --no-backend --label job=e2e -o json
  # A restore keeps its snapshot's sandbox's labels.
  [ "$(jq -c 'map(.id)' <<<"$OUT")" = "[\"$AGENT\",\"$COPY\"]" ] || fail "list --label: $OUT"
  keep list-name.json 0 list --all --no-backend --name agent -o json
  [ "$(jq -c 'map(.id) | sort' <<<"$OUT")" = "$(jq -nc --arg a "$AGENT" --arg b "$AGENT2" '[$a,$b] | sort')" ] ||
    fail "list --all --name agent: $OUT"
  keep list-ids.txt 0 list --all -q
  [ "$(sort <<<"$OUT")" = "$(jq -r '.[].id' <<<"$ALL" | sort)" ] || fail "list -a -q: $OUT"

  # --- usage (docs/usage.md) over the intervals above, read through the store's window scan:
  # agent 0-11, copy 5-30 (now), idem 9-21, short 10-20, idem2 21-30, agent2 22-30 running; gone,
  # broken, twin and twin closed the minute they were made (counted, no time).
  keep usage.json 0 usage --from 2026-12-02T12:00:00Z --to 2026-12-02T13:00:00Z -o json
  [ "$(jq -c '.total | [.count, .running_seconds, .paused_seconds, .uncosted, .cost]' <<<"$OUT")" = \
    '[10,4500,0,10,{}]' ] || fail "usage: $OUT"
  # Clipped to 12:15-12:25: agent, gone and broken closed before it.
  keep usage-clipped.json 0 usage --from 2026-12-02T12:15:00Z --to 2026-12-02T12:25:00Z --by profile -o json
  [ "$(jq -c '[.total.count, .total.running_seconds, [.groups[] | [.key, .count]]]' <<<"$OUT")" = \
    '[7,1680,[["dev",7]]]' ] || fail "usage from 12:15 to 12:25: $OUT"

  keep status-agent.json 0 status "$AGENT" -o json
  expect_keys "status -o json" "$OUT" "$STATUS_KEYS"
  STATUS_HISTORY=$(jq -c .history <<<"$OUT")
  [ "$(jq -c '[.state, (.snapshots | map(.name)), .expires_at]' <<<"$OUT")" = \
    '["destroyed",["s1"],"2026-12-02T12:55:00Z"]' ] || fail "status: $OUT"
  keep status-copy.json 0 status copy -o json
  expect_keys "status -o json" "$OUT" "$STATUS_KEYS"
  keep status-gone.txt 0 status "$GONE" --no-backend
  expect_contains "$OUT" "destroyed"

  # --- history: text and JSON, every step in order, states chained, the hash chain recomputed
  keep history-agent.json 0 history "$AGENT" -o json
  HISTORY=$OUT
  expect_steps agent "$HISTORY" "created:->creating@00 ready:creating>running@00 \
exec.started:running>running@01 exec.finished:running>running@01 \
exec.started:running>running@02 exec.finished:running>running@02 \
extended:running>running@03 snapshotting:running>snapshotting@04 \
snapshotted:snapshotting>running@04 destroying:running>destroying@11 \
destroyed:destroying>destroyed@11"
  [ "$(jq -c '[.[] | select(.event == "exec.finished") | .details.exec.exit_code]' <<<"$HISTORY")" = '[3,0]' ] ||
    fail "exec exit codes: $HISTORY"
  [ "$(jq -c '.[6].details' <<<"$HISTORY")" = \
    '{"from":"2026-12-02T12:45:00Z","to":"2026-12-02T12:55:00Z"}' ] || fail "extend entry: $HISTORY"
  [ "$(jq -r '.[8].details.snapshot' <<<"$HISTORY")" = "$SNAP" ] || fail "snapshot entry: $HISTORY"
  [ "$(jq '[.[].event_id | select(startswith("evt-"))] | unique | length' <<<"$HISTORY")" = 11 ] ||
    fail "event ids: $HISTORY"
  expect_chain "$AGENT" "$HISTORY"
  AGENT_HEAD=$CHAIN_END
  [ "$STATUS_HISTORY" = "$(jq -c . <<<"$HISTORY")" ] || fail "status and history disagree"
  keep history-agent.txt 0 history "$AGENT"
  [ "$(sed -n 1p <<<"$OUT" | tr -s ' ')" = "TIME EVENT FROM TO ACTOR REASON" ] ||
    fail "history table header: $OUT"
  [ "$(wc -l <<<"$OUT")" = 12 ] || fail "history table: one line per entry expected: $OUT"
  [ "$(tail -n +2 <<<"$OUT" | awk '{print $2}' | paste -sd ' ')" = "$(jq -r 'map(.event) | join(" ")' <<<"$HISTORY")" ] ||
    fail "history table events: $OUT"
  expect_contains "$(grep exec.finished <<<"$OUT" | head -1)" "exec sh exited 3"
  # A name answers with the live record of that name; an id with its own record.
  keep history-agent-name.json 0 history agent -o json
  expect_steps "agent (the second)" "$OUT" "created:->creating@22 ready:creating>running@22"
  keep history-copy.json 0 history copy -o json
  expect_steps copy "$OUT" "created:->creating@05 restored:creating>running@05"
  [ "$(jq -r '.[0].details.snapshot' <<<"$OUT")" = "$SNAP" ] || fail "restore entry: $OUT"
  expect_chain "$COPY" "$OUT"
  # Closed records: by the name they bore last, and by id.
  keep history-gone.json 0 history gone -o json
  expect_steps gone "$OUT" "created:->creating@07 ready:creating>running@07 \
destroying:running>destroying@07 destroyed:destroying>destroyed@07"
  expect_chain "$GONE" "$OUT"
  keep history-broken.json 0 history "$BROKEN" -o json
  expect_steps broken "$OUT" "created:->creating@08 failed:creating>failed@08"
  expect_contains "$(jq -r '.[1].reason' <<<"$OUT")" "injected failure of create"
  keep history-short.json 0 history "$SHORT" -o json
  expect_steps short "$OUT" "created:->creating@10 ready:creating>running@10 \
expired:running>expired@20 destroyed:expired>destroyed@20"
  expect_contains "$(jq -r '.[2].actor' <<<"$OUT")" "reaper ("
  keep history-idem.json 0 history "$IDEM" -o json
  expect_steps idem "$OUT" "created:->creating@09 ready:creating>running@09 \
destroying:running>destroying@21 destroyed:destroying>destroyed@21"
  keep history-twin.json 0 history twin -o json
  expect_steps twin "$OUT" "created:->creating@24 ready:creating>running@24 \
destroying:running>destroying@24 destroyed:destroying>destroyed@24"
  keep history-twin1.json 0 history "$TWIN1" -o json
  expect_steps "twin (the first)" "$OUT" "created:->creating@23 ready:creating>running@23 \
snapshotting:running>snapshotting@23 snapshotted:snapshotting>running@23 \
destroying:running>destroying@23 destroyed:destroying>destroyed@23"

  # --- evidence: the document, checked by docs/evidence.md's own checker
  keep evidence-agent.json 0 evidence "$AGENT" -o json
  printf '%s\n' "$OUT" >"$WORK/evidence.json"
  expect_keys "evidence -o json" "$OUT" "$EVIDENCE_KEYS"
  [ "$("$PY" "$WORK/check_evidence.py" "$WORK/evidence.json")" = ok ] ||
    fail "the checker of docs/evidence.md refuses the evidence: $("$PY" "$WORK/check_evidence.py" "$WORK/evidence.json")"
  [ "$(jq -c .sandbox.history <<<"$OUT")" = "$(jq -c . <<<"$HISTORY")" ] ||
    fail "evidence and history disagree"
  [ "$(jq -c '[.evidence_version, .sandbox.id, .sandbox.state, .chain.verified, .chain.head, .sandbox.chain_head, .generated_at]' <<<"$OUT")" = \
    "[1,\"$AGENT\",\"destroyed\",true,\"$AGENT_HEAD\",\"$AGENT_HEAD\",\"2026-12-02T12:30:00Z\"]" ] ||
    fail "evidence: $(jq -c 'del(.sandbox)' <<<"$OUT")"
  [ "$(jq -c '[.execs[].exit_code]' <<<"$OUT")" = '[3,0]' ] || fail "evidence execs: $OUT"
  [ "$(jq -c '[.transitions[].event]' <<<"$OUT")" = \
    '["created","ready","snapshotting","snapshotted","destroying","destroyed"]' ] ||
    fail "evidence transitions: $(jq -c '.transitions' <<<"$OUT")"
  [ "$(jq -c '[.snapshots[].name]' <<<"$OUT")" = '["s1"]' ] || fail "evidence snapshots"
  [ "$(jq -r .ledger.location <<<"$OUT")" = "$STORE_WHERE" ] || fail "evidence ledger: $(jq -c .ledger <<<"$OUT")"
  [ "$(jq -r .ledger.id <<<"$OUT")" = "$LEDGER_ID" ] || fail "evidence ledger id: $(jq -c .ledger <<<"$OUT")"
  keep evidence-gone.json 0 evidence gone -o json
  printf '%s\n' "$OUT" >"$WORK/evidence.json"
  [ "$("$PY" "$WORK/check_evidence.py" "$WORK/evidence.json")" = ok ] || fail "evidence of gone"
  [ "$(jq -c '[.sandbox.id, .chain.verified]' <<<"$OUT")" = "[\"$GONE\",true]" ] || fail "evidence gone: $OUT"
  keep evidence-twin.json 0 evidence twin -o json
  [ "$(jq -c '[.sandbox.id, .chain.verified, .snapshots]' <<<"$OUT")" = "[\"$TWIN2\",true,[]]" ] ||
    fail "evidence twin: $(jq -c 'del(.sandbox)' <<<"$OUT")"
  keep evidence-broken.json 0 evidence "$BROKEN" -o json
  [ "$(jq -c '[.sandbox.state, .chain.verified]' <<<"$OUT")" = '["failed",true]' ] || fail "evidence broken"
  keep evidence-agent.txt 0 evidence "$AGENT"
  expect_contains "$OUT" "sandbox:      $AGENT (agent)"
  expect_contains "$OUT" "chain head:   $AGENT_HEAD"
  expect_contains "$OUT" "chain:        verified"

  # --- ledger verify: every record, every entry
  ROLES="$AGENT agent $COPY copy $GONE gone $BROKEN broken $IDEM idem $SHORT short $IDEM2 idem2
    $AGENT2 agent2 $TWIN1 twin1 $TWIN2 twin2"
  [ "$(printf '%s\n' $ROLES | paste -d' ' - - | sort | cut -d' ' -f1)" = "$(jq -r '.[].id' <<<"$ALL" | sort)" ] ||
    fail "the roles do not name every record"
  mkdir -p "$KEEP_DIR/histories"
  local id role entries
  while read -r id role; do
    expect_code 0 on_store history "$id" -o json
    printf '%s\n' "$OUT" >"$KEEP_DIR/histories/$role.json"
  done < <(printf '%s %s\n' $ROLES)
  entries=$(jq -n '[inputs | length] | add' "$KEEP_DIR"/histories/*.json)
  keep verify.json 0 ledger verify -o json
  expect_keys "ledger verify -o json" "$OUT" "$VERIFY_KEYS"
  [ "$(jq -c '[.ok, .records, .entries, .problems, .ledger]' <<<"$OUT")" = \
    "[true,10,$entries,[],\"$STORE_WHERE\"]" ] || fail "verify: $OUT"
  [[ $(jq -r .head <<<"$OUT") =~ ^[0-9]+:sha256:[0-9a-f]{64}$ ]] || fail "verify: no head in $OUT"
  keep verify.txt 0 ledger verify
  [ "$(head -n 1 <<<"$OUT")" = "ok:    10 record(s), $entries history entries" ] || fail "verify: $OUT"
  expect_contains "$OUT" "head:  $(jq -r .head "$KEEP_DIR/raw/verify.json")"
  # The chain of closed records (issue 34.4): the head kept now checks out later.
  keep head.json 0 ledger head -o json
  KEPT_HEAD=$(jq -r .head <<<"$OUT")
  expect_code 0 on_store ledger verify --head "$KEPT_HEAD"

  # --- snapshots and events, listed the same way
  keep snapshots.json 0 snapshots -o json
  [ "$(jq -c 'map(.id) | sort' <<<"$OUT")" = "$(jq -nc --arg a "$SNAP" --arg b "$SNAP2" '[$a,$b] | sort')" ] ||
    fail "snapshots: $OUT"
  expect_keys "snapshots -o json" "$OUT" "$SNAPSHOT_KEYS"
  keep events.json 0 events list -o json
  [ "$(jq length <<<"$OUT")" = "$entries" ] || fail "events list: $(jq length <<<"$OUT") events, $entries entries"

  # --- an unknown id or snapshot: exit 3, naming the ledger
  local cmd args
  for cmd in history evidence status destroy "exec:--:true" "snapshot" "extend:--by:1m"; do
    IFS=: read -r -a args <<<"$cmd"
    expect_code 3 on_store "${args[0]}" sbx-aaaaaaaaaaaa "${args[@]:1}"
    expect_contains "$ERR" "no sandbox \"sbx-aaaaaaaaaaaa\" in ledger $STORE_WHERE"
  done
  expect_code 3 on_store history nosuchname -o json
  [ -z "$OUT" ] || fail "history of an unknown name printed: $OUT"
  expect_code 3 on_store restore snp-aaaaaaaaaaaa
  expect_contains "$ERR" "no snapshot \"snp-aaaaaaaaaaaa\" in ledger $STORE_WHERE"
  expect_code 3 on_store restore agent:nosuch
  # A closed record refuses what needs a live one: exit 1, as documented; exec's is 10 (issue 35).
  expect_code 10 on_store exec "$AGENT" -- true
  expect_contains "$ERR" "is destroyed, not running: exec needs a running sandbox"
  expect_code 1 on_store snapshot "$GONE"
  expect_code 1 on_store extend "$GONE" --by 1m
  # Nothing above changed the ledger.
  expect_code 0 on_store list --all --no-backend -o json
  [ "$(jq -c . <<<"$OUT")" = "$(jq -c . <<<"$ALL")" ] || fail "a refused command changed the ledger"
  unset SANDBOXER_FAKE_NOW
  normalize_outputs
}

# The same hand edit of a history, in each store's own storage: `ledger verify` and `evidence` say
# so (exit 8), `evidence` still prints its document, `history` shows what is stored, and records
# that nobody edited still verify. Sets VERIFY_JSON (the last verify's -o json) for the wrapper's
# store-specific checks of where it locates each problem.
conformance_tamper() {
  at 40
  tamper_history "$GONE"
  expect_code 0 on_store history "$GONE" -o json
  [ "$(jq -r '.[1].reason' <<<"$OUT")" = Created ] || fail "the tampered entry: $(jq -c '.[1]' <<<"$OUT")"
  expect_code 8 on_store ledger verify
  expect_contains "$OUT" "BROKEN:   sandbox $GONE history[2]: history[2].prev is "
  expect_contains "$OUT" "history[1] was changed, removed or reordered"
  expect_contains "$OUT" "checked:  10 record(s)"
  expect_contains "$ERR" "ledger $STORE_WHERE does not verify: 1 problem(s); the first: sandbox $GONE history[2]"
  expect_code 8 on_store ledger verify -o json
  [ "$(jq -c '[.ok, .records, (.problems | map([.sandbox, .index]))]' <<<"$OUT")" = \
    "[false,10,[[\"$GONE\",2]]]" ] || fail "verify -o json: $OUT"
  expect_code 8 on_store evidence "$GONE" -o json
  expect_contains "$ERR" "sandbox $GONE: its history's hash chain does not verify"
  [ "$(jq -c '[.sandbox.id, .chain.verified]' <<<"$OUT")" = "[\"$GONE\",false]" ] ||
    fail "evidence of a broken chain: $(jq -c .chain <<<"$OUT")"
  printf '%s\n' "$OUT" >"$WORK/evidence.json"
  local said rc=0
  said=$("$PY" "$WORK/check_evidence.py" "$WORK/evidence.json") || rc=$?
  [ "$rc" = 1 ] || fail "the checker accepted the tampered history ($said)"
  expect_contains "$said" "history[2].prev does not match"
  expect_code 8 on_store evidence gone
  expect_contains "$OUT" "chain:        BROKEN"
  expect_code 0 on_store evidence "$AGENT" -o json
  # A live record edited too (after an exec, so that history[1] is not its last entry): two
  # problems, each named.
  expect_code 0 on_store exec copy -- true
  tamper_history "$COPY"
  expect_code 8 on_store ledger verify -o json
  VERIFY_JSON=$OUT
  [ "$(jq -c '[.ok, (.problems | map([.sandbox, .index]) | sort)]' <<<"$OUT")" = \
    "[false,$(jq -nc --arg a "$GONE" --arg b "$COPY" '[[$a,2],[$b,2]] | sort')]" ] ||
    fail "verify -o json with two edits: $OUT"
  expect_contains "$ERR" "2 problem(s)"
  expect_code 8 on_store evidence copy -o json
  [ "$(jq -r .chain.verified <<<"$OUT")" = false ] || fail "evidence of the edited live record"
  # The ledger still works: listing is not refused, and a record whose chain is broken can still
  # be destroyed (its new entries chain on from its recorded head; the break stays reported).
  expect_code 0 on_store list --all -q
  [ "$(wc -l <<<"$OUT")" = 10 ] || fail "list -a after the edits: $OUT"
  expect_code 0 on_store destroy copy
  expect_code 8 on_store ledger verify
  unset SANDBOXER_FAKE_NOW
}

# compare_normalized [--unordered] A B: two runs of the scenario gave the same normalized files,
# with the same contents; a difference is shown and fails the test. --unordered: the same
# contents in any order (every array sorted, every table's lines sorted).
compare_normalized() {
  local sub="" diffs
  if [ "$1" = --unordered ]; then
    sub=/unordered
    shift
  fi
  [ "$(ls "$1$sub"/*.* | wc -l)" -ge 30 ] || fail "only $(ls "$1$sub"/*.* | wc -l) outputs in $1$sub"
  diffs=$(diff -ru -x raw -x histories -x unordered "$1$sub" "$2$sub") || {
    printf '%s\n' "$diffs" | head -n 100 >&2
    fail "the scenario's outputs differ${sub:+ (even in any order)} between $1 and $2 (above)"
  }
}
