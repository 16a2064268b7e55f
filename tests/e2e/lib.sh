# Shared helpers of the end-to-end tests: a fresh state dir and profiles dir per test, the binary
# under test as $SANDBOXER, and small assertions. A test whose component is missing returns 125 to
# be counted as skipped, except under CI=true, where a missing component fails the test: a CI run
# that skipped its Docker or jq tests must not pass.
set -euo pipefail

# skip REASON: skips the test (exit 125), or fails it under CI=true.
skip() {
  if [ "${CI:-}" = true ]; then
    echo "FAIL: $1 (CI=true: a missing component is a failure, not a skip)" >&2
    exit 1
  fi
  echo "skipped: $1"
  exit 125
}

: "${SANDBOXER:?set SANDBOXER to the sandboxer binary (CTest does)}"
command -v jq >/dev/null || skip "jq is missing"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sandboxer-e2e.XXXXXX")
STATE="$WORK/state"
PROFILES="$WORK/profiles"
mkdir -p "$PROFILES"
# A connection keeper that a test's last command started (docs/fleet.md) may be coming up in a
# state dir while it goes: removed again a second later, its place stays gone and it leaves.
remove_work() { rm -rf "$WORK" 2>/dev/null || { sleep 1; rm -rf "$WORK"; }; }
# on_exit: the at_exit commands, then $WORK goes; in the test's own shell only. A subshell that
# the test kills may run the EXIT trap it inherited as it dies (bash catches the terminating
# signals once an EXIT trap is set); it must not stop the test's servers or remove $WORK.
AT_EXIT=""
on_exit() {
  [ "$BASHPID" = "$$" ] || return 0
  eval "$AT_EXIT"
  remove_work
}
trap on_exit EXIT
# at_exit CMD: runs CMD when the test exits (last added first), before $WORK goes.
at_exit() { AT_EXIT="$1; $AT_EXIT"; }

# sbx ARGS...: the binary with this test's state and profiles.
sbx() { "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" "$@"; }

fail() { echo "FAIL: $*" >&2; exit 1; }

# alive PID: the process runs (a zombie waiting for its reaper does not count).
alive() { [ -e "/proc/$1" ] && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]; }

# install_into PREFIX: `cmake --install` of the build under test into PREFIX; fails with its log.
install_into() {
  cmake --install "$(dirname "$SANDBOXER")" --prefix "$1" >"$WORK/install.log" 2>&1 ||
    fail "cmake --install: $(cat "$WORK/install.log")"
}

# require_docker: skips the test (exit 125) unless a Docker Engine answers and has the image that
# scripts/start-docker.sh builds.
require_docker() {
  docker version >/dev/null 2>&1 || skip "no Docker Engine answers"
  docker image inspect sandboxer/busybox:local >/dev/null 2>&1 || skip "no test image sandboxer/busybox:local"
}

# expect_code N CMD...: runs CMD, fails unless it exits with N. Its stdout is in $OUT, stderr in $ERR.
expect_code() {
  local want=$1; shift
  local rc=0
  OUT=$("$@" 2>"$WORK/stderr") || rc=$?
  ERR=$(cat "$WORK/stderr")
  [ "$rc" -eq "$want" ] || fail "expected exit $want, got $rc from: $* (stderr: $ERR)"
}

# expect_contains HAYSTACK NEEDLE
expect_contains() {
  case "$1" in *"$2"*) ;; *) fail "expected to find \"$2\" in: $1" ;; esac
}

# ledger_jq FILTER: runs jq over the ledger as one document: the live file's fields, with
# "sandboxes" holding every record (the closed ones from the journal first, newest copy of each).
ledger_jq() { merged_ledger | jq -r "$@"; }
merged_ledger() {
  {
    cat "$STATE/ledger.json"
    if [ -d "$STATE/journal" ]; then cat "$STATE/journal"/segment-*.jsonl; fi
  } | jq -s '.[0] as $doc | ($doc.sandboxes | map(.id)) as $live
    | [.[1:][] | select(has("id") and has("state"))]
    | reduce .[] as $r ({}; .[$r.id] = $r) | [.[]]
    | map(select(.id as $i | $live | index($i) | not))
    | $doc + {sandboxes: (. + $doc.sandboxes)}'
}

# A stub profile named $1 with extra YAML from stdin appended to its stub section.
stub_profile() {
  local name=$1
  {
    printf 'driver: stub\nttl: { default: 30m, max: 2h }\nlabels: { team: e2e }\nstub:\n'
    cat
  } >"$PROFILES/$name.yaml"
}

# kill_creates_at_random PROFILE ROUNDS [CHECK]: starts `create --profile PROFILE` ROUNDS times and
# SIGKILLs each somewhere between start-up, the intent commit, the backend call and the outcome
# commit, then runs CHECK (a function, given the round). The kill window is as long as one whole
# create takes here: a sanitizer build on a loaded machine is many times slower than a release
# build on an idle one.
kill_creates_at_random() {
  local profile=$1 rounds=$2 check=${3:-true} start window_ms round pid delay_ms
  start=$(date +%s%N)
  sbx create --profile "$profile" --quiet >/dev/null
  window_ms=$((($(date +%s%N) - start) / 1000000))
  for round in $(seq "$rounds"); do
    # Not through the sbx function: a backgrounded function is a subshell, and killing it would
    # leave the real create running on.
    "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" create --profile "$profile" \
      --quiet >/dev/null 2>&1 &
    pid=$!
    delay_ms=$((RANDOM % window_ms))
    sleep "$((delay_ms / 1000)).$(printf '%03d' $((delay_ms % 1000)))"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    "$check" "$round"
  done
}

# expect_exec_forwards_sigint ID: an exec of a command that traps SIGINT, interrupted like a Ctrl-C:
# the signal must reach the command (exit 7 of its trap is sandboxer's exit) and the history must
# record the end with its exit code and the interruption.
expect_exec_forwards_sigint() {
  local id=$1 pid rc=0
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" exec "$id" -- \
    sh -c 'trap "echo got-int; exit 7" INT; echo started; while :; do sleep 0.1; done' \
    >"$WORK/exec-out" 2>"$WORK/exec-err" &
  pid=$!
  for _ in $(seq 200); do grep -q started "$WORK/exec-out" && break; sleep 0.05; done
  kill -INT "$pid"
  wait "$pid" || rc=$?
  [ "$rc" = 7 ] || fail "exec: exit $rc, expected the command's 7 ($(cat "$WORK/exec-err"))"
  expect_contains "$(cat "$WORK/exec-out")" got-int
  local last
  last=$(ledger_jq --arg id "$id" '.sandboxes[] | select(.id == $id) | .history[-1]')
  [ "$(jq -r .details.exec.exit_code <<<"$last")" = 7 ] || fail "no exit code recorded: $last"
  [ "$(jq -r .details.exec.interrupted <<<"$last")" = SIGINT ] ||
    fail "exec end not marked interrupted: $last"
}

# record ID FILTER: jq's FILTER applied to the ledger's record ID.
record() { ledger_jq --arg id "$1" ".sandboxes[] | select(.id == \$id) | $2"; }

# killed_run_reaped PROFILE NAME [RUN_ARGS...]: `run --profile PROFILE --lease 2s --name NAME
# RUN_ARGS -- sleep ${KILLED_SLEEP:-60}` in the background, SIGKILLed once its command runs; after the lease, one
# reap destroys the sandbox and its history says the lease lapsed. $KILLED_ID is the record's id,
# $KILLED_BACKEND_ID the backend's, for the caller to check that nothing is left there.
killed_run_reaped() {
  local profile=$1 name=$2 pid
  shift 2
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" run --profile "$profile" \
    --lease 2s --name "$name" "$@" -- sleep "${KILLED_SLEEP:-60}" >"$WORK/killed-$name.out" 2>&1 &
  pid=$!
  KILLED_ID=""
  for _ in $(seq 1200); do
    KILLED_ID=$(ledger_jq --arg n "$name" \
      '.sandboxes[] | select(.name == $n and any(.history[]; .event == "exec.started")) | .id' \
      2>/dev/null) || true
    [ -n "$KILLED_ID" ] && break
    alive "$pid" || fail "run $name ended before its command ran: $(cat "$WORK/killed-$name.out")"
    sleep 0.05
  done
  [ -n "$KILLED_ID" ] || fail "run $name's command never started: $(cat "$WORK/killed-$name.out")"
  KILLED_BACKEND_ID=$(record "$KILLED_ID" .backend_id)
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || true
  [ "$(record "$KILLED_ID" .state)" = running ] || fail "run $name: the record is not running after SIGKILL"
  sleep 2.5
  expect_code 0 sbx reap --skew 0s
  [ "$(record "$KILLED_ID" .state)" = destroyed ] ||
    fail "reap after the lease left run $name $(record "$KILLED_ID" .state): $OUT $ERR"
  expect_contains "$(record "$KILLED_ID" '[.history[].reason] | join(";")')" lapsed
}

# start_slow_create NAME MADE: `create --profile slow --name NAME -o json` in the background ($PID;
# its stdout and stderr in $WORK/out-NAME and $WORK/err-NAME), returned once its record exists
# ($ID) and `MADE ID` says the backend has made its resource: the create is then in its readiness
# wait.
start_slow_create() {
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" create --profile slow \
    --name "$1" -o json >"$WORK/out-$1" 2>"$WORK/err-$1" &
  PID=$!
  for _ in $(seq 600); do
    ID=$(ledger_jq --arg n "$1" '.sandboxes[] | select(.name == $n) | .id' 2>/dev/null || true)
    [ -n "$ID" ] && "$2" "$ID" && return 0
    sleep 0.05
  done
  fail "create $1 never reached its readiness wait ($(cat "$WORK/err-$1"))"
}

# interrupt_slow_create SIGNAL NAME: sends SIG<SIGNAL> (INT or TERM) to the create that
# start_slow_create NAME started, and checks what every driver owes: exit 128+N, the record failed
# with the interruption in its error and history, and the failed record on stdout.
interrupt_slow_create() {
  local signal=$1 name=$2 rc=0 want=130
  [ "$signal" = TERM ] && want=143
  kill -s "$signal" "$PID"
  wait "$PID" || rc=$?
  [ "$rc" = "$want" ] || fail "SIG$signal: exit $rc, expected $want ($(cat "$WORK/err-$name"))"
  [ "$(record "$ID" .state)" = failed ] || fail "SIG$signal: record is $(record "$ID" .state)"
  expect_contains "$(record "$ID" .error)" "interrupted by SIG$signal"
  [ "$(record "$ID" '.history[-1].details.interrupted')" = "SIG$signal" ] ||
    fail "SIG$signal: history does not say interrupted: $(record "$ID" '.history[-1]')"
  expect_contains "$(cat "$WORK/err-$name")" "interrupted by SIG$signal"
  # Scripts see the failed record on stdout, with its error (issue 14.5).
  [ "$(jq -r .id "$WORK/out-$name")" = "$ID" ] || fail "no record on stdout"
  [ "$(jq -r .state "$WORK/out-$name")" = failed ] || fail "stdout record not failed"
}

# announced_port OUT ERR WHAT: the port a server we started prints as PORT=N on OUT, once it has
# (10 s at most); fails naming WHAT, with its stderr (ERR), if it never does.
announced_port() {
  local port=""
  for _ in $(seq 100); do
    port=$(sed -n 's/^PORT=//p' "$1")
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || fail "$3 did not start: $(cat "$2")"
  echo "$port"
}

# start_fake_e2b: starts tests/fake_e2b/server.py on a loopback port with a fresh API key; sets
# $KEY, $FAKE_PID and $FAKE_URL, and stops the server when the test exits.
start_fake_e2b() {
  KEY="e2b_$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  printf '%s\n' "$KEY" >"$WORK/key"
  python3 "$SANDBOXER_SOURCE_DIR/tests/fake_e2b/server.py" --key-file "$WORK/key" >"$WORK/fake.out" \
    2>"$WORK/fake.err" &
  FAKE_PID=$!
  at_exit 'kill "$FAKE_PID" 2>/dev/null || true; wait "$FAKE_PID" 2>/dev/null || true'
  FAKE_URL="http://127.0.0.1:$(announced_port "$WORK/fake.out" "$WORK/fake.err" "the fake E2B")"
  export FAKE_URL
}

# free_port: a loopback TCP port nobody listens on now.
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_sshd [EXTRA_CONFIG_LINE...]: a throwaway sshd (scripts/throwaway-sshd.sh) on a loopback
# port in front of this machine's dockerd. Sets $SSH_PORT, $SSH_USER, $SSH_DIR (client_key,
# known_hosts), $SSHD_PID and $SSHD_LOG; stops it when the test exits.
start_sshd() {
  command -v docker-compose >/dev/null || skip "docker-compose is missing"
  SSH_DIR=$(mktemp -d "$WORK/ssh.XXXXXX")
  local vars rc=0
  vars=$("$SANDBOXER_SOURCE_DIR/scripts/throwaway-sshd.sh" "$SSH_DIR" "$@") || rc=$?
  [ "$rc" -ne 125 ] || skip "no throwaway sshd here (see above)"
  [ "$rc" -eq 0 ] || fail "the throwaway sshd did not start"
  eval "$vars"
  at_exit "kill $SSHD_PID 2>/dev/null || true"
}

# start_postgres: a throwaway PostgreSQL cluster for this test (scripts/throwaway-postgres.sh):
# sets PG_URL (no password), PG_PORT, PG_PID, PG_SOCKET_DIR, PG_DIR, exports PGPASSFILE, and stops
# the cluster when the test exits. pg_restart [fast|immediate] restarts it (PG_PID changes).
start_postgres() {
  command -v psql >/dev/null || skip "no psql"
  PG_DIR=$(mktemp -d "$WORK/pg.XXXXXX")
  # The server runs as postgres: it must pass through (not read) the test's private directories.
  chmod 711 "$WORK" "$PG_DIR"
  local vars rc=0
  vars=$("$SANDBOXER_SOURCE_DIR/scripts/throwaway-postgres.sh" start "$PG_DIR/cluster") || rc=$?
  [ "$rc" -ne 125 ] || skip "no throwaway PostgreSQL here (see above)"
  [ "$rc" -eq 0 ] || fail "the throwaway PostgreSQL did not start"
  eval "$vars"
  export PGPASSFILE=$PG_PASSFILE
  at_exit '"$SANDBOXER_SOURCE_DIR/scripts/throwaway-postgres.sh" stop "$PG_DIR/cluster" immediate 2>/dev/null || true'
}
# psql_at SQL: one statement on the throwaway PostgreSQL, its rows unaligned, without headers.
psql_at() { psql "$PG_URL" -XAtq -c "$1"; }
# pg_stop [fast|immediate]: stops the throwaway PostgreSQL (pg_restart starts it again).
pg_stop() {
  "$SANDBOXER_SOURCE_DIR/scripts/throwaway-postgres.sh" stop "$PG_DIR/cluster" "${1:-fast}" ||
    fail "the throwaway PostgreSQL did not stop"
}
pg_restart() {
  PG_PID=$("$SANDBOXER_SOURCE_DIR/scripts/throwaway-postgres.sh" restart "$PG_DIR/cluster" "${1:-fast}") ||
    fail "the throwaway PostgreSQL did not restart"
}

# compose_profile NAME COMPOSE_FILE [EXTRA_YAML]: a compose-ssh profile for the sshd of
# start_sshd; COMPOSE_FILE is written as given (relative paths resolve against $PROFILES).
compose_profile() {
  cat >"$PROFILES/$1.yaml" <<EOF2
driver: compose-ssh
ttl: { default: 30m, max: 2h }
compose-ssh:
  host: 127.0.0.1
  port: $SSH_PORT
  user: $SSH_USER
  identity_file: $SSH_DIR/client_key
  known_hosts: $SSH_DIR/known_hosts
  compose_file: $2
${3:-}
EOF2
}

# remove_compose_projects: what the host holds of each project in $PROJECTS, removed (at_exit
# remove_compose_projects, with PROJECTS+=("$ID") after each create).
remove_compose_projects() {
  local p ids
  for p in "${PROJECTS[@]}"; do
    ids=$(docker ps -aq --filter "label=com.docker.compose.project=$p")
    [ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1 || true
    ids=$(docker network ls -q --filter "label=com.docker.compose.project=$p")
    [ -z "$ids" ] || docker network rm $ids >/dev/null 2>&1 || true
  done
}

# compose_leftovers PROJECT: what the host still holds of a compose project (containers, networks,
# volumes), one per line; empty when nothing.
compose_leftovers() {
  docker ps -aq --filter "label=com.docker.compose.project=$1"
  docker network ls -q --filter "label=com.docker.compose.project=$1"
  docker volume ls -q --filter "label=com.docker.compose.project=$1"
}

# modal_profile NAME [LINE...]: $PROFILES/NAME.yaml on the fake started last (start_fake_modal):
# the token from the environment, image debian:12, a 2h lifetime, and each LINE in its modal:
# section.
modal_profile() {
  local name=$1
  shift
  {
    cat <<EOF2
driver: modal
ttl: { default: 30m, max: 4h }
secrets:
  token_id: { env: MODAL_TOKEN_ID }
  token_secret: { env: MODAL_TOKEN_SECRET }
modal:
  image: debian:12
  server_url: $MODAL_FAKE_URL
  timeout: 2h
EOF2
    printf '  %s\n' "$@"
  } >"$PROFILES/$name.yaml"
}

# start_fake_modal [--tls] [FLAGS...]: starts tests/fake_modal (SANDBOXER_FAKE_MODAL) on a loopback
# port with FLAGS and a fresh token pair, exported as MODAL_TOKEN_ID / MODAL_TOKEN_SECRET. Sets
# MODAL_FAKE_URL, FAKE_MODAL_PID and FAKE_MODAL_DIR (its calls.jsonl logs every call), and stops it
# when the test exits. --tls: with a certificate from a throwaway CA, which grpc is told to trust
# through GRPC_DEFAULT_SSL_ROOTS_FILE_PATH (also MODAL_FAKE_CA).
start_fake_modal() {
  [ -n "${SANDBOXER_FAKE_MODAL:-}" ] || skip "the fake Modal server was not built (SANDBOXER_FAKE_MODAL)"
  local tls=""
  if [ "${1:-}" = --tls ]; then
    tls=yes
    shift
  fi
  FAKE_MODAL_DIR=$(mktemp -d "$WORK/modal.XXXXXX")
  MODAL_TOKEN_ID="ak-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  MODAL_TOKEN_SECRET="as-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  export MODAL_TOKEN_ID MODAL_TOKEN_SECRET FAKE_MODAL_DIR
  local args=(--state-dir "$FAKE_MODAL_DIR")
  if [ -n "$tls" ]; then
    command -v openssl >/dev/null || skip "openssl is missing"
    local d="$FAKE_MODAL_DIR"
    openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=sandboxer-test-ca \
      -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$d/server.key" \
      -out "$d/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$d/san.ext"
    openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
      -days 1 -extfile "$d/san.ext" -out "$d/server.pem" 2>/dev/null
    args+=(--tls-cert "$d/server.pem" --tls-key "$d/server.key")
    export GRPC_DEFAULT_SSL_ROOTS_FILE_PATH="$d/ca.pem" MODAL_FAKE_CA="$d/ca.pem"
  fi
  FAKE_MODAL_TOKEN_ID=$MODAL_TOKEN_ID FAKE_MODAL_TOKEN_SECRET=$MODAL_TOKEN_SECRET \
    "$SANDBOXER_FAKE_MODAL" "${args[@]}" "$@" >"$FAKE_MODAL_DIR/out" 2>"$FAKE_MODAL_DIR/err" &
  FAKE_MODAL_PID=$!
  at_exit "kill $FAKE_MODAL_PID 2>/dev/null || true; wait $FAKE_MODAL_PID 2>/dev/null || true"
  local port
  port=$(announced_port "$FAKE_MODAL_DIR/out" "$FAKE_MODAL_DIR/err" "the fake Modal")
  MODAL_FAKE_URL="$([ -n "$tls" ] && echo https || echo http)://127.0.0.1:$port"
  export MODAL_FAKE_URL FAKE_MODAL_PID
}

# tiny_vm_profile NAME [LINE...]: $PROFILES/NAME.yaml booting the tiny VM image (built once per
# build tree by scripts/build-tiny-vm.sh, with this build's guest agent), each LINE ("key: value")
# added to its vm-packer: section in place of the image's own line for that key. The image's
# throwaway ssh key is $SANDBOXER_TINY_VM_DIR/ssh/id_ed25519.
tiny_vm_profile() {
  command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86 is missing"
  command -v packer >/dev/null || skip "packer is missing"
  local dir=${SANDBOXER_TINY_VM_DIR:?} name=$1
  shift
  "$SANDBOXER_SOURCE_DIR/scripts/build-tiny-vm.sh" "$dir" "${SANDBOXER_GUEST_AGENT:?}" ||
    fail "the tiny VM image did not build"
  local line drop=()
  for line in "$@"; do
    drop+=(-e "/^  ${line%%:*}:/d")
  done
  {
    sed -e "s|^  manifest: manifest.json$|  manifest: $dir/manifest.json|" \
      -e "s|^  kernel: vmlinuz$|  kernel: $dir/vmlinuz|" \
      -e "s|^  initrd: initrd.img$|  initrd: $dir/initrd.img|" "${drop[@]}" "$dir/profile.yaml"
    printf '  %s\n' "$@"
  } >"$PROFILES/$name.yaml"
}
