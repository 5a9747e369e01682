"""Cases of the S4D victim, the gradient-matching attack, the MLP control, the data loaders, the
committed results and the plots and widgets of :mod:`lib.book.viz` (see ``tests/api_cases.py``).

Every case is one small valid call (a network of two channels, sequences of a few steps, a
one-step attack) so that the fuzz test and ``benchmarks/bad_inputs.py`` can try each bad input
on it in milliseconds. Files (a CIFAR-10 folder in the batch format, committed results) are
written to a temporary folder, never to the book's own ``book/results``.
"""

from __future__ import annotations

import atexit
import math
import os
import pickle
import shutil
import tempfile
from functools import cache
from pathlib import Path

import numpy as np
import torch
from api_cases import Arg, Case, axes, same

from lib.book import data, machine, results, viz
from lib.poisoning import gradient_matching as gm
from lib.poisoning import mlp_victim
from lib.ssm import _s4d_kernels as s4d_ops
from lib.ssm import s4d

DT = torch.float64
P = Arg


# ------------------------------------------------------------------------------------------
# Oracles: the answer computed another way
# ------------------------------------------------------------------------------------------


def _np64(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().double().numpy()
    return np.asarray(value, dtype=np.float64)


def _oracle_kernel(result, log_dt, log_a_re, a_im, c_re, c_im, length):
    """K_m = 2 Re Σ_j C_j b̄_j ā_j^m, by running the ZOH recurrence in complex numpy."""
    a = -np.exp(_np64(log_a_re)) + 1j * _np64(a_im)
    dt = np.exp(_np64(log_dt))[..., None]
    a_bar, c = np.exp(dt * a), _np64(c_re) + 1j * _np64(c_im)
    state, out = (a_bar - 1) / a, []
    for _ in range(int(length)):
        out.append(2 * (c * state).sum(-1).real)
        state = a_bar * state
    return same(result, np.stack(out, -1), rtol=1e-8)


def _causal(kernel: np.ndarray, u: np.ndarray) -> np.ndarray:
    """y_p = Σ_{k ≤ p} K_{p−k} u_k along the last axis of K and the matching axis of u."""
    length = kernel.shape[-1]
    return np.stack(
        [sum(kernel[..., m, None] * u[..., p - m, :] for m in range(p + 1)) for p in range(length)],
        -2,
    )


def _oracle_toeplitz(result, kernel):
    k = _np64(kernel)
    eye = np.broadcast_to(np.eye(k.shape[-1]), (*k.shape[:-1], k.shape[-1], k.shape[-1]))
    return same(result, _causal(k, eye), rtol=1e-8)


def _oracle_fft(result, kernel, u):
    return same(result, _causal(_np64(kernel), _np64(u)), rtol=1e-8)


def _oracle_gelu(result, y):
    y = _np64(y)
    return same(result, y * 0.5 * (1 + np.vectorize(math.erf)(y / math.sqrt(2))), rtol=1e-6)


def _scale(x: np.ndarray, axis: int) -> np.ndarray:
    """max |x| along ``axis`` (1 where it is 0): dividing by it keeps squares finite."""
    top = np.abs(x).max(axis=axis, keepdims=True)
    return np.where(top > 0, top, 1.0)


def _oracle_layer_norm(result, z):
    """(z − mean) / √(mean(c²) + ε) over axis 1, in units of each column's largest |entry| (so
    that entries of 1e200, whose squares overflow, are normalized too)."""
    z = _np64(z)
    if z.ndim != 3:
        return False
    s = _scale(z, 1)
    c = z / s - (z / s).mean(1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):  # a constant column: c = 0, LN is 0
        norm = c / np.sqrt((c * c).mean(1, keepdims=True) + 1e-5 / (s * s))
    return same(result, np.where(c == 0, 0.0, norm), rtol=1e-5)


def _oracle_row_weights(result, length, row_length):
    rows = int(length) // int(row_length)
    return same(result, np.array([rows - 1 - p // int(row_length) for p in range(int(length))]))


def _oracle_rel_size(result, delta, last):
    d = _np64(delta)
    d = d / _scale(d, -1)  # the ratio is scale-free; this keeps 1e200 and 1e-200 rows normal
    total = np.sqrt((d * d).sum(-1))
    tail = np.sqrt((d[..., -int(last) :] ** 2).sum(-1))
    return (
        abs(result - float(np.where(total > 0, tail / np.where(total > 0, total, 1), 0).mean()))
        < 1e-9
    )


# ------------------------------------------------------------------------------------------
# Small valid inputs (built once)
# ------------------------------------------------------------------------------------------

S4D_TINY = s4d.S4DConfig(channels=2, state=2, layers=1, classes=3)
S4D_TRAIN = s4d.TrainConfig(epochs=1, batch=4)
MLP_TINY = mlp_victim.MLPConfig(inputs=8, hidden=3, classes=3)
MLP_TRAIN = mlp_victim.TrainConfig(epochs=1, batch=4)
LENGTH = 8  # steps of the toy sequences (one channel)


@cache
def _toy_data():
    """Six training and four test sequences of 8 steps in 3 classes, values in [-1, 1]."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, LENGTH, generator=g, dtype=DT) * 2 - 1
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    xt = torch.rand(4, LENGTH, generator=g, dtype=DT) * 2 - 1
    yt = torch.tensor([0, 1, 2, 0])
    return x, y, xt, yt


@cache
def _s4d_params():
    """One run of the tiny network, in float64 (the victim trains in float32; logits accepts both,
    and float32 parameters cannot hold the catalogue's 1e300 entries)."""
    return {k: v.double() for k, v in s4d.init_params(S4D_TINY, [0]).items()}


@cache
def _mlp_params():
    return mlp_victim.init_params(MLP_TINY, [0])


@cache
def _s4d_victim():
    return gm.s4d_victim(S4D_TINY, S4D_TRAIN)


@cache
def _mlp_victim():
    return mlp_victim.victim(MLP_TINY, MLP_TRAIN)


@cache
def _brew():
    x, y, xt, yt = _toy_data()
    return gm.brew(
        _s4d_params(),
        x,
        y,
        xt,
        yt,
        [0],
        [1],
        2,
        0.1,
        (-1.0, 1.0),
        gm.AttackConfig(steps=1, restarts=1),
    )


@cache
def _tmp() -> Path:
    """A temporary folder for the cases' files, removed when the process ends."""
    folder = tempfile.mkdtemp(prefix="api-cases-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return Path(folder)


@cache
def _cifar_folder() -> str:
    """A CIFAR-10 folder in the "python version" format: 2 images a batch, classes 0 and 1."""
    folder = _tmp() / "cifar"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in [*data.CIFAR10_TRAIN_FILES, data.CIFAR10_TEST_FILE]:
        batch = {b"data": rng.integers(0, 256, (2, 3072), dtype=np.uint8), b"labels": [0, 1]}
        with (folder / name).open("wb") as handle:
            pickle.dump(batch, handle)
    return str(folder)


@cache
def _constant_cifar_folder() -> str:
    """A CIFAR-10 folder whose every image holds one gray level (7): nothing to standardize."""
    folder = _tmp() / "cifar-constant"
    folder.mkdir()
    for name in [*data.CIFAR10_TRAIN_FILES, data.CIFAR10_TEST_FILE]:
        batch = {b"data": np.full((2, 3072), 7, dtype=np.uint8), b"labels": [0, 1]}
        with (folder / name).open("wb") as handle:
            pickle.dump(batch, handle)
    return str(folder)


def _in_tmp_results(fn):
    """``fn`` with lib.book.results writing into a temporary folder (never into book/results)."""

    def call(*args, **kwargs):
        saved, results.RESULTS_DIR = results.RESULTS_DIR, _tmp() / "results"
        try:
            return fn(*args, **kwargs)
        finally:
            results.RESULTS_DIR = saved

    return call


def _glue(name, value):
    """book.results.glue with myst-nb's glue replaced by a no-op (there is no notebook here)."""
    import myst_nb

    saved, myst_nb.glue = myst_nb.glue, lambda *args, **kwargs: None
    try:
        return results.glue(name, value)
    finally:
        myst_nb.glue = saved


def _device(name):
    """ssm.s4d.compute_device under BOOK_DEVICE = str(name) (an environment variable is text)."""
    saved = os.environ.get("BOOK_DEVICE")
    os.environ["BOOK_DEVICE"] = str(name)
    try:
        return str(s4d.compute_device())
    finally:
        if saved is None:
            del os.environ["BOOK_DEVICE"]
        else:
            os.environ["BOOK_DEVICE"] = saved


def _draw(fig, *, a=1.0, shape="sine"):
    fig.add_subplot().plot([0.0, 1.0], [0.0, a if shape == "sine" else -a])


def _plotted(fn):
    """A plot on the shared axes, cleared first; returns what the axes hold (finite or not)."""

    def call(*args, **kwargs):
        ax = axes()
        ax.cla()
        fn(ax, *args, **kwargs)
        return [line.get_xydata() for line in ax.lines]

    return call


def _explore(fn, alt, frames, figsize, a, shape):
    """book.viz.explore in test mode (one frame at the defaults), its figures closed afterwards."""
    import matplotlib.pyplot as plt

    saved = os.environ.get("BOOK_MODE")
    os.environ["BOOK_MODE"] = "test"
    try:
        return viz.explore(fn, alt=alt, frames=frames, figsize=figsize, a=a, shape=shape)
    finally:
        plt.close("all")
        if saved is None:
            del os.environ["BOOK_MODE"]
        else:
            os.environ["BOOK_MODE"] = saved


def _slider_grid(fn, specs, alt, frames, figsize, dpi):
    return len(viz.slider_grid_html(fn, specs, alt=alt, frames=frames, figsize=figsize, dpi=dpi))


ALT = "a sine or a line scaled by a"


# ------------------------------------------------------------------------------------------
# The cases
# ------------------------------------------------------------------------------------------


def _s4d_cases() -> list[Case]:
    x, y, xt, yt = _toy_data()
    params = _s4d_params()
    g = torch.Generator().manual_seed(1)
    layer = {
        "log_dt": torch.tensor([-1.0, -2.0], dtype=DT),
        "log_a_re": torch.full((2, 1), math.log(0.5), dtype=DT),
        "a_im": torch.tensor([[0.0], [math.pi]], dtype=DT),
        "c_re": torch.tensor([[0.5], [-1.0]], dtype=DT),
        "c_im": torch.tensor([[0.25], [0.75]], dtype=DT),
    }
    x3 = x[:3]
    return [
        Case(
            "ssm.s4d.S4DConfig",
            s4d.S4DConfig,
            [
                P("channels", 2, "int", True),
                P("state", 2, "int", True),
                P("layers", 1, "int", True),
                P("classes", 3, "int", True),
                P("dt_min", 0.01, "float", True),
                P("dt_max", 0.1, "float", True),
                P("inputs", 1, "int", True),
                P("prenorm", False, "bool", True),
            ],
        ),
        Case(
            "ssm.s4d.TrainConfig",
            s4d.TrainConfig,
            [
                P("epochs", 1, "int", True),
                P("batch", 4, "int", True),
                P("lr", 0.01, "float", True),
                P("weight_decay", 0.01, "float", True),
            ],
        ),
        Case("ssm.s4d.compute_device", _device, [P("name", "cpu", "device")]),
        Case(
            "ssm.s4d.init_params",
            s4d.init_params,
            [P("config", S4D_TINY, "object"), P("seeds", [0, 1], "seq")],
        ),
        Case(
            "ssm.s4d.s4d_kernel",
            s4d.s4d_kernel,
            [P(k, v, "tensor") for k, v in layer.items()] + [P("length", 5, "int")],
            oracle=_oracle_kernel,
        ),
        Case(
            "ssm.s4d.toeplitz",
            s4d.toeplitz,
            [P("kernel", torch.randn(2, 4, generator=g, dtype=DT), "tensor")],
            oracle=_oracle_toeplitz,
        ),
        Case(
            "ssm.s4d.fft_convolve",
            s4d.fft_convolve,
            [
                P("kernel", torch.randn(2, 4, generator=g, dtype=DT), "tensor"),
                P("u", torch.randn(2, 4, 3, generator=g, dtype=DT), "tensor"),
            ],
            oracle=_oracle_fft,
        ),
        Case(
            "ssm.s4d.logits",
            s4d.logits,
            [
                P("params", params, "params"),
                P("x", x3, "tensor"),
                P("method", "auto", "choice", True),
            ],
        ),
        Case(
            "ssm.s4d.logits[fft]",
            s4d.logits,
            [
                P("params", params, "params"),
                P("x", x3, "tensor"),
                P("method", "fft", "choice", True),
            ],
        ),
        Case(
            # the victim's own precision (x is converted to it); the parameters as an "object"
            # (float32 cannot hold the catalogue's 1e300 entries), so only their type is fuzzed
            "ssm.s4d.logits[float32]",
            s4d.logits,
            [P("params", s4d.init_params(S4D_TINY, [0]), "object"), P("x", x3, "tensor")],
        ),
        Case(
            "ssm.s4d.per_run_loss",
            s4d.per_run_loss,
            [
                P("params", params, "params"),
                P("x", x3[None], "tensor"),
                P("labels", y[None, :3], "tensor"),
            ],
        ),
        Case(
            "ssm.s4d.train",
            s4d.train,
            [
                P("config", S4D_TINY, "object"),
                P("x", x, "tensor"),
                P("labels", y, "tensor"),
                P("seeds", [0], "seq"),
                P("train_config", S4D_TRAIN, "object"),
                P("init", params, "params", True),
            ],
            examples=5,
        ),
        Case(
            "ssm.s4d.predict",
            s4d.predict,
            [P("params", params, "params"), P("x", x, "tensor"), P("batch", 4, "int", True)],
        ),
        Case(
            "ssm.s4d.accuracy",
            s4d.accuracy,
            [P("params", params, "params"), P("x", x, "tensor"), P("labels", y, "tensor")],
        ),
        Case("ssm.s4d.select_run", s4d.select_run, [P("params", params, "params"), P("run", 0,
            "int")]),
    ]


def _s4d_ops_cases() -> list[Case]:
    g = torch.Generator().manual_seed(2)
    return [
        Case(
            "ssm._s4d_kernels.toeplitz",
            s4d_ops.toeplitz,
            [P("kernel", torch.randn(2, 5, generator=g, dtype=DT), "tensor")],
            oracle=_oracle_toeplitz,
        ),
        Case(
            "ssm._s4d_kernels.channel_layer_norm",
            s4d_ops.channel_layer_norm,
            [P("z", torch.randn(2, 3, 4, generator=g, dtype=DT), "tensor")],
            oracle=_oracle_layer_norm,
        ),
        Case(
            "ssm._s4d_kernels.gelu",
            s4d_ops.gelu,
            [P("y", torch.randn(2, 3, generator=g, dtype=DT), "tensor")],
            oracle=_oracle_gelu,
        ),
    ]


def _gradient_matching_cases() -> list[Case]:
    x, y, xt, yt = _toy_data()
    params = _s4d_params()
    brewed = _brew()
    victim = _s4d_victim()
    index, delta = brewed.poison_index, brewed.delta
    return [
        Case(
            "poisoning.gradient_matching.Victim",
            gm.Victim,
            [
                P("name", "S4D", "text"),
                P("init", victim.init, "callable"),
                P("logits", victim.logits, "callable"),
                P("train", victim.train, "callable"),
                P("dtype", torch.float32, "object", True),
            ],
        ),
        Case(
            "poisoning.gradient_matching.Victim.per_run_loss",
            victim.per_run_loss,
            [
                P("params", params, "params"),
                P("x", x[None, :3], "tensor"),
                P("labels", y[None, :3], "tensor"),
            ],
        ),
        Case(
            "poisoning.gradient_matching.s4d_victim",
            gm.s4d_victim,
            [P("config", S4D_TINY, "object"), P("train_config", S4D_TRAIN, "object")],
        ),
        Case("poisoning.gradient_matching.runs_of", gm.runs_of, [P("params", params, "params")]),
        Case(
            "poisoning.gradient_matching.AttackConfig",
            gm.AttackConfig,
            [
                P("steps", 2, "int", True),
                P("restarts", 1, "int", True),
                P("lr", 0.1, "float", True),
                P("reg_factor", 1.0, "float", True),
                P("row_length", 4, "int", True),
            ],
        ),
        Case(
            "poisoning.gradient_matching.Brew",
            gm.Brew,
            [
                P("poison_index", brewed.poison_index, "tensor"),
                P("delta", brewed.delta, "tensor"),
                P("matching_loss", brewed.matching_loss, "tensor"),
                P("targets", brewed.targets, "tensor"),
                P("adversarial", brewed.adversarial, "tensor"),
                P("restart_losses", brewed.restart_losses, "tensor"),
            ],
        ),
        Case(
            "poisoning.gradient_matching.row_weights",
            gm.row_weights,
            [P("length", 8, "int"), P("row_length", 4, "int")],
            oracle=_oracle_row_weights,
        ),
        Case(
            "poisoning.gradient_matching.last_elements_rel_size",
            gm.last_elements_rel_size,
            [P("delta", delta, "tensor"), P("last", 2, "int")],
            oracle=_oracle_rel_size,
        ),
        Case(
            "poisoning.gradient_matching.choose_poisons",
            gm.choose_poisons,
            [
                P("y_train", y, "tensor"),
                P("adversarial", 1, "int"),
                P("budget", 2, "int"),
                P("seed", 0, "int"),
            ],
        ),
        Case(
            "poisoning.gradient_matching.matching_loss",
            gm.matching_loss,
            [
                P("surrogate", params, "params"),
                P("x_test", xt, "tensor"),
                P("brew_result", brewed, "object"),
                P("x_train", x, "tensor"),
                P("delta", delta, "tensor"),
                P("victim", victim, "object", True),
            ],
        ),
        Case(
            "poisoning.gradient_matching.brew",
            gm.brew,
            [
                P("surrogate", params, "params"),
                P("x_train", x, "tensor"),
                P("y_train", y, "tensor"),
                P("x_test", xt, "tensor"),
                P("y_test", yt, "tensor"),
                P("targets", [0], "seq"),
                P("adversarial", [1], "seq"),
                P("budget", 2, "int"),
                P("eps", 0.1, "float"),
                P("data_range", (-1.0, 1.0), "object"),
                P("config", gm.AttackConfig(steps=1, restarts=1), "object"),
                P("seed", 0, "int", True),
                P("victim", victim, "object", True),
            ],
            examples=6,
        ),
        Case(
            "poisoning.gradient_matching.random_perturbations",
            gm.random_perturbations,
            [
                P("base", x[index], "tensor"),
                P("like", delta, "tensor"),
                P("eps", 0.1, "float"),
                P("data_range", (-1.0, 1.0), "object"),
                P("seed", 0, "int", True),
            ],
        ),
        Case(
            "poisoning.gradient_matching.poisoned_sets",
            gm.poisoned_sets,
            [
                P("x_train", x, "tensor"),
                P("y_train", y, "tensor"),
                P("poison_index", index, "tensor"),
                P("delta", delta, "tensor"),
            ],
        ),
        Case(
            "poisoning.gradient_matching.wilson_interval",
            gm.wilson_interval,
            [P("successes", 2, "int"), P("trials", 8, "int"), P("z", 1.96, "float")],
        ),
        Case(
            "poisoning.gradient_matching.wilson_by_target",
            gm.wilson_by_target,
            [
                P("success", [1, 0, 1, 1], "seq"),
                P("seeds_per_target", 2, "int"),
                P("z", 1.96, "float"),
            ],
        ),
        Case(
            "poisoning.gradient_matching.paired_sign_test",
            gm.paired_sign_test,
            [
                P("success", [1, 0, 1, 1], "seq"),
                P("control", [0, 0, 1, 0], "seq"),
                P("seeds_per_target", 2, "int"),
            ],
        ),
        Case(
            "poisoning.gradient_matching.retrain",
            gm.retrain,
            [
                P("victim", _mlp_victim(), "object"),
                P("x_train", x, "tensor"),
                P("y_train", y, "tensor"),
                P("poison_index", index, "tensor"),
                P("delta", delta, "tensor"),
                P("seeds", [0], "seq"),
            ],
            examples=5,
        ),
        Case(
            "poisoning.gradient_matching.target_outcome",
            gm.target_outcome,
            [
                P("victim", victim, "object"),
                P("params", params, "params"),
                P("x_test", xt, "tensor"),
                P("y_test", yt, "tensor"),
                P("targets", [0], "seq"),
                P("adversarial", [1], "seq"),
            ],
        ),
    ]


def _mlp_cases() -> list[Case]:
    x, y, _, _ = _toy_data()
    params = _mlp_params()
    return [
        Case(
            "poisoning.mlp_victim.MLPConfig",
            mlp_victim.MLPConfig,
            [
                P("inputs", 8, "int", True),
                P("hidden", 3, "int", True),
                P("classes", 3, "int", True),
            ],
        ),
        Case(
            "poisoning.mlp_victim.TrainConfig",
            mlp_victim.TrainConfig,
            [
                P("epochs", 1, "int", True),
                P("batch", 4, "int", True),
                P("lr", 0.01, "float", True),
                P("weight_decay", 0.01, "float", True),
            ],
        ),
        Case(
            "poisoning.mlp_victim.init_params",
            mlp_victim.init_params,
            [P("config", MLP_TINY, "object"), P("seeds", [0, 1], "seq")],
        ),
        Case(
            "poisoning.mlp_victim.logits",
            mlp_victim.logits,
            [P("params", params, "params"), P("x", x, "tensor")],
        ),
        Case(
            "poisoning.mlp_victim.train",
            mlp_victim.train,
            [
                P("config", MLP_TINY, "object"),
                P("x", x, "tensor"),
                P("labels", y, "tensor"),
                P("seeds", [0], "seq"),
                P("train_config", MLP_TRAIN, "object"),
            ],
            examples=5,
        ),
        Case(
            "poisoning.mlp_victim.predict",
            mlp_victim.predict,
            [P("params", params, "params"), P("x", x, "tensor")],
        ),
        Case(
            "poisoning.mlp_victim.accuracy",
            mlp_victim.accuracy,
            [P("params", params, "params"), P("x", x, "tensor"), P("labels", y, "tensor")],
        ),
        Case(
            "poisoning.mlp_victim.victim",
            mlp_victim.victim,
            [P("config", MLP_TINY, "object"), P("train_config", MLP_TRAIN, "object")],
        ),
    ]


def _data_cases() -> list[Case]:
    folder = _cifar_folder()
    memory = np.arange(2 * 3072, dtype=np.int64).reshape(2, 3072) % 256
    return [
        Case("book.data.digits_split", data.digits_split, [P("test_every", 5, "int", True)],
            examples=4),
        Case(
            "book.data.cifar10_batch", data.cifar10_batch, [P("path", f"{folder}/test_batch",
                "file")]
        ),
        # it locates the folder (its files are read by cifar10, whose case has kind "folder")
        Case("book.data.cifar10_folder", data.cifar10_folder, [P("folder", folder, "object")]),
        Case(
            "book.data.cifar10_sequences",
            data.cifar10_sequences,
            [P("data", memory, "object"), P("reading", "pixels", "choice")],
        ),
        Case(
            "book.data.cifar10",
            data.cifar10,
            [
                Arg("folder", folder, "folder",
                    extra=[("constant images", _constant_cifar_folder(), "bad")]),
                P("reading", "authors", "choice", True),
                P("n_train", 4, "int", True),
            ],
            examples=4,
        ),
    ]


def _results_cases() -> list[Case]:
    _in_tmp_results(results.save_results)(
        "some-chapter", results={"x": 1.0}, settings={}, seeds=[0], command="make", seconds=1.0
    )
    return [
        Case(
            "book.results.results_path",
            _in_tmp_results(results.results_path),
            [P("chapter", "some-chapter", "text")],
        ),
        Case(
            "book.results.save_results",
            _in_tmp_results(results.save_results),
            [
                P("chapter", "other-chapter", "text"),
                P("results", {"x": 1.0, "n": [1, 2]}, "object", True),
                P("settings", {"steps": 3}, "object", True),
                P("seeds", [0, 1], "seq", True),
                P("command", "make reproduce", "text", True),
                P("seconds", 2.5, "float", True),
            ],
        ),
        Case("book.results.glue", _glue, [P("name", "x", "text"), P("value", 0.5, "float")]),
        Case("book.machine.same_machine", machine.same_machine,
             [P("recorded", machine.environment(), "object")]),
        Case(
            "book.results.load_results",
            _in_tmp_results(results.load_results),
            [P("chapter", "some-chapter", "text")],
        ),
    ]


def _viz_cases() -> list[Case]:
    return [
        Case(
            "book.viz.plot_impulse_responses[styles]",
            _plotted(viz.plot_impulse_responses),
            [
                P("responses", {"h": [1.0, 0.5, 0.25]}, "object"),
                P("kappa", 2, "int", True),
                P("colors", {"h": "black"}, "object", True),
                P("styles", {"h": "o-"}, "object", True),
                P("start", 1, "int", True),
            ],
        ),
        Case(
            "book.viz.plot_loss[label]",
            _plotted(viz.plot_loss),
            [
                P("times", torch.tensor([1.0, 2.0, 3.0], dtype=DT), "tensor"),
                P("losses", torch.tensor([1.0, 0.5, 0.25], dtype=DT), "tensor"),
                P("label", "loss", "text", True),
                P("color", "black", "text", True),
                P("logx", False, "bool", True),
            ],
        ),
        Case(
            "book.viz.Table",
            viz.Table,
            [P("headers", ["a", "b"], "seq"), P("rows", [["1", "2"]], "seq")],
        ),
        Case(
            "book.viz.Slider[step]",
            viz.Slider,
            [
                P("lo", 0.0, "float"),
                P("hi", 1.0, "float"),
                P("default", 0.5, "float"),
                P("log", False, "bool"),
                P("step", 0.1, "float"),
            ],
        ),
        Case("book.viz.Slider.frames", viz.Slider(0.1, 1.0, 0.5).frames, [P("count", 3, "int")]),
        Case("book.viz.Choice.frames", viz.Choice(("a", "b")).frames, [P("count", 3, "int")]),
        Case(
            "book.viz.explore",
            _explore,
            [
                P("fn", _draw, "callable"),
                P("alt", ALT, "text"),
                P("frames", 3, "int"),
                P("figsize", (2.0, 1.5), "object"),
                P("a", viz.Slider(0.5, 2.0, 1.0), "object"),
                P("shape", viz.Choice(("sine", "line")), "object"),
            ],
        ),
        Case(
            "book.viz.slider_grid_html",
            _slider_grid,
            [
                P("fn", _draw, "callable"),
                P(
                    "specs",
                    {"a": viz.Slider(0.5, 2.0, 1.0), "shape": viz.Choice(("sine", "line"))},
                    "object",
                ),
                P("alt", ALT, "text"),
                P("frames", 2, "int"),
                P("figsize", (1.0, 1.0), "object"),
                P("dpi", 20, "int"),
            ],
            examples=5,
        ),
    ]


def cases() -> list[Case]:
    return [
        *_s4d_cases(),
        *_s4d_ops_cases(),
        *_gradient_matching_cases(),
        *_mlp_cases(),
        *_data_cases(),
        *_results_cases(),
        *_viz_cases(),
    ]
