"""Question 1 through the library's engines, imported under other names; the rest honest.

base: solution
where: end
expect: full-minus q1
"""

# %%
import numpy as np
import torch

from lib.engine.flow import gradient_descent as _steps
from lib.engine.flow import gradient_flow as _flow


def _quadratic(H, b):
    H, b = torch.as_tensor(H, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return lambda params: 0.5 * params["theta"] @ H @ params["theta"] - b @ params["theta"]


def descent_iterate(H, b, theta0, eta, k):
    start = {"theta": torch.as_tensor(theta0, dtype=torch.float64)}
    return np.asarray(_steps(_quadratic(H, b), start, eta, k)["theta"][-1])


def flow_point(H, b, theta0, t):
    start = {"theta": torch.as_tensor(theta0, dtype=torch.float64)}
    return np.asarray(_flow(_quadratic(H, b), start, [0.0, t], rtol=1e-12, atol=1e-12)["theta"][-1])
