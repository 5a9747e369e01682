"""``lib``: the library behind the book *Implicit Bias of Gradient Descent*.

Five folders, one per part of the book: :mod:`lib.engine` (gradient flow and descent, curvature,
configuration, validation, shared losses), :mod:`lib.ssm` (diagonal SSMs, S4D, extrapolation),
:mod:`lib.poisoning` (Theorem 1 and the poisoning experiments), :mod:`lib.networks` (the linear,
ReLU, convolutional and tensor networks of Parts I and III) and :mod:`lib.book` (plots, typesetting,
the ledger, results, data). Modules whose names start with an underscore are internal.
"""

import torch

from lib.engine.config import torch_threads
from lib.engine.flow import Trajectory, gradient_descent, gradient_flow
from lib.ssm.diagonal import (
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

torch.set_num_threads(torch_threads())  # see lib.engine.config: tiny models, shared cores

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
