"""What a local run is, before anything runs: its source (the demo's or the user's), its registry, its
parameters and their resume key, and the model spec known before the conversion (for the model's up-front check)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from components.imaging import AUTO_IMAGE_SIZE
from pipeline.local.config import DEMO_EPOCHS, MODEL_CHECK_LOG, LocalRunConfig


def check_registry(registry: str) -> str:
    """The folder registry as an absolute path, checked before anything runs (a one-line error for a file, a folder
    that is not a registry, or a cloud path: the local run's evaluate reads the baseline from this machine)."""
    from components.artifacts.registry import FolderRegistry
    from components.cli import UsageError
    from components.storage import check_writable

    if "://" in registry:
        raise UsageError(f"--registry {registry}: a local run keeps its registry in a local folder; pass a path")
    FolderRegistry(registry).default()
    check_writable(registry, "--registry")
    return os.path.abspath(registry)


@dataclass(frozen=True)
class RunIdentity:
    """What makes a local run the run it is: the source it reads, the data's fingerprint, the folder registry, the
    DAG's parameters, and their ``key`` (``resume.run_key``): an interrupted run resumes only under the same
    key, so new or changed images start over."""

    source: str
    fingerprint: str
    registry: str
    parameters: dict
    key: str


def run_identity(config: LocalRunConfig) -> RunIdentity:
    """The run's source (checked), fingerprint, registry and DAG parameters, and the key they make."""
    import pipeline.local.resume as resume
    from pipeline.model_code import checked_and_pinned

    source, fingerprint = resolve_source(config)
    registry = check_registry(config.registry) if config.registry else ""
    epochs = DEMO_EPOCHS if config.epochs is None and not config.source else config.epochs  # (0: auto)
    parameters = {
        "source": source,
        "image_size": given_image_size(config),
        **({"epochs": epochs} if epochs is not None else {}),
        **({"beam_args": list(config.beam_args)} if config.beam_args else {}),
        **({"model_root": registry} if registry else {}),
        **config.parameters,
    }
    # a model of one's own, checked for this data and pinned in the work dir: an edited file is another run
    work_dir = os.path.abspath(config.work_dir)
    parameters = checked_and_pinned(
        parameters,
        work_dir,
        provisional_spec(source, parameters, not config.source),
        os.path.join(work_dir, MODEL_CHECK_LOG),
    )
    key = resume.run_key(parameters, fingerprint, registry, config.cache)
    return RunIdentity(source, fingerprint, registry, parameters, key)


def given_image_size(config: LocalRunConfig) -> int:
    """The ``image_size`` parameter: the one given, else auto; for the demo, the least a built-in model takes where
    that is more than the digits' own size (a pretrained backbone's 32 px), which auto would give it."""
    from components.demo_data import DEFAULT_SIZE
    from components.models import BUILTINS

    if config.image_size is not None:
        return config.image_size
    builtin = BUILTINS.get(config.parameters.get("model_name", ""))
    if config.source or builtin is None or builtin.min_image_size <= DEFAULT_SIZE:
        return AUTO_IMAGE_SIZE
    return builtin.min_image_size


def provisional_spec(source: str, parameters: dict, demo: bool):
    """What the model will be given, as far as it is known before the conversion: the source's classes, the image
    size given (auto: the demo's, else the largest that auto takes) or the texts' length and vocabulary; None for
    TFRecords, whose classes only their conversion reads."""
    from components.convert.config import listed_classes
    from components.demo_data import DEFAULT_SIZE
    from components.imaging import MAX_AUTO_IMAGE_SIZE
    from components.modalities import named
    from components.params import CONVERT, TEXT

    given = {**{name: param.default for name, param in {**CONVERT, **TEXT}.items()}, **parameters}
    text = {name: given[name] for name in ("text_column", "label_column")}
    listed = listed_classes(source, given["classes"] or (), given["modality"], **text)
    if listed is None:
        return None
    modality, names = named(listed[0]), listed[1]
    modality.check_augment(bool(given.get("augment")))
    size = given["image_size"] or (DEFAULT_SIZE if demo else MAX_AUTO_IMAGE_SIZE)
    return modality.spec({**given, "image_size": size, "num_classes": len(names), "class_names": names})


def resolve_source(config: LocalRunConfig) -> tuple[str, str]:
    """The source the DAG reads, and its fingerprint: the user's (absolute), checked as the fingerprint step will
    check it, so that a wrong path fails in one line before anything is written; or the demo digits, written under
    the work dir."""
    from components.convert.config import fingerprint_source
    from components.demo_data import write_digits

    if not config.source:
        source = os.path.join(os.path.abspath(config.work_dir), "data", "digits")
        write_digits(source, per_class_limit=config.demo_per_class)
    else:
        source = os.path.abspath(config.source) if "://" not in config.source else config.source
    text = {
        name: config.parameters[name]
        for name in ("modality", "text_column", "label_column")
        if name in config.parameters
    }
    return source, fingerprint_source(source, config.parameters.get("classes") or (), **text)
