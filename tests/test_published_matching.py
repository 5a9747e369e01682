"""benchmarks/published_matching.py, the transcription of the published brewing loop, beside
lib.poisoning.gradient_matching: the same objective, and with its three departures set to lib's,
the same poisons."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import published_matching as pm  # noqa: E402

from lib.book import data  # noqa: E402
from lib.engine.losses import per_run_cross_entropy  # noqa: E402
from lib.poisoning import gradient_matching as gm  # noqa: E402
from lib.poisoning import mlp_victim  # noqa: E402


@pytest.fixture(scope="module")
def setting():
    x, y, xt, yt, data_range = data.digits_split()
    x, y = x[:300], y[:300]
    victim = mlp_victim.victim(mlp_victim.MLPConfig(hidden=16), mlp_victim.TrainConfig(epochs=5))
    surrogate = victim.train(x, y, [3])
    right = torch.nonzero(mlp_victim.predict(surrogate, xt)[0] == yt)[:, 0]
    target = int(right[0])
    adversarial = (int(yt[target]) + 1) % 10
    eps = 2 * (data_range[1] - data_range[0]) / 16
    return x, y, xt, yt, data_range, victim, surrogate, target, adversarial, eps


def test_the_passenger_loss_is_lib_s_matching_loss(setting):
    """1 − cos(g_t, g_p) summed tensor by tensor (their loop) equals lib's flattened one; float64
    sums in another order: 1e-12."""
    x, y, xt, yt, data_range, victim, surrogate, target, adversarial, eps = setting
    index = gm.choose_poisons(y, adversarial, 5, 0)
    delta = (torch.rand(1, 5, 64, generator=torch.Generator().manual_seed(1),
                        dtype=torch.float64) * 2 - 1) * eps
    b = gm.Brew(poison_index=index[None], delta=delta,
                matching_loss=torch.zeros(1, dtype=torch.float64),
                targets=torch.tensor([target]), adversarial=torch.tensor([adversarial]))
    ours = gm.matching_loss(surrogate, xt, b, x, delta, victim=victim)
    g_t, norm = pm.target_gradient(victim.logits, surrogate, xt[target],
                                   torch.tensor([adversarial]))
    leaves = {k: v.detach().requires_grad_() for k, v in surrogate.items()}
    loss = per_run_cross_entropy(victim.logits(leaves, (x[index] + delta[0])[None]),
                                 y[index][None]).sum()
    g_p = torch.autograd.grad(loss, list(leaves.values()))
    assert float(pm.passenger_loss(list(g_p), g_t, norm)) == pytest.approx(float(ours[0]),
                                                                        abs=1e-12)


def test_with_lib_s_three_choices_the_published_loop_gives_lib_s_poisons(setting):
    """No augmentation, the start projected into the data range, the trial chosen after its last
    step, the same starts: the published loop and gm.brew (step_rule "authors") take the same
    signed-Adam steps. The signs are of float64 gradients summed in another order, so a
    coordinate whose gradient is ~1e-16 could take the other sign: at least 99 % of the
    coordinates agree to 1e-9 ε and the chosen trials' losses to 1e-9."""
    x, y, xt, yt, data_range, victim, surrogate, target, adversarial, eps = setting
    steps, restarts, seed, budget = 30, 2, 5, 6
    config = gm.AttackConfig(steps=steps, restarts=restarts, step_rule="authors")
    b = gm.brew(surrogate, x, y, xt, yt, [target], [adversarial], budget, eps, data_range, config,
                seed=seed, victim=victim)
    base, labels = x[b.poison_index[0]], y[b.poison_index[0]]
    # gm.brew's start: ε · N(0, 1) clipped to [−ε, ε], one draw for all trials, from `seed`
    starts = torch.randn((restarts, budget, 64), generator=torch.Generator().manual_seed(seed),
                         dtype=torch.float64).clamp(-1, 1) * eps
    delta, scores = pm.brew(victim.logits, surrogate, xt[target], adversarial, base, labels, eps,
                            data_range, steps=steps, restarts=restarts, paugment=False,
                            project_start=True, select="final", starts=starts)
    close = (delta - b.delta[0]).abs() <= 1e-9 * eps
    assert float(close.double().mean()) >= 0.99
    assert torch.allclose(scores, b.restart_losses[0], atol=1e-9, rtol=0)
    # and the published choices move it: another start (not projected) and augmentation
    published, _ = pm.brew(victim.logits, surrogate, xt[target], adversarial, base, labels, eps,
                           data_range, steps=steps, restarts=restarts, starts=starts)
    assert float((published - b.delta[0]).abs().max()) > 1e-3 * eps


def test_the_published_poisons_stay_in_the_eps_box_and_the_data_range(setting):
    x, y, xt, yt, data_range, victim, surrogate, target, adversarial, eps = setting
    index = gm.choose_poisons(y, adversarial, 4, 2)
    delta, scores = pm.brew(victim.logits, surrogate, xt[target], adversarial, x[index], y[index],
                            eps, data_range, steps=12, restarts=3, seed=4)
    assert scores.shape == (3,) and bool(torch.isfinite(scores).all())
    assert float(delta.abs().max()) <= eps * (1 + 1e-12)
    poisoned = x[index] + delta
    slack = 1e-12 * (data_range[1] - data_range[0])
    assert float(poisoned.min()) >= data_range[0] - slack
    assert float(poisoned.max()) <= data_range[1] + slack
    with pytest.raises(ValueError, match="select"):
        pm.brew(victim.logits, surrogate, xt[target], adversarial, x[index], y[index], eps,
                data_range, steps=1, restarts=1, select="best")


def test_the_augmentation_without_shift_is_the_identity_or_the_mirror_image():
    """RandomTransform with shift 0 samples the pixel grid itself (align_corners): each image comes
    back as it was, or mirrored left-right where its draw says so; a nonzero shift moves it."""
    images = torch.rand(16, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = pm.shift_and_flip(images, 8, 0, torch.Generator().manual_seed(1))
    mirrored = images.reshape(16, 8, 8).flip(-1).reshape(16, 64)
    same = (out - images).abs().amax(-1) < 1e-12
    flipped = (out - mirrored).abs().amax(-1) < 1e-12
    assert bool((same | flipped).all()) and 0 < int(flipped.sum()) < 16
    moved = pm.shift_and_flip(images, 8, 1, torch.Generator().manual_seed(1), fliplr=False)
    assert float((moved - images).abs().max()) > 1e-3
