"""``lib``: the library behind the book *Implicit Bias of Gradient Descent*.

Modules, by the part of the book that uses them:

- the engine: :mod:`lib.flow` (gradient flow and gradient descent), :mod:`lib.curvature`
  (Hessian-vector products, extreme eigenvalues);
- Part I: :mod:`lib.linear_nets`, :mod:`lib.relu_nets`, :mod:`lib.fast_nets` (their compiled
  gradient descent), :mod:`lib.conv_nets` (convolutional networks as weight-sharing networks),
  :mod:`lib.step_bounds` (the paper's step sizes, times and iteration counts as numbers),
  :mod:`lib.data` (scikit-learn's digits);
- Part II: :mod:`lib.ssm` (diagonal state space models), :mod:`lib.extrapolation` (linear RNNs,
  GRUs) and :mod:`lib.fast_extrapolation` (its compiled flows and Adam loops),
  :mod:`lib.extrapolation_protocols` (the paper's empirical and accumulating losses, schedules)
  and :mod:`lib.gru_students` (many small GRUs at once), :mod:`lib.poison` (Theorem 1) and
  :mod:`lib.poison_extensions` (its Appendix A), :mod:`lib.poison_dynamics` and
  :mod:`lib.fast_dynamics` (the Figure-2 / Table experiments and their compiled loop),
  :mod:`lib.authors_protocol` (the authors' training protocol, emulated),
  :mod:`lib.greedy_learning` and :mod:`lib.fast_greedy` (Figures 3-8: greedy learning of several
  entries), :mod:`lib.keras_streams` (the random numbers of the authors' Keras code),
  :mod:`lib.s4d`, :mod:`lib.s4d_ops` (its compiled layers), :mod:`lib.gradient_matching`
  (poisoning on real data, for any victim family) and :mod:`lib.mlp_victim` (the positive
  control's victim);
- Part III: :mod:`lib.tensor_nets` (linear tensor networks), :mod:`lib.tensor_directions` (limit
  directions beyond three architectures), :mod:`lib.saddles` (saddle-to-saddle dynamics),
  :mod:`lib.escape_dynamics` (from the training dynamics to escape directions) and
  :mod:`lib.fast_relu` (their compiled loops);
- around them: :mod:`lib.viz` (plots and interactive explorations), :mod:`lib.results`
  (committed long-run results), :mod:`lib.ledger` (every paper number the chapters reproduce,
  checked at every build), :mod:`lib.config` (the ``BOOK_SCALE`` / ``BOOK_MODE`` switches),
  :mod:`lib._checks` (input validation).
"""

import torch

from lib.config import torch_threads
from lib.flow import Trajectory, gradient_descent, gradient_flow
from lib.ssm import (
    SSM,
    baseline_and_special,
    characterization_coefficients,
    characterization_velocity,
    effective_rank,
    fit_impulse_response,
    generalization_error,
    impulse_response,
    ones_teacher,
    proposition3_student,
    random_sequences,
    square_loss,
    ssm_output,
    ssm_recurrence,
    theorem1_teacher,
    unit_impulse,
)

torch.set_num_threads(torch_threads())  # see lib.config: tiny models, shared cores

__all__ = [
    "SSM",
    "Trajectory",
    "baseline_and_special",
    "characterization_coefficients",
    "characterization_velocity",
    "effective_rank",
    "fit_impulse_response",
    "generalization_error",
    "gradient_descent",
    "gradient_flow",
    "impulse_response",
    "ones_teacher",
    "proposition3_student",
    "random_sequences",
    "square_loss",
    "ssm_output",
    "ssm_recurrence",
    "theorem1_teacher",
    "unit_impulse",
]
