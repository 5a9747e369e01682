"""Cases of :mod:`lib.networks.conv_nets` for the bad-input fuzz (``cases()``, see
``tests/api_cases.py``).

A small network (4×4 images, two channels, one hidden layer) keeps every call cheap. The oracles
compare with PyTorch's own convolution (``torch.nn.functional.conv2d``) and with the explicit
matrices W_j(w_j) of the paper's eq. (28).
"""

from __future__ import annotations

import numpy as np
import torch
from api_cases import Arg, Case

from lib.networks import conv_nets

P = Arg  # short
SIDE = 4


def _reference_logits(params, x):
    """The adapted CNN by torch's conv2d (stride 2, padding k // 2), then the matrices."""
    weights = [torch.as_tensor(params[f"w{j}"], dtype=torch.float64)
               for j in range(1, len(params) + 1)]
    x = torch.as_tensor(np.asarray(x), dtype=torch.float64)
    side = int(round(x.shape[1] ** 0.5))
    hidden = x.reshape(-1, 1, side, side)
    for j, w in enumerate(weights):
        if w.ndim == 4:
            hidden = torch.nn.functional.conv2d(hidden, w, stride=2, padding=w.shape[-1] // 2)
        else:
            hidden = hidden.reshape(hidden.shape[0], -1) @ w.T
        if j < len(weights) - 1:
            hidden = torch.relu(hidden)
    return hidden


def _oracle_output(result, params, x):
    return torch.allclose(result, _reference_logits(params, x), rtol=1e-10, atol=1e-12)


def _oracle_loss(result, params, x, labels):
    logits = _reference_logits(params, x)
    expected = torch.nn.functional.cross_entropy(logits, torch.as_tensor(np.asarray(labels)))
    return torch.allclose(result, expected, rtol=1e-10, atol=1e-12)


def cases() -> list[Case]:
    net = conv_nets.cnn_init(0, side=SIDE, channels=(2,), hidden=(4,), classes=3)
    x = torch.linspace(-1, 1, 5 * SIDE * SIDE, dtype=torch.float64).reshape(5, SIDE * SIDE)
    labels = torch.tensor([0, 1, 2, 1, 0], dtype=torch.int64)
    return [
        Case("networks.conv_nets.cnn_init", conv_nets.cnn_init,
             [P("seed", 0, "int"), P("side", SIDE, "int", True), P("channels", [2], "seq", True),
              P("hidden", [4], "seq", True), P("classes", 3, "int", True),
              P("kernel", 3, "int", True)]),
        Case("networks.conv_nets.cnn_output", conv_nets.cnn_output,
             [P("params", net, "params"), P("x", x, "tensor")], oracle=_oracle_output),
        Case("networks.conv_nets.cnn_cross_entropy", conv_nets.cnn_cross_entropy,
             [P("params", net, "params"), P("x", x, "tensor"), P("labels", labels, "tensor")],
             oracle=_oracle_loss),
        Case("networks.conv_nets.layer_matrices", conv_nets.layer_matrices,
             [P("params", net, "params"), P("side", SIDE, "int")]),
        Case("networks.conv_nets.sharing_norms", conv_nets.sharing_norms,
             [P("params", net, "params"), P("side", SIDE, "int")]),
        Case("networks.conv_nets.lemma23_bound", conv_nets.lemma23_bound,
             [P("params", net, "params"), P("x", x, "tensor"), P("labels", labels, "tensor")]),
        Case("networks.conv_nets.norm_differences", conv_nets.norm_differences,
             [P("params", net, "params")]),
    ]
