"""Unit tests of the CIFAR-10 path: lib.book.data's loader of the "python version" batch files, on a
tiny folder in exactly that format written by the test, and the Table-2 entry point end to end
(load, train one epoch, brew a few steps, evaluate) on the CPU."""

import pickle
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from lib.book import data
from lib.poisoning import gradient_matching as gm
from lib.ssm import s4d

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import cifar10_table2  # noqa: E402

CLASSES = (0, 3, 7)


def write_batch(path: Path, images: np.ndarray, labels: list[int]) -> None:
    """A batch file as CIFAR-10 ships it: a pickled dict with bytes keys, uint8 (N, 3072) data."""
    batch = {b"batch_label": b"a tiny batch", b"labels": labels, b"data": images,
             b"filenames": [b"img%d.png" % i for i in range(len(labels))]}
    with path.open("wb") as handle:
        pickle.dump(batch, handle)


@pytest.fixture
def folder(tmp_path):
    """data_batch_1..5 with 2 images of each of 3 classes, test_batch with 2 of each (random)."""
    rng = np.random.default_rng(0)
    for name in [*data.CIFAR10_TRAIN_FILES, data.CIFAR10_TEST_FILE]:
        labels = [c for c in CLASSES for _ in range(2)]
        images = rng.integers(0, 256, size=(len(labels), 3072), dtype=np.uint8)
        write_batch(tmp_path / name, images, labels)
    return tmp_path


def test_batch_file_round_trip(folder):
    raw, labels = data.cifar10_batch(folder / "data_batch_2")
    assert raw.dtype == np.uint8 and raw.shape == (6, 3072)
    assert labels.dtype == np.int64 and labels.tolist() == [0, 0, 3, 3, 7, 7]


def test_the_authors_reading_is_the_memory_order_and_pixels_are_rgb_steps():
    # image with value = channel·100 + (pixel index mod 100) in channel-major memory
    pixel = np.arange(1024) % 100
    image = np.concatenate([pixel, pixel + 100, pixel + 200]).astype(np.uint8)[None]
    authors = data.cifar10_sequences(image, "authors").reshape(1024, 3)
    # step p = memory entries 3p, 3p + 1, 3p + 2 (what x.view(B, 1024, 3) reads), no permute; a pure
    # reordering of integers, so exact equality
    np.testing.assert_array_equal(authors.reshape(-1), image[0])
    assert authors[0].tolist() == [0, 1, 2] and authors[341].tolist() == [23, 100, 101]
    pixels = data.cifar10_sequences(image, "pixels").reshape(1024, 3)
    assert pixels[5].tolist() == [5, 105, 205]  # pixel 5's red, green, blue


def test_loader_concatenates_standardizes_and_reads(folder):
    x, y, xt, yt, (lo, hi) = data.cifar10(folder)
    assert x.shape == (30, 3072) and xt.shape == (6, 3072) and x.dtype == torch.float64
    assert y.tolist() == [0, 0, 3, 3, 7, 7] * 5 and yt.shape == (6,)
    # one global standardization of the training set (float64, rounding only)
    assert abs(float(x.mean())) < 1e-12 and float(x.std(unbiased=False)) == pytest.approx(1.0)
    raw, _ = data.cifar10_batch(folder / "data_batch_1")
    scale = (hi - lo) / 255
    np.testing.assert_allclose(x[:6].numpy(), lo + raw * scale, rtol=1e-12, atol=1e-12)
    assert data.cifar10(folder, n_train=12)[0].shape == (12, 3072)
    xp, *_ = data.cifar10(folder, reading="pixels")
    # the same values, step p = pixel p's (red, green, blue)
    np.testing.assert_array_equal(
        xp[:6].reshape(6, 1024, 3).numpy(), x[:6].reshape(6, 3, 1024).transpose(1, 2).numpy()
    )


def test_folder_from_the_environment(folder, monkeypatch):
    monkeypatch.setenv("BOOK_CIFAR10", str(folder))
    assert data.cifar10_folder() == folder
    monkeypatch.delenv("BOOK_CIFAR10")
    with pytest.raises(ValueError, match="BOOK_CIFAR10"):
        data.cifar10_folder()


@pytest.mark.parametrize(
    "content,match",
    [
        ({b"data": np.zeros((2, 3072), np.uint8)}, "no dict"),
        ({b"data": np.zeros((2, 3072), np.float32), b"labels": [0, 1]}, "uint8"),
        ({b"data": np.zeros((2, 3000), np.uint8), b"labels": [0, 1]}, "3072 columns"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}, "one integer per image"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]}, "0..9"),
        ([1, 2, 3], "no dict"),
    ],
)
def test_malformed_batches(tmp_path, content, match):
    path = tmp_path / "data_batch_1"
    with path.open("wb") as handle:
        pickle.dump(content, handle)
    with pytest.raises(ValueError, match=match):
        data.cifar10_batch(path)


def test_missing_folder_files_and_bad_options(folder, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        data.cifar10(tmp_path / "nowhere")
    (folder / "data_batch_4").unlink()
    with pytest.raises(ValueError, match="lacks data_batch_4"):
        data.cifar10(folder)
    (folder / "junk").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="not a pickled"):
        data.cifar10_batch(folder / "junk")
    with pytest.raises(ValueError, match="does not exist"):
        data.cifar10_batch(folder / "data_batch_4")
    with pytest.raises(ValueError, match="reading"):
        data.cifar10_sequences(np.zeros((1, 3072), np.uint8), "columns")
    with pytest.raises(ValueError, match="path must be a path"):
        data.cifar10_batch(None)
    with pytest.raises(ValueError, match="folder must be a path"):
        data.cifar10(3)
    with pytest.raises(ValueError, match="N >= 1"):
        data.cifar10_sequences(np.zeros((0, 3072), np.uint8))
    with pytest.raises(ValueError, match="array of numbers"):
        data.cifar10_sequences(np.zeros((1, 3072), bool))
    with pytest.raises(ValueError, match="finite"):
        data.cifar10_sequences(np.full((1, 3072), np.nan))


def test_table2_end_to_end_on_the_cpu(folder):
    # load, train one epoch, brew 2 steps for 2 targets, retrain, evaluate: the whole pipeline at a
    # toy size (what it computes is checked for shape and range, not for poisoning success)
    settings = replace(
        cifar10_table2.Settings(),
        targets=2,
        poisons=4,
        steps=2,
        restarts=1,
        victim=s4d.S4DConfig(channels=4, state=4, layers=1, inputs=3),
        train=s4d.TrainConfig(epochs=1, batch=10),
        n_train=None,
        victim_seeds=(1, 2),
    )
    result = cifar10_table2.run(settings, folder, log=lambda *_: None)
    assert result["poisons_per_target"] == 2 and len(result["targets"]) == 2
    for key in ("acc_without_poison", "acc_with_poison", "adversarial_with_poison"):
        assert len(result[key]) == 2 and all(0 <= v <= 1 for v in result[key])
    assert 0 <= result["last_elements_rel_size"] <= 1
    assert all(0 <= v <= 2 for v in result["matching_loss"])  # 1 − cosine
    for t, a in zip(result["targets"], result["adversarial"], strict=True):
        assert a in CLASSES and a != [0, 0, 3, 3, 7, 7][t]


def test_the_penalty_weights_image_rows_in_both_readings():
    """Footnote 14's weights 31 − i of image row i (counted from 0) on every entry of that row, in
    all three channels, whichever way the image is read into a sequence: the attack's weights,
    carried back to (3, 32, 32) image coordinates, depend on the image row alone."""
    image = np.arange(3 * 32 * 32)[None]  # a CIFAR row (3, 32, 32) whose entries are their index
    expected = np.broadcast_to((31 - np.arange(32))[None, :, None], (3, 32, 32))
    for reading in data.CIFAR10_READINGS:
        attack = cifar10_table2._attack(cifar10_table2.Settings(reading=reading, reg_factor=1.0))
        weights = gm.row_weights(3072, attack.row_length, attack.free_row, attack.rows).numpy()
        order = data.cifar10_sequences(image, reading).reshape(-1)  # sequence position -> entry
        in_image = np.empty(3072)
        in_image[order] = weights
        np.testing.assert_array_equal(in_image.reshape(3, 32, 32), expected, err_msg=reading)


def test_table2_rows():
    row = cifar10_table2.settings_for_row(5)
    assert (row.targets, row.poisons) == (20, 2500)
    with pytest.raises(ValueError, match="row"):
        cifar10_table2.settings_for_row(7)
