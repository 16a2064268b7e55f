"""One sandboxer command on one of bench/fleet.sh's stores, timed (shared by its parts)."""
import os
import subprocess
import sys
import time


def make_timed(binary, stores, extra_argv=()):
    """stores: {name: (extra environment, state dir)}. Returns timed(store, *args) -> (ms, stdout),
    which ends the bench when the command fails: a time of a failed command means nothing."""

    def timed(store, *args):
        extra, state = stores[store]
        argv = [binary, "--state-dir", state, *extra_argv, *args]
        start = time.perf_counter()
        proc = subprocess.run(argv, env=dict(os.environ, **extra), capture_output=True, text=True)
        ms = (time.perf_counter() - start) * 1000
        if proc.returncode != 0:
            sys.exit(f"FAIL: {store}: {' '.join(args)}: exit {proc.returncode}: "
                     f"{proc.stderr.strip()}")
        return ms, proc.stdout

    return timed
