#!/usr/bin/env python3
"""A pretend SaaS sandbox service for the saas-stub example driver (stdlib only).

    POST   /v1/sandboxes                 {name, labels, env, expires_at, snapshot?} -> 201 {id}
    GET    /v1/sandboxes?label=K=V&...   -> {sandboxes: [{id, labels, expires_at}]}
    GET    /v1/sandboxes/ID              -> {id, labels, expires_at} | 404
    PATCH  /v1/sandboxes/ID              {expires_at} -> {id, ...} | 404
    DELETE /v1/sandboxes/ID              -> 204 | 404
    POST   /v1/sandboxes/ID/exec         {argv, env, workdir, stdin} -> {exit_code, stdout, stderr}
    POST   /v1/sandboxes/ID/snapshots    {name} -> 201 {id, size_bytes} | 404
    DELETE /v1/snapshots/ID              -> 204 | 404
    POST   /_control/fail                {count, status}: the next `count` API requests fail
    GET    /_control/requests            every request seen: [{method, path, status}]

Every /v1 request needs `Authorization: Bearer KEY` (the key in --key-file), else 401. A sandbox is
a directory: exec runs the command on this machine inside it (stdin, stdout and stderr base64).
It listens on 127.0.0.1, prints PORT=N, and exits when its parent does.
"""
import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

STATE = {"sandboxes": {}, "snapshots": {}, "fail": [], "requests": []}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, body=None):
        data = b"" if body is None else json.dumps(body).encode()
        with LOCK:
            STATE["requests"].append({"method": self.command, "path": self.path, "status": status})
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else {}

    def handle_any(self):
        url = urlsplit(self.path)
        parts = [p for p in url.path.split("/") if p]
        payload = self.body()
        if parts[:1] == ["_control"]:
            if parts[1:] == ["fail"]:
                with LOCK:
                    STATE["fail"] += [payload.get("status", 503)] * payload.get("count", 1)
                return self.reply(200, {})
            if parts[1:] == ["requests"]:
                with LOCK:
                    seen = list(STATE["requests"])
                return self.reply(200, seen)
            return self.reply(404, {"error": "no such control"})
        if self.headers.get("Authorization") != "Bearer " + self.server.key:
            return self.reply(401, {"error": "missing or wrong API key"})
        with LOCK:
            injected = STATE["fail"].pop(0) if STATE["fail"] else None
        if injected:
            return self.reply(injected, {"error": "injected failure"})
        if parts[:1] != ["v1"]:
            return self.reply(404, {"error": "no such path"})
        self.api(self.command, parts[1:], dict(parse_qsl(url.query, keep_blank_values=True)),
                 [v for k, v in parse_qsl(url.query) if k == "label"], payload)

    do_GET = do_POST = do_PATCH = do_DELETE = handle_any

    def api(self, method, parts, query, label_filters, payload):
        root = self.server.root
        if parts == ["sandboxes"] and method == "POST":
            sid = "sb-" + uuid.uuid4().hex[:12]
            path = os.path.join(root, "sandboxes", sid)
            snap = payload.get("snapshot")
            if snap:
                with LOCK:
                    source = STATE["snapshots"].get(snap)
                if source is None:
                    return self.reply(404, {"error": "no snapshot " + snap})
                shutil.copytree(source, path, symlinks=True)
            else:
                os.makedirs(path)
            record = {"id": sid, "labels": payload.get("labels") or {}, "env": payload.get("env") or {},
                      "expires_at": payload.get("expires_at"), "path": path}
            with LOCK:
                STATE["sandboxes"][sid] = record
            return self.reply(201, {"id": sid})
        if parts == ["sandboxes"] and method == "GET":
            wanted = dict(f.split("=", 1) for f in label_filters if "=" in f)
            with LOCK:
                found = [public(r) for r in STATE["sandboxes"].values()
                         if all(r["labels"].get(k) == v for k, v in wanted.items())]
            return self.reply(200, {"sandboxes": found})
        if len(parts) >= 2 and parts[0] == "sandboxes":
            with LOCK:
                record = STATE["sandboxes"].get(parts[1])
            if record is None:
                return self.reply(404, {"error": "no sandbox " + parts[1]})
            if len(parts) == 2 and method == "GET":
                return self.reply(200, public(record))
            if len(parts) == 2 and method == "PATCH":
                record["expires_at"] = payload.get("expires_at")
                return self.reply(200, public(record))
            if len(parts) == 2 and method == "DELETE":
                with LOCK:
                    STATE["sandboxes"].pop(parts[1], None)
                shutil.rmtree(record["path"], ignore_errors=True)
                return self.reply(204)
            if parts[2:] == ["exec"] and method == "POST":
                return self.reply(200, run(record, payload))
            if parts[2:] == ["snapshots"] and method == "POST":
                snap = "ss-" + uuid.uuid4().hex[:12]
                target = os.path.join(root, "snapshots", snap)
                shutil.copytree(record["path"], target, symlinks=True)
                with LOCK:
                    STATE["snapshots"][snap] = target
                size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(target) for f in fs)
                return self.reply(201, {"id": snap, "size_bytes": size})
        if len(parts) == 2 and parts[0] == "snapshots" and method == "DELETE":
            with LOCK:
                target = STATE["snapshots"].pop(parts[1], None)
            if target is None:
                return self.reply(404, {"error": "no snapshot " + parts[1]})
            shutil.rmtree(target, ignore_errors=True)
            return self.reply(204)
        return self.reply(404, {"error": "no such path"})


def public(record):
    return {"id": record["id"], "labels": record["labels"], "expires_at": record["expires_at"]}


def run(record, payload):
    cwd = os.path.normpath(os.path.join(record["path"], (payload.get("workdir") or "/").lstrip("/")))
    os.makedirs(cwd, exist_ok=True)
    env = dict(os.environ, **record["env"], **(payload.get("env") or {}))
    try:
        done = subprocess.run(payload.get("argv") or ["true"], cwd=cwd, env=env, capture_output=True,
                              input=base64.b64decode(payload.get("stdin") or ""), timeout=600)
    except FileNotFoundError:
        return {"exit_code": 127, "stdout": "", "stderr": "",
                "error": "command not found: " + (payload.get("argv") or [""])[0]}
    code = done.returncode if done.returncode >= 0 else 128 - done.returncode
    return {"exit_code": code, "stdout": base64.b64encode(done.stdout).decode(),
            "stderr": base64.b64encode(done.stderr).decode()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--key-file", required=True)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.key = open(args.key_file).read().strip()
    server.root = tempfile.mkdtemp(prefix="fake-saas-")
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        server.shutdown()

    threading.Thread(target=watch, daemon=True).start()
    print("PORT=%d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    finally:
        shutil.rmtree(server.root, ignore_errors=True)


if __name__ == "__main__":
    main()
