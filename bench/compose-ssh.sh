#!/usr/bin/env bash
# sandboxer create+destroy of a two-service compose project over ssh, against the same done by hand
# the usual way: `ssh host docker-compose -p X -f - up -d` then `ssh host docker-compose -p X -f -
# down`, alternating, in one run; prints the median of each and their ratio (target <= 1.0: one
# ssh connection per command and no extra round trips beat two connections and two compose starts).
# Needs a Docker Engine with sandboxer/busybox:local (scripts/start-docker.sh), docker-compose and
# sshd; starts its own throwaway sshd (scripts/throwaway-sshd.sh), as root.
# Usage: bench/compose-ssh.sh [path/to/sandboxer] [pairs]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/sandboxer}")
PAIRS=${2:-5}
docker image inspect sandboxer/busybox:local >/dev/null
WORK=$(mktemp -d)
SSHD_PID=""
trap '[ -z "$SSHD_PID" ] || kill "$SSHD_PID" 2>/dev/null; rm -rf "$WORK"' EXIT
eval "$(scripts/throwaway-sshd.sh "$WORK/ssh")"
mkdir -p "$WORK/profiles"
cat >"$WORK/profiles/stack.yml" <<'YAML'
version: "3.8"
services:
  web: { image: sandboxer/busybox:local, command: ["sleep", "3600"], init: true }
  db: { image: sandboxer/busybox:local, command: ["sleep", "3600"], init: true }
YAML
cat >"$WORK/profiles/bench.yaml" <<YAML
driver: compose-ssh
ttl: { default: 30m }
compose-ssh:
  host: 127.0.0.1
  port: $SSH_PORT
  user: $SSH_USER
  identity_file: $WORK/ssh/client_key
  known_hosts: $WORK/ssh/known_hosts
  compose_file: stack.yml
YAML

/usr/bin/python3 - "$BIN" "$WORK" "$PAIRS" "$SSH_PORT" "$SSH_USER" <<'PY'
import os, statistics, subprocess, sys, time

binary, work, pairs, port, user = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
sbx = [binary, "--state-dir", f"{work}/state", "--profiles-dir", f"{work}/profiles"]
ssh = ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={work}/ssh/known_hosts",
       "-i", f"{work}/ssh/client_key", "-o", "IdentitiesOnly=yes", "-p", port, f"{user}@127.0.0.1"]
compose = open(f"{work}/profiles/stack.yml", "rb").read()

def timed(argv, stdin=None):
    start = time.perf_counter()
    proc = subprocess.run(argv, input=stdin, capture_output=True, check=False, timeout=300)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed: {proc.stderr.decode(errors='replace')}")
    return (time.perf_counter() - start) * 1000, proc

sandboxer, by_hand = [], []
for i in range(pairs):
    t1, create = timed(sbx + ["create", "--profile", "bench", "--quiet"])
    t2, _ = timed(sbx + ["destroy", create.stdout.decode().strip(), "--quiet"])
    sandboxer.append(t1 + t2)
    project = f"benchhand{os.getpid()}x{i}"
    t3, _ = timed(ssh + ["docker-compose", "-p", project, "-f", "-", "up", "-d"], compose)
    t4, _ = timed(ssh + ["docker-compose", "-p", project, "-f", "-", "down"], compose)
    by_hand.append(t3 + t4)

s, h = statistics.median(sandboxer), statistics.median(by_hand)
print(f"pairs: {pairs}   (load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus)")
print(f"sandboxer create+destroy (compose-ssh):       median {s:7.0f} ms")
print(f"ssh docker-compose up -d + ssh ... down:      median {h:7.0f} ms")
print(f"ratio sandboxer / by hand:                    {s / h:.2f}   (target <= 1.0)")
PY
