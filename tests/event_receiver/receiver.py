#!/usr/bin/env python3
"""A CloudEvents hub for the tests, on loopback: records every event POSTed to /events, and can
fail on demand. Only the standard library.

    receiver.py PORT_FILE LOG_FILE EXPECTED_TOKEN

Writes the port it listens on to PORT_FILE, appends one JSON line per request it accepted to
LOG_FILE ({"event": ..., "auth_ok": bool, "content_type": ..., "at": seconds}). Its behaviour is
set with POST /control {"mode": "ok" | "fail" | "429" | "hang", "times": N}: `fail` answers 503,
`429` answers 429 with Retry-After: 1, `hang` sleeps 60 s before answering; `times` limits the
failures, after which it is ok again. The token itself is never written anywhere.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT_FILE, LOG_FILE, TOKEN = sys.argv[1], sys.argv[2], sys.argv[3]
state = {"mode": "ok", "times": None}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/control":
            with lock:
                state.update(json.loads(body))
            return self.answer(204)
        if self.path != "/events":
            return self.answer(404)
        with lock:
            mode = state["mode"]
            if mode != "ok" and state["times"] is not None:
                state["times"] -= 1
                if state["times"] < 0:
                    mode = state["mode"] = "ok"
        if mode == "hang":
            time.sleep(60)
            return self.answer(503)
        if mode == "fail":
            return self.answer(503)
        if mode == "429":
            with lock, open(LOG_FILE + ".refused", "a") as log:
                log.write(json.dumps({"at": time.time()}) + "\n")
            return self.answer(429, [("Retry-After", "1")])
        record = {
            "event": json.loads(body),
            "auth_ok": self.headers.get("Authorization") == "Bearer " + TOKEN,
            "content_type": self.headers.get("Content-Type"),
            "at": time.time(),
        }
        with lock, open(LOG_FILE, "a") as log:
            log.write(json.dumps(record) + "\n")
        self.answer(202)


import os
server = ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("RECEIVER_PORT", "0"))), Handler)
server.daemon_threads = True
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
# Bounded: the test stops it, and it stops by itself after 20 minutes in any case.
threading.Timer(1200, server.shutdown).start()
server.serve_forever()
