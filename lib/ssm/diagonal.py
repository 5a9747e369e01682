"""Diagonal linear state space models (SSMs), after Slutzky et al. 2025, §2.2–2.3.

A diagonal SSM of dimension d has parameters a, b, c ∈ R^d (A = diag(a), B = b, C = cᵀ). On an
input sequence x = (x_1, …, x_κ) it runs the recurrence

    s_k = A s_{k−1} + B x_k,   y_k = C s_k,   s_0 = 0,                            (eq. 1)

and outputs the last element, which unrolls into a convolution with the impulse response:

    φ_{(A,B,C)}(x) = y_κ = Σ_{k'=0}^{κ−1} h_{k'} x_{κ−k'},                            (eq. 2)
    h_{k'} = C A^{k'} B = Σ_j c_j b_j a_j^{k'}.

Every function accepts parameters with optional *leading batch dimensions* (shape ``(..., d)``),
so that several students (seeds) are evaluated in one call; a, b and c must share one shape.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from lib.engine.validation import (
    DTYPE,
    NumericalFailure,
    as_bool,
    as_callable,
    as_int,
    as_positive_float,
    as_seed,
    as_size,
    as_tensor,
    check_finite_result,
    check_magnitude,
    same_shapes,
)

# the API (a few more public names serve the library's other folders)
__all__ = [
    "PROPOSITION3_TOLERANCE",
    "SSM",
    "baseline_and_special",
    "characterization_coefficients",
    "characterization_velocity",
    "effective_rank",
    "fit_impulse_response",
    "generalization_error",
    "impulse_response",
    "ones_teacher",
    "proposition3_student",
    "random_sequences",
    "square_loss",
    "square_loss_gradient",
    "ssm_output",
    "ssm_recurrence",
    "theorem1_teacher",
    "unit_impulse",
]


class SSM(NamedTuple):
    """The parameters (a, b, c) of a diagonal SSM: A = diag(a), B = b, C = cᵀ."""

    a: torch.Tensor
    b: torch.Tensor
    c: torch.Tensor

    @property
    def dim(self) -> int:
        """The state dimension d."""
        return int(self.a.shape[-1])


def _check_abc(a, b, c) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a = as_tensor(a, "a", min_ndim=1)
    b = as_tensor(b, "b", min_ndim=1)
    c = as_tensor(c, "c", min_ndim=1)
    same_shapes({"a": a, "b": b, "c": c})
    if a.shape[-1] == 0:
        raise ValueError("the state dimension d must be at least 1, got a of length 0")
    return a, b, c


def as_ssm(model, name: str) -> SSM:
    if isinstance(model, dict):
        missing = {"a", "b", "c"} - set(model)
        if missing:
            raise ValueError(f"{name} must have keys a, b, c; missing {sorted(missing)}")
        model = (model["a"], model["b"], model["c"])
    if not isinstance(model, tuple) or len(model) != 3:
        raise ValueError(
            f"{name} must be an SSM (a, b, c) or a dict with keys a, b, c, got {model!r:.80}"
        )
    return SSM(*_check_abc(*model))


def _powers(a: torch.Tensor, length: int) -> torch.Tensor:
    """The matrix of powers a_j^k, shape ``(..., length, d)``, by cumulative products.

    Cumulative products (rather than ``a ** k``) keep the derivative at a_j = 0 exact: the
    derivative of a^0 is 0, not 0·0^{−1} = nan.
    """
    ones = torch.ones_like(a).unsqueeze(-2)
    if length == 1:
        return ones
    repeated = a.unsqueeze(-2).expand(*a.shape[:-1], length - 1, a.shape[-1])
    return torch.cat([ones, torch.cumprod(repeated, dim=-2)], dim=-2)


def impulse_response(a, b, c, length: int) -> torch.Tensor:
    """The impulse response h_k = C A^k B = Σ_j c_j b_j a_j^k for k = 0, …, length − 1 (eq. 2).

    Parameters a, b, c of shape ``(..., d)``; returns shape ``(..., length)``. Differentiable.
    """
    a, b, c = _check_abc(a, b, c)
    length = as_size(length, "length", per=a.numel())
    return check_finite_result(_response(a, b, c, length), "the impulse response")


def _response(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, length: int) -> torch.Tensor:
    """h_k = Σ_j c_j b_j a_j^k, k < length, on trusted inputs (overflow passed on as inf)."""
    return (_powers(a, length) @ (b * c).unsqueeze(-1)).squeeze(-1)


def _output(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """y_i = Σ_l h_{κ−l} x^{(i)}_l on trusted inputs (overflow passed on as inf)."""
    return _response(a, b, c, x.shape[1]).flip(-1) @ x.T


def _check_inputs(x) -> torch.Tensor:
    x = as_tensor(x, "x", ndim=2)
    if x.shape[1] < 1:
        raise ValueError(f"x must have shape (n, kappa) with kappa >= 1, got {tuple(x.shape)}")
    return x


def ssm_output(a, b, c, x) -> torch.Tensor:
    """The SSM's last output y_κ for a batch of sequences, through the closed form (eq. 2).

    ``x`` has shape ``(n, κ)``, row i being (x_1, …, x_κ) of sequence i. With parameters of shape
    ``(..., d)`` the result has shape ``(..., n)``: y_i = Σ_{l=1}^{κ} h_{κ−l} x^{(i)}_l.
    """
    a, b, c = _check_abc(a, b, c)
    x = _check_inputs(x)
    as_size(x.shape[1], "the length kappa of x", per=a.numel())
    return check_finite_result(_output(a, b, c, x), "the SSM output")


def ssm_recurrence(a, b, c, x) -> torch.Tensor:
    """The same output as :func:`ssm_output`, by running the recurrence (eq. 1) step by step.

    The straightforward reference implementation: κ state updates s ← a ⊙ s + b x_k. Used to test
    the closed form, and as the baseline of the benchmarks.
    """
    a, b, c = _check_abc(a, b, c)
    x = _check_inputs(x)
    state = torch.zeros(*a.shape[:-1], x.shape[0], a.shape[-1], dtype=DTYPE)
    for k in range(x.shape[1]):
        state = a.unsqueeze(-2) * state + b.unsqueeze(-2) * x[:, k].unsqueeze(-1)
    return check_finite_result((state * c.unsqueeze(-2)).sum(-1), "the SSM output")


def square_loss(student, x, y) -> torch.Tensor:
    """The training loss ℓ_S = (1/n) Σ_i (y_i − φ_{(A,B,C)}(x^{(i)}))² (Slutzky et al. 2025, eq. 3).

    Note the factor 1/n and no ½. ``student`` is an :class:`SSM` (or dict with keys a, b, c),
    possibly batched over leading dimensions; ``x`` has shape ``(n, κ)`` and ``y`` shape ``(n,)``.
    Differentiable, so it serves directly as a loss closure for :mod:`lib.engine.flow`; for that
    reason a student whose output overflows (entries of a near 1e300) gets the inf/nan loss as it
    comes, which the engines of :mod:`lib.engine.flow` record as a diverged run.
    """
    student = as_ssm(student, "student")
    x = _check_inputs(x)
    if x.shape[0] == 0:
        raise ValueError("the training set is empty (x has no rows): the mean loss is undefined")
    y = as_tensor(y, "y", ndim=1)
    if y.shape[0] != x.shape[0]:
        raise ValueError(
            f"y must have one label per sequence: {x.shape[0]} sequences, got {y.shape[0]}"
        )
    check_magnitude(x, "x")
    check_magnitude(y, "y")
    return ((y - _output(*student, x)) ** 2).mean(-1)


def ssm_output_vjp(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, x: torch.Tensor):
    """φ(x) for x of shape ``(..., n, κ)`` and its vector–Jacobian product, by hand (no autograd).

    With K_ij = Σ_l x^{(i)}_l a_j^{κ−l} and K'_ij = Σ_l (κ−l) x^{(i)}_l a_j^{κ−l−1},
    φ_i = Σ_j b_j c_j K_ij, and a cotangent u (shape ``(..., n)``) pulls back to
    ∂/∂a_j = b_j c_j Σ_i u_i K'_ij, ∂/∂b_j = c_j Σ_i u_i K_ij, ∂/∂c_j = b_j Σ_i u_i K_ij.
    Inputs are trusted (internal hot path).
    """
    kappa = x.shape[-1]
    powers = _powers(a, kappa)  # (..., κ, d): row k holds a^k
    features = x @ powers.flip(-2)  # K, (..., n, d)
    g = b * c
    prediction = (features * g.unsqueeze(-2)).sum(-1)

    def backward(cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
        u = cotangent.unsqueeze(-2)  # (..., 1, n)
        shifted = torch.cat([torch.zeros_like(powers[..., :1, :]), powers[..., :-1, :]], dim=-2)
        slopes = torch.arange(kappa, dtype=DTYPE).unsqueeze(-1) * shifted  # row k: k a^{k−1}
        weighted = (u @ features).squeeze(-2)  # (..., d)
        slope_features = (u @ (x @ slopes.flip(-2))).squeeze(-2)
        return {"a": g * slope_features, "b": c * weighted, "c": b * weighted}

    return prediction, backward


def square_loss_gradient(x, y, *, weights=None):
    """The loss of eq. (3) with its gradient in closed form, as a ``gradient`` closure for
    lib.engine.flow.

    Returns ``gradient(params) -> (ℓ, {"a": ∂ℓ/∂a, "b": ∂ℓ/∂b, "c": ∂ℓ/∂c})`` for parameters of
    shape ``(..., d)``. With residuals r_i = φ(x^{(i)}) − y_i, g = b ⊙ c, K_ij = Σ_l x^{(i)}_l
    a_j^{κ−l} and K'_ij = Σ_l (κ−l) x^{(i)}_l a_j^{κ−l−1}:

        ℓ = (1/n) Σ_i r_i²,   ∂ℓ/∂b_j = (2/n) c_j Σ_i r_i K_ij,   ∂ℓ/∂c_j = (2/n) b_j Σ_i r_i K_ij,
        ∂ℓ/∂a_j = (2/n) b_j c_j Σ_i r_i K'_ij,

    which is −ȧ_j of Proposition 1 (eq. 7) for a standalone SSM. ``x`` has shape ``(n, κ)``, or
    ``(R, n, κ)`` with ``y`` of shape ``(R, n)`` to give each of R independent runs its own data
    (then parameters have shape ``(R, d)``). It is exact, and several times faster than autograd on
    the small models of the book, whose training runs take 10⁴–10⁵ steps. Parameters are not
    re-validated on each call (a diverging run must be reported by the optimizer, not raised).

    ``weights`` (shape of ``y``, non-negative) replaces the factor 1/n by per-example weights,
    ℓ = Σ_i w_i r_i². Zero-weight rows let runs with training sets of different sizes share one
    padded ``(R, n, κ)`` array: give run r the weights 1/n_r on its n_r real rows and 0 elsewhere.
    """
    x = as_tensor(x, "x", min_ndim=2)
    y = as_tensor(y, "y", min_ndim=1)
    if x.ndim > 3 or y.shape != x.shape[:-1] or x.shape[-1] < 1:
        raise ValueError(
            f"expected x of shape (n, kappa) or (R, n, kappa) and y of shape x.shape[:-1]; got "
            f"x {tuple(x.shape)} and y {tuple(y.shape)}"
        )
    n = x.shape[-2]
    if n == 0:
        raise ValueError("the training set is empty (x has no rows)")
    check_magnitude(x, "x")
    check_magnitude(y, "y")
    if weights is None:
        weights = torch.full(y.shape, 1.0 / n, dtype=DTYPE)
    else:
        weights = as_tensor(weights, "weights")
        if weights.shape != y.shape or bool((weights < 0).any()):
            raise ValueError(
                f"weights must be non-negative with the shape of y {tuple(y.shape)}, got "
                f"shape {tuple(weights.shape)}"
            )

    def gradient(params):
        a, b, c = _closure_params(params)
        if not (a.shape == b.shape == c.shape) or a.ndim < 1:
            raise ValueError(
                f"a, b, c must share one shape (..., d); got {tuple(a.shape)}, "
                f"{tuple(b.shape)}, {tuple(c.shape)}"
            )
        if x.ndim == 3 and (a.ndim != 2 or a.shape[0] != x.shape[0]):
            raise ValueError(
                f"with per-run data x of shape {tuple(x.shape)} the parameters must have shape "
                f"({x.shape[0]}, d), got {tuple(a.shape)}"
            )
        prediction, backward = ssm_output_vjp(a, b, c, x)
        residual = prediction - y
        loss = (weights * residual**2).sum(-1)
        return loss, backward(2.0 * weights * residual)

    return gradient


def _closure_params(params) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """a, b, c of a parameter dict handed to a gradient closure: cheap type checks only (no
    finiteness test, so that a diverging run reaches the optimizer, which reports it)."""
    if not isinstance(params, dict) or not {"a", "b", "c"} <= set(params):
        raise ValueError(f"params must be a dict with keys a, b, c, got {params!r:.80}")
    for key in "abc":
        value = params[key]
        if not isinstance(value, torch.Tensor) or value.dtype != DTYPE:
            raise ValueError(
                f"params[{key!r}] must be a float64 tensor, got {getattr(value, 'dtype', value)!r}"
            )
    return params["a"], params["b"], params["c"]


def generalization_error(student, teacher, length: int, *, normalize: bool = False) -> torch.Tensor:
    """Definition 1 of Slutzky et al. 2025: the largest gap of the first ``length`` impulse entries.

        Gen_k = max_{k' ∈ {0, …, k−1}} |C A^{k'} B − C* (A*)^{k'} B*|.

    ``student`` and ``teacher`` are :class:`SSM` tuples (or dicts with keys a, b, c); the student
    may carry leading batch dimensions. With ``normalize=True`` the error is divided by the
    teacher's largest impulse entry max_{k'<k} |h*_{k'}| (the normalization of the paper's Tables 1
    and 3, row 1), so that the zero map scores 1. Returns a tensor of the batch shape.
    """
    student = as_ssm(student, "student")
    teacher = as_ssm(teacher, "teacher")
    if teacher.a.ndim != 1:
        raise ValueError(f"teacher parameters must be 1-D, got shape {tuple(teacher.a.shape)}")
    length = as_size(length, "length", per=student.a.numel() + teacher.a.numel())
    normalize = as_bool(normalize, "normalize")
    h = impulse_response(*student, length)
    h_star = impulse_response(*teacher, length)
    error = (h - h_star).abs().amax(-1)
    if normalize:
        scale = h_star.abs().max()
        if scale == 0:
            raise ValueError("cannot normalize: the teacher's impulse response is identically zero")
        error = error / scale
    return error


def characterization_coefficients(a, b, c, x, y, *, head=None) -> torch.Tensor:
    """The coefficients γ^{(l)}(t), l = 0, …, κ−2, of Proposition 1 (Slutzky et al. 2025, eq. 8).

    Under gradient flow on ℓ = (1/n) Σ_i (y_i − σ(φ(x^{(i)})))², each diagonal entry moves as

        ȧ_j = b_j c_j Σ_{l=0}^{κ−2} γ^{(l)} a_j^l,                                     (eq. 7)
        γ^{(l)} = (2(l+1)/n) Σ_i δ_i g_i x^{(i)}_{κ−l−1},                                (eq. 8)

    with residuals δ_i = y_i − σ(φ(x^{(i)})) (eq. 9) and gains g_i = σ'(φ(x^{(i)})) (eq. 10),
    x 1-indexed. ``head`` is the non-linear map σ, a callable taking the SSM outputs z of shape
    ``(n,)`` to predictions of shape ``(n,)`` *sample by sample* (its parameters w live in the
    closure); ``None`` means a standalone SSM (σ = identity, g ≡ 1). With a ``head`` the parameters
    must be 1-D; without one they may carry leading batch dimensions (e.g. the recorded times of a
    trajectory), and the result gains the same leading dimensions.

    Returns shape ``(..., κ−1)``; γ^{(0)} depends only on the penultimate inputs x_{κ−1}.
    """
    a, b, c = _check_abc(a, b, c)
    if a.ndim != 1 and head is not None:
        raise ValueError(f"with a head, a, b, c must be 1-D, got shape {tuple(a.shape)}")
    x = _check_inputs(x)
    n, kappa = x.shape
    if kappa < 2:
        raise ValueError(f"Proposition 1 needs sequences of length kappa >= 2, got kappa = {kappa}")
    y = as_tensor(y, "y", ndim=1)
    if y.shape[0] != n:
        raise ValueError(
            f"y must have one label per sequence: {n} sequences, got {y.shape[0]} labels"
        )
    if head is not None:
        as_callable(head, "head", "z -> predictions (or None)")

    z = ssm_output(a.detach(), b.detach(), c.detach(), x)
    if head is None:
        prediction, gain = z, torch.ones_like(z)
    else:
        z = z.clone().requires_grad_(True)
        prediction = head(z)
        if not isinstance(prediction, torch.Tensor) or prediction.shape != z.shape:
            raise ValueError(f"head(z) must return a tensor of shape {tuple(z.shape)}")
        prediction = as_tensor(prediction, "head(z)")  # float64, finite (graph kept)
        if not prediction.requires_grad:
            raise ValueError(
                "head(z) must depend on z through autograd (its answer has no graph: a constant "
                "or detached head has no gain σ'(z) to differentiate)"
            )
        (gain,) = torch.autograd.grad(prediction.sum(), z)
        prediction = prediction.detach()
    residual = y - prediction
    weights = residual * gain  # δ_i g_i
    powers = torch.arange(kappa - 1, dtype=DTYPE)
    # x_{κ−l−1} (1-indexed) is column κ−l−2 (0-indexed): columns κ−2, κ−3, …, 0.
    columns = x[:, : kappa - 1].flip(-1)
    return check_finite_result(2 * (powers + 1) / n * (weights @ columns), "the coefficients")


def characterization_velocity(a, b, c, gammas) -> torch.Tensor:
    """The right-hand side of eq. (7): ȧ_j = b_j c_j Σ_l γ^{(l)} a_j^l, for 1-D a, b, c."""
    a, b, c = _check_abc(a, b, c)
    gammas = as_tensor(gammas, "gammas", ndim=1, nonempty=True)
    if a.ndim != 1:
        raise ValueError(f"a, b, c must be 1-D here, got shape {tuple(a.shape)}")
    velocity = b * c * (_powers(a, gammas.shape[0]) * gammas.unsqueeze(-1)).sum(-2)
    return check_finite_result(velocity, "the velocity")


def effective_rank(a) -> torch.Tensor:
    """Effective rank of A = diag(a) (Roy & Vetterli 2007), as plotted by Slutzky et al. 2025.

    With p_j = |a_j| / Σ_k |a_k|: erank = exp(−Σ_j p_j ln p_j) (terms with p_j = 0 count as 0).
    It lies in [1, d]; a single non-zero entry gives 1. Accepts shape ``(..., d)``.
    """
    a = as_tensor(a, "a", min_ndim=1)
    if a.shape[-1] == 0:
        raise ValueError(f"a must have at least one entry in its last dimension, got {a.shape}")
    magnitude = a.abs()
    total = magnitude.sum(-1, keepdim=True)
    if bool((total == 0).any()):
        raise ValueError("effective rank is undefined for a = 0")
    if not bool(torch.isfinite(total).all()):  # entries near 1e308: the sum overflows
        magnitude = magnitude / magnitude.amax(-1, keepdim=True)
        total = magnitude.sum(-1, keepdim=True)
    p = magnitude / total
    entropy = -torch.where(p > 0, p * torch.log(p.clamp_min(1e-300)), torch.zeros_like(p)).sum(-1)
    return torch.exp(entropy)


# --------------------------------------------------------------------------------------------
# Teachers
# --------------------------------------------------------------------------------------------


def theorem1_teacher(d: int) -> SSM:
    """The teacher of Assumption 1 (Slutzky et al. 2025): A* = diag(1, 0), B* = C*ᵀ = (1, √(d−1)).

    It depends on the *student's* dimension d. Its impulse response is (d, 1, 1, …), the same as
    that of the student with B = 1, C = 1ᵀ and a = (1, 0, …, 0).
    """
    d = as_int(d, "d", minimum=2)
    root = math.sqrt(d - 1)
    return SSM(
        a=torch.tensor([1.0, 0.0], dtype=DTYPE),
        b=torch.tensor([1.0, root], dtype=DTYPE),
        c=torch.tensor([1.0, root], dtype=DTYPE),
    )


def ones_teacher() -> SSM:
    """The teacher of dimension 1, A* = B* = C* = 1: impulse response (1, 1, …), label Σ_l x_l."""
    one = torch.ones(1, dtype=DTYPE)
    return SSM(one.clone(), one.clone(), one.clone())


# --------------------------------------------------------------------------------------------
# Training sequences
# --------------------------------------------------------------------------------------------


def _check_positions(positions, kappa: int, name: str) -> list[int]:
    if isinstance(positions, int) and not isinstance(positions, bool):
        positions = [positions]
    try:
        positions = [as_int(p, name) for p in positions]
    except TypeError:
        raise ValueError(f"{name} must be a list of positions, got {positions!r}") from None
    if not positions:
        raise ValueError(f"{name} must name at least one position")
    bad = [p for p in positions if not 1 <= p <= kappa]
    if bad:
        raise ValueError(f"{name} are 1-indexed and must lie in 1..{kappa}, got {bad}")
    if len(set(positions)) != len(positions):
        raise ValueError(f"{name} must not repeat, got {positions}")
    return positions


def unit_impulse(kappa: int, position: int) -> torch.Tensor:
    """The sequence e_position ∈ R^κ (1-indexed), as a row of shape ``(1, κ)``.

    Theorem 1 trains on e_1 and appends the clean "special" example e_{κ−1}.
    """
    kappa = as_size(kappa, "kappa")
    (position,) = _check_positions([position], kappa, "position")
    x = torch.zeros(1, kappa, dtype=DTYPE)
    x[0, position - 1] = 1.0
    return x


def random_sequences(n: int, kappa: int, positions, generator: torch.Generator) -> torch.Tensor:
    """``n`` length-κ sequences, i.i.d. N(0, 1) at ``positions`` (1-indexed) and 0 elsewhere."""
    kappa = as_size(kappa, "kappa")
    n = as_size(n, "n", minimum=0, per=kappa)
    positions = _check_positions(positions, kappa, "positions")
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    x = torch.zeros(n, kappa, dtype=DTYPE)
    values = torch.randn(n, len(positions), generator=generator, dtype=DTYPE)
    x[:, [p - 1 for p in positions]] = values
    return x


def baseline_and_special(
    kappa: int,
    n_baseline: int,
    n_special: int,
    *,
    baseline_positions,
    special_positions,
    seed: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The "baseline" and "special" sequences of Slutzky et al. 2025 (§4, Tables 4–5, 10–11).

    Baseline sequences are non-zero (N(0, 1)) only at ``baseline_positions``; special ones only at
    ``special_positions`` (1-indexed, typically the last one or two). The baseline sequences are
    drawn first from one generator seeded with ``seed``, so they are *identical* whether or not
    special sequences are added: the poisoned training set is the clean one with examples appended.

    Returns ``(x_baseline, x_special)`` of shapes ``(n_baseline, κ)`` and ``(n_special, κ)``.
    """
    kappa = as_size(kappa, "kappa", minimum=2)
    as_size(n_baseline, "n_baseline", minimum=0, per=kappa)
    as_size(n_special, "n_special", minimum=0, per=kappa)
    seed = as_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    x_baseline = random_sequences(n_baseline, kappa, baseline_positions, generator)
    x_special = random_sequences(n_special, kappa, special_positions, generator)
    return x_baseline, x_special


# --------------------------------------------------------------------------------------------
# Proposition 3: zero training loss, arbitrary error at length κ + 1
# --------------------------------------------------------------------------------------------


def fit_impulse_response(a, targets) -> SSM:
    """A student with the given distinct poles a whose impulse response starts with ``targets``.

    Solves the Vandermonde system Σ_j g_j a_j^k = r_k, k = 0, …, m−1 (proof of Proposition 3 in
    Slutzky et al. 2025, App. B) and returns (a, B = 1, C = gᵀ). Needs m = len(targets) ≤ d = len(a)
    distinct poles; with m < d the minimum-norm solution is taken.
    """
    a = as_tensor(a, "a", ndim=1)
    targets = as_tensor(targets, "targets", ndim=1)
    d, m = a.shape[0], targets.shape[0]
    if m == 0 or m > d:
        raise ValueError(f"need 1 <= len(targets) <= len(a); got {m} targets and {d} poles")
    gaps = (a.unsqueeze(0) - a.unsqueeze(1)).abs() + torch.eye(d, dtype=DTYPE)
    if bool((gaps < 1e-8).any()):
        raise ValueError("the poles a must be distinct (the Vandermonde system is singular)")
    vandermonde = check_finite_result(_powers(a, m), "the Vandermonde matrix a_j^k")
    try:
        g = torch.linalg.lstsq(
            vandermonde, targets.unsqueeze(-1), driver="gelsd"
        ).solution.squeeze(-1)
    except RuntimeError as err:  # torch's LinAlgError: the SVD did not converge
        raise NumericalFailure(f"the Vandermonde system a_j^k could not be solved: {err}") from None
    g = check_finite_result(g, "the fitted coefficients C")
    return SSM(a=a.clone(), b=torch.ones(d, dtype=DTYPE), c=g)


PROPOSITION3_TOLERANCE = 1e-8
"""Relative accuracy :func:`proposition3_student` guarantees on its first κ + 1 impulse entries."""


def proposition3_student(teacher, kappa: int, epsilon: float, *, d: int | None = None) -> SSM:
    """Proposition 3 (Slutzky et al. 2025; also Cohen-Karlik et al. 2023): a bad interpolant.

    Returns a student of dimension d (default κ + 1) whose first κ impulse entries equal the
    teacher's, so it fits *any* training set of length-κ sequences with zero loss, while its entry
    h_κ exceeds the teacher's by ``epsilon``: Gen_{κ+1} = ε. The poles are Chebyshev points in
    (−0.95, 0.95), distinct, which keeps the Vandermonde system as well conditioned as it gets.

    The promise holds in float64 to a relative accuracy of :data:`PROPOSITION3_TOLERANCE`:
    max_{k ≤ κ} |h_k − r_k| ≤ 1e-8 · max(1, max_k |r_k|) for the targets r. The student's weights
    grow geometrically with κ (max |c_j| ≈ 1e10 at κ = 36), and beyond κ ≈ 30 the round-off of
    Σ_j c_j a_j^k breaks that accuracy: the function then raises a ``ValueError`` that says how far
    the construction is off, instead of returning a student that does not keep the promise.
    """
    teacher = as_ssm(teacher, "teacher")
    if teacher.a.ndim != 1:
        raise ValueError(f"teacher parameters must be 1-D, got shape {tuple(teacher.a.shape)}")
    kappa = as_int(kappa, "kappa", minimum=1)
    epsilon = as_positive_float(epsilon, "epsilon", allow_zero=True)
    d = kappa + 1 if d is None else as_int(d, "d", minimum=kappa + 1, maximum=10_000)
    targets = impulse_response(*teacher, kappa + 1).clone()
    targets[kappa] += epsilon
    if not bool(torch.isfinite(targets).all()):
        raise ValueError(
            f"the teacher's impulse response overflows float64 within κ + 1 = {kappa + 1} entries"
        )
    nodes = torch.cos(math.pi * (torch.arange(d, dtype=DTYPE) + 0.5) / d) * 0.95
    student = fit_impulse_response(nodes, targets)
    achieved = impulse_response(*student, kappa + 1)
    gap = (
        float((achieved - targets).abs().max())
        if bool(torch.isfinite(achieved).all())
        else math.inf
    )
    allowed = PROPOSITION3_TOLERANCE * max(1.0, float(targets.abs().max()))
    if not gap <= allowed:
        raise ValueError(
            f"proposition3_student cannot keep its promise at kappa = {kappa}, epsilon = "
            f"{epsilon:g} in float64: the student's first κ + 1 impulse entries would miss their "
            f"targets by {gap:.2e} (allowed {allowed:.2e}), because its weights reach "
            f"{float(student.c.abs().max()):.1e}; use a shorter kappa"
        )
    return student
