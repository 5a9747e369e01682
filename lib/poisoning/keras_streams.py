"""The random numbers of the authors' Keras code, rebuilt: their seeds, their initializations.

The experiments of Slutzky et al. (2025) ran in Keras (TensorFlow 2.4). Every weight of their models
comes from ``keras.initializers.RandomNormal(stddev=sd, seed=seed)``, which draws through
TensorFlow's **stateless** normal generator with the seed pair ``(seed, 0)``. That generator is a
published algorithm, so its numbers can be rebuilt without TensorFlow:

1. **Philox4x32-10** (Salmon et al., *Parallel random numbers: as easy as 1, 2, 3*, SC 2011), a
   counter-based generator: a 128-bit counter and a 64-bit key go through ten rounds of

   ``(c0, c1, c2, c3) -> (hi(M1·c2) ^ c1 ^ k0, lo(M1·c2), hi(M0·c0) ^ c3 ^ k1, lo(M0·c0))``,

   with the key bumped by the Weyl constants (W0, W1) between rounds; every call gives four
   32-bit words, and the counter then steps by one (:func:`philox4x32`).
2. **The seed scramble** of TensorFlow's stateless kernels: the counter ``(s0, 0, s1, 0)`` under
   the key ``(0x3ec8f720, 0x02461e29)`` gives four words ``m``; the generator then starts from the
   key ``(m0, m1)`` and the counter ``(0, 0, m2, m3)``.
3. **Box–Muller in float32**: each pair of words ``(x0, x1)`` becomes a uniform pair
   ``u = mantissa / 2^23`` in [0, 1) (``u1`` clamped below at 1e-7), then
   ``sqrt(−2 ln u1)·(sin 2πu2, cos 2πu2)``, all in float32 (:func:`stateless_normal`).

The same seed gives the same stream for every shape (output ``i`` comes from call ``i // 4``), so
two layers initialized with the same seed share their leading numbers: the authors' recurrent
matrix A (d × d), input vector B (1 × d) and output vector C (d × 1) are all cut from one stream,
B and C from its same first d numbers. :mod:`lib.poisoning.greedy_learning` builds the authors'
initializations from these streams and checks them against the values their notebooks print.

Their training data come from numpy's legacy global generator (``np.random.seed(seed)``), which
``numpy.random.RandomState(seed)`` reproduces exactly.
"""

from __future__ import annotations

import numpy as np

from lib.engine.validation import MAX_ENTRIES, as_int, as_seed

PHILOX_M = (0xD2511F53, 0xCD9E8D57)
"""Philox4x32's two round multipliers (Salmon et al. 2011)."""
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
"""Philox4x32's key increments (the golden ratio and √3 − 1, as 32-bit fractions)."""
TF_SEED_KEY = (0x3EC8F720, 0x02461E29)
"""The key under which TensorFlow's stateless kernels scramble a user's seed pair."""

_MASK = 0xFFFFFFFF


def _as_words(values, name: str, count: int) -> tuple[int, ...]:
    if not isinstance(values, (tuple, list)) or len(values) != count:
        raise ValueError(f"{name} must be a tuple of {count} 32-bit words, got {values!r:.60}")
    return tuple(as_int(v, f"{name}[{i}]", minimum=0, maximum=_MASK) for i, v in enumerate(values))


def _philox(counter: tuple[int, ...], key: tuple[int, ...]) -> tuple[int, int, int, int]:
    """Ten Philox4x32 rounds (no checks: internal callers pass 32-bit words)."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0, p1 = PHILOX_M[0] * c0, PHILOX_M[1] * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & _MASK, (p0 >> 32) ^ c3 ^ k1, p0 & _MASK)
        k0, k1 = (k0 + PHILOX_W[0]) & _MASK, (k1 + PHILOX_W[1]) & _MASK
    return c0, c1, c2, c3


def philox4x32(counter, key) -> tuple[int, int, int, int]:
    """The Philox4x32-10 block function: four 32-bit words from a counter and a key.

    ``counter``: four words (c0 the lowest), ``key``: two words, each an integer in [0, 2³² − 1].
    The known-answer vectors of Random123 (the reference implementation) are in the unit tests.
    """
    return _philox(_as_words(counter, "counter", 4), _as_words(key, "key", 2))


def _uniform(word: int) -> np.float32:
    """TensorFlow's uint32 → float in [0, 1): the low 23 bits as the mantissa of a float in [1, 2),
    minus 1 (exact in float32)."""
    bits = np.array([(127 << 23) | (word & 0x7FFFFF)], dtype=np.uint32)
    return bits.view(np.float32)[0] - np.float32(1.0)


def stateless_normal(count: int, seed: int) -> np.ndarray:
    """``count`` N(0, 1) numbers (float32) of TensorFlow's stateless normal with seeds (seed, 0).

    This is the stream of ``keras.initializers.RandomNormal(seed=seed)``: a weight of shape S with
    standard deviation sd is ``np.float32(sd) * stateless_normal(prod(S), seed).reshape(S)``
    (row-major). See the module docstring for the algorithm.
    """
    count = as_int(count, "count", minimum=0, maximum=MAX_ENTRIES)
    seed = as_seed(seed)
    mixed = _philox((seed & _MASK, seed >> 32, 0, 0), TF_SEED_KEY)
    key, counter = (mixed[0], mixed[1]), [0, 0, mixed[2], mixed[3]]
    two_pi, floor = np.float32(2.0 * np.pi), np.float32(1e-7)
    out = np.empty(count + 3, dtype=np.float32)
    for start in range(0, count, 4):
        words = _philox(tuple(counter), key)
        for i in (0, 2):
            u1 = max(_uniform(words[i]), floor)
            angle = two_pi * _uniform(words[i + 1])
            radius = np.sqrt(np.float32(-2.0) * np.log(u1))
            out[start + i] = np.sin(angle) * radius
            out[start + i + 1] = np.cos(angle) * radius
        for j in range(4):  # the 128-bit counter steps by one
            counter[j] = (counter[j] + 1) & _MASK
            if counter[j]:
                break
    return out[:count]
