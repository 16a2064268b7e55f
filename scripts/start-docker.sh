#!/usr/bin/env bash
# Makes a Docker Engine answer on /var/run/docker.sock for the tests: installs docker.io from Debian
# if needed, starts dockerd in the background if nothing answers, and builds the local test image
# sandboxer/busybox:local with `docker import` from a busybox-static rootfs (no registry is reachable,
# so nothing is ever pulled). When the engine cannot be had it prints a reason and exits 0, so that
# the docker tests skip (exit 125) on a developer's machine; under CI=true it exits 1 instead: a CI
# run without its engine must fail, not pass with its docker tests skipped.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
if ! command -v dockerd >/dev/null || ! command -v busybox >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y -q --no-install-recommends docker.io busybox-static
fi
if ! docker version >/dev/null 2>&1; then
  mkdir -p /tmp/sandboxer-dockerd
  # setsid: the daemon outlives this script, as a service would.
  $SUDO setsid dockerd --host unix:///var/run/docker.sock >/tmp/sandboxer-dockerd/dockerd.log 2>&1 &
  for _ in $(seq 120); do
    docker version >/dev/null 2>&1 && break
    sleep 0.5
  done
  if ! docker version >/dev/null 2>&1; then
    echo "start-docker: dockerd did not come up; see /tmp/sandboxer-dockerd/dockerd.log" >&2
    tail -20 /tmp/sandboxer-dockerd/dockerd.log >&2 || true
    [ "${CI:-}" = true ] && exit 1
    exit 0
  fi
fi
if ! docker image inspect sandboxer/busybox:local >/dev/null 2>&1; then
  root=$(mktemp -d)
  mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/root"
  cp "$(command -v busybox)" "$root/bin/busybox"
  for applet in $("$root/bin/busybox" --list); do
    [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
  done
  echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
  echo 'nobody:x:65534:65534:nobody:/:/bin/false' >>"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
  tar -C "$root" -c . | docker import --change 'CMD ["sh"]' - sandboxer/busybox:local >/dev/null
  rm -rf "$root"
fi
echo "start-docker: engine $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})'), image sandboxer/busybox:local ready"
