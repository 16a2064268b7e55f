"""complete_on_pty.py LINES ARGV...: starts the interactive shell ARGV on a new pseudo-terminal
(50 rows x 200 columns), whose prompt must end in "READY> ", and types each line of the file
LINES as a person would: a tab character in a line is a TAB key, after which it waits for the
shell's answer; the line ends with Enter, after which it waits for the next prompt. Prints what
the terminal showed, escape sequences and carriage returns removed. Each line may take 10 s at
the most; then it gives up and exits 1. What the shells' line editors do with TAB cannot be seen
without a terminal (tests/e2e/test_completion.sh)."""
import fcntl
import os
import pty
import re
import struct
import sys
import termios
import time

from pty_io import read_until

PROMPT = b"READY> "
LINE_BUDGET = 10.0


def settled(fd, deadline):
    """What the shell prints after a TAB: its first output, then until it is quiet for 0.3 s."""
    text = read_until(fd, lambda t: len(t) > 0, min(deadline, time.time() + 3))
    while time.time() < deadline:
        more = read_until(fd, lambda t: len(t) > 0, min(deadline, time.time() + 0.3))
        if not more:
            break
        text += more
    return text


def clean(text):
    text = text.decode(errors="replace")
    text = re.sub(r"\x1b\][^\x07]*\x07", "", text)
    text = re.sub(r"\x1b\[[0-9;?]*[ -/]*[@-~]", "", text)
    text = re.sub(r"\x1b[()][0-9A-Za-z]|\x1b[=>78]", "", text)
    return text.replace("\r", "").replace("\x07", "")


lines_file, argv = sys.argv[1], sys.argv[2:]
with open(lines_file) as f:
    lines = f.read().splitlines()
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))

screen = read_until(fd, lambda t: PROMPT in t, time.time() + LINE_BUDGET)
failed = PROMPT not in screen
for line in lines if not failed else []:
    deadline = time.time() + LINE_BUDGET
    for part in re.split(r"(\t)", line):
        if part:
            os.write(fd, part.encode())
            screen += settled(fd, deadline) if part == "\t" else b""
    os.write(fd, b"\n")
    answer = read_until(fd, lambda t: PROMPT in t, deadline)
    screen += answer
    if PROMPT not in answer:
        failed = True
        screen += b"\n[complete_on_pty: no prompt within 10 s]\n"
        break
os.write(fd, b"exit\n")
read_until(fd, lambda t: False, time.time() + 1)
try:
    os.kill(pid, 9)
except ProcessLookupError:
    pass
os.waitpid(pid, 0)
sys.stdout.write(clean(screen))
sys.exit(1 if failed else 0)
