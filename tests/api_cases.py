"""Every public function of ``lib`` with one small valid call, and the bad inputs to try on it.

Shared by the property-based fuzz test (``tests/test_fuzz_api.py``) and the measurement script
``benchmarks/bad_inputs.py``. The table is split by module so that several people can add cases at
once: this file holds the machinery (:class:`Arg`, :class:`Case`, the bad inputs, the outcome
classes) and the cases of the engine and Part I–II modules; every module ``tests/api_cases_*.py``
that defines ``cases() -> list[Case]`` adds its own, and :func:`build_cases` collects them all (a
case there whose name is already in this file replaces this file's one).

A :class:`Case` names a callable, its arguments with one valid value
each and a *kind* per argument (which decides the bad inputs tried), and optionally an *oracle*
that recognizes a correct answer by an independent computation.

Outcome classes (:func:`classify`), as in the book's rule "a ValueError from lib, or a correct
answer":

``lib-error``     a ``ValueError`` raised inside ``lib`` (its message names the argument)
``correct``       accepted, and the answer is the canonical one (a value-preserving conversion such
                  as a list for a tensor or ``2`` for ``2.0``), or the oracle confirms it
``accepted``      accepted, finite answer, a legitimate value of the argument with no oracle
``long-run``      asked for an absurd size (10¹², 2⁶⁴ steps), still running at the time limit: a
                  run as long as asked, not a hang
``foreign-error`` a ``ValueError`` raised outside ``lib`` (numpy, torch) — outside the rule
``other-error``   any other exception — outside the rule
``overflow``      ``MemoryError``/``OverflowError`` (or an allocator's error) on an absurd size —
                  outside the rule: the size is checked before anything is allocated
``nan``           a silent nan/inf answer from ordinary inputs — outside the rule
``nan-big``       a silent nan/inf answer from 1e300-sized inputs — outside the rule: a result
                  that came out non-finite is a ``NumericalFailure``
``wrong``         a silent wrong answer (a string taken for a boolean, an oracle that disagrees)
``hang``          more than the time limit on ordinary sizes

Two outcomes with a non-finite answer stay inside the rule, because the answer says so:
``diverged`` (a training run's ``info["diverged"]`` is set: the engines stop a run at its first
non-finite loss and report it) and ``overflow-passed`` (a loss or gradient closure evaluated at
1e300-sized parameters returns the overflow as it comes, which is how the engines learn that a run
diverged; the case names those parameters in ``Case.overflow_passes``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import importlib
import inspect
import io
import math
import os
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

import lib
from lib.book import data, viz
from lib.engine import curvature, flow
from lib.networks import linear_nets, relu_nets
from lib.poisoning import dynamics as dyn
from lib.poisoning import theorem1 as poison
from lib.ssm import diagonal as ssm
from lib.ssm import extrapolation

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import book_site  # noqa: E402  (tools/ is not a package)

DT = torch.float64
LIB_DIR = os.path.dirname(os.path.abspath(lib.__file__))
OUTSIDE_RULE = (
    "foreign-error", "other-error", "overflow", "nan", "nan-big", "wrong", "hang", "unnamed-file"
)


def t(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=DT)


@dataclass
class Arg:
    name: str
    value: object
    kind: str  # tensor, int, float, bool, callable, params, seq, choice, object, ssm, text,
    # device, file, folder, closure-params
    keyword: bool = False
    # bad inputs of this argument only (label, value, class), tried after its kind's catalogue:
    # the content-level classes a kind cannot generate (a constant CIFAR-format batch)
    extra: list = field(default_factory=list)


@dataclass
class Case:
    name: str
    fn: Callable
    args: list[Arg]
    oracle: Callable | None = None  # oracle(result, **kwargs) -> bool
    examples: int = 8  # Hypothesis examples in the fuzz test
    convert_only: tuple[str, ...] = field(default_factory=tuple)
    # Parameters at which a loss or gradient closure returns an overflow (inf/nan) as it comes, so
    # that lib.engine.flow's engines can flag a diverging run (their documented contract): at
    # 1e300-sized values of these (or, for a callable argument, when it answers nan), a non-finite
    # answer is that contract, not a silent failure.
    overflow_passes: tuple[str, ...] = field(default_factory=tuple)

    def call(self, values: dict | None = None):
        values = {a.name: a.value for a in self.args} | (values or {})
        positional = [values[a.name] for a in self.args if not a.keyword]
        keywords = {a.name: values[a.name] for a in self.args if a.keyword}
        return self.fn(*positional, **keywords)


# ------------------------------------------------------------------------------------------
# Bad inputs per kind: (label, value, class); class "convert" keeps the value (same answer
# expected), "big" is 1e300-sized, "absurd" an absurd size, "bad" anything else.
# ------------------------------------------------------------------------------------------


def _tensor_mutations(value: torch.Tensor):
    real = value if value.is_floating_point() else value.to(DT)
    out = [
        ("list", value.tolist(), "convert"),
        ("numpy", value.numpy().copy(), "convert"),
        ("float32", real.float(), "bad"),
        ("complex", real.to(torch.complex128), "bad"),
        ("bool tensor", value > 0, "bad"),
        ("None", None, "bad"),
        ("string", "abc", "bad"),
        ("empty", value.reshape(-1)[:0], "bad"),
        ("extra axis", value.unsqueeze(0).repeat(2, *[1] * value.ndim), "bad"),
        ("nan", torch.full_like(real, math.nan), "bad"),
        ("inf", torch.full_like(real, math.inf), "bad"),
        ("negated", -value, "bad"),
        ("zeros", torch.zeros_like(value), "bad"),
        ("1e300", _huge_like(real), "big"),
    ]
    if value.ndim >= 1 and value.numel() > 1:
        out.append(("one entry fewer", value.reshape(-1)[:-1].reshape(-1), "bad"))
        out.append(("flattened", value.reshape(-1)[:1], "bad"))
    if value.ndim >= 1:
        out.append(("scalar", value.reshape(-1)[0].clone(), "bad"))
    if value.is_floating_point() and bool((value == value.round()).all()):
        out.append(("int64 tensor", value.to(torch.int64), "convert"))
    elif value.is_floating_point():  # integer policy: converted, the answer of its float64 equal
        out.append(("int64 rounded", value.round().to(torch.int64), "convert-int"))
    if not value.is_floating_point():
        out.append(("out of range", value + 100, "bad"))
    if value.is_floating_point():
        # autograd policy: a tensor that requires grad is used for its values (or rejected)
        out.append(("requires_grad", value.detach().clone().requires_grad_(True), "convert"))
    if value.is_floating_point() and value.dtype == DT:
        # squares overflow, the answer need not: a silent 0 or inf where a norm goes through inf
        out.append(("1e200", torch.full_like(value, 1e200), "big"))
        out.append(("1e-200", torch.full_like(value, 1e-200), "bad"))
    if value.numel() > 1:
        out.append(("constant", torch.full_like(real, 0.7), "bad"))
        out.append(("one entry 1e300", _one_entry(real), "big"))
    return out


def _huge(dtype: torch.dtype) -> float:
    """1e300, or the largest number of a narrower floating dtype (float32 holds no 1e300)."""
    return 1e300 if dtype == DT or not dtype.is_floating_point else torch.finfo(dtype).max


def _huge_like(value: torch.Tensor) -> torch.Tensor:
    return torch.full_like(value, _huge(value.dtype))


def _one_entry(value: torch.Tensor) -> torch.Tensor:
    out = value.detach().clone()
    out.reshape(-1)[0] = _huge(value.dtype)
    return out


def _int_mutations(value: int):
    return [
        ("numpy int", np.int64(value), "convert"),
        ("float", value + 0.5, "bad"),
        ("integral float", float(value), "bad"),
        ("bool", True, "bad"),
        ("None", None, "bad"),
        ("string", str(value), "bad"),
        ("negative", -3, "bad"),
        ("zero", 0, "bad"),
        ("1e12", 10**12, "absurd"),
        ("2**64", 2**64, "absurd"),
        ("list", [value], "bad"),
    ]


def _float_mutations(value: float):
    return [
        ("int", int(value), "convert" if float(int(value)) == value else "bad"),
        ("numpy float64", np.float64(value), "convert"),
        ("float32", np.float32(value), "bad"),
        ("nan", math.nan, "bad"),
        ("inf", math.inf, "bad"),
        ("negative", -abs(value) - 1.0, "bad"),
        ("zero", 0.0, "bad"),
        ("1e300", 1e300, "big"),
        ("1e-300", 1e-300, "bad"),
        ("bool", True, "bad"),
        ("None", None, "bad"),
        ("string", "1.0", "bad"),
        ("complex", complex(value, 1.0), "bad"),
        ("list", [value], "bad"),
    ]


def _bool_mutations(value: bool):
    return [
        ("numpy bool", np.bool_(value), "convert"),
        ('"False"', "False", "bad"),
        ('"no"', "no", "bad"),
        ("0", 0, "bad"),
        ("1", 1, "bad"),
        ("None", None, "bad"),
    ]


def _params_mutations(value: dict):
    key = next(iter(value))
    return [
        ("nan entry", {**value, key: torch.full_like(value[key], math.nan)}, "bad"),
        ("float32 entry", {**value, key: value[key].float()}, "bad"),
        ("list entry", {**value, key: value[key].tolist()}, "bad"),
        ("empty dict", {}, "bad"),
        ("missing key", {k: v for k, v in value.items() if k != key}, "bad"),
        ("extra key", {**value, "zz": value[key].clone()}, "bad"),
        ("None", None, "bad"),
        ("string", "abc", "bad"),
        ("list of tensors", list(value.values()), "bad"),
        ("1e300 entry", {**value, key: _huge_like(value[key])}, "big"),
        ("requires_grad entry", {**value, key: value[key].detach().clone().requires_grad_(True)},
         "convert"),
        ("int64 entry", {**value, key: value[key].round().to(torch.int64)}, "convert-int"),
        ("complex entry", {**value, key: value[key].to(torch.complex128)}, "bad"),
    ]


def _seq_mutations(value):
    first = value[0]
    return [
        ("tuple", tuple(value), "convert"),
        ("empty", [], "bad"),
        ("None", None, "bad"),
        ("string", "ab", "bad"),
        ("None element", [None, *value[1:]], "bad"),
        ("string element", ["x", *value[1:]], "bad"),
        ("float element", [first + 0.5 if isinstance(first, int) else math.nan, *value[1:]], "bad"),
        ("negative element", [-5, *value[1:]], "bad"),
        ("huge element", [2**64, *value[1:]], "absurd"),
        ("bool element", [True, *value[1:]], "bad"),
    ]


def _other_mutations(value, kind: str):
    out = [("None", None, "bad"), ("string", "abc", "bad"), ("int", 3, "bad"), ("list", [1], "bad")]
    if kind == "callable":
        out.append(("tensor", t(1.0), "bad"))
        out += _closure_mutations(value)
    if kind == "device":
        out = [("unknown name", "bogus", "bad"), ("upper case", "CPU", "bad"), ("int", 3, "bad"),
               ("None", None, "bad"), ("absent GPU", "cuda:99", "bad"),
               ("torch.device", torch.device("cpu"), "convert")]
    if kind in ("file", "folder"):
        out = [("None", None, "bad"), ("int", 3, "bad"), ("missing", "/nonexistent/zz", "bad")]
        out += _malformed_files(value, kind)
    if kind == "choice":
        out = [("unknown name", "nonsense", "bad"), ("None", None, "bad"), ("int", 1, "bad")]
        out.append(("bool", True, "bad"))
    if kind == "ssm":
        a, b, c = value
        out += [
            ("nan a", (torch.full_like(a, math.nan), b, c), "bad"),
            ("float32 b", (a, b.float(), c), "bad"),
            ("short c", (a, b, c[:-1]), "bad"),
            ("two tensors", (a, b), "bad"),
            ("dict", {"a": a, "b": b, "c": c}, "convert"),
            ("list", [a, b, c], "bad"),
            ("1e300 a", (_huge_like(a), b, c), "big"),
            ("requires_grad", tuple(v.detach().clone().requires_grad_(True) for v in (a, b, c)),
             "convert"),
            ("int64 a", (a.round().to(torch.int64), b, c), "convert-int"),
        ]
    if kind == "text":
        out = [("None", None, "bad"), ("int", 3, "bad")]
    return out


# ------------------------------------------------------------------------------------------
# Closures: the callable an argument names is kept, its answer is spoiled (a wrong dtype, a
# missing key, a non-number, a complex, a detached or non-finite value, one value for a pair).
# ------------------------------------------------------------------------------------------


def _map_tensors(value, fn):
    """``value`` with every tensor replaced by ``fn(tensor)`` (through tuples, lists, dicts)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_map_tensors(v, fn) for v in value)
    if isinstance(value, list):
        return [_map_tensors(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


def _drop_key(value):
    """The first dict found in ``value`` (itself, or inside a tuple) without its first key."""
    if isinstance(value, dict) and value:
        return {k: v for i, (k, v) in enumerate(value.items()) if i}
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_drop_key(v) if isinstance(v, dict) else v for v in value)
    return value


def _spoiled(fn, transform, label):
    def spoiled(*args, **kwargs):
        return transform(fn(*args, **kwargs))

    spoiled.__name__ = spoiled.__qualname__ = f"{getattr(fn, '__name__', 'fn')}_{label}"
    return spoiled


def _floating(transform):
    return lambda x: transform(x) if x.is_floating_point() else x


def _closure_mutations(value):
    transforms = [
        ("returns float32", lambda out: _map_tensors(out, _floating(lambda x: x.float())), "bad"),
        ("returns complex", lambda out: _map_tensors(
            out, _floating(lambda x: x.to(torch.complex128))), "bad"),
        ("returns a string", lambda out: "x", "bad"),
        ("returns None", lambda out: None, "bad"),
        ("returns nan", lambda out: _map_tensors(
            out, _floating(lambda x: torch.full_like(x, math.nan))), "closure-nan"),
        ("returns 1e300", lambda out: _map_tensors(
            out, _floating(_huge_like)), "big"),
        ("returns detached", lambda out: _map_tensors(out, lambda x: x.detach()), "bad"),
        ("returns int64", lambda out: _map_tensors(
            out, _floating(lambda x: x.detach().round().to(torch.int64))), "bad"),
        ("returns a 2-D view", lambda out: _map_tensors(out, lambda x: x.unsqueeze(0)), "bad"),
        ("drops a key", _drop_key, "bad"),
        ("returns one of a pair", lambda out: out[0] if isinstance(out, tuple) else (out, out),
         "bad"),
    ]
    return [(label, _spoiled(value, f, label.replace(" ", "_")), cls)
            for label, f, cls in transforms]


# ------------------------------------------------------------------------------------------
# Files: a file (or a folder's first file) with malformed content; the error must name it.
# ------------------------------------------------------------------------------------------

MALFORMED = [
    ("truncated JSON", b"{not json"),
    ("JSON list", b"[1, 2]"),
    ("JSON without fields", b'{"scale": "fast", "entries": {}}'),
    ("empty", b""),
    ("binary garbage", b"\x80\x04\x95garbage\xff"),
    ("not UTF-8", b"\xff\xfe{"),
]


class Named(str):
    """A path (a str) to a malformed file; ``.culprit`` is the file an error must name."""

    culprit: str


def _named(path: str, culprit: str) -> Named:
    out = Named(path)
    out.culprit = culprit
    return out


_FILES_ROOT: list[str] = []


def _files_root() -> str:
    """One temporary folder for the malformed files, removed when the process ends."""
    import atexit
    import shutil
    import tempfile

    if not _FILES_ROOT:
        _FILES_ROOT.append(tempfile.mkdtemp(prefix="fuzz-files-"))
        atexit.register(shutil.rmtree, _FILES_ROOT[0], ignore_errors=True)
    return _FILES_ROOT[0]


def _malformed_files(value, kind: str):
    import shutil
    import tempfile

    source = str(value)
    out = []
    for label, body in MALFORMED:
        root = tempfile.mkdtemp(prefix="case-", dir=_files_root())
        if kind == "file":
            path = os.path.join(root, os.path.basename(source))
            with open(path, "wb") as handle:
                handle.write(body)
            out.append((f"file: {label}", _named(path, path), "file"))
        else:
            folder = os.path.join(root, os.path.basename(source.rstrip("/")) or "d")
            shutil.copytree(source, folder)
            names = sorted(n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n)))
            if not names:
                continue
            culprit = os.path.join(folder, names[0])
            with open(culprit, "wb") as handle:
                handle.write(body)
            out.append((f"folder: {label}", _named(folder, culprit), "file"))
    return out


def mutations(arg: Arg) -> list[tuple[str, object, str]]:
    kind, value = arg.kind, arg.value
    if kind == "tensor":
        out = _tensor_mutations(value)
    elif kind == "int":
        out = _int_mutations(value)
    elif kind == "float":
        out = _float_mutations(value)
    elif kind == "bool":
        out = _bool_mutations(value)
    elif kind == "params":
        out = _params_mutations(value)
    elif kind == "closure-params":  # a closure's parameters: nan is passed on, like 1e300
        out = [(label, v, "closure-nan" if label == "nan entry" else c)
               for label, v, c in _params_mutations(value)]
    elif kind == "seq":
        out = _seq_mutations(value)
    else:
        out = _other_mutations(value, kind)
    return out + list(arg.extra)


# The classes of bad input that every case meets where its arguments allow (the fuzz test runs
# them all on every case, not only those Hypothesis happens to draw), by mutation label.
INPUT_CLASSES = {
    "requires_grad": ("requires_grad", "requires_grad entry"),
    "integer dtype": ("int64 tensor", "int64 rounded", "int64 entry", "int64 a", "numpy int"),
    "float32 dtype": ("float32", "float32 entry", "float32 b"),
    "complex": ("complex", "complex entry", "returns complex"),
    "huge (1e300)": ("1e300", "1e300 entry", "1e300 a", "one entry 1e300", "1e200", "1e-200"),
    "constant data": ("constant", "zeros", "constant images"),
    "device": ("unknown name", "upper case", "absent GPU", "torch.device"),
    "malformed file": tuple(f"{kind}: {label}" for kind in ("file", "folder")
                            for label, _ in MALFORMED),
    "closure's answer": ("returns float32", "returns a string", "returns None", "returns nan",
                         "returns 1e300", "returns detached", "returns int64",
                         "returns a 2-D view", "drops a key", "returns one of a pair"),
}


def input_class(label: str, kind: str) -> str | None:
    """The class of :data:`INPUT_CLASSES` a mutation belongs to (None for the others)."""
    if kind == "device" and label in ("int", "None"):
        return "device"
    for name, labels in INPUT_CLASSES.items():
        if label in labels and (name != "device" or kind == "device"):
            return name
    return None


def class_mutations(case: Case) -> list[tuple[str, str, object, str, str]]:
    """Every mutation of ``case`` in one of the classes: (class, argument, value, cls, label)."""
    out = []
    for arg in case.args:
        for label, value, cls in mutations(arg):
            name = input_class(label, arg.kind)
            if name is not None:
                out.append((name, arg.name, value, cls, label))
    return out


# ------------------------------------------------------------------------------------------
# The public API: what the API page (book/api.rst) documents
# ------------------------------------------------------------------------------------------


def public_modules() -> list[str]:
    """The modules the API page documents, as ``folder.module``: every module of ``lib``'s
    folders without a leading underscore.

    The same list as the page's ``lib-modules`` directive (``tools/book_site.py``).
    """
    return [
        f"{folder}.{name}"
        for folder, names in book_site.lib_folders()
        for name in names
    ]


def _module_members(module) -> list[str]:
    """autodoc's ``:members:`` of a module: its ``__all__``, or its own public names."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [
        name
        for name, obj in vars(module).items()
        if not name.startswith("_") and getattr(obj, "__module__", None) == module.__name__
    ]


def _takes_arguments(fn) -> bool:
    """Whether ``fn`` has a parameter to fuzz."""
    try:
        return len(inspect.signature(fn).parameters) > 0
    except (TypeError, ValueError):  # a builtin without a signature: count it
        return True


def _public_methods(cls: type) -> list[str]:
    """The public methods written in a class's body that take an argument besides self/cls."""
    out = []
    for key, value in vars(cls).items():
        if key.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            method = value.__func__
            skip = 0 if isinstance(value, staticmethod) else 1
        elif inspect.isfunction(value):
            method, skip = value, 1
        else:  # properties, attributes
            continue
        if len(inspect.signature(method).parameters) > skip:
            out.append(key)
    return out


def public_callables() -> list[str]:
    """Every public callable the API page lists, as ``module.name`` or ``module.Class.method``.

    A module's members are its ``__all__`` where it has one (the compiled kernels that only lib
    calls are left out that way), else its public names defined in it; a class contributes itself
    and the public methods written in its body (properties and inherited methods are not inputs
    to fuzz). A callable without parameters has no input to get wrong and is not listed.
    """
    names = []
    for module_name in public_modules():
        module = importlib.import_module(f"lib.{module_name}")
        for member in _module_members(module):
            obj = getattr(module, member)
            if not callable(obj):
                continue
            if _takes_arguments(obj):
                names.append(f"{module_name}.{member}")
            if inspect.isclass(obj):
                names += [f"{module_name}.{member}.{key}" for key in _public_methods(obj)]
    return names


# ------------------------------------------------------------------------------------------
# Comparing answers
# ------------------------------------------------------------------------------------------


def _leaves(value):
    """Numeric leaves of a result (tensors, arrays, numbers) in a fixed order."""
    if isinstance(value, torch.Tensor):
        return [value.detach().to(torch.float64).numpy() if value.is_floating_point() else
                value.numpy()]  # fmt: skip
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, (bool, int, float, np.floating, np.integer)):
        return [np.asarray(value, dtype=np.float64)]
    if isinstance(value, dict):
        return [leaf for k in sorted(value, key=str) for leaf in _leaves(value[k])]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    if isinstance(value, flow.Trajectory):
        return _leaves(value.times) + _leaves(value.params) + _leaves(value.losses)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _leaves(getattr(value, "trajectory", None)) if hasattr(value, "trajectory") else []
    if isinstance(value, torch.nn.Module):
        return [p.detach().numpy() for p in value.parameters()]
    return []


def finite(value) -> bool:
    for leaf in _leaves(value):
        if leaf.dtype.kind in "fc" and not np.all(np.isfinite(leaf)):
            return False
    return True


def same(left, right, rtol: float = 1e-9) -> bool:
    """Equal up to rtol (a conversion may reorder float operations only by rounding)."""
    a, b = _leaves(left), _leaves(right)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape:
            return False
        if not np.allclose(x.astype(np.float64), y.astype(np.float64), rtol=rtol, atol=1e-12,
                           equal_nan=True):  # fmt: skip
            return False
    return True


# ------------------------------------------------------------------------------------------
# Oracles: independent computations of the answer
# ------------------------------------------------------------------------------------------


def _impulse_loop(a, b, c, length):
    a, b, c = (torch.as_tensor(np.asarray(v, dtype=np.float64)) for v in (a, b, c))
    return torch.stack([(c * b * a**k).sum(-1) for k in range(length)], -1)


def _oracle_impulse(result, a, b, c, length):
    return same(result, _impulse_loop(a, b, c, int(length)), rtol=1e-8)


def _oracle_output(result, a, b, c, x):
    reference = ssm.ssm_recurrence(
        *(torch.as_tensor(np.asarray(v, dtype=np.float64)) for v in (a, b, c)),
        torch.as_tensor(np.asarray(x, dtype=np.float64)),
    )
    return same(result, reference, rtol=1e-8)


def _oracle_eigen(result, loss, params, **_):
    values = torch.linalg.eigvalsh(curvature.dense_hessian(loss, params))
    scale = max(1.0, float(values.abs().max()))
    return (
        abs(result[0] - float(values[0])) <= 1e-7 * scale
        and abs(result[1] - float(values[-1])) <= 1e-7 * scale
    )


def _oracle_prop3(result, teacher, kappa, epsilon, **_):
    target = ssm.impulse_response(*ssm.as_ssm(teacher, "teacher"), int(kappa) + 1).clone()
    target[int(kappa)] += float(epsilon)
    got = ssm.impulse_response(*result, int(kappa) + 1)
    return float((got - target).abs().max()) <= 1e-8 * max(1.0, float(target.abs().max()))


def _oracle_erank(result, a):
    d = np.asarray(a).shape[-1]
    values = np.asarray(result)
    return bool(np.all(values >= 1 - 1e-12) and np.all(values <= d + 1e-9))


# ------------------------------------------------------------------------------------------
# The cases
# ------------------------------------------------------------------------------------------


def _fresh(generator):
    """A copy of a random generator in its current state (so every call draws the same)."""
    if isinstance(generator, torch.Generator):
        return torch.Generator().set_state(generator.get_state())
    if isinstance(generator, np.random.RandomState):
        copy = np.random.RandomState()
        copy.set_state(generator.get_state())
        return copy
    return generator


def _quadratic_loss(params):
    return (params["w"] ** 2).sum() + params["w"].sum() ** 2


def _half_loss(params):
    return (params["w"][: params["w"].numel() // 2] ** 2).sum()


def _dynamics_runs():
    setting = dataclasses.replace(dyn.FIGURE2_SSM, n_baseline=3, n_special=2, extra_steps=1)
    options = {"engine": "torch"} if "engine" in dyn.train_dynamics.__code__.co_varnames else {}
    return dyn.train_dynamics(setting, [0], max_steps=4, record_every=2, **options)


def _mlp_runs():
    setting = dataclasses.replace(dyn.FIGURE2_SSM_MLP, n_baseline=3, n_special=2, hidden=3)
    options = {"engine": "torch"} if "engine" in dyn.train_dynamics.__code__.co_varnames else {}
    return dyn.train_dynamics(setting, [0], max_steps=4, record_every=2, **options)


def _mlp_params(runs=2, d=3, hidden=2):
    g = torch.Generator().manual_seed(0)
    shapes = {"a": (runs, d), "b": (runs, d), "c": (runs, d), "d_in": (runs, hidden, 1),
              "d_hidden": (runs, hidden, hidden), "d_out": (runs, 1, hidden)}  # fmt: skip
    return {k: torch.rand(*s, generator=g, dtype=DT) * 0.5 for k, s in shapes.items()}


class Applied:
    """A case's callable that builds a closure with the case's arguments and applies it to
    ``params`` (``call(closure, params)`` where the factory returns more than one closure).
    :func:`build_cases` adds a sibling case, ``"<name> (closure params)"``, that keeps the
    factory's valid arguments and fuzzes the parameter dict the closure receives instead."""

    def __init__(self, factory: Callable, params, call: Callable | None = None):
        self.factory, self.params, self.call = factory, params, call

    def __call__(self, *args, **kwargs):
        closure = self.factory(*args, **kwargs)
        return closure(self.params) if self.call is None else self.call(closure, self.params)


def applied(factory: Callable, params, call: Callable | None = None) -> Applied:
    return Applied(factory, params, call)


def _closure_params_case(case: Case) -> Case:
    built = case.fn
    positional = [a.value for a in case.args if not a.keyword]
    keywords = {a.name: a.value for a in case.args if a.keyword}

    def run(params):
        return Applied(built.factory, params, built.call)(*positional, **keywords)

    # the closures lib builds are loss/gradient closures for lib.engine.flow's engines: at nan or
    # 1e300-sized parameters they pass the overflow on, for the engines to flag the run diverged
    return Case(f"{case.name} (closure params)", run,
                [Arg("params", built.params, "closure-params")], examples=case.examples,
                overflow_passes=("params",))


def build_cases() -> list[Case]:
    """Every case: this file's, then those of each ``tests/api_cases_*.py`` (sorted by file name).

    The other files are imported here, not at the top, because they import this module. Two cases
    of the same name in two of those files are an error; one that repeats a name of this file's
    table replaces it.
    """
    cases = {case.name: case for case in _own_cases()}
    seen: dict[str, str] = {}
    for module_name in case_modules():
        module = importlib.import_module(module_name)
        for case in module.cases():
            if case.name in seen:
                where = f"{seen[case.name]} and {module_name}"
                raise ValueError(f"case {case.name!r} is defined twice: in {where}")
            seen[case.name] = module_name
            cases[case.name] = case
    for case in list(cases.values()):  # closures built by lib: their params are inputs too
        if isinstance(case.fn, Applied):
            sibling = _closure_params_case(case)
            cases[sibling.name] = sibling
    return list(cases.values())


def case_modules() -> list[str]:
    """The names of the modules ``tests/api_cases_*.py`` next to this file, sorted."""
    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    paths = sorted(glob.glob(os.path.join(here, "api_cases_*.py")))
    return [os.path.splitext(os.path.basename(path))[0] for path in paths]


RECORDS = {
    "engine.flow.Trajectory": "the record lib.engine.flow's engines return; every reader of one is "
                              "lib itself",
    "ssm.diagonal.SSM": "a named tuple (a, b, c): every function that takes one checks it "
                        "(ssm.as_ssm)",
    "poisoning.dynamics.DynamicsRuns": "the record train_dynamics returns; its methods check their "
    "arguments (cases DynamicsRuns.run, .index, .active, .gamma0, .initial_gain)",
}
"""Public classes that are plain records of results: lib builds them, and what reads them checks
them, so their constructors have no case. A case module may add its own in a dict ``RECORDS``."""


def records() -> dict[str, str]:
    """The record classes of this file and of every ``tests/api_cases_*.py`` (name: why)."""
    out = dict(RECORDS)
    for module_name in case_modules():
        out.update(getattr(importlib.import_module(module_name), "RECORDS", {}))
    return out


def fresh(generator):
    """A copy of a random generator in its current state (for the other case files)."""
    return _fresh(generator)


_AXES = None


def axes():
    """One shared matplotlib Axes for the plotting cases (created on first use)."""
    global _AXES
    if _AXES is None:
        import matplotlib.pyplot as plt

        _AXES = plt.subplots()[1]
    return _AXES


def _own_cases() -> list[Case]:
    a, b, c = t(0.5, -0.3, 0.2), t(1.0, 0.5, -1.0), t(0.3, 1.0, 2.0)
    x = torch.linspace(-1, 1, 20, dtype=DT).reshape(4, 5)
    y = t(1.0, -1.0, 0.5, 0.0)
    teacher = ssm.theorem1_teacher(4)
    student = ssm.SSM(t(0.5, 0.1, 0.0, 0.2), t(1.0, 1, 1, 1), t(1.0, 1, 1, 1))
    w = t(1.0, 0.5, 0.25, 0.125, 0.0625, 0.03, 0.015, 0.007)
    net = linear_nets.xavier_init((3, 4, 2), 0)
    scalar_net = linear_nets.xavier_init((3, 2, 2, 1), 0)
    labels = torch.tensor([0, 1, 1, 0], dtype=torch.int64)
    x3 = torch.linspace(-1, 1, 12, dtype=DT).reshape(4, 3)
    flow_params = {"w": t(1.0, -0.5)}
    traj = flow.gradient_descent(_quadratic_loss, flow_params, 0.1, 3)
    gru_small = extrapolation.GRUNet(2, 0)
    gru_other = extrapolation.GRUNet(2, 1)
    mlp = _mlp_params()
    runs = _dynamics_runs()
    mlp_runs = _mlp_runs()
    balanced = {"a": t(0.1, 0.2), "b": t(0.1, -0.1)}
    A = torch.eye(2, dtype=DT) * 0.5
    setting = dyn.FIGURE2_SSM
    fig_ax = None

    def ax():
        nonlocal fig_ax
        if fig_ax is None:
            import matplotlib.pyplot as plt

            fig_ax = plt.subplots()[1]
        return fig_ax

    P = Arg  # short
    cases = [
        # lib.ssm.diagonal
        Case(
            "ssm.diagonal.impulse_response",
            ssm.impulse_response,
            [P("a", a, "tensor"), P("b", b, "tensor"), P("c", c, "tensor"), P("length", 6, "int")],
            oracle=_oracle_impulse,
        ),
        Case(
            "ssm.diagonal.ssm_output",
            ssm.ssm_output,
            [P("a", a, "tensor"), P("b", b, "tensor"), P("c", c, "tensor"), P("x", x, "tensor")],
            oracle=_oracle_output,
        ),
        Case(
            "ssm.diagonal.ssm_recurrence",
            ssm.ssm_recurrence,
            [P("a", a, "tensor"), P("b", b, "tensor"), P("c", c, "tensor"), P("x", x, "tensor")],
        ),
        Case(
            "ssm.diagonal.square_loss",
            ssm.square_loss,
            [P("student", (a, b, c), "ssm"), P("x", x, "tensor"), P("y", y, "tensor")],
            overflow_passes=("student",),  # a loss closure for lib.engine.flow (its docstring)
        ),
        Case(
            "ssm.diagonal.square_loss_gradient",
            applied(ssm.square_loss_gradient, {"a": a, "b": b, "c": c}),
            [P("x", x, "tensor"), P("y", y, "tensor"), P("weights", y.abs() / 4, "tensor", True)],
        ),
        Case(
            "ssm.diagonal.generalization_error",
            ssm.generalization_error,
            [
                P("student", student, "ssm"),
                P("teacher", teacher, "ssm"),
                P("length", 6, "int"),
                P("normalize", True, "bool", True),
            ],
        ),
        Case(
            "ssm.diagonal.characterization_coefficients",
            ssm.characterization_coefficients,
            [
                P("a", a, "tensor"),
                P("b", b, "tensor"),
                P("c", c, "tensor"),
                P("x", x, "tensor"),
                P("y", y, "tensor"),
                P("head", torch.tanh, "callable", True),
            ],
        ),
        Case(
            "ssm.diagonal.characterization_velocity",
            ssm.characterization_velocity,
            [
                P("a", a, "tensor"),
                P("b", b, "tensor"),
                P("c", c, "tensor"),
                P("gammas", t(0.1, 0.2, 0.3), "tensor"),
            ],
        ),
        Case("ssm.diagonal.effective_rank", ssm.effective_rank, [P("a", a, "tensor")],
            oracle=_oracle_erank),
        Case("ssm.diagonal.theorem1_teacher", ssm.theorem1_teacher, [P("d", 4, "int")]),
        Case("ssm.diagonal.unit_impulse", ssm.unit_impulse, [P("kappa", 5, "int"), P("position", 2,
            "int")]),
        Case(
            "ssm.diagonal.random_sequences",
            lambda n, kappa, positions, generator: ssm.random_sequences(
                n, kappa, positions, _fresh(generator)
            ),
            [
                P("n", 3, "int"),
                P("kappa", 5, "int"),
                P("positions", [1, 2], "seq"),
                P("generator", torch.Generator().manual_seed(0), "object"),
            ],
        ),
        Case(
            "ssm.diagonal.baseline_and_special",
            ssm.baseline_and_special,
            [
                P("kappa", 5, "int"),
                P("n_baseline", 3, "int"),
                P("n_special", 2, "int"),
                P("baseline_positions", [1, 2], "seq", True),
                P("special_positions", [4], "seq", True),
                P("seed", 0, "int", True),
            ],
        ),
        Case(
            "ssm.diagonal.fit_impulse_response",
            ssm.fit_impulse_response,
            [P("a", t(0.5, -0.5, 0.1), "tensor"), P("targets", t(1.0, 2.0), "tensor")],
        ),
        Case(
            "ssm.diagonal.proposition3_student",
            ssm.proposition3_student,
            [
                P("teacher", teacher, "ssm"),
                P("kappa", 5, "int"),
                P("epsilon", 2.0, "float"),
                P("d", 7, "int", True),
            ],
            oracle=_oracle_prop3,
        ),
        # lib.engine.flow
        Case("engine.flow.log_grid", flow.log_grid, [P("horizon", 100.0, "float"), P("points", 5,
            "int")]),
        Case(
            "engine.flow.gradient_flow",
            flow.gradient_flow,
            [
                P("loss", _quadratic_loss, "callable"),
                P("params", flow_params, "params"),
                P("t_eval", t(0.0, 0.5, 1.0), "tensor"),
                P("log_time", False, "bool", True),
                P("method", "LSODA", "choice", True),
                P("rtol", 1e-8, "float", True),
                P("atol", 1e-10, "float", True),
            ],
            examples=8,
        ),
        Case(
            "engine.flow.gradient_descent",
            flow.gradient_descent,
            [
                P("loss", _quadratic_loss, "callable"),
                P("params", flow_params, "params"),
                P("lr", 0.1, "float"),
                P("steps", 5, "int"),
                P("record_every", 2, "int", True),
                P("optimizer", "adam", "choice", True),
                P("beta", 0.8, "float", True),
                P("adam_eps", 1e-8, "float", True),
            ],
            examples=8,
        ),
        Case("engine.flow.Trajectory.at", traj.at, [P("index", 1, "int")]),
        Case("engine.flow.Trajectory.getitem", traj.__getitem__, [P("name", "w", "text")]),
        # lib.engine.curvature
        Case(
            "engine.curvature.parameter_count",
            curvature.parameter_count,
            [P("params", flow_params, "params")],
        ),
        Case(
            "engine.curvature.hessian_vector_product",
            curvature.hessian_vector_product,
            [
                P("loss", _quadratic_loss, "callable"),
                P("params", flow_params, "params"),
                P("vector", t(1.0, 0.0), "tensor"),
            ],
        ),
        Case(
            "engine.curvature.dense_hessian",
            curvature.dense_hessian,
            [P("loss", _quadratic_loss, "callable"), P("params", flow_params, "params")],
        ),
        Case(
            "engine.curvature.extreme_eigenvalues",
            curvature.extreme_eigenvalues,
            [
                P("loss", _half_loss, "callable"),
                P("params", {"w": torch.linspace(-1, 1, 9, dtype=DT)}, "params"),
                P("dense_limit", 4, "int", True),
                P("tol", 1e-10, "float", True),
            ],
            oracle=_oracle_eigen,
        ),
        # lib.book.data, lib.engine.config
        Case(
            "book.data.digits", data.digits, [P("n", 10, "int"), P("every", 3, "int", True)],
                examples=4
        ),
        Case("engine.config.scaled", lib.engine.config.scaled, [P("fast", 1, "int"), P("full", 2,
            "int")]),
        # lib.networks.relu_nets
        Case(
            "networks.relu_nets.relu_network",
            relu_nets.relu_network,
            [
                P("weights", [torch.ones(2, 3, dtype=DT), torch.ones(1, 2, dtype=DT)], "seq"),
                P("inputs", x3, "tensor"),
            ],
        ),
        Case(
            "networks.relu_nets.gaussian_weights",
            lambda widths, scale, rng: relu_nets.gaussian_weights(widths, scale, _fresh(rng)),
            [
                P("widths", [2, 3, 1], "seq"),
                P("scale", 0.1, "float"),
                P("rng", np.random.RandomState(0), "object"),
            ],
        ),
        # lib.networks.linear_nets
        Case("networks.linear_nets.layers", linear_nets.layers, [P("params", net, "params")]),
        Case(
            "networks.linear_nets.as_params",
            linear_nets.as_params,
            [P("weights", list(net.values()), "seq")],
        ),
        Case(
            "networks.linear_nets.xavier_init",
            linear_nets.xavier_init,
            [P("widths", [3, 4, 2], "seq"), P("seed", 0, "int")],
        ),
        Case(
            "networks.linear_nets.network_output",
            linear_nets.network_output,
            [
                P("params", net, "params"),
                P("x", x3, "tensor"),
                P("activation", "relu", "choice", True),
            ],
        ),
        Case(
            "networks.linear_nets.cross_entropy",
            linear_nets.cross_entropy,
            [
                P("params", net, "params"),
                P("x", x3, "tensor"),
                P("labels", labels, "tensor"),
                P("activation", "linear", "choice", True),
            ],
        ),
        Case("networks.linear_nets.end_to_end", linear_nets.end_to_end, [P("params", net,
            "params")]),
        Case(
            "networks.linear_nets.scalar_regression_loss",
            linear_nets.scalar_regression_loss,
            [P("params", scalar_net, "params"), P("target", t(1.0, 0.5, -0.5), "tensor")],
            overflow_passes=("params",),  # a loss closure (the gradient-flow chapter's)
        ),
        Case(
            "networks.linear_nets.balanced_init",
            linear_nets.balanced_init,
            [P("widths", [2, 3, 2], "seq"), P("end_to_end_matrix", A, "tensor")],
        ),
        Case(
            "networks.linear_nets.balance_matrices",
            linear_nets.balance_matrices,
            [P("params", net, "params")],
        ),
        Case(
            "networks.linear_nets.unbalancedness", linear_nets.unbalancedness, [P("params", net,
                "params")]
        ),
        Case(
            "networks.linear_nets.rescale",
            linear_nets.rescale,
            [P("params", net, "params"), P("j", 1, "int"), P("c", 2.0, "float")],
        ),
        Case(
            "networks.linear_nets.end_to_end_velocity",
            linear_nets.end_to_end_velocity,
            [
                P("w", t(0.1, 0.2), "tensor"),
                P("target", t(1.0, 0.0), "tensor"),
                P("depth", 3, "int"),
            ],
        ),
        Case(
            "networks.linear_nets.lemma7_bound",
            linear_nets.lemma7_bound,
            [P("params", scalar_net, "params"), P("gradient_norm", 0.5, "float")],
        ),
        Case(
            "networks.linear_nets.theorem15_step_size",
            linear_nets.theorem15_step_size,
            [
                P("depth", 3, "int"),
                P("norm0", 0.1, "float"),
                P("alignment", 0.5, "float"),
                P("accuracy", 0.1, "float"),
            ],
        ),
        # lib.ssm.extrapolation
        Case(
            "ssm.extrapolation.moment_teacher",
            extrapolation.moment_teacher,
            [P("eigenvalues", t(0.5, -0.2), "tensor"), P("weights", t(0.3, 0.7), "tensor")],
        ),
        Case(
            "ssm.extrapolation.moment_sequence",
            extrapolation.moment_sequence,
            [
                P("eigenvalues", t(0.5, -0.2), "tensor"),
                P("weights", t(0.3, 0.7), "tensor"),
                P("length", 5, "int"),
            ],
        ),
        Case(
            "ssm.extrapolation.hankel",
            extrapolation.hankel,
            [P("sequence", w, "tensor"), P("size", 3, "int")],
        ),
        Case(
            "ssm.extrapolation.hankel_rank",
            extrapolation.hankel_rank,
            [P("sequence", w, "tensor"), P("size", 3, "int"), P("rtol", 1e-8, "float", True)],
        ),
        Case("ssm.extrapolation.lemma_a1_pair", extrapolation.lemma_a1_pair, [P("n", 3, "int")]),
        Case(
            "ssm.extrapolation.tail_error",
            extrapolation.tail_error,
            [
                P("h", w * 0.9, "tensor"),
                P("w", w, "tensor"),
                P("k", 2, "int"),
                P("horizon", 6, "int"),
            ],
        ),
        Case(
            "ssm.extrapolation.population_loss",
            extrapolation.population_loss,
            [P("h", w * 0.9, "tensor"), P("w", w, "tensor"), P("k", 3, "int")],
        ),
        Case(
            "ssm.extrapolation.balanced_field",
            applied(extrapolation.balanced_field, balanced, lambda pair, p: pair[0](p)),
            [P("w", w, "tensor"), P("k", 3, "int")],
        ),
        Case(
            "ssm.extrapolation.balanced_field (jacobian)",
            applied(extrapolation.balanced_field, balanced, lambda pair, p: pair[1](p)),
            [P("w", w, "tensor"), P("k", 3, "int")],
        ),
        Case(
            "ssm.extrapolation.balanced_init",
            extrapolation.balanced_init,
            [P("d", 3, "int"), P("seed", 0, "int"), P("init_scale", 0.1, "float", True)],
        ),
        Case(
            "ssm.extrapolation.balanced_flow",
            extrapolation.balanced_flow,
            [
                P("w", w, "tensor"),
                P("k", 3, "int"),
                P("params", balanced, "params"),
                P("time", 100.0, "float", True),
                P("points", 3, "int", True),
                P("engine", "compiled", "choice", True),
            ],
            examples=6,
        ),
        Case(
            "ssm.extrapolation.extrapolation_sweep",
            extrapolation.extrapolation_sweep,
            [
                P("eigenvalues", t(0.5, -0.2), "tensor"),
                P("weights", t(0.3, 0.7), "tensor"),
                P("ks", [3], "seq"),
                P("d", 4, "int", True),
                P("seeds", [0], "seq", True),
                P("init_scale", 0.1, "float", True),
                P("horizon", 8, "int", True),
                P("time", 100.0, "float", True),
                P("engine", "compiled", "choice", True),
            ],
            examples=5,
        ),
        Case(
            "ssm.extrapolation.balanced_descent_field",
            applied(extrapolation.balanced_descent_field,
                    {k: v.unsqueeze(0) for k, v in balanced.items()}),
            [P("w", w, "tensor"), P("ks", [3], "seq")],
        ),
        Case(
            "ssm.extrapolation.linear_rnn_response",
            extrapolation.linear_rnn_response,
            [
                P("a", A, "tensor"),
                P("b", t(1.0, 0.5), "tensor"),
                P("c", t(0.5, 1.0), "tensor"),
                P("length", 4, "int"),
            ],
        ),
        Case(
            "ssm.extrapolation.general_descent_field",
            applied(extrapolation.general_descent_field,
                    {"A": A.unsqueeze(0), "B": t(1.0, 0.5).unsqueeze(0),
                     "C": t(0.5, 1.0).unsqueeze(0)}),
            [P("w", w, "tensor"), P("ks", [3], "seq")],
        ),
        Case(
            "ssm.extrapolation.general_init",
            extrapolation.general_init,
            [P("d", 2, "int"), P("seeds", [0, 1], "seq"), P("init_scale", 0.1, "float", True)],
        ),
        Case("ssm.extrapolation.delay_teacher", extrapolation.delay_teacher, [P("d_hat", 3,
            "int")]),
        Case(
            "ssm.extrapolation.train_adam",
            lambda lr, steps, milestones, runs, engine="compiled": extrapolation.train_adam(
                extrapolation.balanced_descent_field(w, [3]),
                {k: v.unsqueeze(0) for k, v in balanced.items()},
                runs,
                lr=lr,
                steps=steps,
                milestones=milestones,
                record_every=2,
                engine=engine,
            ),
            [
                P("lr", 0.01, "float"),
                P("steps", 6, "int"),
                P("milestones", [3], "seq"),
                P("runs", 1, "int"),
                P("engine", "compiled", "choice", True),
            ],
            examples=6,
        ),
        Case(
            "ssm.extrapolation.GRUNet",
            extrapolation.GRUNet,
            [P("hidden", 2, "int"), P("seed", 0, "int")],
        ),
        Case(
            "ssm.extrapolation.gru_teacher",
            extrapolation.gru_teacher,
            [
                P("hidden", 2, "int"),
                P("target", t(1.0, 0.5, 0.25), "tensor"),
                P("steps", 2, "int", True),
                P("lr", 0.01, "float", True),
                P("seed", 0, "int", True),
            ],
            examples=5,
        ),
        Case(
            "ssm.extrapolation.train_gru_student",
            extrapolation.train_gru_student,
            [
                P("teacher", gru_small, "object"),
                P("k", 3, "int"),
                P("hidden", 2, "int", True),
                P("steps", 2, "int", True),
                P("lr", 0.01, "float", True),
                P("batch", 4, "int", True),
                P("seed", 0, "int", True),
            ],
            examples=5,
        ),
        Case(
            "ssm.extrapolation.gru_tail_error",
            extrapolation.gru_tail_error,
            [
                P("student", gru_small, "object"),
                P("teacher", gru_other, "object"),
                P("k", 2, "int"),
                P("length", 5, "int", True),
                P("n", 8, "int", True),
            ],
        ),
        # lib.poisoning.theorem1
        Case(
            "poisoning.theorem1.tie_gap",
            poison.tie_gap,
            [P("init_scale", 1e-3, "float"), P("exponent", 5.0, "float")],
        ),
        Case(
            "poisoning.theorem1.theorem1_init",
            poison.theorem1_init,
            [
                P("d", 4, "int"),
                P("seed", 0, "int"),
                P("init_scale", 1e-2, "float", True),
                P("diff", 1e-5, "float", True),
            ],
        ),
        Case(
            "poisoning.theorem1.theorem1_training_set",
            poison.theorem1_training_set,
            [P("d", 4, "int"), P("kappa", 5, "int"), P("poisoned", True, "bool", True)],
        ),
        Case(
            "poisoning.theorem1.theorem1_loss",
            poison.theorem1_loss,
            [
                P("a", t(0.3, 0.2, 0.1), "tensor"),
                P("kappa", 5, "int"),
                P("poisoned", False, "bool", True),
            ],
        ),
        Case(
            "poisoning.theorem1.theorem1_velocity",
            poison.theorem1_velocity,
            [
                P("a", t(0.3, 0.2, 0.1), "tensor"),
                P("kappa", 5, "int"),
                P("poisoned", True, "bool", True),
            ],
        ),
        Case(
            "poisoning.theorem1.theorem1_flow",
            poison.theorem1_flow,
            [
                P("a0", t(0.03, 0.02, 0.01), "tensor"),
                P("kappa", 5, "int"),
                P("poisoned", False, "bool", True),
                P("horizon", 1e3, "float", True),
                P("points", 3, "int", True),
                P("engine", "compiled", "choice", True),
            ],
            examples=8,
        ),
        Case(
            "poisoning.theorem1.conserved_quantity",
            poison.conserved_quantity,
            [P("a", t(0.3, 0.2, 0.1), "tensor"), P("kappa", 5, "int")],
        ),
        Case(
            "poisoning.theorem1.escape_time", poison.escape_time, [P("a1", 0.01, "float"),
                P("kappa", 7, "int")]
        ),
        Case("poisoning.theorem1.saddle_point", poison.saddle_point, [P("d", 4, "int"), P("kappa",
            5, "int")]),
        Case(
            "poisoning.theorem1.saddle_hessian_eigenvalues",
            poison.saddle_hessian_eigenvalues,
            [P("d", 4, "int"), P("kappa", 5, "int")],
        ),
        Case(
            "poisoning.theorem1.theorem1_lower_bound",
            poison.theorem1_lower_bound,
            [P("d", 4, "int"), P("kappa", 5, "int")],
        ),
        Case(
            "poisoning.theorem1.theorem1_error",
            poison.theorem1_error,
            [
                P("a", t(0.9, 0.1, 0.0, 0.0), "tensor"),
                P("d", 4, "int"),
                P("length", 8, "int", True),
            ],
        ),
        Case(
            "poisoning.theorem1.default_horizons",
            poison.default_horizons,
            [P("d", 4, "int"), P("kappa", 5, "int"), P("a1", 0.01, "float")],
        ),
        Case(
            "poisoning.theorem1.theorem1_table",
            poison.theorem1_table,
            [
                P("d", 4, "int"),
                P("kappa", 5, "int"),
                P("seeds", [0], "seq"),
                P("init_scale", 1e-2, "float", True),
                P("diff", 1e-5, "float", True),
                P("length", 8, "int", True),
            ],
            examples=5,
        ),
        Case(
            "poisoning.theorem1.poisoning_window",
            poison.poisoning_window,
            [
                P("d", 4, "int"),
                P("kappa", 5, "int"),
                P("seeds", [0], "seq"),
                P("init_scales", [1e-2], "seq", True),
                P("relative_gaps", [1e-3], "seq", True),
                P("length", 8, "int", True),
            ],
            examples=5,
        ),
        # lib.poisoning.dynamics
        Case(
            "poisoning.dynamics.sorted_with_tie",
            dyn.sorted_with_tie,
            [P("values", np.array([0.1, 0.3, 0.2]), "object"), P("diff", 0.01, "float")],
        ),
        Case(
            "poisoning.dynamics.dynamics_init",
            dyn.dynamics_init,
            [P("setting", setting, "object"), P("seed", 0, "int")],
        ),
        Case(
            "poisoning.dynamics.dynamics_data",
            dyn.dynamics_data,
            [
                P("setting", setting, "object"),
                P("seed", 0, "int"),
                P("special_scale", 1.0, "float", True),
            ],
        ),
        Case(
            "poisoning.dynamics.ssm_mlp_output",
            dyn.ssm_mlp_output,
            [P("params", mlp, "params"), P("x", x.unsqueeze(0).repeat(2, 1, 1), "tensor")],
        ),
        Case(
            "poisoning.dynamics.ssm_mlp_loss_gradient",
            applied(dyn.ssm_mlp_loss_gradient, mlp),
            [
                P("x", x.unsqueeze(0).repeat(2, 1, 1), "tensor"),
                P("y", y.unsqueeze(0).repeat(2, 1), "tensor"),
                P("weights", torch.full((2, 4), 0.25, dtype=DT), "tensor"),
            ],
        ),
        Case(
            "poisoning.dynamics.DynamicsSetting",
            lambda d, kappa, sd_a, optimizer: dataclasses.replace(
                setting, d=d, kappa=kappa, sd_a=sd_a, optimizer=optimizer
            ),
            [
                P("d", 10, "int"),
                P("kappa", 6, "int"),
                P("sd_a", 0.01, "float"),
                P("optimizer", "adaptive", "choice"),
            ],
        ),
        Case("poisoning.dynamics.DynamicsRuns.run", runs.run, [P("r", 0, "int")]),
        Case("poisoning.dynamics.DynamicsRuns.active", runs.active, [P("r", 0, "int")]),
        Case("poisoning.dynamics.DynamicsRuns.gamma0", runs.gamma0, [P("r", 0, "int")]),
        Case(
            "poisoning.dynamics.DynamicsRuns.index",
            runs.index,
            [P("seed", 0, "int"), P("scale", 1.0, "float")],
        ),
        Case(
            "poisoning.dynamics.impulse_error",
            dyn.impulse_error,
            [P("runs", runs, "object"), P("length", 8, "int", True)],
        ),
        Case(
            "poisoning.dynamics.relative_test_error",
            dyn.relative_test_error,
            [
                P("runs", mlp_runs, "object"),
                P("n", 16, "int", True),
                P("length", 8, "int", True),
                P("index", -1, "int", True),
            ],
        ),
        Case(
            "poisoning.dynamics.train_dynamics",
            dyn.train_dynamics,
            [
                P("setting", dataclasses.replace(setting, n_baseline=3, n_special=2), "object"),
                P("seeds", [0], "seq"),
                P("special_scales", [None, 1.0], "seq", True),
                P("max_steps", 3, "int", True),
                P("record_every", 1, "int", True),
            ]
            + [P("engine", "compiled", "choice", True)],
            examples=5,
        ),
        # lib.book.viz
        Case(
            "book.viz.plot_loss",
            lambda times, losses, logx: viz.plot_loss(ax(), times, losses, logx=logx),
            [
                P("times", t(1.0, 2.0, 3.0), "tensor"),
                P("losses", t(1.0, 0.5, 0.1), "tensor"),
                P("logx", True, "bool"),
            ],
        ),
        Case(
            "book.viz.plot_impulse_responses",
            lambda responses, kappa, colors=None, styles=None: viz.plot_impulse_responses(
                ax(), responses, kappa=kappa, colors=colors, styles=styles),
            [P("responses", {"h": [1.0, 0.5]}, "object"), P("kappa", 2, "int"),
             Arg("colors", {"h": "C0"}, "object", True,
                 extra=[("not a colour", {"h": "zz-not-a-colour"}, "bad")]),
             Arg("styles", {"h": "o-"}, "object", True,
                 extra=[("not a format", {"h": "zz"}, "bad"), ("a number", {"h": 3}, "bad")])],
        ),
        Case(
            "book.viz.Slider",
            viz.Slider,
            [
                P("lo", 0.1, "float"),
                P("hi", 1.0, "float"),
                P("default", 0.5, "float"),
                P("log", True, "bool"),
            ],
        ),
        Case("book.viz.Choice", viz.Choice, [P("options", ("a", "b"), "object")]),
        Case(
            "book.viz.table",
            viz.table,
            [
                P("headers", ["a", "b"], "seq"),
                P("rows", [[1.0, 2.0]], "seq"),
                P("digits", 3, "int", True),
            ],
        ),
    ]
    return cases


# ------------------------------------------------------------------------------------------
# Running one bad input and classifying the outcome
# ------------------------------------------------------------------------------------------


class _Timeout(Exception):
    pass


def _raised_in_lib(error: BaseException) -> bool:
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and os.path.abspath(frames[-1].filename).startswith(LIB_DIR + os.sep)


def classify(case: Case, name: str, value, cls: str, *, timeout: int = 20) -> tuple[str, str]:
    """Run ``case`` with argument ``name`` replaced by ``value``: (outcome, detail)."""
    import warnings

    def alarm(signum, frame):
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            result = case.call({name: value})
    except _Timeout:
        if cls == "absurd":  # asked for 10^12 steps: a long run, not a hang
            return "long-run", f"still running after {timeout} s, as asked"
        return "hang", f"> {timeout} s"
    except ValueError as error:
        if _raised_in_lib(error):
            culprit = getattr(value, "culprit", None)
            if cls == "file" and culprit and os.path.basename(culprit) not in str(error):
                return "unnamed-file", f"the error does not name {culprit}: {str(error)[:100]}"
            return "lib-error", str(error)[:120]
        return "foreign-error", f"{type(error).__name__}: {str(error)[:100]}"
    except (MemoryError, OverflowError) as error:
        return "overflow", f"{type(error).__name__}: {str(error)[:100]}"
    except Exception as error:  # noqa: BLE001 - classifying every other exception is the point
        if "alloc" in str(error).lower():
            return "overflow", f"{type(error).__name__}: {str(error)[:100]}"
        return "other-error", f"{type(error).__name__}: {str(error)[:100]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return judge(case, name, value, cls, result)


def declares_divergence(result) -> bool:
    """Whether an answer says it diverged: a trajectory (or runs) whose ``info["diverged"]`` is set
    for some run (lib.engine.flow's engines stop a run at a non-finite loss and record that)."""
    trajectory = getattr(result, "trajectory", result)
    info = getattr(trajectory, "info", None)
    if not isinstance(info, dict) or "diverged" not in info:
        return False
    return bool(np.any(info["diverged"]))


def judge(case: Case, name: str, value, cls: str, result) -> tuple[str, str]:
    """Classify an accepted call's answer."""
    kind = next(a.kind for a in case.args if a.name == name)
    if kind == "bool" and not isinstance(value, (bool, np.bool_)):
        return "wrong", f"accepted {value!r} as a boolean"
    if not finite(result):
        if declares_divergence(result):
            return "diverged", "non-finite answer, flagged diverged in its info"
        if cls in ("big", "closure-nan") and name in case.overflow_passes:
            return "overflow-passed", "a closure's overflow, passed on for the engines to flag"
        return ("nan-big" if cls == "big" else "nan"), "non-finite answer"
    if case.oracle is not None:
        values = {a.name: a.value for a in case.args} | {name: value}
        try:
            ok = case.oracle(result, **values)
        except Exception as error:  # noqa: BLE001 - an oracle that cannot judge says so
            return "accepted", f"oracle could not judge ({type(error).__name__})"
        return ("correct", "oracle agrees") if ok else ("wrong", "oracle disagrees")
    if cls == "convert":
        reference = case.call()
        return ("correct", "same as canonical") if same(result, reference) else ("wrong", "differs")
    if cls == "convert-int":  # an integer input: the answer of its float64 equal
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                reference = case.call({name: _float64_equal(value)})
        except ValueError as error:
            return "wrong", f"int64 accepted, its float64 equal rejected: {str(error)[:80]}"
        if same(result, reference):
            return "correct", "same as its float64 equal"
        return "wrong", "differs from its float64 equal"
    if cls == "file":
        return "wrong", "a malformed file was accepted"
    return "accepted", "finite answer, no oracle"


def _float64_equal(value):
    """``value`` with every integer tensor as the float64 tensor of the same numbers."""
    if isinstance(value, torch.Tensor):
        return value if value.is_floating_point() else value.to(DT)
    if isinstance(value, dict):
        return {k: _float64_equal(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_float64_equal(v) for v in value)
    return value
