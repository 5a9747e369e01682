"""Run untrusted code (a student's notebook) in a sandbox: bubblewrap, prlimit, a separate uid.

The grader (tools/grading.py) runs every submission through :func:`run`. What the sandboxed process
gets, and what it does not:

- **Files.** A new mount namespace built by `bubblewrap <https://github.com/containers/bubblewrap>`_
  (``bwrap``, the sandbox Flatpak uses): read-only views of ``/usr``, of the Python installation and
  the virtual environment, and of the book's ``lib`` package; a private ``/tmp`` (a size-capped
  tmpfs that vanishes with the sandbox) as its home and working folder; a minimal ``/dev`` with a
  size-capped ``/dev/shm``, and its own ``/proc``. Everything else is read-only (bwrap's own
  tmpfs mounts, the root and ``/dev``, would otherwise hold up to half the machine's memory).
  Nothing else of the machine is mounted: not the repository (solutions, hidden tests), not the
  folder of submissions, not ``grades.csv``, not the other sandboxes.
- **Environment.** The sandboxed program gets a few fixed variables (``--clearenv``), and the
  launchers get only ``PATH`` and ``LANG``: bwrap's first process, pid 1 inside the sandbox, keeps
  the environment it was started with, readable in ``/proc/1/environ``, and the grader's holds
  ``COURSE_SECRET``.
- **Namespaces.** ``--unshare-all``: its own user, PID, network (loopback only: no network),
  IPC, UTS and cgroup namespaces; ``--die-with-parent`` and a PID namespace, so that killing
  ``bwrap`` kills every process the submission started, detached or not; ``--new-session``, so it
  cannot push characters into the instructor's terminal.
- **Limits.** ``prlimit`` (util-linux) sets CPU seconds, address space (memory), the size of a
  file, open files and the number of processes: for a sandbox with a uid of its own, before it
  starts; otherwise inside its user namespace, where Linux 5.14 and later count only its own
  processes (older kernels: no process limit without root). Memory held outside the address
  space (in-memory files of ``memfd_create``, System V shared memory) is not limited: only a
  memory cgroup around the grader limits that (see book/course.md).
- **System calls.** A seccomp filter (compiled with libseccomp's own Python bindings, Debian's
  ``python3-seccomp``, and handed to ``bwrap --seccomp``) refuses what a notebook never needs and
  the namespaces do not cover: ``socket(AF_VSOCK, ...)`` (a virtual machine's channel to its
  host, outside any network namespace), ``io_uring``, the kernel keyring (``keyctl``,
  ``add_key``, ``request_key``), ``ptrace`` and ``process_vm_readv``/``writev``, ``bpf``,
  ``perf_event_open`` and ``userfaultfd``; and file locks (``flock``, ``fcntl``'s record locks
  and leases) and file notifications (``inotify``, ``fanotify``, ``fcntl``'s ``F_NOTIFY``),
  through which two sandboxes that see the same read-only file could talk. Another
  architecture's system calls (the 32-bit ABI) kill the process.
- **A uid of its own.** When the grader runs as root, each concurrent sandbox runs as its own
  unprivileged uid (``setpriv``, util-linux), so that its process limit counts only its own
  processes. Where the Python installation lies under a folder that uid cannot enter (``/root``),
  it is bind-mounted to a staging folder first, in a private mount namespace of ``unshare``.

Where bubblewrap is missing and we are root with apt-get (CI), it is installed
(``apt-get install bubblewrap``); where it cannot run at all (no user namespaces), :func:`check`
raises :class:`SandboxUnavailable` and the grader refuses to grade unless told to run unsandboxed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import system_packages  # tools/, on the path of whoever imports this module

UID_BASE = 2_000_000  # sandbox uids when we are root: UID_BASE + k, k < UID_RANGE, leased
UID_RANGE = 1_000_000  # (no account needs these uids: nothing on disk belongs to them)
USED_UIDS: set[int] = set()  # the uids this process's sandboxes ran as
STDOUT_CAP = 64 * 2**20  # bytes of the result stream kept
STDERR_CAP = 256 * 2**10  # bytes of the submission's own output kept (head), for the log


class SandboxUnavailable(RuntimeError):
    """This machine cannot run bubblewrap sandboxes (missing, or no user namespaces)."""


@dataclass
class Limits:
    """Resource limits of one sandbox (``prlimit`` names in brackets)."""

    wall_seconds: float = 300.0  # killed after this, whatever it does
    cpu_seconds: int = 300  # [--cpu] CPU time: SIGXCPU, then SIGKILL 5 s later
    memory_bytes: int = 4 * 2**30  # [--as] address space of each process
    processes: int = 64  # [--nproc] processes and threads of the sandbox's uid
    tmp_bytes: int = 256 * 2**20  # size of its private /tmp (a tmpfs)
    shm_bytes: int = 64 * 2**20  # size of its /dev/shm (a tmpfs: POSIX shared memory, semaphores)
    file_bytes: int = 128 * 2**20  # [--fsize] largest file it may write
    open_files: int = 256  # [--nofile]


@dataclass
class Result:
    returncode: int | None
    stdout: bytes
    stderr: bytes
    seconds: float
    timed_out: bool = False
    notes: list[str] = field(default_factory=list)


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def bwrap_path(install: bool = True) -> str:
    """The ``bwrap`` executable; installed with apt-get when missing and we are root."""
    found = shutil.which("bwrap")
    if found:
        return found
    if install and is_root() and shutil.which("apt-get"):
        print("grade: no bubblewrap; installing Debian's bubblewrap with apt-get", flush=True)
        system_packages.apt_install(["bubblewrap"], check=True)
        found = shutil.which("bwrap")
        if found:
            return found
    raise SandboxUnavailable(
        "grading runs each submission in a bubblewrap sandbox, and bwrap is not installed: run "
        "`sudo apt-get install bubblewrap` (Debian/Ubuntu) or `sudo dnf install bubblewrap`, or "
        "grade unsandboxed at your own risk with --unsandboxed (make grade UNSANDBOXED=1)"
    )


# The filter, compiled by libseccomp: its Python bindings are a C extension of the system's
# Python (Debian's python3-seccomp), so it is compiled there, once, by a short script.
SECCOMP_SCRIPT = r"""
import errno, sys
import seccomp

refused = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
for name in sys.argv[2:]:
    refused.add_rule(seccomp.ERRNO(errno.EPERM), name)
AF_VSOCK = 40
refused.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), "socket", seccomp.Arg(0, seccomp.EQ, AF_VSOCK))
# File locks and leases: F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW,
# F_SETLEASE, F_GETLEASE; and flock(2).
for command in (5, 6, 7, 36, 37, 38, 1024, 1025):
    refused.add_rule(seccomp.ERRNO(errno.ENOLCK), "fcntl", seccomp.Arg(1, seccomp.EQ, command))
refused.add_rule(seccomp.ERRNO(errno.ENOLCK), "flock")
F_NOTIFY = 1026  # dnotify: a folder's accesses by anyone
refused.add_rule(seccomp.ERRNO(errno.EPERM), "fcntl", seccomp.Arg(1, seccomp.EQ, F_NOTIFY))
with open(sys.argv[1], "wb") as out:
    refused.export_bpf(out)
"""
# What is refused, and why: what a notebook never needs and the namespaces do not cover. The file
# locks, leases and notifications (inotify, fanotify, dnotify) of a file that two sandboxes both
# see read-only (any file of /usr) work across namespaces and uids: two sandboxes graded at once
# could talk through them (one with torch answering another where torch is absent).
REFUSED_SYSCALLS = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "inotify_init",
    "inotify_init1",
    "inotify_add_watch",
    "fanotify_init",
    "fanotify_mark",
)


def _seccomp_pythons() -> list[str]:
    found = [sys.executable]
    for candidate in ("/usr/bin/python3", shutil.which("python3")):
        if candidate and candidate not in found and os.path.exists(candidate):
            found.append(candidate)
    return found


def _compile_seccomp() -> bytes | None:
    for python in _seccomp_pythons():
        with tempfile.TemporaryDirectory(prefix="seccomp-") as scratch:
            out = Path(scratch) / "filter.bpf"
            done = subprocess.run(
                [python, "-I", "-c", SECCOMP_SCRIPT, str(out), *REFUSED_SYSCALLS],
                capture_output=True,
                env=host_environment(),
            )
            if done.returncode == 0 and out.is_file() and out.stat().st_size > 0:
                return out.read_bytes()
    return None


def seccomp_filter(install: bool = True) -> bytes:
    """The compiled BPF program of the sandbox's system-call filter (installs Debian's
    python3-seccomp with apt-get when missing and we are root); SandboxUnavailable if none."""
    if "seccomp" in _FILTER:
        return _FILTER["seccomp"]
    program = _compile_seccomp()
    if program is None and install and is_root() and shutil.which("apt-get"):
        print("grade: no libseccomp bindings; installing Debian's python3-seccomp", flush=True)
        system_packages.apt_install(["python3-seccomp"])
        program = _compile_seccomp()
    if program is None:
        raise SandboxUnavailable(
            "the sandbox's system-call filter is compiled with libseccomp's Python bindings, "
            "which are missing: run `sudo apt-get install python3-seccomp` (Debian/Ubuntu) or "
            "`sudo dnf install python3-libseccomp`"
        )
    _FILTER["seccomp"] = program
    return program


_FILTER: dict[str, bytes] = {}
_CHECKED: dict[str, str] = {}


def check(install: bool = True) -> str:
    """Return the ``bwrap`` path once a trivial sandbox has run; raise SandboxUnavailable if not."""
    if "bwrap" in _CHECKED:
        return _CHECKED["bwrap"]
    bwrap = bwrap_path(install)
    program = seccomp_filter(install)
    with _filter_fd(program) as fd:
        probe = subprocess.run(
            [bwrap, "--unshare-all", "--seccomp", str(fd), *_system_mounts(), "--", "true"],
            capture_output=True,
            text=True,
            env=host_environment(),
            pass_fds=(fd,),
        )
    if probe.returncode != 0:
        raise SandboxUnavailable(
            "bubblewrap cannot create a sandbox on this machine (user namespaces disabled?): "
            f"{probe.stderr.strip()}; grade unsandboxed at your own risk with --unsandboxed"
        )
    _CHECKED["bwrap"] = bwrap
    return bwrap


@contextlib.contextmanager
def _filter_fd(program: bytes):
    """A file descriptor holding ``program`` from its start (one per sandbox: bwrap reads it)."""
    fd = os.memfd_create("seccomp", 0)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


def missing() -> str | None:
    """Why sandboxes cannot run here, or None when they can (or when we are root: then a missing
    bubblewrap is installed, and a failure is an error, not a reason). For test suites to skip."""
    if is_root():
        return None
    try:
        check()
    except SandboxUnavailable as error:
        return str(error)
    return None


def _system_mounts() -> list[str]:
    """``/usr`` read-only, and ``/bin``, ``/lib``... as on the host (symlinks or binds)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for name in ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "fonts", "localtime", "alternatives"):
        if os.path.exists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


def _enterable_by_others(path: Path) -> bool:
    """Whether a uid other than ours can reach ``path`` (every folder above it has o+x)."""
    for folder in [*reversed(path.parents), path]:
        try:
            mode = folder.stat().st_mode
        except OSError:
            return False
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return False
    return True


def python_mounts() -> list[Path]:
    """The folders this interpreter needs: its installation and the virtual environment."""
    folders = {Path(sys.base_prefix).resolve(), Path(sys.prefix).absolute()}
    return sorted(folders)


def nproc_per_namespace() -> bool:
    """Whether this kernel counts a process limit per user namespace (Linux 5.14 and later).

    Then ``prlimit --nproc`` run *inside* the sandbox's user namespace counts only the sandbox's
    processes, even when it runs as our own uid (not root: no uid of its own). Before 5.14 the
    count is every process of the uid on the machine, so the limit is left out there.
    """
    release = os.uname().release.split(".")
    try:
        version = (int(release[0]), int("".join(c for c in release[1] if c.isdigit()) or 0))
    except (IndexError, ValueError):
        return False
    return version >= (5, 14)


def host_environment() -> dict[str, str]:
    """The environment the sandbox's launchers (unshare, setpriv, prlimit, bwrap) start with.

    Not ours: bwrap's first process inside the sandbox (its pid 1) keeps the environment it was
    started with, and the submission can read ``/proc/1/environ``; ours holds COURSE_SECRET.
    """
    return {"PATH": os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def _wait_unreaped(pid: int, seconds: float, stopped=None) -> bool:
    """Wait up to ``seconds`` for the child ``pid`` to end (or ``stopped`` to be set), without
    reaping it; True if it did."""
    deadline = time.monotonic() + seconds
    while True:
        if stopped is not None and stopped.is_set():
            return True
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
        except ChildProcessError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.kill()


def _reader(stream, cap: int, into: bytearray, stop_on=None, stopped=None) -> None:
    """Read ``stream`` to its end, keeping the first ``cap`` bytes (the rest is discarded); set
    ``stopped`` once the kept bytes hold ``stop_on``, and stop reading there."""
    while True:
        chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not chunk:
            return
        room = cap - len(into)
        if room > 0:
            start = max(0, len(into) - len(stop_on or b""))
            into += chunk[:room]
            if stop_on and stop_on in into[start:]:
                stopped.set()
                return


def _writer(stream, data: bytes) -> None:
    try:
        stream.write(data)
        stream.close()
    except (BrokenPipeError, OSError):
        pass


def _communicate(
    process: subprocess.Popen,
    stdin: bytes,
    wall_seconds: float,
    stop_on: bytes | None = None,
    stdout_cap: int = STDOUT_CAP,
) -> Result:
    """Feed ``stdin``, collect capped stdout and stderr, kill the process group at the deadline
    (or once stdout holds ``stop_on``)."""
    start = time.monotonic()
    out, err = bytearray(), bytearray()
    stopped = threading.Event()
    threads = [
        threading.Thread(
            target=_reader, args=(process.stdout, stdout_cap, out, stop_on, stopped), daemon=True
        ),
        threading.Thread(target=_reader, args=(process.stderr, STDERR_CAP, err), daemon=True),
        threading.Thread(target=_writer, args=(process.stdin, stdin), daemon=True),
    ]
    for thread in threads:
        thread.start()
    timed_out = not _wait_unreaped(process.pid, wall_seconds, stopped)
    # The process has ended (or is late) but is not reaped yet, so its id, which is also its
    # group's, cannot have been given to another process: killing the group hits only ours.
    _kill(process)
    process.wait()
    for thread in threads[:2]:
        thread.join(timeout=10)
    result = Result(process.returncode, bytes(out), bytes(err), time.monotonic() - start)
    result.timed_out = timed_out
    return result


def _leftover(uid: int) -> list[int]:
    """Processes still running as ``uid`` (none should survive a sandbox: checked, and killed)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info.get("uids")
        if uids is not None and uid in (uids.real, uids.effective):
            found.append(proc.pid)
    return found


def command(
    argv: list[str],
    mounts: list[tuple[Path, str]],
    limits: Limits,
    *,
    uid: int | None = None,
    env: dict[str, str] | None = None,
    staging: Path | None = None,
    seccomp_fd: int | None = None,
) -> tuple[list[str], int | None]:
    """The full command line of a sandbox running ``argv``, and the uid it runs as (or None).

    ``mounts`` are (host path, sandbox path) pairs, bound read-only, in order (a later one may
    cover a folder of an earlier one); ``uid`` is the uid to run as (None: ours);
    ``seccomp_fd`` a descriptor holding the system-call filter (:func:`seccomp_filter`), which
    the command's process must inherit.
    """
    bwrap = check()
    staged: list[tuple[str, str]] = []
    binds: list[str] = []
    for host, inside in mounts:
        source = str(host)
        if uid is not None and not _enterable_by_others(Path(host)):
            if staging is None:
                raise ValueError("staging: a folder is needed to stage " + source)
            target = staging / f"m{len(staged)}"
            if Path(host).is_dir():
                target.mkdir()
            else:
                target.touch()
            staged.append((source, str(target)))
            source = str(target)
        binds += ["--ro-bind", source, inside]
    environment = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "USER": "student",
        "LANG": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": "/tmp/.matplotlib",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        **(env or {}),
    }
    sandbox = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
    ]
    if seccomp_fd is not None:
        sandbox += ["--seccomp", str(seccomp_fd)]
    sandbox += ["--clearenv", "--hostname", "sandbox"]
    for key, value in environment.items():
        sandbox += ["--setenv", key, value]
    # The private /tmp first: the read-only binds that follow may live under /tmp on the host (a
    # checkout in /tmp, as CI's fresh clones are), and a tmpfs mounted after them would hide them.
    sandbox += ["--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
    sandbox += _system_mounts() + binds
    sandbox += ["--proc", "/proc", "--dev", "/dev"]
    sandbox += ["--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm"]
    # bwrap's own tmpfs mounts (the root, /dev) have the kernel's default size, half the
    # machine's memory, which no rlimit counts: read-only, once every mount point is made.
    sandbox += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--"]
    rlimits = [
        "prlimit",
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 5}",
        f"--as={limits.memory_bytes}",
        f"--fsize={limits.file_bytes}",
        f"--nofile={limits.open_files}",
        "--core=0",
    ]
    inside = []
    if uid is not None:
        rlimits.append(f"--nproc={limits.processes}")
    elif nproc_per_namespace():
        inside = ["prlimit", f"--nproc={limits.processes}", "--"]
    line = [*rlimits, "--", *sandbox, *inside, *argv]
    if uid is not None:
        line = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *line]
    if staged:  # a private mount namespace in which the staging folders show the real ones
        script = 'while [ "$1" != "--" ]; do mount --bind "$1" "$2" || exit 97; shift 2; done'
        script += '; shift; exec "$@"'
        pairs = [part for pair in staged for part in pair]
        prefix = ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script]
        line = [*prefix, "sh", *pairs, "--", *line]
    return line, uid


def run(
    argv: list[str],
    *,
    stdin: bytes,
    mounts: list[tuple[Path, str]],
    limits: Limits,
    env: dict[str, str] | None = None,
    stop_on: bytes | None = None,
    stdout_cap: int = STDOUT_CAP,
) -> Result:
    """Run ``argv`` in a fresh sandbox, feed it ``stdin``, and return what it wrote.

    Whatever happens, when this returns the sandbox's processes are gone (the PID namespace dies
    with ``bwrap``, which is killed after ``limits.wall_seconds``, or as soon as its stdout holds
    ``stop_on``) and its temporary files with it. At most ``stdout_cap`` bytes of stdout are kept.
    """
    program = seccomp_filter()
    with _lease() as (uid, staging), _filter_fd(program) as fd:
        line, uid = command(argv, mounts, limits, uid=uid, env=env, staging=staging, seccomp_fd=fd)
        process = subprocess.Popen(
            line,
            env=host_environment(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(fd,),
            cwd="/",  # the launchers' PWD, which bwrap's first process shows in /proc/1/environ
        )
        result = _communicate(process, stdin, limits.wall_seconds, stop_on, stdout_cap)
        if uid is not None:
            _reap(uid, result)
    return result


LEASES = Path(tempfile.gettempdir()) / "sandbox-leases"


@contextlib.contextmanager
def _lease():
    """(uid, staging folder) of one sandbox, held while it runs; (None, None) unless we are root.

    The uid is one no other sandbox uses: a lock file per uid (``flock``, released when this
    process ends, however it ends) keeps two graders running at once from sharing a uid, and so
    from counting or killing each other's processes; a uid that still has processes is skipped.
    The staging folder, ``<uid>.stage`` beside the lock, holds the empty mount points of
    :func:`command`; one left by a grader that was killed is removed once its lock is free.
    """
    if not is_root():
        yield None, None
        return
    import random

    LEASES.mkdir(mode=0o755, exist_ok=True)  # sandbox uids must enter it to reach the staging
    _check_ours(LEASES)
    for stale in LEASES.glob("*.stage"):
        with _locked(LEASES / stale.name.replace(".stage", ".lock")) as free:
            if free:
                shutil.rmtree(stale, ignore_errors=True)
    for _ in range(1000):
        uid = UID_BASE + random.randrange(UID_RANGE)
        with _locked(LEASES / f"{uid}.lock") as free:
            if not free or _leftover(uid):
                continue
            staging = LEASES / f"{uid}.stage"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(mode=0o755)
            USED_UIDS.add(uid)
            try:
                yield uid, staging
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            return
    raise SandboxUnavailable("no free sandbox uid (1000 tries)")


def _check_ours(folder: Path) -> None:
    """Refuse a lease folder that another user made or can write: as root we open, truncate and
    remove files in it, and symbolic links planted there would point those at any file."""
    info = os.lstat(folder)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise SandboxUnavailable(f"{folder} is not a folder (a symbolic link?): remove it")
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise SandboxUnavailable(
            f"{folder} belongs to another user or others can write to it: remove it"
        )


@contextlib.contextmanager
def _locked(path: Path):
    """Yield whether an exclusive lock on ``path`` was taken (not waiting); drop it after."""
    import fcntl

    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            path.unlink(missing_ok=True)


def _reap(uid: int, result: Result) -> None:
    """Wait for the namespace's processes to go (killing bwrap kills them); kill any that stay."""
    deadline = time.monotonic() + 5
    while _leftover(uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = _leftover(uid)
    for pid in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if survivors:
        result.notes.append(f"killed {len(survivors)} process(es) that outlived the sandbox")


def run_unsandboxed(
    argv: list[str],
    *,
    stdin: bytes,
    limits: Limits,
    stop_on: bytes | None = None,
    stdout_cap: int = STDOUT_CAP,
) -> Result:
    """The same without any isolation (only the limits): for ``--unsandboxed`` grading only."""
    with tempfile.TemporaryDirectory(prefix="unsandboxed-") as scratch:
        rlimits = ["prlimit", f"--cpu={limits.cpu_seconds}", f"--as={limits.memory_bytes}", "--"]
        env = {k: v for k, v in os.environ.items() if k != "COURSE_SECRET"}
        env.update(HOME=scratch, MPLBACKEND="Agg", OMP_NUM_THREADS="1")
        process = subprocess.Popen(
            [*rlimits, *argv],
            cwd=scratch,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        return _communicate(process, stdin, limits.wall_seconds, stop_on, stdout_cap)
