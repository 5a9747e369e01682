"""lib.poisoning.keras_streams and lib.poisoning.greedy_learning: the rebuilt random streams, the
gradients, the three forms of the adaptive step, the compiled loop against the numpy reference, and
the authors' runs.

Tolerances. The compiled loop and the numpy reference compute the same protocol along different
paths (sums in other orders; the full-matrix gradient norm through K × K matrices in one, the d × d
gradient in the other), so they agree to float64 rounding, not bit for bit; over 300 steps from a
near-zero start the gap stays near 1e-15 (measured), and 1e-10 is asked. The rebuilt Keras
initializations are compared with the values the authors' notebooks print *after one training step*,
which moves an entry by at most a few 1e-6 relatively in the runs used here: 1e-4 relative is asked.
"""

from dataclasses import replace

import numpy as np
import pytest
import torch

from lib.poisoning import greedy_learning as gl
from lib.poisoning import keras_streams as ks

DT = torch.float64


def test_philox_known_answers():
    """Random123's known-answer vectors for Philox4x32-10 (kat_vectors in its distribution)."""
    assert ks.philox4x32((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    ones = 0xFFFFFFFF
    expected = (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)
    assert ks.philox4x32((ones,) * 4, (ones, ones)) == expected
    pi_words = (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344)
    assert ks.philox4x32(pi_words, (0xA4093822, 0x299F31D0)) == (
        0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)  # fmt: skip


def test_stateless_normal_is_a_prefix_stream_of_standard_normals():
    long = ks.stateless_normal(4000, 7)
    assert long.dtype == np.float32
    np.testing.assert_array_equal(ks.stateless_normal(10, 7), long[:10])  # same seed, any shape
    assert not np.array_equal(ks.stateless_normal(10, 8), long[:10])
    # 4000 draws: mean within 4 standard errors of 0, variance within 4 of 1 (chi-square sd √(2/n))
    assert abs(long.mean()) < 4 / np.sqrt(4000)
    assert abs(long.var() - 1) < 4 * np.sqrt(2 / 4000)


# The seven largest |a_j| the authors' notebooks print at epoch 0 (after one step), for the
# clean run of each seed: standalone_ssm_dynamics_experiments.ipynb and
# standalone_ssm_dim=*_dynamics_experiments.ipynb of github.com/YoniSlutzky98/imp-bias-ssm-poison.
PRINTED_EPOCH0 = {
    (gl.FIGURE2, 105): [0.03153432, 0.0315339, 0.01101801, 0.00863898, 0.00862912, 0.00680719,
                        0.00501502],
    (gl.FIGURE2, 100): [0.02203692, 0.02203679, 0.00860916, 0.00564485, 0.00351127, 0.00336591,
                        0.0026922],
    (gl.FIGURE4_SHORT, 302): [0.02140439, 0.02048876, 0.01325951, 0.01279907, 0.00455702,
                              0.00347678, 0.0032957],
    (gl.FIGURE5_SHORT, 401): [0.01485123, 0.01393502, 0.0139258, 0.01007344, 0.00805713,
                              0.00764574, 0.00626401],
    (gl.FIGURE6_SHORT, 403): [0.01007305, 0.00915695, 0.00914794, 0.0091112, 0.00608163,
                              0.00419972, 0.00381182],
}  # fmt: skip


@pytest.mark.parametrize("key", list(PRINTED_EPOCH0), ids=lambda k: f"{k[0].name}-{k[1]}")
def test_authors_initialization_matches_their_printout(key):
    setting, seed = key
    a = gl.greedy_init(setting, seed, streams="authors")["a"].numpy()
    top = np.sort(np.abs(a))[::-1][:7]
    np.testing.assert_allclose(top, PRINTED_EPOCH0[key], rtol=1e-4)


def test_authors_initialization_structure():
    """B and C from the same first d numbers of the stream, C reversed; ties in float32."""
    setting = gl.FIGURE2
    p = gl.greedy_init(setting, 105, streams="authors")
    raw = np.abs(np.float32(setting.sd_bc) * ks.stateless_normal(setting.d, 105)).astype(float)
    np.testing.assert_array_equal(p["c"].numpy(), raw[::-1])
    np.testing.assert_array_equal(p["b"].numpy()[2:], np.sort(raw)[::-1][2:])
    assert p["a"][0] == p["a"][1]  # the gap 0.05 e^-40 is below float32 resolution: a tie
    fixed = gl.greedy_init(gl.FIGURE6_SHORT, 403, streams="book")
    assert torch.equal(fixed["b"], torch.ones(10, dtype=DT)) and torch.equal(fixed["c"], fixed["b"])


def test_book_initialization_is_poison_dynamics_one():
    """The book's streams are those of lib.poisoning.dynamics (the chapter's Figure-2 runs)."""
    from lib.poisoning import dynamics as pdyn

    for seed in (0, 5):
        ours = gl.greedy_init(gl.FIGURE2, seed)
        theirs = pdyn.dynamics_init(pdyn.FIGURE2_SSM, seed)
        for k in "abc":
            assert torch.equal(ours[k], theirs[k])
        x, y = gl.greedy_data(gl.FIGURE2, seed)
        x_ref, y_ref = pdyn.dynamics_data(pdyn.FIGURE2_SSM, seed)
        assert torch.equal(x, x_ref)
        torch.testing.assert_close(y, y_ref, rtol=1e-14, atol=1e-14)  # two sums of the same terms


def test_authors_data_draw_each_sequence_in_turn():
    setting = gl.FIGURE4_SHORT
    x, y = gl.greedy_data(setting, 302, streams="authors")
    rng = np.random.RandomState(302)
    first = rng.normal(0, 1, size=(2, 1))[:, 0]
    np.testing.assert_array_equal(x[0, :2].numpy(), first)
    assert x.shape == (18, 6) and torch.all(x[8:, [0, 1, 2, 3, 5]] == 0)
    # teacher diag(0.99, 0.8): y = Σ_l x_l (0.99^(6−l) + 0.8^(6−l))
    h = torch.tensor([0.99**m + 0.8**m for m in range(5, -1, -1)], dtype=DT)
    torch.testing.assert_close(y, x @ h, rtol=1e-13, atol=1e-13)


def _full_matrix_loss(a, b, c, x, y, w):
    """ℓ of the authors' SSM with a full d × d matrix A: h_m = bᵀ A^m c."""
    kappa = x.shape[1]
    impulse, state = [], c
    for _ in range(kappa):
        impulse.append(b @ state)
        state = a @ state
    h = torch.stack(impulse)
    phi = x @ h.flip(0)
    return (w * (phi - y) ** 2).sum()


@pytest.mark.parametrize("kappa", [2, 6, 10])
def test_gradients_and_full_matrix_norm_against_autograd(kappa):
    from lib.poisoning._greedy_kernels import _full_matrix_norm, _loss_and_gradient

    gen = torch.Generator().manual_seed(kappa)
    d, n = 5, 7
    a = torch.rand(d, generator=gen, dtype=DT) * 1.6 - 0.8  # entries up to 0.8: powers matter
    b, c = torch.randn(d, generator=gen, dtype=DT), torch.randn(d, generator=gen, dtype=DT)
    x, y = torch.randn(n, kappa, generator=gen, dtype=DT), torch.randn(n, generator=gen, dtype=DT)
    w = torch.full((n,), 1 / n, dtype=DT)
    full = torch.diag(a).requires_grad_(True)
    bb, cc = b.clone().requires_grad_(True), c.clone().requires_grad_(True)
    loss = _full_matrix_loss(full, bb, cc, x, y, w)
    g_full, g_b, g_c = torch.autograd.grad(loss, (full, bb, cc))
    theta = torch.cat([a, b, c]).numpy()
    grad = np.empty(3 * d)
    h, z = np.empty(kappa), np.empty(kappa)
    value = _loss_and_gradient(theta, grad, x.numpy(), y.numpy(), w.numpy(), d,
                               np.empty((kappa, d)), h, z)  # fmt: skip
    order = kappa - 1
    norm = _full_matrix_norm(theta, z, d, np.empty(2 * (2 * order - 1) + 2 * order * order))
    # different summation orders of the same O(1) terms: 1e-12 relative
    np.testing.assert_allclose(value, loss.item(), rtol=1e-12)
    np.testing.assert_allclose(grad[:d], torch.diagonal(g_full).numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grad[d:], torch.cat([g_b, g_c]).numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(norm, torch.linalg.norm(g_full).item(), rtol=1e-10, atol=1e-13)
    reference = gl._reference_gradient(a.numpy(), b.numpy(), c.numpy(), x.numpy(), y.numpy(),
                                       w.numpy())[2]  # fmt: skip
    np.testing.assert_allclose(reference, g_full.numpy(), rtol=1e-10, atol=1e-13)


VARIANTS = {
    "A, B, C trained, authors' step": (gl.FIGURE2, "book"),
    "A, B, C trained, diagonal step": (replace(gl.FIGURE2, step_norm="diagonal"), "authors"),
    "B, C fixed, authors' step (first step at their B, C)": (gl.FIGURE5_SHORT, "authors"),
    "B, C fixed, diagonal step": (replace(gl.FIGURE6_LONG, step_norm="diagonal"), "book"),
}
# The text's rule divides by the root of the squared norm, so its step is about η/‖∇ℓ‖, up to
# η / 10⁻⁵ = 10³ where the gradient nearly vanishes (the special runs start there): a run then
# amplifies the engines' rounding differences when an entry escapes (measured: from 10⁻¹⁵ to 10⁻⁷
# between steps 224 and 280 with A, B, C trained; to 2·10⁻⁸ between steps 105 and 126 with B, C
# fixed). The engines are compared there over the first 100 steps, before that growth.
SHORT_VARIANTS = {
    "A, B, C trained, the text's step": (replace(gl.FIGURE2, step_norm="text"), "authors"),
    "B, C fixed, the text's step": (replace(gl.FIGURE5_SHORT, step_norm="text"), "book"),
}


def test_text_step_is_the_squared_norm_with_its_softening():
    """App. H.1.1's rule: η_0 = η / (√(G_0) + 10⁻⁵) with G_0 = ‖∇ℓ‖² at the first step (the
    bias-corrected average of one term is that term), so η_0 ≈ η / ‖∇ℓ‖; the code's forms give
    η / (√(Σ_blocks ‖∇_block‖) + 10⁻⁶) instead."""
    setting = replace(gl.FIGURE2, step_norm="text")
    runs = gl.train_greedy(setting, [0], special_scales=[None], max_steps=3, record_every=1)
    x, y = runs.x[0, : runs.sizes[0]].numpy(), runs.y[0, : runs.sizes[0]].numpy()
    w = runs.weights[0, : runs.sizes[0]].numpy()
    a, b, c = (runs.trajectory[k][0, 0] for k in "abc")
    _, (ga, gb, gc), _ = gl._reference_gradient(a, b, c, x, y, w)
    norm = float(np.sqrt(ga @ ga + gb @ gb + gc @ gc))
    expected = setting.lr_clean / (norm + gl.TEXT_SOFTENING)
    np.testing.assert_allclose(runs.trajectory.step_sizes[0, 0], expected, rtol=1e-12)
    authors = gl.train_greedy(gl.FIGURE2, [0], special_scales=[None], max_steps=3, record_every=1)
    assert not np.isclose(authors.trajectory.step_sizes[0, 0], expected, rtol=1e-3)


@pytest.mark.parametrize("name", [*VARIANTS, *SHORT_VARIANTS])
def test_compiled_loop_equals_numpy_reference(name):
    setting, streams = {**VARIANTS, **SHORT_VARIANTS}[name]
    kwargs = dict(max_steps=100 if name in SHORT_VARIANTS else 300, record_every=7,
                  streams=streams)
    compiled = gl.train_greedy(setting, [0, 3], engine="compiled", **kwargs).trajectory
    reference = gl.train_greedy(setting, [0, 3], engine="numpy", **kwargs).trajectory
    np.testing.assert_array_equal(compiled.times, reference.times)
    for k in "abc":
        np.testing.assert_allclose(compiled[k], reference[k], rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(compiled.losses, reference.losses, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(compiled.step_sizes, reference.step_sizes, rtol=1e-10)


def test_stopping_rule_and_fixed_bc():
    """Loss ≤ stop_loss at step k, then extra_steps more; a finished run stays frozen; with B, C
    fixed only a moves (after the first step b = c = 1)."""
    setting = replace(gl.FIGURE4_SHORT, extra_steps=50)
    runs = gl.train_greedy(setting, [1], special_scales=[1.0], max_steps=20_000, streams="authors")
    info, traj = runs.trajectory.info, runs.trajectory
    k = info["converged_step"][0]
    assert k is not None and info["steps_run"][0] == k + 50
    assert traj.losses[-1, 0] <= setting.stop_loss * 1.5  # 50 more steps keep it near the threshold
    assert np.all(traj["b"][1:] == 1.0) and np.all(traj["c"][1:] == 1.0)
    assert np.isnan(traj.step_sizes[-1, 0])


def test_escape_iteration_and_traces():
    runs = gl.train_greedy(gl.FIGURE2, [0], max_steps=60_000)
    clean, special = runs.index(0, None), runs.index(0, 1.0)
    assert np.all(runs.gamma0(clean) == 0)  # baseline sequences vanish at the penultimate position
    assert abs(runs.gamma0(special)[0]) > 0.1
    escape = runs.escape_iteration(special)
    k = int(np.searchsorted(runs.trajectory.times, escape))
    assert runs.magnitudes(special)[k, 0] > 0.5 >= runs.magnitudes(special)[k - 1, 0]
    assert runs.escape_iteration(clean, rank=10, level=0.9) is None
    assert 1 <= runs.effective_ranks(clean)[-1] <= 10


# The authors' notebooks print the three largest |a_j| of each run where its loss first falls below
# the threshold ("Reached sub-epsilon train loss", one step later), for Figures 2 and 4:
PRINTED_AT_THRESHOLD = {
    ("Figure 2", None): [1.1527418, 0.03854054, 0.01121102],
    ("Figure 2", 1.0): [1.0882952, 0.5312806, 0.43466774],
    ("Figure 4, κ = 6", None): [1.0457965, 0.54642755, 0.01731453],
    ("Figure 4, κ = 6", 1.0): [1.0478063, 0.41335836, 0.10835364],
}


@pytest.mark.parametrize("key", list(PRINTED_AT_THRESHOLD), ids=str)
def test_authors_runs_rebuilt(key):
    """The authors' own runs, rebuilt (their initialization, data and step rule): where the loss
    first falls below the threshold, the three largest entries agree with their printout to 1%
    (their runs are float32, ours float64; measured: within 0.4%). The final values, 1500 or 5000
    steps later, drift further apart while the entries still move (measured: up to 1.2%, the
    second entry of Figure 4's run with special sequences), so the test compares at the threshold,
    where the notebooks print too."""
    figure, scale = key
    setting, seed = gl.AUTHORS_SEEDS[figure]
    runs = gl.train_greedy(setting, [seed], special_scales=[scale], streams="authors",
                           max_steps=100_000, record_every=1)  # fmt: skip
    k = runs.trajectory.info["converged_step"][0]
    np.testing.assert_allclose(runs.magnitudes(0)[k, :3], PRINTED_AT_THRESHOLD[key], rtol=1e-2)


def test_sort_c_sorts_the_same_draws_as_the_dynamics_module():
    """App. H.1.1's sorted C: the unsorted draw of the same stream, sorted descending, and the
    same vector as lib.poisoning.dynamics draws for the same seed with its sort_c (a, b and c
    come from one RandomState in the same order in both modules)."""
    from lib.poisoning import dynamics

    for seed in (0, 7):
        unsorted = gl.greedy_init(gl.FIGURE2, seed)
        sorted_ = gl.greedy_init(replace(gl.FIGURE2, sort_c=True), seed)
        assert torch.equal(sorted_["a"], unsorted["a"]) and torch.equal(sorted_["b"], unsorted["b"])
        assert torch.equal(sorted_["c"], torch.sort(unsorted["c"], descending=True).values)
        other = dynamics.dynamics_init(replace(dynamics.FIGURE2_SSM, sort_c=True), seed)["c"]
        torch.testing.assert_close(sorted_["c"], other, rtol=0, atol=0)
    with pytest.raises(ValueError, match="sort_c"):
        gl.greedy_init(replace(gl.FIGURE2, sort_c=True), 0, streams="authors")


def test_settings_reject_bad_fields():
    with pytest.raises(ValueError, match="special_positions"):
        replace(gl.FIGURE2, special_positions=(7,))
    with pytest.raises(ValueError, match="tie_factors"):
        replace(gl.FIGURE2, tie_factors=(1.0,) * 10)
    with pytest.raises(ValueError, match="step_norm"):
        replace(gl.FIGURE2, step_norm="squared")
    with pytest.raises(ValueError, match="streams"):
        gl.greedy_init(gl.FIGURE2, 0, streams="keras")
    with pytest.raises(ValueError, match="int32"):
        gl.greedy_init(gl.FIGURE2, 2**31, streams="authors")
