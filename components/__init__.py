"""The pipeline's steps. Importing this package keeps two imports of the frameworks from loading what no step uses
through them: Keras imports scikit-learn, matplotlib and OpenCV whenever they are installed (for its scikit-learn
wrappers and plotting utilities), and TensorFlow and Keras on TensorFlow import JAX (for TFLite's converter from JAX
functions, and Keras's Orbax checkpoints). Together 2 to 4 seconds of each TensorFlow or Keras step's start on 2
cores (``bench/loop.py``). They stay importable as ever: evaluate's metrics import scikit-learn themselves, after
Keras, and training on JAX imports JAX."""

from __future__ import annotations

import importlib.abc
import sys

# the packages each module skips while it is being imported (it imports them in a ``try``, and goes on without them)
SKIPPED_WHILE = {
    "keras": ("sklearn", "matplotlib", "cv2"),
    "tensorflow.lite.python.util": ("jax",),
    "keras.src.callbacks.orbax_checkpoint": ("jax",),
}


class _ImportSkips(importlib.abc.MetaPathFinder):
    """Finds none of a module's ``SKIPPED_WHILE`` packages while that module itself is being imported; at any other
    time, leaves them to the other finders."""

    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        for module, skipped in SKIPPED_WHILE.items():
            if top in skipped and importing(module):
                raise ModuleNotFoundError(f"{name} is not loaded while {module} is imported", name=name)
        return None


def importing(module: str) -> bool:
    """Whether ``module`` is being imported now (loaded, its code not yet run to the end)."""
    loaded = sys.modules.get(module)
    return loaded is not None and getattr(getattr(loaded, "__spec__", None), "_initializing", False)


if not any(isinstance(finder, _ImportSkips) for finder in sys.meta_path):
    sys.meta_path.insert(0, _ImportSkips())
