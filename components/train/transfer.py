"""Transfer learning: a pretrained backbone (``components.models.BACKBONES``) under a new classifier, trained in two
phases, as keras-io's fine-tuning guide and TFX's examples do:

1. the head: the backbone frozen, the classifier trained at ``--learning-rate`` for ``--epochs``;
2. fine-tuning: the top ``--fine-tune-blocks`` blocks of the backbone unfrozen (their batch norm layers stay frozen,
   and the backbone runs in inference mode throughout, so its statistics stay those it learned), trained with the
   head at ``--fine-tune-learning-rate`` (a tenth of ``--learning-rate`` by default) for ``--fine-tune-epochs``.

The pretrained weights: ``imagenet`` (downloaded from the keras-applications bucket, as ``keras.applications``
downloads them, into ``--weights-cache``: a DAG run keeps them in the pipeline root's bucket, so that a schedule
downloads them once), a file (local or ``gs://``) of the backbone's weights, or ``none`` (the architecture trained
from scratch, in one phase).
"""

from __future__ import annotations

import logging
import math
import os
import tempfile

from components.cli import UsageError
from components.models import BACKBONES, backbone_blocks, backbone_of

log = logging.getLogger(__name__)

DEFAULT_WEIGHTS = {True: "imagenet", False: "none"}  # auto: by whether the model has a pretrained backbone
WEIGHTS_CACHE_FOLDER = "keras-weights"  # in the pipeline root's bucket


def weights_cache_for(model_uri: str) -> str:
    """Where a DAG run keeps ImageNet weights: ``gs://<the bucket of the model's URI>/keras-weights`` (the pipeline
    root's bucket, outside the runs' folders, so that every scheduled run finds them), or Keras's own cache (``""``,
    in the home folder, which a local machine keeps between runs) for a local run."""
    if not model_uri.startswith("gs://"):
        return ""
    return f"gs://{model_uri[len('gs://') :].split('/', 1)[0]}/{WEIGHTS_CACHE_FOLDER}"


def resolve_weights_choice(weights: str, model_name: str) -> str:
    """``auto`` made ``imagenet`` for a backbone, ``none`` for the others; a one-line error for pretrained weights
    asked of a model that has no backbone."""
    pretrained = model_name in BACKBONES
    if weights == "auto":
        return DEFAULT_WEIGHTS[pretrained]
    if not pretrained and weights != "none":
        raise UsageError(
            f"--weights {weights}: {model_name} is trained from scratch; pretrained weights go with "
            f"the backbones: {', '.join(BACKBONES)}"
        )
    return weights


def weights_file(weights: str, model_name: str, cache_dir: str) -> str | None:
    """The local file of the backbone's pretrained weights (None for ``none``): ImageNet's, downloaded into
    ``cache_dir`` (or found there), or a local or ``gs://`` file. A one-line error when they cannot be had."""
    if weights == "none":
        return None
    if weights == "imagenet":
        return download_imagenet(model_name, cache_dir)
    from components.storage import copy, exists

    if not exists(weights):
        raise UsageError(
            f"--weights {weights}: no such file; give the backbone's weights (a .weights.h5 file that "
            "Keras's save_weights wrote, or keras-applications' .h5), imagenet or none"
        )
    if "://" not in weights:
        return weights
    local = os.path.join(tempfile.mkdtemp(prefix="weights-"), os.path.basename(weights))
    copy(weights, local)
    return local


def download_imagenet(model_name: str, cache_dir: str) -> str:
    """The backbone's ImageNet weights (no classifier), from ``cache_dir`` if a run put them there, else downloaded
    there (checked against keras-applications' MD5 hash); ``cache_dir`` empty: Keras's own cache (``~/.keras``)."""
    import keras

    origin, md5 = BACKBONES[model_name].imagenet
    name = origin.rsplit("/", 1)[1]
    local_cache, remote = cache_dir, "://" in cache_dir
    if remote:  # gs://: a local copy for Keras, then the file kept beside the pipeline root's other outputs
        from components.storage import copy, exists

        local_cache = tempfile.mkdtemp(prefix="keras-weights-")
        kept = f"{cache_dir.rstrip('/')}/{name}"
        if exists(kept):
            os.makedirs(os.path.join(local_cache, "models"))
            copy(kept, os.path.join(local_cache, "models", name))
    try:
        path = keras.utils.get_file(name, origin, file_hash=md5, cache_subdir="models", cache_dir=local_cache or None)
    except Exception as error:  # (urllib's URLError, HTTPError, a hash mismatch: get_file raises them as they are)
        cause = " ".join(str(error).split()) or type(error).__name__
        raise UsageError(
            f"--weights imagenet: the ImageNet weights of {model_name} could not be downloaded from "
            f"{origin} ({cause}): download that file where the network allows and pass "
            "--weights PATH (local or gs://), or --weights none"
        ) from None
    if remote and not exists(kept):
        from components.storage import read_bytes, write_atomically

        write_atomically(kept, read_bytes(path))
        log.info("kept the ImageNet weights of %s in %s for later runs", model_name, kept)
    return path


def load_backbone_weights(model, path: str) -> None:
    """Loads the weights at ``path`` into ``model``'s backbone; a one-line error when they are another network's."""
    try:
        backbone_of(model).load_weights(path)
    except (ValueError, KeyError, OSError) as error:
        cause = " ".join(str(error).split())[:300]
        raise UsageError(
            f"--weights {path}: not the weights of {model.name}'s backbone at this image size ({cause})"
        ) from None


def freeze_backbone(model) -> None:
    """Phase 1: nothing of the backbone trains."""
    backbone_of(model).trainable = False


def unfreeze_top(model, blocks: int) -> int:
    """Phase 2: the top ``blocks`` blocks of the backbone train, but not their batch norm layers; returns how many of
    the backbone's weights now train."""
    import keras

    backbone = backbone_of(model)
    backbone.trainable = True
    all_blocks = backbone_blocks(model)
    top = all_blocks[len(all_blocks) - min(blocks, len(all_blocks)) :] if blocks > 0 else []
    unfrozen = {id(layer) for block in top for layer in block}
    for layer in backbone.layers:
        layer.trainable = id(layer) in unfrozen and not isinstance(layer, keras.layers.BatchNormalization)
    return sum(math.prod(weight.shape) for weight in backbone.trainable_weights)
