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
