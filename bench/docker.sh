#!/usr/bin/env bash
# sandboxer create+destroy against docker run -d + docker rm -f of the same image, alternating, 20
# pairs in one run; prints the median wall time of each, their ratio, and sandboxer's own overhead
# (its wall time minus the time spent in Engine API calls, from its debug log). The target is per
# command, beyond process start-up (docs/drivers/docker.md, "Own overhead"); bench/docker_overhead.sh
# measures it without the engine's noise.
# Needs a Docker Engine and the image sandboxer/busybox:local (scripts/start-docker.sh makes both).
# Usage: bench/docker.sh [path/to/sandboxer] [pairs]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/sandboxer}")
PAIRS=${2:-20}
docker image inspect sandboxer/busybox:local >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
. bench/lib.sh
write_docker_bench_profile "$WORK"

python3 - "$BIN" "$WORK" "$PAIRS" <<'PY'
import re, statistics, subprocess, sys, time

binary, work, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
sbx = [binary, "--state-dir", f"{work}/state", "--profiles-dir", f"{work}/profiles"]
api_ms = re.compile(r"-> \d+ \(([\d.]+) ms\)")
total_ms = re.compile(r"timing: \w+ total ([\d.]+) ms")

def timed(argv):
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    return (time.perf_counter() - start) * 1000, proc

# What any process of this size costs to start on this machine, so that the overhead below can be
# split into "starting a process" and "sandboxer's own work".
startup = statistics.median(timed([binary, "--version"])[0] for _ in range(10))

sandboxer, docker, overhead = [], [], []
in_process = {"create": [], "destroy": []}
for i in range(pairs):
    # sandboxer: create + destroy, with the API calls' own times from the debug log.
    t1, create = timed(sbx + ["-v", "create", "--profile", "bench", "--quiet"])
    t2, destroy = timed(sbx + ["-v", "destroy", create.stdout.strip(), "--quiet"])
    calls = sum(float(m) for m in api_ms.findall(create.stderr + destroy.stderr))
    # Inside each process: from the command's start to its end, minus its API calls.
    for verb, proc in (("create", create), ("destroy", destroy)):
        found = total_ms.search(proc.stderr)
        if not found:
            sys.exit(f"no timing line in the {verb} log:\n{proc.stderr}")
        total = float(found.group(1))
        in_process[verb].append(total - sum(float(m) for m in api_ms.findall(proc.stderr)))
    sandboxer.append(t1 + t2)
    overhead.append(t1 + t2 - calls)
    # docker CLI: the same container life.
    t3, run = timed(["docker", "run", "-d", "--stop-timeout", "0", "sandboxer/busybox:local",
                     "sleep", "infinity"])
    t4, _ = timed(["docker", "rm", "-f", run.stdout.strip()])
    docker.append(t3 + t4)

s, d, o = statistics.median(sandboxer), statistics.median(docker), statistics.median(overhead)
import os
print(f"pairs: {pairs}   (load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus; "
      f"above the cpu count, the ms below are inflated)")
print(f"sandboxer create+destroy  median {s:8.1f} ms")
print(f"docker run -d + rm -f     median {d:8.1f} ms")
print(f"ratio sandboxer/docker           {s / d:8.2f}   (target <= 1.0)")
print(f"sandboxer time outside Engine API calls: median {o:.1f} ms over its 2 processes")
print(f"  of which process start-up (sandboxer --version): 2 x {startup:.1f} ms")
print(f"  sandboxer's own work (profile, ledger commits, HTTP, libcurl init): "
      f"{o - 2 * startup:.1f} ms for the 2 commands (target < 10 ms per command)")
print(f"  inside the processes, from the command's start to its end, beyond the API calls: "
      f"create {statistics.median(in_process['create']):.1f} ms, "
      f"destroy {statistics.median(in_process['destroy']):.1f} ms")
PY
