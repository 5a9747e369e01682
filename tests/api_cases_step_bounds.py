"""Cases of :mod:`lib.networks.step_bounds` for the bad-input fuzz (``cases()``, see
``tests/api_cases.py``).

Oracles recompute the paper's formulas independently (Corollary 4 from its three cases, eq. (21)
and eq. (24) term by term) or check the defining property (Lemma 31: the constructed point is
balanced and keeps W_n).
"""

from __future__ import annotations

import decimal
import math

import numpy as np
import torch
from api_cases import Arg, Case

from lib.networks import linear_nets, step_bounds

P = Arg  # short


def _quadratic_gradient(q: float) -> float:
    return q


def _quadratic_flow(times):
    return np.exp(-np.asarray(times))


def _one_minus_exp(x: decimal.Decimal) -> decimal.Decimal:
    """1 − e^{−x} for x > 0, its series where e^{−x} rounds to 1 at the context's precision."""
    return x - x * x / 2 + x * x * x / 6 if x < decimal.Decimal("1e-30") else 1 - (-x).exp()


def _oracle_corollary4(result, curvature, smoothness, start_loss, radius, horizon, start_gap=0.0):
    """Corollary 4's three cases in 40-digit decimals, which neither overflow nor underflow at any
    float input (m > 0 in the e^{−m t̃}-scaled form, the same number)."""
    with decimal.localcontext() as context:
        context.prec = 40
        m, beta, f0, eps, t, gap = (decimal.Decimal(float(v)) for v in (
            curvature, smoothness, start_loss, radius, horizon, start_gap))
        c = 1 / ((2 * f0 * beta**3).sqrt() + beta**2 * eps)
        if m < 0:
            expected = c * max(eps - gap, 0) * -m
        elif m == 0:
            expected = c * max(eps - gap, 0) / t
        else:
            expected = c * max(eps * (-m * t).exp() - gap, 0) * m / _one_minus_exp(m * t)
    return math.isclose(result, float(expected), rel_tol=1e-9, abs_tol=1e-300)


def _oracle_exit_times(result, gradient, flow, start, step_sizes, horizon, radius):
    """Gradient descent on ½q² from ``start`` against the given flow, step by step."""
    expected = []
    for eta in [float(e) for e in step_sizes]:
        q, k, exit_time = float(start), 0, None
        while (k + 1) * eta <= float(horizon) + 1e-9 * eta:
            k += 1
            q -= eta * q
            if abs(q - float(flow(np.array([k * eta]))[0])) > float(radius):
                exit_time = k * eta
                break
        expected.append(exit_time if exit_time is not None else (k + 1) * eta)
    return np.allclose(result, expected, rtol=1e-12)


def _oracle_time(result, depth, norm0, alignment, accuracy):
    n, w, nu, eps = int(depth), float(norm0), float(alignment), float(accuracy)
    kappa = (1 - nu) / (1 + nu)
    expected = (2 * n * max(1, 1.5 * kappa) ** n / w
                * math.log(15 * n * max(1, kappa) / (w * min(1, 2 * eps))))
    return math.isclose(result, expected, rel_tol=1e-9)


def _oracle_nearest(result, params):
    weights = linear_nets.layers(result)
    return (linear_nets.unbalancedness(result) < 1e-10
            and torch.equal(weights[-1], linear_nets.layers(params)[-1]))


def cases() -> list[Case]:
    square = linear_nets.xavier_init((3, 3, 3, 1), 0)
    regression = [P("depth", 3, "int"), P("norm0", 0.1, "float"), P("alignment", 0.5, "float"),
                  P("accuracy", 0.01, "float")]
    return [
        Case("networks.step_bounds.corollary4_step_size", step_bounds.corollary4_step_size,
             [P("curvature", 1.0, "float"), P("smoothness", 1.0, "float"),
              P("start_loss", 2.0, "float"), P("radius", 0.1, "float"),
              P("horizon", 3.0, "float"), P("start_gap", 0.01, "float")],
             oracle=_oracle_corollary4),
        Case("networks.step_bounds.tracking_exit_times", step_bounds.tracking_exit_times,
             [P("gradient", _quadratic_gradient, "callable"),
              P("flow", _quadratic_flow, "callable"), P("start", 1.0, "float"),
              P("step_sizes", [0.5, 0.1], "seq"), P("horizon", 2.0, "float"),
              P("radius", 0.05, "float")],
             oracle=_oracle_exit_times),
        Case("networks.step_bounds.proposition14_time", step_bounds.proposition14_time, regression,
             oracle=_oracle_time),
        Case("networks.step_bounds.theorem15_iterations", step_bounds.theorem15_iterations,
             [*regression, P("step", 1e-3, "float")]),
        Case("networks.step_bounds.theorem32_unbalancedness", step_bounds.theorem32_unbalancedness,
             [P("depth", 3, "int"), P("norm0", 0.05, "float"), P("alignment", 0.5, "float"),
              P("accuracy", 0.01, "float")]),
        Case("networks.step_bounds.theorem32_step_size", step_bounds.theorem32_step_size,
             [P("depth", 3, "int"), P("norm0", 0.05, "float"), P("alignment", 0.5, "float"),
              P("accuracy", 0.01, "float")]),
        Case("networks.step_bounds.theorem32_iterations", step_bounds.theorem32_iterations,
             [P("depth", 3, "int"), P("norm0", 0.05, "float"), P("alignment", 0.5, "float"),
              P("accuracy", 0.01, "float"), P("step", 1e-3, "float")]),
        Case("networks.step_bounds.nearest_balanced", step_bounds.nearest_balanced,
             [P("params", square, "params")], oracle=_oracle_nearest),
    ]
