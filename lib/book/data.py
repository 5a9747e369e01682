"""Data sets that need no download: scikit-learn's bundled digits, and CIFAR-10 from a local folder.

The book's machines cannot fetch data at run time. The only real data set the book itself runs on
is the 8×8 handwritten digits that ship inside scikit-learn (1797 images, 10 classes); it stands
in for MNIST in the experiments of Elkabetz & Cohen 2021. :func:`cifar10` reads CIFAR-10 for
readers who have it, from the folder they name; nothing here downloads anything.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import torch

from lib.engine.validation import DTYPE, describe, as_choice, as_int

CIFAR10_TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_FILE = "test_batch"
CIFAR10_SIDE = 32
CIFAR10_PIXELS = CIFAR10_SIDE * CIFAR10_SIDE  # 1024 sequence steps
CIFAR10_READINGS = ("authors", "pixels")


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

    bunch = load_digits()
    # every n-th image for n >= the set's size holds out image 0 alone
    test_every = as_int(test_every, "test_every", minimum=2, maximum=len(bunch.target))
    raw = bunch.data.astype(np.float64)
    held_out = np.arange(len(raw)) % test_every == 0
    mean, std = raw[~held_out].mean(), raw[~held_out].std()
    x = torch.from_numpy((raw - mean) / std).to(DTYPE)
    y = torch.from_numpy(bunch.target.astype(np.int64))
    mask = torch.from_numpy(held_out)
    return x[~mask], y[~mask], x[mask], y[mask], ((0 - mean) / std, (16 - mean) / std)


def _as_path(value, name: str) -> Path:
    """A file-system path given as a non-empty string or a path object."""
    if isinstance(value, str) and value or isinstance(value, os.PathLike):
        return Path(value)
    raise ValueError(f"{name} must be a path (a non-empty string), got {describe(value)}")


def cifar10_batch(path) -> tuple[np.ndarray, np.ndarray]:
    """One batch file of CIFAR-10's "python version": ``(data, labels)``.

    The file is a pickled dict with ``b"data"``, a uint8 array (N, 3072) holding each 32×32 image
    channel-major (1024 red, then 1024 green, then 1024 blue values, rows top to bottom), and
    ``b"labels"``, N integers 0..9. Returns the uint8 array and int64 labels; raises ``ValueError``
    for a missing file or any other content. (Unpickling runs code stored in the file: read only
    files from a source you trust, as CIFAR-10's own site.)
    """
    path = _as_path(path, "path")
    if not path.is_file():
        raise ValueError(f"CIFAR-10 batch file {str(path)!r} does not exist")
    try:
        with path.open("rb") as handle:
            batch = pickle.load(handle, encoding="bytes")
    except Exception as err:  # any unpickling failure is a malformed file
        raise ValueError(f"{str(path)!r} is not a pickled CIFAR-10 batch ({err})") from None
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise ValueError(f"{str(path)!r} is not a CIFAR-10 batch: no dict with b'data', b'labels'")
    data, labels = batch[b"data"], batch[b"labels"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        raise ValueError(f"{str(path)!r}: b'data' must be a 2-D uint8 array, got {data!r:.60}")
    if data.shape[1] != 3 * CIFAR10_PIXELS:
        raise ValueError(f"{str(path)!r}: b'data' must have 3072 columns, got {data.shape[1]}")
    try:
        labels = np.asarray(labels)
    except Exception:
        raise ValueError(f"{str(path)!r}: b'labels' is not a list of integers") from None
    if labels.ndim != 1 or labels.dtype.kind not in "iu" or len(labels) != len(data):
        raise ValueError(
            f"{str(path)!r}: b'labels' must hold one integer per image ({len(data)}), "
            f"got {labels!r:.60}"
        )
    if len(labels) and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"{str(path)!r}: labels must lie in 0..9")
    return data, labels.astype(np.int64)


def cifar10_folder(folder=None) -> Path:
    """The folder of CIFAR-10's batch files: ``folder``, else the environment's ``BOOK_CIFAR10``."""
    if folder is None:
        folder = os.environ.get("BOOK_CIFAR10")
        if not folder:
            raise ValueError(
                "no CIFAR-10 folder: pass one, or set BOOK_CIFAR10=/path/to/cifar-10-batches-py "
                "(the extracted 'CIFAR-10 python version'; nothing is downloaded)"
            )
    path = _as_path(folder, "folder")
    if not path.is_dir():
        raise ValueError(f"CIFAR-10 folder {str(path)!r} does not exist")
    missing = [f for f in (*CIFAR10_TRAIN_FILES, CIFAR10_TEST_FILE) if not (path / f).is_file()]
    if missing:
        raise ValueError(f"CIFAR-10 folder {str(path)!r} lacks {', '.join(missing)}")
    return path


def cifar10_sequences(data: np.ndarray, reading: str = "authors") -> np.ndarray:
    """CIFAR-10 images (N, 3072), channel-major, as flat sequences of 1024 steps × 3 values.

    The result's row holds step p in entries 3p, 3p + 1, 3p + 2 (the flat layout of
    :mod:`lib.ssm.s4d`). ``reading="authors"``, as the paper's S4 victim reads the (B, 3, 32, 32) image
    with ``x.view(B, 1024, 3)``, without moving channels last: step p is the memory entries
    3p, 3p + 1, 3p + 2 of the channel-major image, so steps 0..340 hold red values only, step 341
    one red and two green values, and so on; the row is the image's memory unchanged.
    ``reading="pixels"``: step p is pixel p in raster order, its (red, green, blue) values.
    """
    reading = as_choice(reading, "reading", CIFAR10_READINGS)
    if (
        not isinstance(data, np.ndarray)
        or data.ndim != 2
        or data.shape[1] != 3 * CIFAR10_PIXELS
        or data.shape[0] == 0
        or data.dtype.kind not in "iuf"
    ):
        raise ValueError(
            f"data must be an (N, 3072) array of numbers, N >= 1, got {describe(data)}"
        )
    if data.dtype.kind == "f" and not np.all(np.isfinite(data)):
        raise ValueError("data must be finite, got nan or inf entries")
    if reading == "authors":
        return data
    n = data.shape[0]
    return data.reshape(n, 3, CIFAR10_PIXELS).transpose(0, 2, 1).reshape(n, 3 * CIFAR10_PIXELS)


def cifar10(
    folder=None, *, reading: str = "authors", n_train: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, tuple[float, float]]:
    """CIFAR-10 from its "python version" batch files in ``folder`` (default: ``BOOK_CIFAR10``).

    The training set is ``data_batch_1`` … ``data_batch_5`` in order (its first ``n_train`` images
    if given; the paper trains on 45000), the test set ``test_batch``. Each image becomes a flat
    sequence of 1024 steps × 3 values in the ``reading`` of :func:`cifar10_sequences` ("authors",
    the default, as the paper ran it; or "pixels"). Values x/255 (PyTorch's ToTensor) standardized
    with one mean and one standard deviation over the training set (the authors' code standardizes
    each channel; one scale keeps the data range a single interval). Returns ``(x_train, y_train,
    x_test, y_test, (lo, hi))``: float64 (n, 3072), int64 labels, and the standardized values of
    the gray levels 0 and 255, so ε gray levels are ε (hi − lo) / 255 in these units.
    """
    path = cifar10_folder(folder)
    reading = as_choice(reading, "reading", CIFAR10_READINGS)
    parts = [cifar10_batch(path / f) for f in CIFAR10_TRAIN_FILES]
    raw = np.concatenate([d for d, _ in parts])
    labels = np.concatenate([y for _, y in parts])
    if n_train is not None:
        n_train = as_int(n_train, "n_train", minimum=1, maximum=len(raw))
        raw, labels = raw[:n_train], labels[:n_train]
    test_raw, test_labels = cifar10_batch(path / CIFAR10_TEST_FILE)
    # decided on the integers: in floats, rounding leaves a constant set a std of ~1e-17 > 0
    if raw.size == 0 or raw.min() == raw.max():
        raise ValueError(
            f"the CIFAR-10 training images in {str(path)!r} are all one value: nothing to "
            "standardize"
        )
    scaled = raw.astype(np.float64) / 255
    mean, std = scaled.mean(), scaled.std()

    def standardize(images: np.ndarray) -> torch.Tensor:
        seq = cifar10_sequences(images, reading).astype(np.float64) / 255
        return torch.from_numpy((seq - mean) / std).to(DTYPE)

    return (
        standardize(raw),
        torch.from_numpy(labels),
        standardize(test_raw),
        torch.from_numpy(test_labels),
        ((0 - mean) / std, (1 - mean) / std),
    )
