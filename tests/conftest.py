"""Shared fixtures: a seeded generator and a random diagonal SSM instance.

The rule for every test here: never compare floats bit for bit across computation paths (a run
inside a batch against the same run alone, a closed form against a recurrence or autograd, numpy
against torch, different thread counts). Those agree only up to rounding, which differs between
machines and kernels; compare them with a tolerance whose size a one-line comment justifies.
Exact comparisons are for one computation path only (a frozen run against its own last iterate,
the same call twice, integer arithmetic, copies of the same draw). ``make test-portable`` runs this
suite under torch's portable kernels and under two threads to catch violations.
"""

import pytest
import torch

DT = torch.float64


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


def random_ssm(gen, d, *, batch=(), radius=0.95):
    """A random diagonal SSM with |a_j| < radius, parameters of shape (*batch, d)."""
    a = (torch.rand(*batch, d, generator=gen, dtype=DT) * 2 - 1) * radius
    b = torch.randn(*batch, d, generator=gen, dtype=DT)
    c = torch.randn(*batch, d, generator=gen, dtype=DT)
    return a, b, c


def ones(*shape):
    """A float64 tensor of ones (short, for the tables of bad inputs)."""
    return torch.ones(*shape, dtype=DT)


def flat_hessian(loss, params):
    """The autograd Hessian of θ ↦ loss(params(θ)), θ the dict's tensors flattened in dict order.

    An independent reference for lib.engine.curvature (torch.autograd.functional.hessian).
    """
    from torch.autograd.functional import hessian

    names = list(params)
    shapes = [params[k].shape for k in names]
    sizes = [params[k].numel() for k in names]

    def flat_loss(theta):
        chunks = theta.split(sizes)
        return loss({k: c.reshape(s) for k, c, s in zip(names, chunks, shapes, strict=True)})

    theta = torch.cat([params[k].detach().reshape(-1) for k in names])
    return hessian(flat_loss, theta)
