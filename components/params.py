"""Every pipeline parameter, declared once: its default and what it means.

The step configs (``ConvertConfig``, ``TextConvertConfig``, ``TrainConfig``, ``EvaluateConfig``) take their defaults
from here, and check the values (one place per rule); the DAG's signature (``pipeline/dag.py``) takes its defaults
from here, and passes every value to its steps, whose KFP wrappers have no defaults of their own; the command lines
(each step's and ``run-local``'s) take their help from here. ``tests/test_parameters.py`` fails when a default literal
of a parameter named here appears anywhere else.

The choices of a parameter live beside the code that acts on them (``components.models.BUILTINS``,
``components.train.placement.PRECISIONS`` ...), and are read from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from components.imaging import AUTO_IMAGE_SIZE


@dataclass(frozen=True)
class Param:
    """A parameter's default, what it means (``help``, without the default), and the flag users type when it is
    not the parameter's name with dashes."""

    default: Any
    help: str
    flag: str = ""
    shown: str = ""  # the default as users write it, where that is not the value (image_size 0: auto)

    def auto_number(self) -> int | float | None:
        """The number that stands for ``auto``, where the help offers auto for a number (``epochs``: 0); else None."""
        return self.default if self.shown == "auto" and type(self.default) in (int, float) else None

    def help_with_default(self) -> str:
        shown = self.shown or (self.default if self.default not in ("", [], ()) else "none")
        return f"{self.help} (default {shown})"


def flag_of(name: str, params: dict[str, Param]) -> str:
    """The command-line flag of parameter ``name``: ``per_replica_batch_size`` -> ``--batch-size``."""
    param = params.get(name)
    return param.flag if param is not None and param.flag else "--" + name.replace("_", "-")


def auto_value(name: str) -> int | float | None:
    """The number that stands for ``auto`` in step parameter ``name`` (``epochs``: 0), where its help offers auto
    for a number; else None."""
    found = [table[name] for table in (CONVERT, TEXT, TRAIN, TUNE, EVALUATE, EXPORT, CHECK_DATA) if name in table]
    return found[0].auto_number() if found else None


def defaults(params: dict[str, Param]) -> dict[str, Any]:
    return {name: param.default for name, param in params.items()}


# the convert step, images and texts
CONVERT = {
    "image_size": Param(
        AUTO_IMAGE_SIZE,
        "square side of the converted images; auto (0 in the DAG): the source images' median shorter side, "
        "at most 192 and at least 16",
        shown="auto",
    ),
    "validation_fraction": Param(0.1, "share of the examples hashed into the validation split"),
    "test_fraction": Param(0.1, "share of the examples hashed into the test split"),
    "num_shards": Param(0, "TFRecord shards per split; 0: a count for shards of about 150 MB"),
    "max_bad_fraction": Param(0.01, "share of unreadable files quarantined before the conversion fails"),
    "classes": Param(
        (), "the class names in index order (keep it across retraining); empty: the sorted folder names or labels"
    ),
    "modality": Param(
        "auto",
        "what the source holds: auto (a .jsonl, folders of .txt files, or a .csv whose header names the text and "
        "label columns are texts; another .csv is an image manifest), image or text",
    ),
}
# the convert step, texts only
TEXT = {
    "vocabulary_size": Param(15_000, "ids in the vocabulary, padding and out-of-vocabulary included"),
    "sequence_length": Param(250, "token ids per text, cut or padded at the end"),
    "text_column": Param("text", "the text's column of a CSV or JSONL source"),
    "label_column": Param("label", "the label's column of a CSV or JSONL source"),
}
TRAIN = {
    "model_name": Param(
        "auto",
        "the model: a built-in one (python -m pipeline models), your own as FILE.py[:FUNCTION] (local or gs://) or "
        "MODULE:FUNCTION, a builder build(spec, **hparams) that returns a Keras model (docs/your-model.md); auto: the "
        "codelab convnet with batch norm for images, the bag of words, word pairs and subwords (ngrams) for texts",
        flag="--model",
    ),
    "hparams": Param(
        (),
        "the model's own hyperparameters as NAME=VALUE, the builder's keyword arguments (typed as their defaults)",
        flag="--hparam",
    ),
    "epochs": Param(
        0,
        "training epochs (a pretrained backbone's: those of its head, the backbone frozen); auto (0 in the DAG): 30 "
        "for an image model trained from scratch, 20 for a text model or a pretrained backbone's head",
        shown="auto",
    ),
    "weights": Param(
        "auto",
        "a backbone's pretrained weights: imagenet (downloaded at run time; on Vertex AI kept in the pipeline "
        "root's bucket), a file of them (local or gs://), or none (trained from scratch); auto: imagenet for the "
        "backbones, none for the others",
    ),
    "fine_tune_epochs": Param(10, "a pretrained backbone's second phase: epochs with its top blocks unfrozen"),
    "fine_tune_blocks": Param(3, "a pretrained backbone's blocks unfrozen for fine-tuning, from the top"),
    "fine_tune_learning_rate": Param(
        0.0, "Adam's learning rate while fine-tuning; 0: a tenth of the learning rate", shown="a tenth"
    ),
    "per_replica_batch_size": Param(
        32,
        "per-device batch size, rounded up to a multiple of 8; the global batch is this times the devices",
        flag="--batch-size",
    ),
    "learning_rate": Param(
        0.0,
        "Adam's learning rate, the peak with a schedule; auto (0): 0.001 for an image model trained from scratch, "
        "0.002 for a text model or a pretrained backbone's head",
        shown="auto",
    ),
    "lr_schedule": Param("constant", "the learning-rate schedule"),
    "precision": Param(
        "auto",
        "training precision; auto: bfloat16 where the hardware has it (TPUs, GPUs from "
        "compute capability 8.0, CPUs with AMX or AVX512-BF16), float32 elsewhere",
    ),
    "backend": Param(
        "auto", "Keras backend; auto: JAX on TPUs, elsewhere the one bench/train.py measured faster there"
    ),
    "jit_compile": Param(False, "compile TensorFlow's training step with XLA (JAX always does)"),
    "steps_per_execution": Param(
        1, "training steps per compiled call (the most up to it that divide an epoch's steps)"
    ),
    "augment": Param(False, "random flips, brightness and saturation of the training images (images only)"),
    "seed": Param(42, "the seed of the weights, the shuffles and the augmentation"),
}
# what epochs and learning_rate resolve to when left to auto (0), by what trains: an image model trained from scratch
# learns small real sets best at a lower rate over more epochs (bench/image_models.py); a text model and a pretrained
# backbone's head learn at these in fewer
AUTO_TRAINING = {
    "image model from scratch": {"epochs": 30, "learning_rate": 0.001},
    "text model or pretrained head": {"epochs": 20, "learning_rate": 0.002},
}


# hyperparameter tuning (components.train.tuning): learning rate, batch size, augmentation, fine-tuning depth
TUNE = {
    "tune_trials": Param(
        0,
        "hyperparameter search: trials over learning rate, batch size, augmentation, (with a pretrained backbone) "
        "fine-tuning depth and the ranges a model of your own declares (SEARCH_SPACE), each a whole training run; the "
        "best one's model goes on to evaluate (0: no search, train once)",
    ),
    "tune_parallel_trials": Param(1, "Vertex AI tuning job: trials run at once (run-local runs them one by one)"),
}
DEPLOY = {
    # the smallest general-purpose machine Vertex AI serves a TensorFlow CPU model on
    "machine_type": Param("n1-standard-2", "the serving machine"),
    "min_replicas": Param(1, "serving replicas at least"),
    "max_replicas": Param(1, "serving replicas at most (autoscaling between the two)"),
}
EVALUATE = {
    # the codelab's transfer-learning baseline on the flowers: a model below it is not worth serving
    "min_accuracy": Param(
        0.0,
        "bless (and so export) only at this test accuracy or more; 0: once the model beats always answering the most "
        "common test class by more than chance (99%% confidence)",
    ),
    "max_accuracy_drop": Param(0.0, "how much less accurate than the baseline still blesses"),
    "baseline": Param(
        "",
        "the model in service, evaluated on the same examples (a train or export step output, or the SavedModel "
        "folder the Model Registry holds; gs:// read through /gcs/): bless only if not worse than it",
    ),
}
EXPORT = {
    # every format of components.artifacts.exported.FORMATS (params is below the artifacts: the names are written out)
    "export_formats": Param(
        ("saved_model", "tflite_float", "tflite_int8"),
        "the formats exported: saved_model (always: serving, the export's checks and registration read it), "
        "tflite_float, tflite_int8; leaving out a TFLite file saves its conversion and scoring",
        flag="--formats",
        shown="saved_model,tflite_float,tflite_int8",
    ),
}
# the data checks between versions (components.check_data; its thresholds' defaults are in its THRESHOLDS)
CHECK_DATA = {
    "accept_data_change": Param(
        False, "train on a data version that fails a blocking data check, deliberately (the run records it)"
    ),
    "data_thresholds": Param(
        (), "data check thresholds as NAME=VALUE, e.g. class_mix_block=0.25 (python -m components.check_data --help)"
    ),
}
