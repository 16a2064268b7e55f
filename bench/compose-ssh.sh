#!/usr/bin/env bash
# sandboxer create+destroy of a compose project over ssh, against the same done by hand the usual
# way: `ssh host docker-compose -p X -f - up -d` then `ssh host docker-compose -p X -f - down -v`,
# alternating, in one run, for two compose files of different shapes:
#   two:   two plain services;
#   three: three services, one with a named volume and env, one that depends_on the other two.
# Prints, per shape, the median of each, their ratio (target <= 1.0: one ssh connection per command
# and no extra round trips beat two connections and two compose starts), and the remote commands
# (ssh sessions, from the throwaway sshd's log) one sandboxer create and one destroy cost.
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
. bench/lib.sh
mkdir -p "$WORK/profiles"
cat >"$WORK/profiles/two.yml" <<'YAML'
version: "3.8"
services:
  web: { image: sandboxer/busybox:local, command: ["sleep", "3600"], init: true }
  db: { image: sandboxer/busybox:local, command: ["sleep", "3600"], init: true }
YAML
cat >"$WORK/profiles/three.yml" <<'YAML'
version: "3.8"
services:
  app:
    image: sandboxer/busybox:local
    command: ["sleep", "3600"]
    init: true
    depends_on: [db, cache]
    environment: { ROLE: app, DB: db }
  db:
    image: sandboxer/busybox:local
    command: ["sleep", "3600"]
    init: true
    environment: { ROLE: db, PGDATA: /data }
    volumes: [ "data:/data" ]
  cache: { image: sandboxer/busybox:local, command: ["sleep", "3600"], init: true }
volumes:
  data: {}
YAML
for shape in two three; do
  write_compose_bench_profile "$WORK" "$shape" "$shape.yml"
done

/usr/bin/python3 - "$BIN" "$WORK" "$PAIRS" "$SSH_PORT" "$SSH_USER" "$SSHD_LOG" <<'PY'
import os, statistics, subprocess, sys, time

binary, work, pairs, port, user, sshd_log = sys.argv[1:7]
pairs = int(pairs)
sbx = [binary, "--state-dir", f"{work}/state", "--profiles-dir", f"{work}/profiles"]
ssh = ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={work}/ssh/known_hosts",
       "-i", f"{work}/ssh/client_key", "-o", "IdentitiesOnly=yes", "-p", port, f"{user}@127.0.0.1"]

def sessions():
    # sshd logs one "Starting session" per remote command (LogLevel VERBOSE), multiplexed or not.
    with open(sshd_log, errors="replace") as log:
        return sum("Starting session" in line for line in log)

def timed(argv, stdin=None):
    start = time.perf_counter()
    proc = subprocess.run(argv, input=stdin, capture_output=True, check=False, timeout=300)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed: {proc.stderr.decode(errors='replace')}")
    return (time.perf_counter() - start) * 1000, proc

def counted(argv):
    before = sessions()
    ms, proc = timed(argv)
    time.sleep(0.05)  # sshd writes its log line asynchronously
    return ms, proc, sessions() - before

results = {}
for shape in ("two", "three"):
    compose = open(f"{work}/profiles/{shape}.yml", "rb").read()
    sandboxer, by_hand, create_rt, destroy_rt = [], [], [], []
    for i in range(pairs):
        t1, create, n1 = counted(sbx + ["create", "--profile", shape, "--quiet"])
        t2, _, n2 = counted(sbx + ["destroy", create.stdout.decode().strip(), "--quiet"])
        sandboxer.append(t1 + t2)
        create_rt.append(n1)
        destroy_rt.append(n2)
        project = f"benchhand{os.getpid()}{shape}x{i}"
        t3, _ = timed(ssh + ["docker-compose", "-p", project, "-f", "-", "up", "-d"], compose)
        t4, _ = timed(ssh + ["docker-compose", "-p", project, "-f", "-", "down", "-v"], compose)
        by_hand.append(t3 + t4)
    results[shape] = (statistics.median(sandboxer), statistics.median(by_hand),
                      statistics.median(create_rt), statistics.median(destroy_rt))

print(f"pairs: {pairs}   (load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus)")
for shape, (s, h, c, d) in results.items():
    print(f"[{shape}] sandboxer create+destroy (compose-ssh):  median {s:7.0f} ms"
          f"   (remote commands: create {c:g}, destroy {d:g})")
    print(f"[{shape}] ssh docker-compose up -d + ... down -v:  median {h:7.0f} ms   (2)")
    print(f"[{shape}] ratio sandboxer / by hand:               {s / h:.2f}   (target <= 1.0)")
PY
