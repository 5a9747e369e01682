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


def digits_split(
    *, test_every: int = 5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, tuple[float, float]]:
    """All 1797 digits, split into a training and a held-out set, as sequences of 64 pixels.

    Image i is held out when i % test_every == 0. Pixels (integers 0..16) are standardized with the
    training set's global mean and standard deviation; the 8×8 image is read row by row (raster
    order), so sequence position p is pixel (p // 8, p % 8) and the last 8 positions are the bottom
    row. Returns ``(x_train, y_train, x_test, y_test, (lo, hi))``: float64 (n, 64) inputs, int64
    labels, and the standardized images of the raw pixel values 0 and 16 (the data range).
    """
    from sklearn.datasets import load_digits

    test_every = as_int(test_every, "test_every", minimum=2)
    bunch = load_digits()
    raw = bunch.data.astype(np.float64)
    held_out = np.arange(len(raw)) % test_every == 0
    mean, std = raw[~held_out].mean(), raw[~held_out].std()
    x = torch.from_numpy((raw - mean) / std).to(DTYPE)
    y = torch.from_numpy(bunch.target.astype(np.int64))
    mask = torch.from_numpy(held_out)
    return x[~mask], y[~mask], x[mask], y[mask], ((0 - mean) / std, (16 - mean) / std)
