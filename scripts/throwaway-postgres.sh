#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the fleet ledger's tests and bench: Debian's postgresql
# binaries, initdb as the postgres user in DIR, listening on 127.0.0.1 on a free port and on a
# unix socket in DIR only. Superuser `sandboxer` with a random password (SCRAM), written to
# DIR/pgpass (libpq's PGPASSFILE format, mode 0600, owned by the caller) and never to argv.
#
#   eval "$(scripts/throwaway-postgres.sh start DIR)"  # prints PG_PORT PG_PID PG_URL PG_SOCKET_DIR
#                                                       # PG_PASSFILE PG_DATA (shell assignments)
#   scripts/throwaway-postgres.sh restart DIR [fast|immediate]
#   scripts/throwaway-postgres.sh stop DIR [fast|immediate]
#
# PG_URL has no password: point PGPASSFILE at PG_PASSFILE. The caller stops the cluster (stop, or
# by PG_PID). Exits 125 when it cannot run here (not root, no postgresql, no postgres user).
set -euo pipefail
cannot() { echo "throwaway-postgres: $*" >&2; exit 125; }
[ $# -ge 2 ] || { echo "usage: $0 start|restart|stop DIR [fast|immediate]" >&2; exit 2; }
ACTION=$1
DIR=$(realpath -m "$2")
MODE=${3:-fast}
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$BIN" ] && [ -x "$BIN/initdb" ] || cannot "Debian's postgresql is not installed (scripts/install-deps.sh)"
id postgres >/dev/null 2>&1 || cannot "there is no postgres user (Debian's postgresql makes it)"
[ "$(id -u)" -eq 0 ] || cannot "only root can run initdb as the postgres user"
as_postgres() { runuser -u postgres -- "$@"; }

case "$ACTION" in
stop | restart)
  # -t: bounded; "immediate" is a crash as far as clients can tell (no shutdown checkpoint).
  if [ "$ACTION" = stop ]; then
    as_postgres "$BIN/pg_ctl" -D "$DIR/data" -m "$MODE" -w -t 60 stop >/dev/null
  else
    as_postgres "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -m "$MODE" -w -t 60 restart >/dev/null
    head -1 "$DIR/data/postmaster.pid"
  fi
  exit 0
  ;;
start) ;;
*) echo "usage: $0 start|restart|stop DIR [fast|immediate]" >&2; exit 2 ;;
esac

mkdir -p "$DIR/sock" "$DIR/data"
# The postgres user walks to DIR from the caller's (often mode 0700) temporary directory.
chmod 755 "$DIR" "$(dirname "$DIR")"
chmod 700 "$DIR/data"
install -m 0600 -o postgres /dev/null "$DIR/server.log"
chown postgres: "$DIR/sock" "$DIR/data"
PASSWORD=$(head -c 18 /dev/urandom | base64 | tr '+/' 'xy')
# initdb reads the password from a file postgres can read; it is removed right after.
install -m 0600 -o postgres /dev/null "$DIR/initdb-pw"
printf '%s\n' "$PASSWORD" >"$DIR/initdb-pw"
if ! as_postgres "$BIN/initdb" -D "$DIR/data" -U sandboxer -A scram-sha-256 \
  --pwfile "$DIR/initdb-pw" -E UTF8 --no-locale >"$DIR/initdb.log" 2>&1; then
  rm -f "$DIR/initdb-pw"
  echo "throwaway-postgres: initdb failed: $(tail -3 "$DIR/initdb.log")" >&2
  exit 1
fi
rm -f "$DIR/initdb-pw"
# Only loopback and the socket in DIR; nothing in the server's configuration reaches further.
cat >>"$DIR/data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DIR/sock'
max_connections = 200
EOF
for _ in 1 2 3 4 5; do
  PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  sed -i '/^port = /d' "$DIR/data/postgresql.conf"
  echo "port = $PORT" >>"$DIR/data/postgresql.conf"
  if as_postgres "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 start >/dev/null; then
    umask 077
    printf '127.0.0.1:%s:*:sandboxer:%s\n%s:%s:*:sandboxer:%s\n' \
      "$PORT" "$PASSWORD" "$DIR/sock" "$PORT" "$PASSWORD" >"$DIR/pgpass"
    printf 'PG_PORT=%s\nPG_PID=%s\nPG_URL=%q\nPG_SOCKET_DIR=%q\nPG_PASSFILE=%q\nPG_DATA=%q\n' \
      "$PORT" "$(head -1 "$DIR/data/postmaster.pid")" \
      "postgresql://sandboxer@127.0.0.1:$PORT/postgres" "$DIR/sock" "$DIR/pgpass" "$DIR/data"
    exit 0
  fi
done
echo "throwaway-postgres: the server did not start: $(tail -3 "$DIR/server.log")" >&2
exit 1
