# Shared by the docker benches: the profile both measure with, so that they measure the same thing.
# write_docker_bench_profile DIR: writes DIR/profiles/bench.yaml.
write_docker_bench_profile() {
  mkdir -p "$1/profiles"
  cat >"$1/profiles/bench.yaml" <<'YAML'
driver: docker
ttl: { default: 30m }
docker: { image: sandboxer/busybox:local, command: [sleep, infinity], pull: never, stop_timeout: 0s }
YAML
}

# write_compose_bench_profile DIR NAME COMPOSE_FILE: writes DIR/profiles/NAME.yaml, a compose-ssh
# profile on the throwaway sshd (scripts/throwaway-sshd.sh: $SSH_PORT, $SSH_USER, keys in DIR/ssh).
write_compose_bench_profile() {
  cat >"$1/profiles/$2.yaml" <<YAML
driver: compose-ssh
ttl: { default: 30m }
compose-ssh:
  host: 127.0.0.1
  port: $SSH_PORT
  user: $SSH_USER
  identity_file: $1/ssh/client_key
  known_hosts: $1/ssh/known_hosts
  compose_file: $3
YAML
}

# Ends what a bench with a throwaway PostgreSQL made: the cluster it started ($PG_DIR, or by
# $PG_PID if pg_ctl cannot), then $WORK. A connection keeper that the last command started may be
# coming up in a state dir: once its place is gone it leaves (docs/fleet.md).
stop_postgres_and_work() {
  if [ -n "${PG_PID:-}" ]; then
    scripts/throwaway-postgres.sh stop "$PG_DIR" immediate >/dev/null 2>&1 ||
      kill "$PG_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK" 2>/dev/null || { sleep 1; rm -rf "$WORK"; }
}
