"""Data sets that need no download: scikit-learn's bundled digits, and whitened toy regressions.

The book's machines cannot fetch data at run time. The only real data set is the 8×8 handwritten
digits that ship inside scikit-learn (1797 images, 10 classes); it stands in for MNIST in the
experiments of Elkabetz & Cohen 2021.
"""

from __future__ import annotations

import numpy as np
import torch

from lib._checks import DTYPE, as_int


def digits(n: int = 300, *, every: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed subset of scikit-learn's digits: images 0, every, 2·every, … (the first ``n``).

    Pixels are standardized with the subset's global mean and standard deviation (as the paper's
    code does for MNIST with (x − 0.1307)/0.3081). Returns ``(x, labels)``: x of shape (n, 64),
    float64; labels of shape (n,), int64 in 0..9. Deterministic: no random subset.
    """
    from sklearn.datasets import load_digits

    n = as_int(n, "n", minimum=1)
    every = as_int(every, "every", minimum=1)
    bunch = load_digits()
    available = (len(bunch.target) + every - 1) // every
    if n > available:
        raise ValueError(f"only {available} digits with every = {every}, asked for n = {n}")
    images = bunch.data[::every][:n].astype(np.float64)
    images = (images - images.mean()) / images.std()
    labels = bunch.target[::every][:n].astype(np.int64)
    return torch.from_numpy(images).to(DTYPE), torch.from_numpy(labels)
