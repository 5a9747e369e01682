"""Shared fixtures: a seeded generator and a random diagonal SSM instance."""

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
