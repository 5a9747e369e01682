"""The machine a number was computed on: what decides whether the same code, run again, performs
the same floating-point operations in the same order.

Committed results (:mod:`lib.book.results`) and the committed ledger (:mod:`lib.book.ledger`)
record :func:`environment`; a later run compares its own with :func:`same_machine` and holds the
recorded numbers to their last digits only where the two agree on :data:`SAME_MACHINE`. Elsewhere
the chapters' long trainings amplify the last bits in which two CPUs' arithmetic differs, and a
moved number is reported, not failed. This module imports neither torch nor numpy.
"""

from __future__ import annotations

import platform
from importlib import metadata

from lib.engine.validation import describe

_PACKAGES = ("numpy", "scipy", "torch", "numba")


def _cpuinfo(field: str) -> str | None:
    """The first ``field`` line of Linux's /proc/cpuinfo, after its colon (None elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform module reports."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_features() -> str:
    """What, beyond the model's name, decides the order of a CPU's floating-point operations: the
    CPU that LLVM (numba's compiler) targets on this host and the widest vector instruction set
    it offers (OpenBLAS and torch choose their kernels by it), e.g. ``"znver3, avx2"``.

    The model name alone does not tell two machines apart: a host reporting "AMD EPYC" (znver3,
    AVX2, no AVX-512) moved 66 numbers of a ledger that another "AMD EPYC" host had written
    (measured 2026-12-01).
    """
    try:
        from llvmlite import binding

        target = binding.get_host_cpu_name()
    except Exception:  # pragma: no cover - llvmlite comes with numba, a dependency
        target = "unknown target"
    flags = set((_cpuinfo("flags") or "").split())
    widest = next((name for flag, name in (("avx512f", "avx512"), ("avx2", "avx2"),
                                           ("avx", "avx"), ("sse2", "sse2")) if flag in flags),
                  "unknown vector set")
    return f"{target}, {widest}"


def host() -> str:
    """This running host: Linux's boot id (a random id drawn at each boot, so two virtual machines
    started from one image differ), else the platform's node name.

    Model, features and library versions do not tell two hosts' arithmetic apart: on 2026-12-02 a
    host that agreed with the committed ledger's on every other :data:`SAME_MACHINE` field
    ("AMD EPYC", "znver4, avx512", the same numpy, torch and numba, 2 cores) ran poisoning-in-
    practice's Table 1, row 3 with the authors' initialization to other errors on 13 of its 32
    seeds (up to 2.7 times; the other 19 bit for bit the same), reproducibly on that host. Only a
    run on the host that wrote a number is known to repeat it to its last digit.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="utf-8") as boot:
            boot_id = boot.read().strip()
    except OSError:
        boot_id = ""
    return boot_id or platform.node() or "unknown host"


#: The fields of :func:`environment` that must agree for two runs of the same code to perform the
#: same floating-point operations in the same order: the same host (:func:`host`) with the same
#: libraries; the CPU's model and features (:func:`cpu_features`) are kept for the record.
SAME_MACHINE = ("host", "cpu", "cpu_features", "numpy", "torch", "numba")


def environment() -> dict[str, str]:
    """Python and library versions, the CPU's model and its features, and the host (:func:`host`):
    two runs that agree on :data:`SAME_MACHINE` run the same floating-point operations in the
    same order (numba compiles for the CPU it runs on)."""
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:  # pragma: no cover - all are dependencies
            versions[name] = "not installed"
    versions["cpu"] = cpu_model()
    versions["cpu_features"] = cpu_features()
    versions["host"] = host()
    return versions


def same_machine(recorded) -> bool:
    """Whether ``recorded`` (the ``environment`` of a results file, the machine of the committed
    ledger) names this machine: the same :data:`SAME_MACHINE` fields. A record that lacks one was
    written elsewhere, or before the field was recorded."""
    if not isinstance(recorded, dict):
        raise ValueError(
            f"recorded must be the dict environment() returns, got {describe(recorded)}")
    here = environment()
    return all(recorded.get(key) == here[key] for key in SAME_MACHINE)


