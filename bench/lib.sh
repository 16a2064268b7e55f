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
