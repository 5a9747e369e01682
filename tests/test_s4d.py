"""Unit tests of lib.ssm.s4d: the S4D kernel against its recurrence, the Toeplitz convolution, and
independent runs trained in one batch."""

import numpy as np
import pytest
import torch

from lib.book.data import digits_split
from lib.ssm import s4d

DT = torch.float64

# lib.ssm.s4d.logits(init_params(S4DConfig(channels=4, state=4, layers=2), [0]), digits[:2])[0, :,
# :3] computed with lib/ssm/s4d.py as of commit b575efb (one input channel, Toeplitz only)
PINNED_DIGITS_LOGITS = [
    [0.3576672375202179, 0.5748685002326965, -0.35232529044151306],
    [0.36878761649131775, 0.5546274781227112, -0.3485053479671478],
]


def recurrence_kernel(log_dt, log_a_re, a_im, c_re, c_im, length):
    """Impulse response of the ZOH-discretized diagonal SSM, by running the recurrence."""
    a = torch.complex(-torch.exp(log_a_re), a_im)
    dt = torch.exp(log_dt)[..., None]
    a_bar = torch.exp(dt * a)
    b_bar = (a_bar - 1) / a  # ZOH with B = 1: (exp(ΔA) − 1) A⁻¹ B
    c = torch.complex(c_re, c_im)
    state = torch.zeros_like(a_bar)
    out = []
    for step in range(length):
        state = a_bar * state + b_bar * (1.0 if step == 0 else 0.0)
        out.append(2 * (c * state).sum(-1).real)
    return torch.stack(out, -1)


def test_kernel_matches_the_recurrence(gen):
    h, half, length = 3, 4, 20
    log_dt = torch.rand(h, generator=gen, dtype=DT) * 3 - 4
    log_a_re = torch.randn(h, half, generator=gen, dtype=DT) * 0.3 - 0.7
    a_im = torch.rand(h, half, generator=gen, dtype=DT) * 10
    c_re, c_im = torch.randn(2, h, half, generator=gen, dtype=DT)
    closed = s4d.s4d_kernel(log_dt, log_a_re, a_im, c_re, c_im, length)
    loop = recurrence_kernel(log_dt, log_a_re, a_im, c_re, c_im, length)
    # float64, two computation paths (powers vs repeated products): rounding only
    torch.testing.assert_close(closed, loop, rtol=1e-10, atol=1e-12)


def test_toeplitz_product_is_the_causal_convolution(gen):
    kernel = torch.randn(2, 9, generator=gen, dtype=DT)
    u = torch.randn(2, 9, generator=gen, dtype=DT)
    y = (s4d.toeplitz(kernel) @ u[..., None])[..., 0]
    for i in range(2):
        ref = np.convolve(kernel[i].numpy(), u[i].numpy())[:9]
        np.testing.assert_allclose(y[i].numpy(), ref, rtol=1e-12, atol=1e-12)


def test_logits_of_a_batch_of_runs_are_those_of_each_run_alone(gen):
    cfg = s4d.S4DConfig(channels=4, state=4, layers=2)
    p = s4d.init_params(cfg, [0, 1, 2])
    x = torch.randn(5, 16, generator=gen)
    out = s4d.logits(p, x)
    assert out.shape == (3, 5, 10)
    for r in range(3):
        # float32, a run inside a batch vs alone: same arithmetic, kernels may round differently
        torch.testing.assert_close(out[r : r + 1], s4d.logits(s4d.select_run(p, r), x))
    assert not torch.allclose(out[0], out[1])  # different seeds, different networks


def test_the_last_input_reaches_the_output_only_through_the_pooled_last_position(gen):
    # Causality of the Toeplitz convolution: the last input element moves only the last output
    # position, by K_0 (same computation path twice: exact zeros elsewhere).
    kernel = torch.randn(1, 3, 16, generator=gen)
    u = torch.randn(1, 3, 16, 2, generator=gen)
    bumped = u.clone()
    bumped[:, :, -1] += 1.0
    t = s4d.toeplitz(kernel)
    diff = t @ bumped - t @ u
    assert torch.equal(diff[:, :, :-1], torch.zeros_like(diff[:, :, :-1]))
    torch.testing.assert_close(diff[:, :, -1], kernel[..., :1].expand(1, 3, 2))


def test_init_is_deterministic_and_seeds_differ():
    cfg = s4d.S4DConfig(channels=4, state=4, layers=2)
    a, b = s4d.init_params(cfg, [3, 4]), s4d.init_params(cfg, [3])
    for name in a:
        assert torch.equal(a[name][:1], b[name])  # same draw, one path
    assert not torch.equal(a["w0"][0], a["w0"][1])


def test_batched_runs_train_as_if_alone():
    x, y, *_ = digits_split()
    x, y = x[:96], y[:96]
    cfg = s4d.S4DConfig(channels=4, state=4, layers=1)
    tc = s4d.TrainConfig(epochs=2, batch=32, lr=1e-2)
    both = s4d.train(cfg, x, y, [1, 2], tc)
    alone = s4d.train(cfg, x, y, [2], tc)
    for name in both:
        # float32 run inside a batch vs alone: the same arithmetic, rounding may differ by kernels
        torch.testing.assert_close(both[name][1:], alone[name], rtol=1e-4, atol=1e-5)


def test_training_learns_the_digits():
    x, y, xt, yt, _ = digits_split()
    p = s4d.train(
        s4d.S4DConfig(), x[:400], y[:400], [0], s4d.TrainConfig(epochs=6, batch=16, lr=3e-2)
    )
    # chance is 0.1; a model that learns anything from 400 images and 150 steps is far above it
    assert float(s4d.accuracy(p, xt, yt)[0]) > 0.3


def test_digits_split_is_a_partition():
    x, y, xt, yt, (lo, hi) = digits_split()
    assert x.shape == (1437, 64) and xt.shape == (360, 64)
    assert float(x.min()) == pytest.approx(lo) and float(x.max()) == pytest.approx(hi)
    assert abs(float(x.mean())) < 1e-12


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"state": 5}, "state"),
        ({"channels": 0}, "channels"),
        ({"dt_min": 1.0, "dt_max": 0.1}, "dt_min"),
    ],
)
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        s4d.S4DConfig(**kwargs)


def test_bad_training_input():
    x, y, *_ = digits_split()
    cfg = s4d.S4DConfig(channels=4, state=4, layers=1)
    with pytest.raises(ValueError, match="labels"):
        s4d.train(cfg, x[:10], y[:9], [0])
    with pytest.raises(ValueError, match="float64"):
        s4d.train(cfg, x[:10].float(), y[:10], [0])
    with pytest.raises(ValueError, match="seeds"):
        s4d.train(cfg, torch.stack([x[:10]] * 2), torch.stack([y[:10]] * 2), [0])
    with pytest.raises(ValueError, match="labels"):
        s4d.train(cfg, x[:10], y[:10] + 10, [0])
    with pytest.raises(ValueError, match="run"):
        s4d.select_run(s4d.init_params(cfg, [0]), 1)


def test_a_diverging_training_is_reported_not_returned():
    x, y, *_ = digits_split()
    cfg = s4d.S4DConfig(channels=4, state=4, layers=1)
    # finite float64 inputs beyond float32's range overflow in the victim's precision: the training
    # must say so (NumericalFailure, a ValueError) instead of returning nan parameters
    with pytest.raises(ValueError, match="not finite"):
        s4d.train(cfg, x[:64] * 1e300, y[:64], [0], s4d.TrainConfig(epochs=1, batch=32))


def _as64(params):
    return {k: v.double() for k, v in params.items()}


@pytest.mark.parametrize("length", [128, 256, 512])
def test_fft_and_toeplitz_paths_agree_around_the_crossover(length, gen):
    # lengths on both sides of lib.ssm.s4d.FFT_MIN_LENGTH; float64 parameters and inputs, so the two
    # paths differ by rounding only: the FFT's error is ~1e-16 · log2(2L) · max|values| per sum
    cfg = s4d.S4DConfig(channels=4, state=4, layers=2)
    p = {k: v.requires_grad_() for k, v in _as64(s4d.init_params(cfg, [0, 1])).items()}
    x = torch.randn(2, 3, length, generator=gen, dtype=DT)
    labels = torch.randint(0, 10, (2, 3), generator=gen)
    out = {}
    for method in ("toeplitz", "fft"):
        logits = s4d.logits(p, x, method=method)
        loss = torch.nn.functional.cross_entropy(logits.reshape(6, 10), labels.reshape(6))
        grads = torch.autograd.grad(loss, list(p.values()))
        out[method] = (logits.detach(), grads)
    torch.testing.assert_close(out["fft"][0], out["toeplitz"][0], rtol=1e-9, atol=1e-10)
    for a, b in zip(out["fft"][1], out["toeplitz"][1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def test_fft_path_in_float32_follows_toeplitz_at_cifar_length(gen):
    # the victim's own precision at L = 1024: float32 rounding of O(1) activations summed over up
    # to 1024 terms (relative error ~1e-7 · sqrt(L) · a few), far below the logits' O(1) gaps
    cfg = s4d.S4DConfig(channels=4, state=4, layers=2, inputs=3)
    p = s4d.init_params(cfg, [0])
    x = torch.randn(4, 3 * 1024, generator=gen)
    torch.testing.assert_close(
        s4d.logits(p, x, method="fft"), s4d.logits(p, x, method="toeplitz"), rtol=1e-4, atol=1e-4
    )


def test_fft_convolution_is_the_causal_convolution(gen):
    kernel = torch.randn(2, 9, generator=gen, dtype=DT)
    u = torch.randn(2, 9, 3, generator=gen, dtype=DT)
    # float64, a sum of 9 terms against an FFT of length 18: rounding only
    torch.testing.assert_close(
        s4d.fft_convolve(kernel, u), s4d.toeplitz(kernel) @ u, rtol=1e-12, atol=1e-12
    )


def test_fft_path_has_second_derivatives(gen):
    # the attack differentiates through a backward pass: finite differences to second order
    kernel = torch.randn(2, 6, generator=gen, dtype=DT).requires_grad_()
    u = torch.randn(2, 6, 2, generator=gen, dtype=DT).requires_grad_()
    assert torch.autograd.gradgradcheck(s4d.fft_convolve, (kernel, u))


def test_auto_method_is_toeplitz_below_the_crossover_and_fft_above(gen, monkeypatch):
    cfg = s4d.S4DConfig(channels=4, state=4, layers=1)
    p = s4d.init_params(cfg, [0])
    calls = []
    real = s4d._fft_convolve  # what logits calls (fft_convolve is its checked public form)
    monkeypatch.setattr(s4d, "_fft_convolve", lambda k, u: calls.append(1) or real(k, u))
    s4d.logits(p, torch.randn(2, s4d.FFT_MIN_LENGTH - 1, generator=gen))
    assert not calls
    s4d.logits(p, torch.randn(2, s4d.FFT_MIN_LENGTH, generator=gen))
    assert calls


def test_one_input_channel_keeps_the_digits_network():
    # The digits chapter's network (one input channel, L = 64 < FFT_MIN_LENGTH): parameters of the
    # old shapes, drawn in the old order, and the Toeplitz path. Pinned by values computed with the
    # code before input channels and the FFT were added (float32; exact equality was checked then,
    # the tolerance only absorbs float32 rounding of a different BLAS or CPU: 1e-5 of O(1) logits).
    cfg = s4d.S4DConfig(channels=4, state=4, layers=2)
    p = s4d.init_params(cfg, [0])
    assert p["enc_w"].shape == (1, 4) and p["enc_b"].shape == (1, 4)
    x, *_ = digits_split()
    got = s4d.logits(p, x[:2].float())[0, :, :3]
    want = torch.tensor(PINNED_DIGITS_LOGITS)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_input_channels_are_read_step_by_step(gen):
    # flat input: step p holds entries C p .. C p + C − 1. A network with C = 3 whose encoder reads
    # only channel 1 gives the logits of a one-channel network on x[..., 1::3] (same other params)
    cfg3 = s4d.S4DConfig(channels=4, state=4, layers=1, inputs=3)
    p3 = s4d.init_params(cfg3, [0])
    p1 = dict(p3)
    p1["enc_w"] = p3["enc_w"][..., 1].contiguous()
    p3["enc_w"] = torch.zeros_like(p3["enc_w"])
    p3["enc_w"][..., 1] = p1["enc_w"]
    x = torch.randn(5, 3 * 20, generator=gen)
    for method in ("toeplitz", "fft"):
        # float32, one product over 3 channels (two of them zero) against one channel
        torch.testing.assert_close(
            s4d.logits(p3, x, method=method), s4d.logits(p1, x[:, 1::3], method=method)
        )


def test_cifar10_victim_is_the_papers_size():
    cfg = s4d.CIFAR10_VICTIM
    assert (cfg.layers, cfg.channels, cfg.state, cfg.inputs) == (4, 128, 64, 3)
    p = s4d.init_params(cfg, [0])
    assert p["enc_w"].shape == (1, 128, 3) and p["c_re3"].shape == (1, 128, 32)


def test_bad_channels_method_and_device(monkeypatch):
    cfg = s4d.S4DConfig(channels=4, state=4, layers=1, inputs=3)
    p = s4d.init_params(cfg, [0])
    with pytest.raises(ValueError, match="multiple of C = 3"):
        s4d.logits(p, torch.zeros(2, 10))
    with pytest.raises(ValueError, match="inputs = 3"):
        s4d.train(cfg, torch.zeros(4, 10, dtype=DT), torch.zeros(4, dtype=torch.int64), [0])
    with pytest.raises(ValueError, match="method"):
        s4d.logits(p, torch.zeros(2, 9), method="dft")
    with pytest.raises(ValueError, match="inputs"):
        s4d.S4DConfig(inputs=0)
    monkeypatch.setenv("BOOK_DEVICE", "no-such-device")
    with pytest.raises(ValueError, match="BOOK_DEVICE"):
        s4d.logits(p, torch.zeros(2, 9))
    if not torch.cuda.is_available():
        monkeypatch.setenv("BOOK_DEVICE", "cuda")
        with pytest.raises(ValueError, match="no CUDA device"):
            s4d.compute_device()


def reference_logits(p, x, inputs, prenorm):
    """One run's classifier written out plainly, (B, L·C) → (B, classes): encoder on each step's
    C values, per layer (pre-norm or post-norm) a causal convolution by an explicit sum over lags,
    GELU, mixing, residual; mean pooling; decoder."""
    p = {k: v[0] for k, v in p.items()}

    def norm(z):  # over channels, the last axis here
        c = z - z.mean(-1, keepdim=True)
        return c / torch.sqrt((c * c).mean(-1, keepdim=True) + 1e-5)

    b, length = x.shape[0], x.shape[1] // inputs
    enc_w = p["enc_w"].reshape(-1, inputs)
    u = x.reshape(b, length, inputs) @ enc_w.T + p["enc_b"]  # (B, L, H)
    layer = 0
    while f"log_dt{layer}" in p:
        i = layer
        k = s4d.s4d_kernel(p[f"log_dt{i}"], p[f"log_a_re{i}"], p[f"a_im{i}"], p[f"c_re{i}"],
                           p[f"c_im{i}"], length)  # (H, L)
        v = norm(u) if prenorm else u
        conv = torch.stack(
            [sum(k[:, lag] * v[:, pos - lag] for lag in range(pos + 1)) for pos in range(length)], 1
        ) + p[f"d{i}"] * v
        mix = "_pre" if prenorm else ""
        mixed = torch.nn.functional.gelu(conv) @ p[f"w{mix}{i}"].T + p[f"b{mix}{i}"]
        u = u + mixed if prenorm else norm(u + mixed)
        layer += 1
    return u.mean(1) @ p["dec_w"].T + p["dec_b"]


@pytest.mark.parametrize("prenorm", [False, True])
@pytest.mark.parametrize("inputs", [1, 3])
@pytest.mark.parametrize("method", ["toeplitz", "fft"])
def test_logits_match_a_plain_reference(prenorm, inputs, method, gen):
    cfg = s4d.S4DConfig(channels=4, state=4, layers=2, inputs=inputs, prenorm=prenorm)
    p = _as64(s4d.init_params(cfg, [0]))
    assert ("w_pre0" in p) == prenorm and ("w0" in p) != prenorm
    x = torch.randn(3, 12 * inputs, generator=gen, dtype=DT)
    # float64, the same network summed in other orders: rounding only
    torch.testing.assert_close(
        s4d.logits(p, x, method=method)[0], reference_logits(p, x, inputs, prenorm),
        rtol=1e-10, atol=1e-10,
    )


def test_cifar10_victim_is_pre_norm():
    # the Table-2 version of the authors' code passes prenorm='store_true', a true value
    assert s4d.CIFAR10_VICTIM.prenorm and not s4d.S4DConfig().prenorm


@pytest.mark.parametrize("method", ["toeplitz", "fft"])
def test_no_cpu_tensor_enters_a_computation_on_another_device(method, gen, monkeypatch):
    # PyTorch's "meta" device computes shapes only and refuses any CPU tensor mixed into an op, as
    # a GPU does: forward, backward and the attack's double backward all stay on the device
    monkeypatch.setenv("BOOK_DEVICE", "meta")
    cfg = s4d.S4DConfig(channels=4, state=4, layers=2, inputs=3, prenorm=True)
    p = {k: v.to("meta").requires_grad_() for k, v in s4d.init_params(cfg, [0, 1]).items()}
    x = torch.randn(2, 5, 3 * 40, generator=gen).to("meta").requires_grad_()
    out = s4d.logits(p, x, method=method)
    assert out.device.type == "meta" and out.shape == (2, 5, 10)
    (g,) = torch.autograd.grad(out.sum(), [p["w_pre0"]], create_graph=True)
    (gx,) = torch.autograd.grad(g.sum(), [x])
    assert gx.device.type == "meta" and gx.shape == x.shape


def test_a_network_with_a_nan_parameter_predicts_nothing():
    # argmax of nan logits is class 0: without the check, predict and accuracy would answer
    x, y, *_ = digits_split()
    p = s4d.init_params(s4d.S4DConfig(channels=4, state=4, layers=1), [0])
    p["c_re0"][0, 0, 0] = float("nan")
    for call in (lambda: s4d.predict(p, x[:5]), lambda: s4d.accuracy(p, x[:5], y[:5])):
        with pytest.raises(ValueError, match=r"params\['c_re0'\] must be finite"):
            call()


def test_logits_that_overflow_are_reported_not_returned():
    # a step size exp(100) overflows float32: the kernel turns nan, and so would every logit
    p = s4d.init_params(s4d.S4DConfig(channels=4, state=4, layers=1), [0])
    p["log_dt0"][:] = 100.0
    with pytest.raises(ValueError, match="not finite"):
        s4d.logits(p, torch.zeros(2, 8))


def test_train_refuses_an_init_of_another_architecture():
    x, y, *_ = digits_split()
    cfg = s4d.S4DConfig(channels=4, state=4, layers=1)
    for other in (
        s4d.S4DConfig(channels=4, state=4, layers=2),
        s4d.S4DConfig(channels=8, state=4, layers=1),
        s4d.S4DConfig(channels=4, state=4, layers=1, prenorm=True),
    ):
        with pytest.raises(ValueError, match="init must be a network of config's architecture"):
            s4d.train(cfg, x[:8], y[:8], [0], init=s4d.init_params(other, [0]))
    with pytest.raises(ValueError, match="init must hold 1 run or one per seed"):
        s4d.train(cfg, x[:8], y[:8], [0, 1, 2], init=s4d.init_params(cfg, [0, 1]))


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda p: p.pop("d0"), r"missing \['d0'\]"),
        (lambda p: p.update(extra=p["d0"]), r"unexpected \['extra'\]"),
        (lambda p: p.update(d0=p["d0"][:, :3]), r"params\['d0'\] must have shape \(1, 4\)"),
        (lambda p: p.update(d0=p["d0"].half()), "float32 or float64"),
        (lambda p: p.update(d0=p["d0"].double()), "one dtype"),
    ],
)
def test_logits_name_what_is_wrong_with_a_parameter_dict(change, match):
    p = s4d.init_params(s4d.S4DConfig(channels=4, state=4, layers=1), [0])
    change(p)
    with pytest.raises(ValueError, match=match):
        s4d.logits(p, torch.zeros(2, 8))


def test_kernel_needs_a_length_and_matching_shapes():
    h = torch.zeros(2, 3, dtype=DT)
    with pytest.raises(ValueError, match="length must be at least 1"):
        s4d.s4d_kernel(torch.zeros(2, dtype=DT), h, h, h, h, 0)  # it was an empty kernel
    with pytest.raises(ValueError, match="log_dt must have shape"):
        s4d.s4d_kernel(torch.zeros(3, dtype=DT), h, h, h, h, 4)
    with pytest.raises(ValueError, match="share one dtype"):
        s4d.s4d_kernel(torch.zeros(2), h, h, h, h, 4)


def test_labels_may_be_any_integers_but_no_floats():
    x, y, *_ = digits_split()
    p = s4d.init_params(s4d.S4DConfig(channels=4, state=4, layers=1), [0])
    # the same labels as a list and as int32: the same accuracy (one computation path)
    assert torch.equal(s4d.accuracy(p, x[:6], y[:6].tolist()), s4d.accuracy(p, x[:6], y[:6]))
    assert torch.equal(s4d.accuracy(p, x[:6], y[:6].int()), s4d.accuracy(p, x[:6], y[:6]))
    with pytest.raises(ValueError, match="labels must be an integer tensor"):
        s4d.accuracy(p, x[:6], y[:6].double())
