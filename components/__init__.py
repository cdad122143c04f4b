"""The pipeline's steps. Importing this package keeps Keras's own import from loading scikit-learn, matplotlib and
OpenCV, which it imports whenever they are installed (for its scikit-learn wrappers and plotting utilities, which no
step uses): 1 to 3 seconds of each TensorFlow or Keras step's start on 2 cores (``bench/loop.py``). They stay
importable as ever: evaluate's metrics import scikit-learn themselves, after Keras."""

from __future__ import annotations

import importlib.abc
import sys

KERAS_SKIPS = ("sklearn", "matplotlib", "cv2")


class _KerasSkips(importlib.abc.MetaPathFinder):
    """Finds none of ``KERAS_SKIPS`` while the ``keras`` package itself is being imported (Keras imports them in a
    ``try``, and goes on without them); at any other time, leaves them to the other finders."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in KERAS_SKIPS and keras_importing():
            raise ModuleNotFoundError(f"{name} is not loaded while Keras is imported", name=name)
        return None


def keras_importing() -> bool:
    keras = sys.modules.get("keras")
    return keras is not None and getattr(getattr(keras, "__spec__", None), "_initializing", False)


if "keras" not in sys.modules and not any(isinstance(finder, _KerasSkips) for finder in sys.meta_path):
    sys.meta_path.insert(0, _KerasSkips())
