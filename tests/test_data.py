"""Unit tests of lib.book.data: the fixed, standardized subset of scikit-learn's bundled digits."""

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from lib.book.data import digits


@pytest.fixture(scope="module")
def bunch():
    return load_digits()


@pytest.mark.parametrize("n,every", [(300, 3), (50, 1), (599, 3), (1797, 1), (10, 7)])
def test_digits_picks_every_kth_image_and_standardizes(bunch, n, every):
    x, labels = digits(n, every=every)
    assert x.shape == (n, 64) and labels.shape == (n,)
    assert x.dtype == torch.float64 and labels.dtype == torch.int64
    rows = np.arange(n) * every  # images 0, every, 2·every, …
    raw = bunch.data[rows].astype(np.float64)
    expected = (raw - raw.mean()) / raw.std()
    np.testing.assert_allclose(x.numpy(), expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(labels.numpy(), bunch.target[rows])
    # globally standardized: one mean and one standard deviation over all pixels of the subset
    assert abs(float(x.mean())) < 1e-12
    assert float(x.std(unbiased=False)) == pytest.approx(1.0, rel=1e-12, abs=0)
    assert int(labels.min()) >= 0 and int(labels.max()) <= 9


def test_digits_default_subset(bunch):
    x, labels = digits()
    assert x.shape == (300, 64)
    np.testing.assert_array_equal(labels.numpy(), bunch.target[0:900:3])
    assert set(labels.tolist()) == set(range(10))  # all ten classes occur


def test_digits_every_changes_the_rows(bunch):
    x1, y1 = digits(20, every=1)
    x3, y3 = digits(20, every=3)
    np.testing.assert_array_equal(y1.numpy(), bunch.target[:20])
    np.testing.assert_array_equal(y3.numpy(), bunch.target[:60:3])
    assert not torch.equal(y1, y3)
    # the pixel pattern (up to the affine standardization) is that of the chosen images
    for x, rows in ((x1, np.arange(20)), (x3, np.arange(0, 60, 3))):
        corr = np.corrcoef(x.numpy().ravel(), bunch.data[rows].ravel())[0, 1]
        assert corr == pytest.approx(1.0, abs=1e-12)


def test_digits_is_deterministic():
    x, labels = digits(100, every=2)
    x2, labels2 = digits(100, every=2)
    torch.testing.assert_close(x, x2, rtol=0, atol=0)
    assert torch.equal(labels, labels2)


@pytest.mark.parametrize(
    "n,every",
    [
        (600, 3),  # only ⌈1797/3⌉ = 599 images with every = 3
        (1798, 1),
        (258, 7),  # ⌈1797/7⌉ = 257
        (0, 3),
        (-5, 3),
        (10.0, 3),
        (10, 0),
        (10, 1.5),
        (True, 3),
    ],
)
def test_digits_rejects_bad_input(n, every):
    with pytest.raises(ValueError):
        digits(n, every=every)


@pytest.mark.parametrize("test_every", [1, 0, 2.0, True, None, 2**64])
def test_digits_split_rejects_bad_input(test_every):
    from lib.book.data import digits_split

    with pytest.raises(ValueError, match="test_every"):
        digits_split(test_every=test_every)


def test_digits_largest_subsets_are_allowed(bunch):
    for every in (1, 3, 7):
        available = len(range(0, len(bunch.target), every))
        x, _ = digits(available, every=every)
        assert x.shape == (available, 64)
