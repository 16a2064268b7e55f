#!/usr/bin/env bash
# sandboxer run against docker run, in one run, alternating (docs/run.md, "Speed"):
#   1. `sandboxer run --profile bench -- true` against `docker run --rm IMAGE true`: our create,
#      exec and destroy on the Engine API against the docker CLI's one container (target ratio
#      <= 1.0);
#   2. the cost of the lease: a `run -- sleep S` with a short lease, its CPU time and the ledger
#      writes of its renewals, scaled to a minute.
# Needs a Docker Engine with sandboxer/busybox:local (scripts/start-docker.sh).
# Usage: bench/run.sh [path/to/sandboxer] [rounds] [lease seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/sandboxer}")
ROUNDS=${2:-10}
LEASE=${3:-6}
docker image inspect sandboxer/busybox:local >/dev/null
WORK=$(mktemp -d)
trap '"$BIN" --state-dir "$WORK/state" --profiles-dir "$WORK/profiles" destroy --all --yes >/dev/null 2>&1 || true
      rm -rf "$WORK"' EXIT
. bench/lib.sh
write_docker_bench_profile "$WORK"
SBX=("$BIN" --state-dir "$WORK/state" --profiles-dir "$WORK/profiles")
"${SBX[@]}" run --profile bench -- true >/dev/null # the ledger exists before the first timing

/usr/bin/python3 - "$ROUNDS" "$LEASE" "$WORK" "${SBX[@]}" <<'PY'
import json, os, resource, statistics, subprocess, sys, time

rounds, lease, work, sbx = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]

def timed(argv):
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start

ours, theirs = [], []
for i in range(rounds):
    pair = [("s", sbx + ["run", "--profile", "bench", "--", "true"]),
            ("d", ["docker", "run", "--rm", "sandboxer/busybox:local", "true"])]
    for who, argv in (pair if i % 2 == 0 else pair[::-1]):
        (ours if who == "s" else theirs).append(timed(argv))
s, d = statistics.median(ours), statistics.median(theirs)
print(f"run -- true, {rounds} rounds (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus)")
print(f"  sandboxer run {s:6.3f} s   docker run --rm {d:6.3f} s   ratio {s / d:.2f}  (target <= 1.00)")

# The engine's floor: the same calls made bare over the Engine API socket (no process to start, no
# ledger), so the ratio above can be read against what the engine itself costs. "exec" is what run
# asks of the engine (create, start, exec, inspect, forced delete); "one-shot" is docker run's own
# sequence (the command as the container's first process: create, start, wait, delete).
import http.client, socket
sock_path = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock").removeprefix("unix://")

class Engine(http.client.HTTPConnection):
    def __init__(self):
        super().__init__("docker", timeout=60)
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(60)
        self.sock.connect(sock_path)

def call(engine, method, path, body=None):
    engine.request(method, "/v1.41" + path, body=None if body is None else json.dumps(body),
                   headers={"Content-Type": "application/json"})
    response = engine.getresponse()
    data = response.read()
    if response.status >= 300:
        raise SystemExit(f"{method} {path}: {response.status} {data[:200]!r}")
    return json.loads(data) if data else None

def bare(one_shot):
    engine = Engine()
    spec = {"Image": "sandboxer/busybox:local", "HostConfig": {"Init": True},
            "Cmd": ["true"] if one_shot else ["sleep", "infinity"]}
    container = call(engine, "POST", "/containers/create", spec)["Id"]
    call(engine, "POST", f"/containers/{container}/start")
    if one_shot:
        call(engine, "POST", f"/containers/{container}/wait")
    else:
        exec_id = call(engine, "POST", f"/containers/{container}/exec", {"Cmd": ["true"]})["Id"]
        call(engine, "POST", f"/exec/{exec_id}/start", {"Detach": False})
        call(engine, "GET", f"/exec/{exec_id}/json")
    call(engine, "DELETE", f"/containers/{container}?v=1&force=1")

def timed_call(function):
    start = time.perf_counter()
    function()
    return time.perf_counter() - start

floor_exec, floor_one_shot, floor_docker = [], [], []
for i in range(rounds):
    floor_exec.append(timed_call(lambda: bare(False)))
    floor_one_shot.append(timed_call(lambda: bare(True)))
    floor_docker.append(timed(["docker", "run", "--rm", "sandboxer/busybox:local", "true"]))
fe, fo, fd = (statistics.median(v) for v in (floor_exec, floor_one_shot, floor_docker))
print(f"the engine's floor, bare API calls: exec sequence {fe:6.3f} s (ratio {fe / fd:.2f}), "
      f"one-shot sequence {fo:6.3f} s (ratio {fo / fd:.2f}), docker run --rm {fd:6.3f} s")
print(f"  sandboxer run over the bare exec sequence: {s / fe:.2f} "
      f"({1000 * (s - fe):.0f} ms of process, ledger and events)")

# The lease: a run of 3 leases' length renews every third of its lease: its CPU time, and the
# ledger writes of the renewals (each renewal is one commit; -o json counts them).
seconds = 3 * lease
before = resource.getrusage(resource.RUSAGE_CHILDREN)
start = time.perf_counter()
done = subprocess.run(sbx + ["-o", "json", "run", "--profile", "bench", "--lease", f"{lease}s", "--",
                             "sleep", str(seconds)], check=True, capture_output=True, text=True)
wall = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
renewals = json.loads(done.stdout)["lease"]["renewals"]
per_minute = 60 / wall
print(f"lease {lease}s over a {seconds}s run ({wall:.1f} s): {cpu:.2f} s of CPU in all, create and "
      f"destroy included ({cpu * per_minute:.2f} s a minute); {renewals} renewals, one ledger write "
      f"each ({renewals * per_minute:.1f} a minute; the default 2m lease makes 1.5 a minute)")
PY
