"""The engine every part runs on: gradient flow and descent (:mod:`lib.engine.flow`), curvature,
the ``BOOK_SCALE`` / ``BOOK_MODE`` switches (config), input validation (validation) and the
losses several parts share (losses)."""
