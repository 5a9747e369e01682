"""Input validation shared by the public functions of :mod:`lib`.

Every public function of the library rejects malformed input with a :class:`ValueError` that says
which argument, what was expected and what came. These helpers keep those messages uniform.

The one policy on numeric types, applied by every helper below:

* **floating point**: float64 only. A float32 (or float16, bfloat16) tensor or array is *rejected*,
  never silently upcast, because float32 erases the near-ties this book studies (a gap of 1e-8 on
  entries of size 1e-3). Python floats are float64 already.
* **integers** (Python ints, numpy or torch integer dtypes) are exact, so they are *converted* to
  float64 where a real number or tensor is expected (``[1, 2]`` is the tensor ``[1., 2.]``).
* **booleans** are never numbers, and numbers or strings are never booleans: ``True`` is rejected
  where a number is expected, and ``"False"`` (truthy!) where a flag is expected.
* **complex** values, strings, ``None`` and other objects are rejected.
* **non-finite** values (nan, ±inf) are rejected in inputs.
* **autograd**: a tensor that requires grad passes through :func:`as_tensor` unchanged where the
  answer is differentiable; a function that computes in numpy (or trains from the value as a
  start) takes its values (``detach=True``, :func:`as_array`), never numpy's RuntimeError.
* **devices** are names this machine has (:func:`as_device`): "CPU", "bogus", 3 or an absent GPU
  are rejected up front, not at the first allocation.
* **closures**: a closure lib builds checks the parameter dict it receives
  (:func:`check_closure_params`: keys, dtypes, shapes), and what a caller's closure returns is
  checked where lib reads it (:func:`closure_number`, and the engines' own checks of losses and
  gradients): a missing key, a float32, complex or non-number answer gets a ValueError naming the
  closure, not a KeyError or a dtype error from inside the arithmetic.

Numerical failures met *during* a computation (a flow that turns nan, an eigensolver that does not
converge) raise :class:`NumericalFailure`, a ``ValueError`` (and a ``RuntimeError``) whose message
says what failed and where.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch

# the library's own input checks, shared by every folder; not API for readers
__all__: list[str] = []

DTYPE = torch.float64

_TORCH_INTEGER = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
_REAL_TYPES = (int, float, np.floating, np.integer)


class NumericalFailure(ValueError, RuntimeError):
    """A computation on valid-looking input met nan/inf or a solver failure (never silent)."""


def describe(value) -> str:
    """A short description of what came: its repr for scalars, its type and shape otherwise."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of dtype {value.dtype} and shape {tuple(value.shape)}"
    if isinstance(value, np.ndarray):
        return f"a numpy array of dtype {value.dtype} and shape {value.shape}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_real_number(value) -> bool:
    return isinstance(value, _REAL_TYPES) and not isinstance(value, (bool, np.bool_))


def as_bool(value, name: str) -> bool:
    """A real boolean (``True``/``False``, or a numpy bool), else a ValueError.

    Strings such as ``"False"`` are truthy in Python; they are rejected, as are 0 and 1.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ValueError(f"{name} must be True or False, got {describe(value)}")


def as_int(value, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as a Python int in [minimum, maximum] (no bools, no floats, not even 2.0)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {describe(value)}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return value


def as_float(
    value,
    name: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    open_minimum: bool = False,
    open_maximum: bool = False,
) -> float:
    """``value`` as a finite Python float in the given (closed, or open) range."""
    if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim == 0:
        if value.dtype in (torch.float64, np.float64) or (
            isinstance(value, torch.Tensor) and value.dtype in _TORCH_INTEGER
        ):
            value = value.item()
    if not _is_real_number(value):
        raise ValueError(f"{name} must be a real number, got {describe(value)}")
    if isinstance(value, np.floating) and value.dtype != np.float64:
        raise ValueError(f"{name} must be a float64 number, got a {value.dtype} scalar")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    low_bad = minimum is not None and (value <= minimum if open_minimum else value < minimum)
    high_bad = maximum is not None and (value >= maximum if open_maximum else value > maximum)
    if low_bad or high_bad:
        low = "(-inf" if minimum is None else ("(" if open_minimum else "[") + f"{minimum}"
        high = "inf)" if maximum is None else f"{maximum}" + (")" if open_maximum else "]")
        raise ValueError(f"{name} must lie in {low}, {high}, got {value}")
    return value


def as_positive_float(value, name: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a finite float > 0 (or >= 0 with ``allow_zero``)."""
    if isinstance(value, (bool, np.bool_)) or not _is_real_number(value):
        raise ValueError(f"{name} must be a real number, got {describe(value)}")
    value = as_float(value, name)
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value}")
    return value


def as_callable(value, name: str, signature: str = "") -> object:
    """``value`` if it is callable, else a ValueError (``signature`` describes what is expected)."""
    if not callable(value):
        what = f" {signature}" if signature else ""
        raise ValueError(f"{name} must be a callable{what}, got {describe(value)}")
    return value


def as_choice(value, name: str, options: Sequence):
    """``value`` if it is one of ``options`` (compared as equal, same type), else a ValueError."""
    for option in options:
        if type(value) is type(option) and value == option:
            return value
    raise ValueError(f"{name} must be one of {tuple(options)}, got {describe(value)}")


def as_tensor(
    value,
    name: str,
    *,
    ndim: int | None = None,
    min_ndim: int | None = None,
    shape: tuple | None = None,
    nonempty: bool = False,
    detach: bool = False,
) -> torch.Tensor:
    """Return ``value`` as a finite float64 tensor, or raise a ``ValueError``.

    Follows the module's policy: float64 tensors pass through unchanged (no copy, so autograd
    still reaches them); Python numbers, (nested) lists, integer tensors and float64 or integer
    numpy arrays are converted; float32 and other floating dtypes, complex and bool are rejected.
    ``shape`` may hold ``None`` for a free dimension; ``nonempty`` rejects tensors without entries.
    ``detach`` returns the tensor cut from autograd: a function whose answer is not
    differentiable (it computes in numpy, or trains from the value as a starting point) passes
    it, so that a tensor with ``requires_grad`` is used for its values instead of failing deep
    inside (numpy's "Can't call numpy() on Tensor that requires grad").
    """
    if isinstance(value, torch.Tensor):
        if value.dtype in _TORCH_INTEGER:
            tensor = value.to(DTYPE)
        elif value.dtype != DTYPE:
            raise ValueError(
                f"{name} must be a torch.float64 tensor, got dtype {value.dtype}; "
                f"convert with {name}.double() (float32 erases the tiny gaps these models need)"
            )
        else:
            tensor = value
    elif isinstance(value, np.ndarray):
        if value.dtype.kind not in "fiu":
            raise ValueError(
                f"{name} must hold real numbers, got a numpy array of dtype {value.dtype}"
            )
        if value.dtype.kind == "f" and value.dtype != np.float64:
            raise ValueError(f"{name} must be float64, got a numpy array of dtype {value.dtype}")
        tensor = torch.as_tensor(value, dtype=DTYPE)
    elif _is_real_number(value) or isinstance(value, (list, tuple)):
        if isinstance(value, np.floating) and value.dtype != np.float64:
            raise ValueError(f"{name} must be float64, got a {value.dtype} scalar")
        if isinstance(value, (list, tuple)) and _has_non_real(value):
            raise ValueError(
                f"{name} must be a number or a (nested) list of real numbers, "
                f"got {describe(value)}"
            )
        try:
            tensor = torch.as_tensor(value, dtype=DTYPE)
        except (TypeError, ValueError, RuntimeError, OverflowError) as err:
            raise ValueError(
                f"{name} must be a number or a (nested) list of numbers of equal lengths: {err}"
            ) from None
    else:
        raise ValueError(f"{name} must be a float64 torch tensor, got {describe(value)}")
    if ndim is not None and tensor.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(tensor.shape)}")
    if min_ndim is not None and tensor.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimension(s), got shape {tuple(tensor.shape)}"
        )
    if shape is not None:
        expected = tuple(shape)
        if tensor.ndim != len(expected) or any(
            e is not None and e != s for e, s in zip(expected, tensor.shape, strict=True)
        ):
            wanted = "(" + ", ".join("*" if e is None else str(e) for e in expected) + ")"
            raise ValueError(f"{name} must have shape {wanted}, got {tuple(tensor.shape)}")
    if nonempty and tensor.numel() == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(tensor.shape)}")
    if not all_finite(tensor):
        raise ValueError(f"{name} must be finite, got non-finite entries (nan or inf)")
    return tensor.detach() if detach else tensor


def as_array(value, name: str, **options) -> np.ndarray:
    """:func:`as_tensor` (same options), detached, as a float64 numpy array sharing its memory.

    The converter for functions that compute in numpy: a tensor with ``requires_grad`` gives its
    values (numpy cannot hold a graph), an integer one is converted, float32 is rejected."""
    return as_tensor(value, name, detach=True, **options).numpy()


def _has_non_real(values) -> bool:
    """True if a nested list/tuple holds anything but real numbers (bools and strings count)."""
    for item in values:
        if isinstance(item, (list, tuple)):
            if _has_non_real(item):
                return True
        elif not _is_real_number(item):
            return True
    return False


def check_params(params, name: str = "params") -> dict[str, torch.Tensor]:
    """Validate a parameter dict ``{name: float64 tensor}`` and return a detached copy."""
    if not isinstance(params, Mapping) or len(params) == 0:
        raise ValueError(f"{name} must be a non-empty dict of float64 tensors, got {params!r:.80}")
    out = {}
    for key, value in params.items():
        if not isinstance(key, str):
            raise ValueError(f"{name} keys must be strings, got {key!r}")
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{name}[{key!r}] must be a torch tensor, got {type(value).__name__}")
        out[key] = as_tensor(value, f"{name}[{key!r}]").detach().clone()
    return out


def check_closure_params(
    params, name: str, shapes: Mapping[str, tuple], *, what: str = "the closure",
    finite: bool = True,
) -> dict[str, torch.Tensor]:
    """The parameter dict a closure returned by lib receives, checked against what it expects.

    ``shapes`` maps each expected name to its shape (``None`` for a free dimension). Exactly these
    keys; every value a float64 tensor (integers converted, float32, complex and other objects
    rejected: the policy of :func:`as_tensor`), finite unless ``finite=False`` (a closure that
    lib.engine.flow's engines call passes its overflow on, for them to flag); autograd still
    reaches the values (no copy). A wrong dict gets a ValueError that names ``what`` and the
    parameter, instead of a KeyError or a shape error from inside the arithmetic. Float64 tensors
    of the right shapes cost a few attribute reads (closures run thousands of times in a flow).
    """
    if not isinstance(params, Mapping):
        raise ValueError(
            f"{what} takes a dict {{{', '.join(map(repr, shapes))}}} of float64 tensors, "
            f"got {describe(params)}"
        )
    if len(params) != len(shapes) or any(key not in params for key in shapes):
        missing = sorted(set(shapes) - set(params), key=str)
        extra = sorted(set(params) - set(shapes), key=str)
        raise ValueError(
            f"{what} takes the parameters {sorted(shapes)}: missing {missing}, unexpected {extra}"
        )
    out = {}
    for key, shape in shapes.items():
        tensor = params[key]
        if not (isinstance(tensor, torch.Tensor) and tensor.dtype == DTYPE) or finite:
            tensor = as_tensor(tensor, f"{name}[{key!r}]") if finite else _as_float64(
                tensor, f"{name}[{key!r}]")
        if shape is not None and (
            tensor.ndim != len(shape)
            or any(e is not None and e != s for e, s in zip(shape, tensor.shape, strict=True))
        ):
            wanted = ", ".join("*" if e is None else str(e) for e in shape)
            raise ValueError(
                f"{name}[{key!r}] for {what} must have shape ({wanted}), got "
                f"{tuple(tensor.shape)}"
            )
        out[key] = tensor
    return out


def _as_float64(value, name: str) -> torch.Tensor:
    """A float64 tensor of ``value`` (integer tensors converted), non-finite entries allowed."""
    if isinstance(value, torch.Tensor) and value.dtype in _TORCH_INTEGER:
        return value.to(DTYPE)
    if isinstance(value, torch.Tensor) and value.dtype == DTYPE:
        return value
    raise ValueError(f"{name} must be a torch.float64 tensor, got {describe(value)}")


def closure_number(value, what: str) -> float:
    """What a caller's closure returned where a real number is expected (a Python or numpy real,
    or a one-entry float64/integer tensor or array), as a float; else a ValueError naming the
    closure's call ``what`` (``"gradient(q) at q = 0.5"``) and what came. Non-finite values
    pass (the caller decides what an overflow means)."""
    if isinstance(value, torch.Tensor):
        if value.numel() == 1 and value.ndim <= 1 and (
            value.dtype == torch.float64 or value.dtype in _TORCH_INTEGER
        ):
            return float(value.detach().reshape(()).item())
    elif isinstance(value, np.ndarray):
        if value.size == 1 and value.ndim <= 1 and (
            value.dtype == np.float64 or value.dtype.kind in "iu"
        ):
            return float(value.reshape(()).item())
    elif _is_real_number(value) and not (
        isinstance(value, np.floating) and value.dtype != np.float64
    ):
        return float(value)
    raise ValueError(f"{what} must return a real (float64) number, got {describe(value)}")


def as_device(value, name: str = "device") -> torch.device:
    """A torch device this machine has: ``"cpu"``, ``"cuda"``/``"cuda:i"`` with a GPU i, ``"mps"``
    where available (a string or a ``torch.device``), else a ValueError naming what is available.

    Torch's own parser raises RuntimeError for a misspelled name ("CPU", "bogus") and accepts an
    int as a CUDA index, which fails only at the first allocation on a machine without one."""
    if not isinstance(value, (str, torch.device)):
        raise ValueError(f"{name} must be a device name such as 'cpu', got {describe(value)}")
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError, TypeError):
        device = None
    available = ["cpu"]
    if torch.cuda.is_available():
        available += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        available.append("mps")
    ok = device is not None and (
        device.type == "cpu" and device.index in (None, 0)
        or device.type == "cuda" and torch.cuda.is_available()
        and (device.index is None or device.index < torch.cuda.device_count())
        or device.type == "mps" and "mps" in available
    )
    if not ok:
        raise ValueError(f"{name} must be one of {available} on this machine, got {value!r:.60}")
    return device


def same_shapes(name_to_tensor: Mapping[str, torch.Tensor]) -> None:
    """Raise unless all tensors have the same shape (no silent broadcasting)."""
    shapes = {name: tuple(t.shape) for name, t in name_to_tensor.items()}
    if len(set(shapes.values())) > 1:
        described = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"expected equal shapes, got {described}")


def as_list(values, name: str) -> list:
    """A non-empty list/tuple/range/array of values, else a ValueError naming what came."""
    if not isinstance(values, (list, tuple, range, np.ndarray)) or len(values) == 0:
        raise ValueError(f"{name} must be a non-empty list, got {describe(values)}")
    return list(values)


MAX_ENTRIES = 2**28
"""The most float64 numbers (2 GiB) one public call allocates for an array: a size argument that
would need more is rejected up front with a ValueError, instead of a MemoryError from the
allocator (or an OverflowError from a C integer) deep inside numpy, torch or numba."""

MAX_STEPS = 2**53
"""The most iterations a training loop accepts (every count up to it is exact in float64)."""


def as_size(value, name: str, *, minimum: int = 1, per: int = 1) -> int:
    """A size (a length, a count) in [minimum, MAX_ENTRIES // per], where ``per`` is the number of
    entries the call allocates for each unit of it (the product with the other sizes)."""
    value = as_int(value, name, minimum=minimum)
    limit = max(minimum, MAX_ENTRIES // max(int(per), 1))
    if value > limit:
        raise ValueError(
            f"{name} must be at most {limit}, got {value}: the result would hold {value} × {per} "
            f"entries, more than {MAX_ENTRIES} float64 numbers (2 GiB)"
        )
    return value


def as_steps(steps, record_every, *, per_record: int, minimum: int = 0) -> tuple[int, int]:
    """``steps`` (an iteration count up to MAX_STEPS) and ``record_every`` (at least 1), checked so
    that the record of steps // record_every + 2 rows of ``per_record`` entries fits MAX_ENTRIES."""
    steps = as_int(steps, "steps", minimum=minimum, maximum=MAX_STEPS)
    record_every = as_int(record_every, "record_every", minimum=1, maximum=MAX_STEPS)
    rows = steps // record_every + 2
    if rows * max(int(per_record), 1) > MAX_ENTRIES:
        raise ValueError(
            f"steps = {steps} recorded every {record_every} would keep {rows} records of "
            f"{per_record} numbers, more than {MAX_ENTRIES} float64 numbers (2 GiB): raise "
            "record_every or lower steps"
        )
    return steps, record_every


SEED_LIMIT = 2**32 - 1
"""The largest seed numpy's ``RandomState`` accepts (torch's generators accept it too)."""


def as_seed(value, name: str = "seed") -> int:
    """An integer seed in [0, 2³² − 1]."""
    return as_int(value, name, minimum=0, maximum=SEED_LIMIT)


def as_seeds(seeds, name: str = "seeds") -> list[int]:
    """A non-empty list of integer seeds in [0, 2³² − 1]."""
    return [as_seed(s, f"{name}[{i}]") for i, s in enumerate(as_list(seeds, name))]


DATA_LIMIT = 1e100
"""The largest magnitude of a data entry that a square loss or a cross-entropy takes: squared (and
multiplied by parameters of order one) larger entries overflow float64 (about 1.8e308), so the
loss would be inf at every parameter."""


def check_magnitude(tensor: torch.Tensor, name: str, limit: float = DATA_LIMIT) -> torch.Tensor:
    """``tensor`` (already checked finite) if no entry exceeds ``limit`` in magnitude, else a
    ValueError that says how large it came."""
    if tensor.numel() == 0:
        return tensor
    low, high = torch.aminmax(tensor.detach())  # no |tensor| allocated
    if high > limit or low < -limit:
        largest = max(float(high), -float(low))
        raise ValueError(
            f"{name} must have entries of magnitude at most {limit:.0e} (a loss of larger data "
            f"overflows float64), got max |{name}| = {largest:.3g}"
        )
    return tensor


def check_finite_result(value, what: str):
    """``value`` if the computed tensor/array/number is finite, else :class:`NumericalFailure`."""
    if isinstance(value, torch.Tensor):
        finite = all_finite(value)
    else:
        finite = bool(np.all(np.isfinite(np.asarray(value, dtype=np.float64))))
    if not finite:
        raise NumericalFailure(f"{what} is not finite (nan or inf): the computation overflowed")
    return value


MODEL_DTYPES = (torch.float32, torch.float64)


def all_finite(tensor: torch.Tensor) -> bool:
    """All entries finite (True on the meta device, which has no values). A finite sum proves it
    at a fraction of the cost of an elementwise test, which runs only when the sum is not."""
    if tensor.is_meta:
        return True
    values = tensor.detach()
    return bool(torch.isfinite(values.sum())) or bool(torch.isfinite(values).all())


def check_result(value: torch.Tensor, what: str) -> torch.Tensor:
    """``value`` if all its entries are finite, else
    :class:`~lib.engine.validation.NumericalFailure`."""
    if not all_finite(value):
        raise NumericalFailure(f"{what} is not finite (nan or inf): the computation overflowed")
    return value


def as_model_tensor(value, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``value`` as a finite float32 or float64 tensor (the victim's precision or the book's):
    such tensors (and numpy arrays) pass unchanged, anything
    :func:`lib.engine.validation.as_tensor` takes (integers, lists, float64 arrays) becomes
    float64; then converted to ``dtype`` if given."""
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        value = torch.from_numpy(value)
    if isinstance(value, torch.Tensor) and value.dtype in MODEL_DTYPES:
        if not all_finite(value):
            raise ValueError(f"{name} must be finite, got non-finite entries (nan or inf)")
        tensor = value
    else:
        tensor = as_tensor(value, name)
    return tensor if dtype is None else tensor.to(dtype)


def as_indices(
    values, name: str, shape: tuple | None, size: int | None, what: str
) -> torch.Tensor:
    """Indices in 0..size−1 (or any ≥ 0 without ``size``) as an int64 tensor of ``shape`` (a tuple
    whose None entries are free; None: any shape): integer tensors, integer numpy arrays and
    (nested) lists of integers are taken, floats and bools are not. ``what`` says what they index.
    (Shared by :mod:`lib.poisoning.mlp_victim` and :mod:`lib.poisoning.gradient_matching`.)"""
    if isinstance(values, (list, tuple)):
        try:
            values = np.asarray(values)
        except ValueError:
            raise ValueError(
                f"{name} must be a list of integers, got {describe(values)}"
            ) from None
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        values = torch.from_numpy(values.astype(np.int64))
    if not isinstance(values, torch.Tensor) or values.dtype not in _INTEGER_DTYPES:
        raise ValueError(f"{name} must be an integer tensor of {what}, got {describe(values)}")
    values = values.to(torch.int64)
    if shape is not None and (
        values.ndim != len(shape)
        or any(e is not None and e != s for e, s in zip(shape, values.shape, strict=True))
    ):
        wanted = "(" + ", ".join("*" if e is None else str(e) for e in shape) + ")"
        raise ValueError(f"{name} must have shape {wanted}, got {tuple(values.shape)}")
    if values.numel() and not values.is_meta:
        low, high = int(values.min()), int(values.max())
        if low < 0 or (size is not None and high >= size):
            bound = f"0..{size - 1}" if size is not None else ">= 0"
            raise ValueError(f"{name} ({what}) must lie in {bound}, got entries in {low}..{high}")
    return values


def as_labels(labels, name: str, shape: tuple, classes: int | None) -> torch.Tensor:
    """Class labels in 0..classes−1 of the given shape, as int64 (see :func:`as_indices`)."""
    return as_indices(labels, name, shape, classes, "class indices")


_INTEGER_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
