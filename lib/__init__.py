"""``lib``: the library behind the book *Implicit Bias of Gradient Descent*.

Modules: :mod:`lib.flow` (gradient flow and gradient descent), :mod:`lib.ssm` (diagonal state
space models), :mod:`lib.viz` (plots and interactive explorations), :mod:`lib.config` (the
``BOOK_SCALE`` / ``BOOK_MODE`` switches).
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
