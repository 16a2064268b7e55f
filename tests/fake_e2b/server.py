#!/usr/bin/env python3
"""A fake E2B for sandboxer's tests: the subset of E2B's control-plane API (shared/specs/
e2b-openapi.yml) and of envd's process.Process/Start (e2b-envd-process.proto, Connect JSON over
HTTP/1.1) that the e2b driver uses, on loopback, with the spec's status codes and error bodies.

- Every control-plane request must carry X-API-KEY with the right key; the key must appear nowhere
  else (URL, other headers, body), and never in an envd request. Breaches are recorded as
  violations, which the tests read from GET /_control/violations and fail on.
- Sandboxes have running/paused states and expire on the fake's own clock (POST
  /_control/advance moves it); autoPause pauses instead of killing.
- Pause keeps the files; with memory (SandboxPauseRequest.memory, true by default) the sandbox's
  processes (those exec started, found by the SANDBOXER_CONSOLE they carry) get SIGSTOP and
  connect/resume SIGCONTs them; without memory they get SIGKILL, as a cold boot would lose them.
  Killing a sandbox SIGKILLs them. POST /_control/vanish {"id": ...} makes a sandbox disappear
  (as E2B dropping it), processes and files with it.
- Faults: POST /_control/inject {"status": 503, "count": 2, "method": "GET", "path": "/sandboxes",
  "retry_after": "1", "ratelimit_reset": "1"} answers the next matching requests with that status;
  {"lose": true, "count": 1, "method": "POST", "path": "/sandboxes"} does the request, then closes
  the connection without an answer.
- exec runs the command for real, argv without a shell, in a directory of the sandbox; snapshots
  copy that directory, so a sandbox created from a snapshot sees the files.
- envd's file API (e2b-envd-openapi.yml): GET /files, POST /files (multipart or octet-stream),
  POST /files/compose, on this machine's filesystem as exec sees it (a relative path is under the
  sandbox's directory). Faults can be injected there too ({"status": 507, "path": "/files"}).

Usage: server.py --key-file FILE [--max-timeout SECONDS]. Prints "PORT=<n>" once listening on
127.0.0.1 (port 0: the kernel picks), and exits on POST /_control/shutdown or when its parent dies.
"""

import argparse
import base64
import json
import os
import pwd
import random
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ENVD_PORT = 49983


def rfc3339(t):
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def random_id(n=20):
    return "i" + "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(n - 1))


class State:
    def __init__(self, key, max_timeout):
        self.lock = threading.RLock()
        self.key = key
        self.max_timeout = max_timeout
        self.offset = 0.0  # the fake's clock = real time + offset
        self.sandboxes = {}
        self.templates = {"base": None}  # template id -> snapshot directory (None: empty)
        self.faults = []
        self.violations = []
        self.requests = []
        self.root = tempfile.mkdtemp(prefix="fake-e2b-")

    def now(self):
        return time.time() + self.offset

    def expire(self):
        """Applies E2B's own timer: kill (or pause, with autoPause) what is past its end."""
        now = self.now()
        for sid, sbx in list(self.sandboxes.items()):
            if sbx["state"] == "running" and sbx["endAt"] <= now:
                if sbx["autoPause"]:
                    signal_processes(sbx, signal.SIGSTOP)  # autoPauseMemory defaults to true
                    sbx["state"] = "paused"
                else:
                    self.kill(sid)

    def kill(self, sid):
        sbx = self.sandboxes.pop(sid)
        signal_processes(sbx, signal.SIGKILL)
        shutil.rmtree(sbx["dir"], ignore_errors=True)
        if os.path.exists(sbx["dir"] + ".console"):
            os.remove(sbx["dir"] + ".console")


def processes_of(sbx):
    """Pids of the processes exec started in the sandbox (and their children): they carry
    SANDBOXER_CONSOLE=<its console file> in their environment."""
    wanted = ("SANDBOXER_CONSOLE=" + sbx["console"]).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if wanted in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue  # gone meanwhile, or another user's
    return found


def signal_processes(sbx, signum):
    for pid in processes_of(sbx):
        try:
            os.kill(pid, signum)
        except OSError:
            pass


def error_body(code, message):
    return {"code": code, "message": message}


def basic_user(authorization):
    """The user of a Basic Authorization header ("user:" in base64), or ""."""
    if not authorization.startswith("Basic "):
        return ""
    try:
        return base64.b64decode(authorization[6:]).decode().split(":", 1)[0]
    except (ValueError, UnicodeDecodeError):
        return ""


def envelope(message, flags=0):
    payload = json.dumps(message).encode()
    return bytes([flags]) + len(payload).to_bytes(4, "big") + payload


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-e2b/1"

    def log_message(self, fmt, *args):
        if os.environ.get("FAKE_E2B_VERBOSE"):
            sys.stderr.write("fake-e2b: " + fmt % args + "\n")

    @property
    def state(self):
        return self.server.state

    # --- plumbing -----------------------------------------------------------------------------

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def send_json(self, status, body=None, headers=None):
        if getattr(self, "lose_answer", False):
            # The request took effect; its answer is lost as in a connection reset.
            self.close_connection = True
            with self.state.lock:
                self.state.requests[-1]["status"] = "lost"
            return None
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        with self.state.lock:
            self.state.requests[-1]["status"] = status

    def violation(self, what):
        with self.state.lock:
            self.state.violations.append(f"{self.command} {self.path}: {what}")

    def check_key_placement(self, body, envd):
        """The key may travel only as the X-API-KEY header of a control-plane request."""
        key = self.state.key
        if key in self.path or key in urllib.parse.unquote(self.path):
            self.violation("the API key is in the URL")
        for name, value in self.headers.items():
            if key in value and (envd or name.lower() != "x-api-key"):
                self.violation(f"the API key is in header {name}")
        if key.encode() in body:
            self.violation("the API key is in the body")
        if envd and self.headers.get("X-API-KEY") is not None:
            self.violation("an envd request carries X-API-KEY")

    def dispatch(self):
        body = self.read_body()
        url = urllib.parse.urlsplit(self.path)
        path, query = url.path, urllib.parse.parse_qs(url.query)
        with self.state.lock:
            self.state.requests.append({"method": self.command, "path": self.path, "status": None})
        if path.startswith("/_control/"):
            return self.control(path, body)
        envd = path.startswith("/process.Process/") or path == "/files" or path.startswith("/files/")
        self.check_key_placement(body, envd)
        if envd:
            fault = self.take_fault(path)
            if fault is not None:
                return fault
            return self.envd(path, body, query)
        given = self.headers.get("X-API-KEY")
        if given is None:
            self.violation("no X-API-KEY header")
            return self.send_json(401, error_body(401, "Invalid API key, it must be provided in the X-API-Key header"))
        if given != self.state.key:
            return self.send_json(401, error_body(401, "Invalid API key"))
        fault = self.take_fault(path)
        if fault is not None:
            return fault
        with self.state.lock:
            self.state.expire()
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            return self.send_json(400, error_body(400, "request body is not valid JSON"))
        return self.api(path, query, payload)

    def take_fault(self, path):
        """Answers with an injected fault that matches this request, if any (True when it did;
        a lost answer is arranged for send_json and the request goes on)."""
        with self.state.lock:
            for fault in self.state.faults:
                if fault["count"] > 0 and fault.get("method", self.command) == self.command and \
                        path.startswith(fault.get("path", "/")):
                    fault["count"] -= 1
                    if fault.get("lose"):
                        self.lose_answer = True
                        return None
                    headers = {}
                    if "retry_after" in fault:
                        headers["Retry-After"] = str(fault["retry_after"])
                    if "ratelimit_reset" in fault:
                        headers["RateLimit-Reset"] = str(fault["ratelimit_reset"])
                    status = fault["status"]
                    self.send_json(status, error_body(status, fault.get("message", "injected fault")), headers)
                    return True
        return None

    do_GET = do_POST = do_DELETE = do_PUT = lambda self: self.dispatch()

    # --- test control ---------------------------------------------------------------------------

    def control(self, path, body):
        payload = json.loads(body) if body else {}
        st = self.state
        with st.lock:
            if path == "/_control/violations":
                return self.send_json(200, st.violations)
            if path == "/_control/requests":
                return self.send_json(200, st.requests)
            if path == "/_control/sandboxes":
                st.expire()
                return self.send_json(200, {sid: {k: v for k, v in s.items() if k != "dir"}
                                            for sid, s in st.sandboxes.items()})
            if path == "/_control/templates":
                return self.send_json(200, sorted(st.templates))
            if path == "/_control/now":
                return self.send_json(200, {"now": st.now()})
            if path == "/_control/advance":
                st.offset += float(payload.get("seconds", 0))
                st.expire()
                return self.send_json(200, {"now": st.now()})
            if path == "/_control/inject":
                st.faults.append(dict(payload))
                return self.send_json(204)
            if path == "/_control/vanish":
                if payload.get("id") not in st.sandboxes:
                    return self.send_json(404, error_body(404, "no such sandbox"))
                st.kill(payload["id"])
                return self.send_json(204)
            if path == "/_control/max_timeout":
                st.max_timeout = int(payload["seconds"])
                return self.send_json(204)
            if path == "/_control/shutdown":
                self.send_json(204)
                threading.Thread(target=self.server.shutdown, daemon=True).start()
                return None
        return self.send_json(404, error_body(404, "unknown control endpoint"))

    # --- control plane ----------------------------------------------------------------------------

    def sandbox_view(self, sbx, kind):
        """kind: "Sandbox" (create, connect), "SandboxDetail" (get) or "ListedSandbox" (list)."""
        view = {"templateID": sbx["templateID"], "sandboxID": sbx["sandboxID"],
                "clientID": "6532622b", "envdVersion": "0.2.0"}
        if kind != "Sandbox":
            view.update({"startedAt": rfc3339(sbx["startedAt"]), "endAt": rfc3339(sbx["endAt"]),
                         "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 2048,
                         "metadata": sbx["metadata"], "state": sbx["state"]})
        if kind != "ListedSandbox":
            view["envdAccessToken"] = sbx["token"]
            view["domain"] = None
        return view

    def timeout_of(self, payload, default=None):
        timeout = (payload or {}).get("timeout", default)
        if not isinstance(timeout, int) or timeout < 0:
            return None, self.send_json(400, error_body(400, "timeout must be a non-negative integer"))
        if timeout > self.state.max_timeout:
            hours = self.state.max_timeout // 3600
            return None, self.send_json(400, error_body(400, f"Timeout cannot be greater than {hours} hours"))
        return timeout, None

    def api(self, path, query, payload):
        st = self.state
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        with st.lock:
            if path == "/sandboxes" and self.command == "POST":
                return self.create(payload or {})
            if path in ("/sandboxes", "/v2/sandboxes") and self.command == "GET":
                return self.list(query, v2=path.startswith("/v2"))
            if len(parts) == 4 and parts[:2] == ["v2", "sandboxes"] and parts[3] == "logs" \
                    and self.command == "GET":
                sbx = st.sandboxes.get(parts[2])
                if sbx is None:
                    return self.send_json(404, error_body(404, f"sandbox \"{parts[2]}\" doesn't exist or you don't have access to it"))
                return self.logs(sbx, query)
            if len(parts) >= 2 and parts[0] == "sandboxes":
                sid = parts[1]
                sbx = st.sandboxes.get(sid)
                if sbx is None:
                    return self.send_json(404, error_body(404, f"sandbox \"{sid}\" doesn't exist or you don't have access to it"))
                action = parts[2] if len(parts) > 2 else None
                return self.sandbox_action(sbx, action, payload)
            if len(parts) == 2 and parts[0] == "templates" and self.command == "DELETE":
                if parts[1] in st.templates and parts[1] != "base":
                    directory = st.templates.pop(parts[1])
                    shutil.rmtree(directory, ignore_errors=True)
                    return self.send_json(204)
                return self.send_json(404, error_body(404, f"template '{parts[1]}' not found"))
        return self.send_json(404, error_body(404, f"no route {self.command} {path}"))

    def create(self, payload):
        st = self.state
        template = payload.get("templateID")
        if not isinstance(template, str) or not template:
            return self.send_json(400, error_body(400, "templateID is required"))
        template_key = template.rsplit(":", 1)[0] if template not in st.templates else template
        if template_key not in st.templates:
            return self.send_json(404, error_body(404, f"template '{template}' not found"))
        timeout, failed = self.timeout_of(payload, 15)
        if failed is not None or timeout is None:
            return failed
        metadata = payload.get("metadata") or {}
        env = payload.get("envVars") or {}
        if not all(isinstance(v, str) for v in list(metadata.values()) + list(env.values())):
            return self.send_json(400, error_body(400, "metadata and envVars values must be strings"))
        sid = random_id()
        directory = os.path.join(st.root, sid)
        source = st.templates[template_key]
        if source:
            shutil.copytree(source, directory)
        else:
            os.makedirs(directory)
        now = st.now()
        sbx = {"sandboxID": sid, "templateID": template, "metadata": metadata, "envVars": env,
               "state": "running", "startedAt": now, "endAt": now + timeout,
               "timeout": timeout, "autoPause": bool(payload.get("autoPause", False)),
               "allowInternetAccess": payload.get("allow_internet_access"),
               "token": "ea_" + random_id(24), "dir": directory,
               "console": directory + ".console", "console_read": 0,
               "logs": [{"timestamp": datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                         "level": "info", "message": f"sandbox {sid} started", "fields": {}}]}
        open(sbx["console"], "w").close()
        st.sandboxes[sid] = sbx
        return self.send_json(201, self.sandbox_view(sbx, "Sandbox"))

    def logs(self, sbx, query):
        """GET /v2/sandboxes/{id}/logs (SandboxLogsV2Response): the fake's stand-in for the
        sandbox's own output is its console file, which exec'd commands find in
        $SANDBOXER_CONSOLE; each line is stamped when the fake first reads it."""
        try:
            cursor = int(query.get("cursor", ["0"])[0])
            limit = int(query.get("limit", ["1000"])[0])
        except ValueError:
            return self.send_json(400, error_body(400, "cursor and limit must be integers"))
        direction = query.get("direction", ["forward"])[0]
        if limit < 0 or limit > 1000 or cursor < 0 or direction not in ("forward", "backward"):
            return self.send_json(400, error_body(400, "invalid cursor, limit or direction"))
        entries = sbx["logs"]
        with open(sbx["console"], "rb") as f:
            lines = f.read().decode("utf-8", "replace").split("\n")[:-1]
        now = datetime.fromtimestamp(self.state.now(), timezone.utc)
        for line in lines[sbx["console_read"]:]:
            level = "error" if line.startswith("ERROR ") else "info"
            entries.append({"timestamp": now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z",
                            "level": level, "message": line, "fields": {"source": "console"}})
        sbx["console_read"] = len(lines)

        def ms(entry):
            stamp = datetime.strptime(entry["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
            return int(stamp.timestamp() * 1000)
        if direction == "forward":
            found = [e for e in entries if ms(e) >= cursor][:limit]
        else:
            found = [e for e in reversed(entries) if "cursor" not in query or ms(e) <= cursor][:limit]
        return self.send_json(200, {"logs": found})

    def list(self, query, v2):
        st = self.state
        wanted = {}
        for raw in query.get("metadata", []):
            for key, value in urllib.parse.parse_qsl(raw, keep_blank_values=True):
                wanted[key] = value
        states = ["running"]
        if v2 and "state" in query:
            states = [s for v in query["state"] for s in v.split(",")]
            if any(s not in ("running", "paused") for s in states):
                return self.send_json(400, error_body(400, "invalid state filter"))
        found = [s for s in st.sandboxes.values() if s["state"] in states and
                 all(s["metadata"].get(k) == v for k, v in wanted.items())]
        found.sort(key=lambda s: (s["startedAt"], s["sandboxID"]), reverse=True)
        headers = {}
        if v2:
            limit = int(query.get("limit", ["100"])[0])
            if limit < 1 or limit > 100:
                return self.send_json(400, error_body(400, "limit must be between 1 and 100"))
            start = int(query.get("nextToken", ["0"])[0] or 0)
            page = found[start:start + limit]
            if start + limit < len(found):
                headers["X-Next-Token"] = str(start + limit)
            headers["X-Total-Running"] = str(sum(1 for s in found if s["state"] == "running"))
            found = page
        return self.send_json(200, [self.sandbox_view(s, "ListedSandbox") for s in found], headers)

    def sandbox_action(self, sbx, action, payload):
        st = self.state
        sid = sbx["sandboxID"]
        if action is None and self.command == "GET":
            return self.send_json(200, self.sandbox_view(sbx, "SandboxDetail"))
        if action is None and self.command == "DELETE":
            st.kill(sid)
            return self.send_json(204)
        if self.command != "POST":
            return self.send_json(405, error_body(405, "method not allowed"))
        if action == "timeout":
            timeout, failed = self.timeout_of(payload)
            if failed is not None or timeout is None:
                return failed
            sbx["endAt"] = st.now() + timeout
            return self.send_json(204)
        if action == "pause":
            if sbx["state"] == "paused":
                return self.send_json(409, error_body(409, f"sandbox \"{sid}\" is already paused"))
            memory = (payload or {}).get("memory", True)
            if not isinstance(memory, bool):
                return self.send_json(400, error_body(400, "memory must be a boolean"))
            signal_processes(sbx, signal.SIGSTOP if memory else signal.SIGKILL)
            sbx["state"] = "paused"
            sbx["pausedWithMemory"] = memory
            sbx["pauses"] = sbx.get("pauses", 0) + 1
            return self.send_json(204)
        if action in ("connect", "resume"):
            timeout, failed = self.timeout_of(payload, 15)
            if failed is not None or timeout is None:
                return failed
            was_paused = sbx["state"] == "paused"
            if action == "resume" and not was_paused:
                return self.send_json(409, error_body(409, f"sandbox \"{sid}\" is already running"))
            if was_paused:
                signal_processes(sbx, signal.SIGCONT)
                sbx["resumes"] = sbx.get("resumes", 0) + 1
            sbx["state"] = "running"
            end = st.now() + timeout
            sbx["endAt"] = end if was_paused else max(sbx["endAt"], end)
            return self.send_json(201 if was_paused else 200, self.sandbox_view(sbx, "Sandbox"))
        if action == "snapshots":
            name = (payload or {}).get("name") or random_id()
            template = f"{name}"
            target = os.path.join(st.root, "tpl-" + random_id())
            shutil.copytree(sbx["dir"], target)
            st.templates[template] = target
            return self.send_json(201, {"snapshotID": f"{template}:default",
                                        "names": [f"fake-team/{template}:default"]})
        return self.send_json(404, error_body(404, f"no route POST /sandboxes/{sid}/{action}"))

    # --- envd ------------------------------------------------------------------------------------------

    def connect_error(self, http_status, code, message):
        self.send_json(http_status, {"code": code, "message": message})

    def envd(self, path, body, query):
        st = self.state
        host = self.headers.get("Host", "")
        sid = self.headers.get("E2b-Sandbox-Id")
        if host.startswith(f"{ENVD_PORT}-"):
            sid = host.split(".", 1)[0][len(f"{ENVD_PORT}-"):]
        with st.lock:
            st.expire()
            sbx = st.sandboxes.get(sid or "")
            if sbx is None or sbx["state"] != "running":
                what = "paused" if sbx else "not found"
                return self.send_json(502, error_body(502, f"The sandbox {sid} is {what}"))
            token, directory, sandbox_env = sbx["token"], sbx["dir"], dict(sbx["envVars"])
        if self.headers.get("X-Access-Token") != token:
            return self.connect_error(401, "unauthenticated", "invalid access token")
        if path == "/files" or path.startswith("/files/"):
            return self.files(path, body, query, directory)
        if path != "/process.Process/Start":
            return self.connect_error(404, "unimplemented", f"{path} is not implemented by the fake")
        if self.headers.get("Content-Type") != "application/connect+json":
            return self.connect_error(415, "invalid_argument", "expected application/connect+json")
        if len(body) < 5 or body[0] != 0 or int.from_bytes(body[1:5], "big") != len(body) - 5:
            return self.connect_error(400, "invalid_argument", "malformed Connect envelope")
        request = json.loads(body[5:])
        process = request.get("process") or {}
        argv = [process.get("cmd", "")] + list(process.get("args") or [])
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": directory,
               "SANDBOXER_CONSOLE": directory + ".console"}
        env.update(sandbox_env)
        env.update(process.get("envs") or {})
        cwd = process.get("cwd") or directory
        # envd runs the command as the Authorization header's user, looked up by name. The fake's
        # template has E2B's default user "user" (this server's own uid) and the host's users.
        run_as = None
        username = basic_user(self.headers.get("Authorization", ""))
        if username not in ("", "user"):
            try:
                run_as = pwd.getpwnam(username)
            except KeyError:
                return self.connect_error(401, "unauthenticated",
                                          f"error looking up user '{username}': user: unknown user {username}")
            env["HOME"] = run_as.pw_dir
            if not process.get("cwd"):
                cwd = run_as.pw_dir if os.path.isdir(run_as.pw_dir) else "/"
        switch = run_as if run_as and run_as.pw_uid != os.geteuid() else None
        self.send_response(200)
        self.send_header("Content-Type", "application/connect+json")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        with st.lock:
            st.requests[-1]["status"] = 200
        try:
            child = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     user=switch.pw_uid if switch else None,
                                     group=switch.pw_gid if switch else None,
                                     extra_groups=[] if switch else None)
        except OSError as e:
            self.wfile.write(envelope({"error": {"code": "internal", "message": f"error starting process: {e.strerror}: {argv[0]}"}}, 2))
            return None
        write_lock = threading.Lock()

        def send(message, flags=0):
            with write_lock:
                self.wfile.write(envelope(message, flags))
                self.wfile.flush()

        send({"event": {"start": {"pid": child.pid}}})

        def pump(stream, name):
            for chunk in iter(lambda: stream.read1(4096), b""):
                send({"event": {"data": {name: base64.b64encode(chunk).decode()}}})

        pumps = [threading.Thread(target=pump, args=(child.stdout, "stdout")),
                 threading.Thread(target=pump, args=(child.stderr, "stderr"))]
        for t in pumps:
            t.start()
        for t in pumps:
            t.join()
        code = child.wait()
        end = {"exited": code >= 0, "status": f"exit status {code}" if code >= 0 else f"signal: {-code}"}
        if code > 0:
            end["exitCode"] = code  # proto3 JSON leaves out a zero exit code
        elif code < 0:
            end["exitCode"] = -1
            end["status"] = {9: "signal: killed", 15: "signal: terminated"}.get(-code, f"signal: {-code}")
        send({"event": {"end": end}})
        send({}, 2)
        return None


    # --- envd's file API (e2b-envd-openapi.yml, /files) -------------------------------------------
    # As exec runs commands on this machine, an absolute path here is this machine's path; a
    # relative one is under the sandbox's directory (the user's home).

    def files(self, path, body, query, home):
        username = (query.get("username") or [""])[0] or basic_user(self.headers.get("Authorization", ""))
        if username not in ("", "user"):
            try:
                pwd.getpwnam(username)
            except KeyError:
                return self.send_json(401, error_body(401, f"error looking up user '{username}': user: unknown user {username}"))

        def resolve(name):
            return name if name.startswith("/") else os.path.join(home, name)

        if path == "/files/compose" and self.command == "POST":
            request = json.loads(body or b"{}")
            sources = [resolve(p) for p in request.get("source_paths") or []]
            destination = request.get("destination")
            if not sources or not isinstance(destination, str) or not destination:
                return self.send_json(400, error_body(400, "source_paths and destination are required"))
            for source in sources:
                if not os.path.isfile(source):
                    return self.send_json(404, error_body(404, f"path '{source}' does not exist"))
            target = resolve(destination)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as out:
                for source in sources:
                    with open(source, "rb") as part:
                        shutil.copyfileobj(part, out, 1 << 20)
            for source in sources:
                os.remove(source)
            return self.send_json(200, {"path": target, "name": os.path.basename(target), "type": "file"})
        if path != "/files":
            return self.send_json(404, error_body(404, f"no route {self.command} {path}"))
        name = (query.get("path") or [""])[0]
        if self.command == "GET":
            target = resolve(name)
            if os.path.isdir(target):
                return self.send_json(400, error_body(400, f"path '{target}' is a directory"))
            if not os.path.exists(target):
                return self.send_json(404, error_body(404, f"path '{target}' does not exist"))
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(os.path.getsize(target)))
            self.end_headers()
            with open(target, "rb") as f:
                shutil.copyfileobj(f, self.wfile, 1 << 16)
            with self.state.lock:
                self.state.requests[-1]["status"] = 200
            return None
        if self.command != "POST":
            return self.send_json(405, error_body(405, "method not allowed"))
        content_type = self.headers.get("Content-Type", "")
        if content_type.startswith("application/octet-stream"):
            if not name:
                return self.send_json(400, error_body(400, "path is required for application/octet-stream"))
            uploads = [(name, body)]
        elif content_type.startswith("multipart/form-data"):
            uploads = []
            for filename, content in multipart_files(content_type, body):
                uploads.append((name or filename, content))
            if not uploads:
                return self.send_json(400, error_body(400, "no file part in the multipart body"))
        else:
            return self.send_json(400, error_body(400, f"unsupported content type {content_type}"))
        written = []
        for name, content in uploads:
            target = resolve(name)
            if os.path.isdir(target):
                return self.send_json(400, error_body(400, f"path '{target}' is a directory"))
            try:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    f.write(content)
            except OSError as e:
                return self.send_json(500, error_body(500, f"error opening file '{target}': {e.strerror}"))
            written.append({"path": target, "name": os.path.basename(target), "type": "file"})
        return self.send_json(200, written)


def multipart_files(content_type, body):
    """(filename, content) of each part named "file" of a multipart/form-data body."""
    boundary = None
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key == "boundary":
            boundary = value.strip('"')
    if not boundary:
        return []
    delimiter = b"--" + boundary.encode()
    found = []
    for part in body.split(delimiter)[1:]:
        if part.startswith(b"--"):
            break
        head, _, content = part.partition(b"\r\n\r\n")
        if content.endswith(b"\r\n"):
            content = content[:-2]
        disposition = next((line for line in head.decode("utf-8", "replace").split("\r\n")
                            if line.lower().startswith("content-disposition")), "")
        if 'name="file"' not in disposition:
            continue
        filename = disposition.partition('filename="')[2].partition('"')[0]
        found.append((filename, content))
    return found


def watch_parent(server, parent):
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            server.shutdown()
            return


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--key-file", required=True)
    parser.add_argument("--max-timeout", type=int, default=24 * 3600)
    args = parser.parse_args()
    with open(args.key_file) as f:
        key = f.read().strip()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.state = State(key, args.max_timeout)
    threading.Thread(target=watch_parent, args=(server, os.getppid()), daemon=True).start()
    # SIGTERM (what the tests send) stops serving and still removes the sandboxes' directories.
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    print(f"PORT={server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    finally:
        shutil.rmtree(server.state.root, ignore_errors=True)


if __name__ == "__main__":
    main()
