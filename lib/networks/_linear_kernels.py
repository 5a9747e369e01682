"""Compiled gradient descent for the bias-free networks of Elkabetz & Cohen 2021 (Part I).

The digits experiment of the paper's §6 trains a 64–32–32–10 network, linear or ReLU, by full-batch
gradient descent for up to 10⁴ steps per step size. Through
:func:`lib.engine.flow.gradient_descent`, even with the closed-form gradient
:func:`lib.networks.linear_nets.cross_entropy_gradient`, each step is a few dozen torch operations
and the engine's bookkeeping around them; at the paper's 1000 images that overhead costs more than
the arithmetic. Here the *whole* loop (forward pass, cross-entropy, backpropagation, update,
recording) is one function compiled by numba, whose matrix products call BLAS on one thread. The
arithmetic is that of :func:`lib.networks.linear_nets.cross_entropy_gradient`:

* logits Z = W_{n:1} Xᵀ (linear) or Z = W_n σ(⋯ σ(W_1 Xᵀ)) (ReLU), as columns, one per sample;
* ℓ = (1/N) Σ_i (log Σ_c e^{Z_ci} − Z_{y_i i}) and ∂ℓ/∂Z = (softmax(Z) − Y) / N;
* linear: ∇_{W_j} f = W_{n:j+1}ᵀ ∇φ(W_{n:1}) W_{j−1:1}ᵀ with ∇φ = (∂ℓ/∂Z) X;
  ReLU: ∂ℓ/∂W_l = δ_l h_{l−1}ᵀ, δ_{l−1} = (W_lᵀ δ_l) ⊙ 1[h_{l−1} > 0];

and the protocol is that of :func:`lib.engine.flow.gradient_descent` with ``optimizer="gd"``:
θ_{k+1} = θ_k − η ∇ℓ(θ_k), recorded at iteration 0, every ``record_every`` iterations and at the
last one, and stopped at the first non-finite loss or gradient. Only the order of floating-point
sums differs, so trajectories agree with the torch engine up to rounding (tested).

Its small helpers (the finiteness test, the recording buffers) repeat those of the other
compiled modules on purpose: numba's on-disk cache does not notice when a compiled function of
another file changes, so a cross-file call could run a stale copy.

:func:`_descent` releases the GIL, so independent runs can advance on several cores at once.

Nothing here is public: :func:`lib.networks.linear_nets.cross_entropy_descent` validates its
inputs and calls these compiled pieces.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__: list[str] = []  # internal kernels (see the module docstring)


@njit(cache=True, error_model="numpy")
def _layer(theta, bounds, shapes, j):
    """W_j as a (rows × columns) view of the flat parameter vector."""
    return theta[bounds[j] : bounds[j + 1]].reshape((shapes[j, 0], shapes[j, 1]))


@njit(cache=True, error_model="numpy")
def _cross_entropy_head(z, labels):
    """Mean cross-entropy of the logit columns z (classes × N); z becomes ∂ℓ/∂z in place.

    Row-wise passes over z (each a contiguous run of N numbers) so that the compiler vectorizes.
    """
    classes, n = z.shape
    top = z[0].copy()
    for c in range(1, classes):
        for i in range(n):
            top[i] = max(top[i], z[c, i])
    loss = 0.0
    for i in range(n):  # log Σ_c e^{z_ci} − z_{y_i i} = log total_i + top_i − z_{y_i i}
        loss += top[i] - z[labels[i], i]
    total = np.zeros(n)
    for c in range(classes):
        for i in range(n):
            e = math.exp(z[c, i] - top[i])
            z[c, i] = e
            total[i] += e
    for i in range(n):
        loss += math.log(total[i])
    for c in range(classes):
        for i in range(n):
            z[c, i] /= total[i] * n
    for i in range(n):
        z[labels[i], i] -= 1.0 / n
    return loss / n


@njit(cache=True, error_model="numpy")
def _linear_gradient(theta, grad, bounds, shapes, xt, x, labels):
    """ℓ(θ) and ∇ℓ(θ) into ``grad`` for the linear network, through W_{n:1} (eq. 10)."""
    depth = shapes.shape[0]
    below = [_layer(theta, bounds, shapes, 0).copy()]  # W_{j:1}
    for j in range(1, depth):
        below.append(_layer(theta, bounds, shapes, j) @ below[j - 1])
    z = below[depth - 1] @ xt
    loss = _cross_entropy_head(z, labels)
    above = z @ x  # ∇φ(W_{n:1}), then W_{n:j+1}ᵀ ∇φ
    for j in range(depth - 1, -1, -1):
        g = _layer(grad, bounds, shapes, j)
        if j > 0:
            g[:, :] = above @ below[j - 1].T
            above = _layer(theta, bounds, shapes, j).T @ above
        else:
            g[:, :] = above
    return loss


@njit(cache=True, error_model="numpy")
def _relu_gradient(theta, grad, bounds, shapes, xt, x, labels):
    """ℓ(θ) and ∇ℓ(θ) into ``grad`` for the ReLU network, by backpropagation (columns h_lᵀ)."""
    depth = shapes.shape[0]
    columns = [xt]  # h_0, …, h_{n−1}, one column per sample
    for j in range(depth - 1):
        a = _layer(theta, bounds, shapes, j) @ columns[j]
        columns.append(np.maximum(a, 0.0))
    delta = _layer(theta, bounds, shapes, depth - 1) @ columns[depth - 1]
    loss = _cross_entropy_head(delta, labels)
    for j in range(depth - 1, -1, -1):
        g = _layer(grad, bounds, shapes, j)
        if j > 0:
            g[:, :] = delta @ columns[j].T
            back = _layer(theta, bounds, shapes, j).T @ delta
            h = columns[j]
            for r in range(back.shape[0]):
                for i in range(back.shape[1]):
                    if h[r, i] <= 0.0:  # σ'(a) = 0 where h = σ(a) = 0, as autograd has it
                        back[r, i] = 0.0
            delta = back
        else:
            g[:, :] = delta @ x
    return loss


@njit(cache=True, error_model="numpy", nogil=True)
def _descent(theta0, bounds, shapes, xt, x, labels, relu, lr, steps, record_every):
    """The loop of gradient_descent(optimizer="gd"): the recorded iterations, states, losses,
    step sizes (the first ``count`` rows), the last step and the divergence flag."""
    size = theta0.shape[0]
    capacity = steps // record_every + 2
    times = np.empty(capacity, np.int64)
    states = np.empty((capacity, size))
    losses = np.empty(capacity)
    etas = np.empty(capacity)
    theta = theta0.copy()
    grad = np.empty(size)
    last = steps
    diverged = False
    count = 0
    for k in range(steps + 1):
        if relu:
            value = _relu_gradient(theta, grad, bounds, shapes, xt, x, labels)
        else:
            value = _linear_gradient(theta, grad, bounds, shapes, xt, x, labels)
        bad = not math.isfinite(value)
        for p in range(size):
            bad |= grad[p] - grad[p] != 0.0  # 0 exactly when finite
        if bad:
            diverged = True
            last = k
        if k >= last:
            times[count] = k
            states[count] = theta
            losses[count] = value
            etas[count] = np.nan
            count += 1
            break
        if k % record_every == 0:
            times[count] = k
            states[count] = theta
            losses[count] = value
            etas[count] = lr
            count += 1
        for p in range(size):
            theta[p] -= lr * grad[p]
    return times[:count], states[:count], losses[:count], etas[:count], last, diverged

