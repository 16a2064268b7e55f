"""run_on_pty.py OUTPUT ARGV...: runs ARGV on a new pseudo-terminal standing in for the user's
(33 rows x 111 columns), resizes it to 44x132 once the output shows "first=", and writes the
output (without carriage returns) then "exit=N" to OUTPUT. Gives up after 60 s."""
import fcntl
import os
import pty
import select
import struct
import sys
import termios
import time

output, argv = sys.argv[1], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)


def set_size(rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


set_size(33, 111)
text, resized, deadline = b"", False, time.time() + 60
while time.time() < deadline:
    ready, _, _ = select.select([fd], [], [], 0.1)
    if not ready:
        continue
    try:
        chunk = os.read(fd, 4096)
    except OSError:  # EIO: the child closed the terminal
        break
    if not chunk:
        break
    text += chunk
    if not resized and b"first=" in text:
        set_size(44, 132)
        resized = True
_, status = os.waitpid(pid, 0)
with open(output, "w") as f:
    f.write(text.decode(errors="replace").replace("\r", ""))
    f.write("exit=%d\n" % os.waitstatus_to_exitcode(status))
