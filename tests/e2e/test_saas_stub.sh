#!/usr/bin/env bash
# The C++ SDK example, examples/saas-stub, against its pretend SaaS (fake_saas.py on loopback): it
# passes the conformance kit, sends the key only in its Authorization header, retries the
# service's 503s, and reports a sandbox the service lost as not found.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || skip "python3 is missing"
command -v curl >/dev/null || skip "curl is missing"
: "${SANDBOXER_SAAS_STUB:?set SANDBOXER_SAAS_STUB to the built example driver (CTest does)}"
export SANDBOXER_DRIVER_PATH="$(dirname "$SANDBOXER_SAAS_STUB")"
cd "$WORK"

KEY="saas-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf '%s\n' "$KEY" >"$WORK/key"
python3 "$SANDBOXER_SOURCE_DIR/examples/saas-stub/fake_saas.py" --key-file "$WORK/key" \
  >"$WORK/fake.out" 2>"$WORK/fake.err" &
FAKE_PID=$!
trap 'kill "$FAKE_PID" 2>/dev/null || true; wait "$FAKE_PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT
PORT=$(announced_port "$WORK/fake.out" "$WORK/fake.err" "the fake SaaS")
URL="http://127.0.0.1:$PORT"
control() { curl -sf "$URL/_control/$1" ${2:+-H 'Content-Type: application/json' -d "$2"}; }

export SAAS_KEY="$KEY"
cat >"$PROFILES/saas.yaml" <<EOF2
driver: saas-stub
labels: { team: e2e }
secrets: { api_key: { env: SAAS_KEY } }
saas-stub: { api_url: "$URL", retries: 3 }
EOF2

expect_code 0 sbx drivers test --profile saas -o json
[ "$(jq .failed <<<"$OUT")" = 0 ] || fail "the kit failed: $(jq -c '.checks[] | select(.result == "fail")' <<<"$OUT")"
[ "$(jq .skipped <<<"$OUT")" = 0 ] || fail "the kit skipped: $(jq -c '.checks[] | select(.result == "skip")' <<<"$OUT")"

# Retries: three 503s in a row are absorbed (retries: 3); the service saw each attempt.
expect_code 0 sbx -v create --profile saas --name one -o json
BID=$(jq -r .backend_id <<<"$OUT")
control fail '{"count": 3, "status": 503}' >/dev/null
expect_code 0 sbx -v exec one -- sh -c 'echo retried'
[ "$OUT" = retried ] || fail "exec after 503s printed: $OUT"
expect_contains "$ERR" "-> 503, retrying"
[ "$(control requests | jq '[.[] | select(.status == 503)] | length')" = 3 ] || fail "not 3 attempts failed"
# Four are one too many: the error names the status.
control fail '{"count": 4, "status": 503}' >/dev/null
expect_code 4 sbx exec one -- true
expect_contains "$ERR" "HTTP 503"

# The key travels only in the Authorization header: never in the ledger, the output or the log.
printf '%s\n%s\n' "$OUT" "$ERR" >"$WORK/output"
if grep -rqF "$KEY" "$STATE" "$WORK/output"; then fail "the key leaked"; fi
SAAS_KEY=wrong expect_code 4 sbx create --profile saas
expect_contains "$ERR" "HTTP 401"

# The service lost the sandbox: exec says not found (exit 3), destroy still succeeds.
curl -sf -X DELETE -H "Authorization: Bearer $KEY" "$URL/v1/sandboxes/$BID" >/dev/null
expect_code 3 sbx exec one -- true
expect_contains "$ERR" "no sandbox $BID"
expect_code 0 sbx destroy one
echo "ok"
