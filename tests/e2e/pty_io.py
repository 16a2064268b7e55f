"""Reading a pseudo-terminal's output for the tests that drive one (run_on_pty.py,
complete_on_pty.py)."""
import os
import select
import time


def read_until(fd, done, deadline):
    """Reads from fd until done(what was read) is true, the deadline passes or the other side
    closes the terminal; returns what was read."""
    text = b""
    while time.time() < deadline and not done(text):
        ready, _, _ = select.select([fd], [], [], 0.05)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        text += chunk
    return text
