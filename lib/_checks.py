"""Input validation shared by the public functions of :mod:`lib`.

Every public function of the library rejects malformed input with a :class:`ValueError` that says
what was expected and what came. These helpers keep those messages uniform.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch

DTYPE = torch.float64


def as_tensor(
    value, name: str, *, ndim: int | None = None, min_ndim: int | None = None
) -> torch.Tensor:
    """Return ``value`` as a finite float64 tensor, or raise a ``ValueError``.

    Python numbers, lists and float64 numpy arrays are converted. A torch tensor of another floating
    dtype is *rejected* rather than silently upcast, because float32 erases the near-ties this book
    studies (a gap of 1e-8 on entries of size 1e-3).
    """
    if isinstance(value, torch.Tensor):
        if value.dtype != DTYPE:
            raise ValueError(
                f"{name} must be a torch.float64 tensor, got dtype {value.dtype}; "
                f"convert with {name}.double() (float32 erases the tiny gaps these models need)"
            )
        tensor = value
    elif isinstance(value, np.ndarray):
        if value.dtype.kind not in "fiu":
            raise ValueError(
                f"{name} must hold real numbers, got a numpy array of dtype {value.dtype}"
            )
        if value.dtype.kind == "f" and value.dtype != np.float64:
            raise ValueError(f"{name} must be float64, got a numpy array of dtype {value.dtype}")
        tensor = torch.as_tensor(value, dtype=DTYPE)
    elif isinstance(value, (int, float, list, tuple)) and not isinstance(value, bool):
        try:
            tensor = torch.as_tensor(value, dtype=DTYPE)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"{name} must be a number or a (nested) list of numbers: {err}"
            ) from None
    else:
        raise ValueError(f"{name} must be a float64 torch tensor, got {type(value).__name__}")
    if ndim is not None and tensor.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(tensor.shape)}")
    if min_ndim is not None and tensor.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} dimension(s), got shape {tuple(tensor.shape)}"
        )
    if not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"{name} must be finite, got non-finite entries (nan or inf)")
    return tensor


def as_int(value, name: str, *, minimum: int | None = None) -> int:
    """Return ``value`` as a Python int (no bools, no fractional floats) at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def as_positive_float(value, name: str, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a finite float > 0 (or >= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value}")
    return value


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


def same_shapes(name_to_tensor: Mapping[str, torch.Tensor]) -> None:
    """Raise unless all tensors have the same shape (no silent broadcasting)."""
    shapes = {name: tuple(t.shape) for name, t in name_to_tensor.items()}
    if len(set(shapes.values())) > 1:
        described = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"expected equal shapes, got {described}")


def as_list(values, name: str) -> list:
    """A non-empty list/tuple/array of values, else a ValueError naming what came."""
    if not isinstance(values, (list, tuple, np.ndarray)) or len(values) == 0:
        raise ValueError(f"{name} must be a non-empty list, got {values!r:.60}")
    return list(values)


def as_seeds(seeds, name: str = "seeds") -> list[int]:
    """A non-empty list of integer seeds >= 0."""
    return [as_int(s, "seed", minimum=0) for s in as_list(seeds, name)]
