#!/usr/bin/env bash
# sandboxer's own time per docker command, without the engine's: create and destroy against a
# stand-in Docker Engine on a unix socket that answers the calls they make at once (python, ~0.2 ms
# a request), alternating, N of each; prints the medians (and minimums: on a busy machine the
# minimum is the better estimate of the work itself) next to the process start-up of
# `sandboxer --version`. bench/docker.sh measures the same against the real engine, where the
# engine's own 100s of ms make a few ms of sandboxer's hard to see.
# The target (docs/drivers/docker.md, "Own overhead"): under 10 ms per command beyond process
# start-up. Usage: bench/docker_overhead.sh [path/to/sandboxer...] (several binaries: A/B, alternated)
set -euo pipefail
cd "$(dirname "$0")/.."
BINS=()
for b in "${@:-build/sandboxer}"; do BINS+=("$(realpath "$b")"); done
WORK=$(mktemp -d)
ENGINE_PID=""
trap '[ -z "$ENGINE_PID" ] || kill "$ENGINE_PID"; rm -rf "$WORK"' EXIT
. bench/lib.sh
write_docker_bench_profile "$WORK"

cat >"$WORK/engine.py" <<'EOF2'
# Answers what create (create, start, inspect) and destroy (remove, list by label) send.
import os, socketserver, sys
from http.server import BaseHTTPRequestHandler

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the engine does
    def log_message(self, *args): pass
    def address_string(self): return "local"
    def reply(self, code, body=b""):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)
    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        path = self.path.split("?")[0]
        if path.endswith("/containers/create"):
            return self.reply(201, b'{"Id":"' + b"c" * 64 + b'"}')
        if path.endswith("/start"):
            return self.reply(204)
        if path.endswith("/containers/json"):
            return self.reply(200, b"[]")
        if path.endswith("/json"):
            return self.reply(200, b'{"State":{"Running":true,"Status":"running"}}')
        if self.command == "DELETE":
            return self.reply(204)
        self.reply(404, b'{"message":"not in the stand-in"}')
    do_GET = do_POST = do_DELETE = answer

class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

Server(sys.argv[1], Handler).serve_forever()
EOF2
python3 "$WORK/engine.py" "$WORK/docker.sock" &
ENGINE_PID=$!
for _ in $(seq 50); do [ -S "$WORK/docker.sock" ] && break; sleep 0.1; done

DOCKER_HOST="unix://$WORK/docker.sock" python3 - "$WORK" "${BINS[@]}" <<'PY'
import os, statistics, subprocess, sys, time
work, binaries = sys.argv[1], sys.argv[2:]
rounds = int(os.environ.get("ROUNDS", "30"))

def timed(argv):
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    return (time.perf_counter() - start) * 1000, proc.stdout.strip()

times = {b: {"version": [], "create": [], "destroy": []} for b in binaries}
for i in range(rounds):
    for b in binaries:
        sbx = [b, "--state-dir", f"{work}/state-{binaries.index(b)}", "--profiles-dir",
               f"{work}/profiles"]
        times[b]["version"].append(timed([b, "--version"])[0])
        t, sandbox = timed(sbx + ["create", "--profile", "bench", "--quiet"])
        times[b]["create"].append(t)
        times[b]["destroy"].append(timed(sbx + ["destroy", sandbox, "--quiet"])[0])
print(f"rounds: {rounds}   (load average at the end: {os.getloadavg()[0]:.1f} on "
      f"{os.cpu_count()} cpus)")
for b in binaries:
    t = times[b]
    start = statistics.median(t["version"])
    print(b)
    print(f"  start-up (--version)  median {start:6.1f}  min {min(t['version']):6.1f} ms")
    for verb in ("create", "destroy"):
        med = statistics.median(t[verb])
        print(f"  {verb:8}              median {med:6.1f}  min {min(t[verb]):6.1f} ms   "
              f"own work beyond start-up: {med - start:5.1f} ms (target < 10)")
PY
