"""run_on_pty.py OUTPUT ARGV...: runs ARGV on a new pseudo-terminal standing in for the user's
(33 rows x 111 columns), resizes it to 44x132 once the output shows "first=", and writes the
output (without carriage returns) then "exit=N" to OUTPUT. Gives up after 60 s."""
import fcntl
import os
import pty
import struct
import sys
import termios
import time

from pty_io import read_until

output, argv = sys.argv[1], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)


def set_size(rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


set_size(33, 111)
deadline = time.time() + 60
text = read_until(fd, lambda t: b"first=" in t, deadline)
if b"first=" in text:
    set_size(44, 132)
    text += read_until(fd, lambda t: False, deadline)
_, status = os.waitpid(pid, 0)
with open(output, "w") as f:
    f.write(text.decode(errors="replace").replace("\r", ""))
    f.write("exit=%d\n" % os.waitstatus_to_exitcode(status))
