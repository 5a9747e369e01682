"""Debian's packages that the book's tools use: bubblewrap and python3-seccomp (the grading
sandbox, tools/sandbox.py) and chromium (the site test and the PDF, tools/site_test.py,
tools/pdf.py).

Each tool installs what it lacks with apt-get when it runs as root (CI), through
:func:`apt_install`. Two installs at once contend for dpkg's lock, and the second used to fail at
once: CI grades in the background while the book builds, so a grading worker's python3-seccomp
install and the site test's Chromium install (or two grading workers) could meet, and the
sandbox then reported its bindings missing. So the installs take turns on a lock file and wait
for any other apt-get's dpkg lock (apt's ``DPkg::Lock::Timeout``), and
``python tools/system_packages.py`` (make system-packages, CI's first step) installs all that is
missing in one apt-get call, before anything runs in parallel.

As a command it does nothing where it is not root or there is no apt-get: there each tool, when
it needs its package, stops with the command to run.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile

# Seconds an apt-get call waits for another one's lock before giving up.
LOCK_WAIT = 900
# The lock file on which this module's installs take turns.
APT_TURN = os.path.join(tempfile.gettempdir(), "book-apt-get.lock")


def can_install() -> bool:
    """Whether apt-get can install here: we are root and it exists."""
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get") is not None


def apt_install(packages: list[str], *, check: bool = False) -> bool:
    """``apt-get update`` then ``apt-get install -y`` of ``packages``, each waiting up to
    LOCK_WAIT seconds for another apt-get's lock; True when both succeeded. With ``check`` a
    failure raises CalledProcessError."""
    quiet = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}  # no prompt in CI
    wait = ["-o", f"DPkg::Lock::Timeout={LOCK_WAIT}"]
    steps = (
        ["apt-get", *wait, "update", "-q"],
        ["apt-get", *wait, "install", "-y", "-q", *packages],
    )
    # apt's timeout covers dpkg's lock, not the package lists' lock that `apt-get update` takes
    # (measured: of two threads here, the second's update failed at once), so the tools' own
    # installs take turns on a lock file of their own first.
    with open(APT_TURN, "a") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)
        for step in steps:
            done = subprocess.run(step, check=check, env=quiet, stdout=subprocess.DEVNULL)
            if done.returncode != 0:
                return False
    return True


def _system_python_has_seccomp() -> bool:
    python = "/usr/bin/python3"
    if not os.path.exists(python):
        return False
    found = subprocess.run([python, "-I", "-c", "import seccomp"], capture_output=True)
    return found.returncode == 0


def missing() -> list[str]:
    """The packages of this module's list that are not installed."""
    wanted = {
        "bubblewrap": shutil.which("bwrap") is not None,
        "python3-seccomp": _system_python_has_seccomp(),
        "chromium": (os.environ.get("CHROMIUM") or shutil.which("chromium")) is not None,
    }
    return [name for name, present in wanted.items() if not present]


def main() -> int:
    lacking = missing()
    if not lacking:
        print("system packages: bubblewrap, python3-seccomp and chromium are installed")
        return 0
    if not can_install():
        print(
            f"system packages: {', '.join(lacking)} missing; each tool that needs one says how to "
            "install it (apt-get needs root)"
        )
        return 0
    print(f"system packages: installing {', '.join(lacking)} with apt-get", flush=True)
    return 0 if apt_install(lacking) else 1


if __name__ == "__main__":
    sys.exit(main())
