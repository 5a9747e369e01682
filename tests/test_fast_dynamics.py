"""The compiled training loops of lib.poisoning._dynamics_kernels against the torch engine
(lib.engine.flow).

The two engines compute the same protocol along different computation paths (the order of sums
differs), so they agree up to float64 rounding, not bit for bit. How far that carries depends on the
dynamics: a plateau escape or a near-tie amplifies a rounding difference of 1e-16 exponentially
(measured: from 1e-16 to 1e-10 within ~600 steps after a poisoned run of Table 1 row 2 has fitted,
and about as fast for Adam on the SSM + MLP), exactly as it amplifies the rounding differences
between two machines. So trajectories are compared step by step over a horizon short of that
(200 steps, where the measured gap stays below 1e-12) to 1e-10, and the stopping rule on a run
whose threshold crossing is clear.
"""

from dataclasses import replace

import numpy as np
import pytest

from lib.poisoning import dynamics as pdyn

TOL = 1e-10  # the agreement the compiled engine promises; the measured gap is below 1e-12 here
HORIZON = 200

SETTINGS = {
    "adaptive (Table 1 row 2)": pdyn.TABLE1_ROW2,
    "adaptive (Figure 2)": pdyn.FIGURE2_SSM,
    "adam keras + MLP (Table 1 row 3)": pdyn.TABLE1_ROW3,
    "adam torch + MLP": replace(pdyn.TABLE1_ROW3, adam_form="torch", adam_eps=1e-8),
    "gd": replace(pdyn.TABLE1_ROW2, optimizer="gd", lr_clean=0.01, lr_special=0.01),
}


def _both(setting, seeds, steps, record_every=1, scales=(None, 1.0)):
    kwargs = dict(special_scales=scales, max_steps=steps, record_every=record_every)
    torch_runs = pdyn.train_dynamics(setting, seeds, engine="torch", **kwargs)
    compiled_runs = pdyn.train_dynamics(setting, seeds, engine="compiled", **kwargs)
    return torch_runs.trajectory, compiled_runs.trajectory


@pytest.mark.parametrize("name", list(SETTINGS))
def test_compiled_trajectory_equals_torch_engine(name):
    reference, compiled = _both(SETTINGS[name], [0, 3], HORIZON)
    assert compiled.times.tolist() == reference.times.tolist()  # integer step indices
    for key in reference.params:
        assert compiled[key].shape == reference[key].shape
        np.testing.assert_allclose(compiled[key], reference[key], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(compiled.losses, reference.losses, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(compiled.step_sizes, reference.step_sizes, rtol=TOL)
    assert compiled.info == reference.info
    # the runs moved (a comparison of two frozen runs would prove nothing)
    assert np.abs(compiled["a"][-1] - compiled["a"][0]).max() > 1e-6


def test_compiled_stopping_rule_and_frozen_runs():
    """Runs that stop at different steps are frozen like gradient_descent freezes them."""
    setting = replace(pdyn.FIGURE2_SSM, extra_steps=50)
    reference, compiled = _both(setting, [0, 1], 3000, record_every=7)
    stops = reference.info["converged_step"]
    assert sum(s is not None for s in stops) >= 2  # the rule acted
    for r, step in enumerate(stops):
        if step is None:
            continue
        losses = pdyn.train_dynamics(
            setting, [r // 2], special_scales=[(None, 1.0)[r % 2]], max_steps=step + 1,
            engine="torch", record_every=1,
        ).trajectory.losses[:, 0]  # fmt: skip
        # the crossing is clear by far more than rounding (relative 1e-9), so the step is exact
        assert losses[step] <= setting.stop_loss * (1 - 1e-9)
        assert losses[step - 1] > setting.stop_loss * (1 + 1e-9)
    assert compiled.info == reference.info
    assert compiled.times.tolist() == reference.times.tolist()
    for r, last in enumerate(compiled.info["steps_run"]):
        tail = compiled.times >= last
        frozen = compiled["a"][tail, r]
        np.testing.assert_array_equal(frozen, np.broadcast_to(frozen[0], frozen.shape))  # own copy
        assert np.isnan(compiled.step_sizes[tail, r]).all()


def test_compiled_divergence_is_flagged():
    setting = replace(pdyn.TABLE1_ROW2, optimizer="gd", lr_clean=1e6, lr_special=1e-3)
    reference, compiled = _both(setting, [0], 500)
    assert compiled.info["diverged"] == reference.info["diverged"] == [True, False]
    assert compiled.info["steps_run"][0] < 500
    assert compiled.info == reference.info


def test_bad_engine_is_a_value_error():
    with pytest.raises(ValueError, match="engine"):
        pdyn.train_dynamics(pdyn.TABLE1_ROW2, [0], max_steps=2, engine="numba")
    with pytest.raises(ValueError, match="engine"):
        pdyn.train_dynamics(pdyn.TABLE1_ROW2, [0], max_steps=2, engine=None)
