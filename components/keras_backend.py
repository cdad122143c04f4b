"""Choosing the Keras backend of a process, which has to happen before Keras is first imported."""

from __future__ import annotations

import os
import sys

from components.cli import UsageError


def activate_backend(backend: str, env: dict | None = None) -> None:
    """Makes ``backend`` (``jax`` or ``tensorflow``) the Keras backend of this process. A process that already
    imported Keras keeps its backend, and a different one is a one-line error."""
    env = os.environ if env is None else env
    keras = sys.modules.get("keras")
    if keras is None:
        env["KERAS_BACKEND"] = backend
        return
    loaded = keras.backend.backend()
    if loaded != backend:
        raise UsageError(
            f"--backend {backend}: Keras was already imported with the {loaded} backend in this process; start a "
            "new one (the steps' entry points set KERAS_BACKEND themselves)"
        )
