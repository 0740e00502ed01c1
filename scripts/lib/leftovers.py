#!/usr/bin/env python3
"""Lists (and optionally ends) the processes a test run left behind.

scripts/test.sh exports GPUSHARE_TEST_RUN=<a value unique to the run> before
its first stage. Every process a stage starts inherits it (a process's
/proc/PID/environ is the environment it was executed with), including servers
started under chroot, setsid or a new process group, which a process-group or
parent-PID check would miss. After a stage, this script lists every process
whose environment carries that value; run it without the variable itself
(`env -u GPUSHARE_TEST_RUN`), so that it does not find itself.

  leftovers.py MARKER [--wait SECONDS] [--kill]

Waits up to --wait seconds (default 5) for such processes to exit (a stage's
cleanup may have just signalled them), then prints one line per process still
there, "PID NAME COMMAND-LINE", and exits 1; exits 0 when there are none.
With --kill, each leftover is sent SIGTERM, then SIGKILL after 5 s, so that
the next stage starts clean. Zombies (exited, not yet reaped) are not counted.
Processes that cleared their environment (env -i) are not seen.
"""

import argparse
import os
import signal
import sys
import time


def carriers(marker: bytes):
    """PIDs of live processes whose environment contains `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:  # Gone, or not ours to read.
            continue
        if state == b"Z" or marker not in env:
            continue
        found.append(pid)
    return found


def describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            name = f.read().strip()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return f"{pid} (exited)"
    return f"{pid} {name} {cmd[:300]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("marker", help="the value of GPUSHARE_TEST_RUN")
    ap.add_argument("--wait", type=float, default=5.0)
    ap.add_argument("--kill", action="store_true")
    args = ap.parse_args()
    if not args.marker:
        ap.error("the marker is empty")
    marker = ("GPUSHARE_TEST_RUN=" + args.marker).encode()
    deadline = time.monotonic() + args.wait
    pids = carriers(marker)
    while pids and time.monotonic() < deadline:
        time.sleep(0.2)
        pids = carriers(marker)
    if not pids:
        return 0
    for pid in pids:
        print(describe(pid))
    if args.kill:
        for sig, pause in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            end = time.monotonic() + pause
            while time.monotonic() < end:
                pids = carriers(marker)
                if not pids:
                    break
                time.sleep(0.2)
            if not pids:
                break
    return 1


if __name__ == "__main__":
    sys.exit(main())
