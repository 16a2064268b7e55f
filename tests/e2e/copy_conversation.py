#!/usr/bin/python3
"""Speaks the driver protocol's copy methods with an external driver, as sandboxer would, and
records the conversation for validate_json.py --protocol (lines of {"dir": "in"|"out", "line"}).

    copy_conversation.py DRIVER ROOT RECORD [SIZE]

Creates a sandbox, stat_path, copy_in of a tar stream holding a file of SIZE bytes (default 1 MiB)
in 64 KiB chunks, copy_out of it, destroy. Checks that the bytes came back and that both answers
count the stream; prints the seconds each copy took. Exits 1 on any failure."""
import base64, io, json, os, subprocess, sys, tarfile, time

driver, root, record = sys.argv[1:4]
size = int(sys.argv[4]) if len(sys.argv) > 4 else 1 << 20
proc = subprocess.Popen([driver], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
log = open(record, "w")
next_id = 0


def write(message):
    line = json.dumps(message)
    log.write(json.dumps({"dir": "in", "line": line}) + "\n")
    proc.stdin.write((line + "\n").encode())
    proc.stdin.flush()


def read():
    line = proc.stdout.readline().decode()
    if not line:
        sys.exit(f"the driver exited (status {proc.wait()})")
    log.write(json.dumps({"dir": "out", "line": line.rstrip("\n")}) + "\n")
    return json.loads(line)


def call(method, params, chunks=(), on_output=None):
    global next_id
    next_id += 1
    write({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params})
    for chunk in chunks:
        write({"jsonrpc": "2.0", "method": "input",
               "params": {"id": next_id, "data": base64.b64encode(chunk).decode()}})
    if method == "copy_in":
        write({"jsonrpc": "2.0", "method": "input", "params": {"id": next_id, "eof": True}})
    while True:
        message = read()
        if "id" not in message:
            on_output(message["params"])
            continue
        if "error" in message:
            sys.exit(f"{method}: {message['error']}")
        return message["result"]


call("initialize", {"protocol": 1})
spec = call("validate", {"spec": {"root": root}})["spec"]
common = {"spec": spec, "secrets": {}}
backend = call("create", {"id": "sbx-conv", "name": "conv", "labels": {}, "env": {},
                          "expires_at": None, **common})["backend_id"]
content = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
stream = io.BytesIO()
with tarfile.open(fileobj=stream, mode="w", format=tarfile.PAX_FORMAT) as tar:
    info = tarfile.TarInfo("payload")
    info.size, info.mode, info.mtime = len(content), 0o755, 1_600_000_000
    tar.addfile(info, io.BytesIO(content))
data = stream.getvalue()
chunks = [data[i:i + 65536] for i in range(0, len(data), 65536)]
start = time.monotonic()
result = call("copy_in", {"backend_id": backend, "directory": "/", **common}, chunks)
copy_in_s = time.monotonic() - start
assert result == {"bytes": len(data)}, result
info = call("stat_path", {"backend_id": backend, "path": "/payload", **common})
assert info["kind"] == "file" and info["size"] == size and info["mode"] == 0o755, info
back = bytearray()


def take(params):
    assert params["stream"] == "tar", params
    chunk = base64.b64decode(params["data"])
    assert len(chunk) <= 65536, len(chunk)
    back.extend(chunk)


start = time.monotonic()
result = call("copy_out", {"backend_id": backend, "path": "/payload", "follow": False, **common},
              on_output=take)
copy_out_s = time.monotonic() - start
assert result == {"bytes": len(back)}, result
with tarfile.open(fileobj=io.BytesIO(bytes(back))) as tar:
    member = tar.next()
    assert (member.name, member.mode, member.mtime) == ("payload", 0o755, 1_600_000_000), member
    assert tar.extractfile(member).read() == content, "the bytes differ"
call("destroy", {"backend_id": backend, **common})
peak = [l.split()[1] for l in open(f"/proc/{proc.pid}/status") if l.startswith("VmHWM:")][0]
proc.stdin.close()
proc.wait()
print(f"{size} bytes: copy_in {copy_in_s:.3f} s, copy_out {copy_out_s:.3f} s, "
      f"the driver's peak RSS {peak} kB")
