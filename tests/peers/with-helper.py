"""Runs a command after starting a helper that outlives politeness: the helper sits in a
process group of its own and ignores SIGTERM (as a browser, a language server or a `sleep`
in a shell wrapper a real server starts may). For tests of the edge's stdio supervision.

    python with-helper.py PIDFILE -- COMMAND [ARGS...]

Appends the helper's pid to PIDFILE, then becomes COMMAND (exec: same process id, the
helper its child).
"""

import os
import subprocess
import sys

HELPER = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    time.sleep(60)\n"


def main():
    pidfile = sys.argv[1]
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    helper = subprocess.Popen(
        [sys.executable, "-c", HELPER],
        process_group=0,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with open(pidfile, "a") as f:
        f.write(f"{helper.pid}\n")
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
