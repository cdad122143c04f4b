"""The convert step as a lightweight KFP component: a thin wrapper over ``components.convert.core``."""

from typing import List

from kfp import dsl
from kfp.dsl import Dataset, Output


def convert(
    source: str,
    examples: Output[Dataset],
    image_size: int,
    validation_fraction: float,
    test_fraction: float,
    num_shards: int,
    max_bad_fraction: float,
    max_pixels: int,
    classes: List[str],
    source_fingerprint: str,
    beam_args: List[str],
    worker_image: str,
    modality: str,
    vocabulary_size: int,
    sequence_length: int,
    text_column: str,
    label_column: str,
) -> int:
    """Converts an image folder or manifest, or a text source (``modality`` auto: recognised; image; text), into
    sharded TFRecords; returns the number of examples written.

    ``source_fingerprint`` (from the fingerprint step) is part of KFP's cache key: a rerun over unchanged data is a
    cache hit, new or changed files make a new conversion. ``worker_image``: the Dataflow workers' image when
    ``beam_args`` name ``DataflowRunner`` and no ``--sdk_container_image`` of their own (the ``beam-worker`` image of
    the registry and tag the DAG was compiled for).
    """
    import logging

    from components.cli import start_step
    from components.convert.dispatch import convert_source
    from components.convert.staging import runs_locally, with_worker_image
    from components.modalities import modality_of

    start_step()
    beam_args = with_worker_image(beam_args or (), worker_image)
    # the local engine writes through KFP's /gcs mount (examples.path); a remote runner's workers (Dataflow) have
    # no such mount, so Beam gets the artifact's gs:// URI, and the stats are read back from there
    output_dir = examples.path if runs_locally(beam_args or ()) else examples.uri
    stats = convert_source(
        modality,
        dict(
            source=source,
            output_dir=output_dir,
            validation_fraction=validation_fraction,
            test_fraction=test_fraction,
            num_shards=num_shards,
            max_bad_fraction=max_bad_fraction,
            classes=tuple(classes),
            pipeline_args=tuple(beam_args or ()),
            image_size=image_size,
            max_pixels=max_pixels,
            vocabulary_size=vocabulary_size,
            sequence_length=sequence_length,
            text_column=text_column,
            label_column=label_column,
        ),
    )
    modality_of_examples = modality_of(stats)
    examples.metadata.update(
        {
            "modality": modality_of_examples.name,
            "counts": stats["counts"],
            "class_names": stats["class_names"],
            **modality_of_examples.input_facts(stats),
            "quarantined": stats["quarantined"],
            "duplicates": stats["duplicates"],
            "fingerprint": stats["fingerprint"],
        }
    )
    if source_fingerprint and source_fingerprint != stats["fingerprint"]:
        logging.getLogger(__name__).warning("the source changed between the fingerprint and convert steps")
    return stats["num_examples"]


def make_component(base_image: str):
    """The KFP component, running in ``base_image`` (which has this project and kfp installed)."""
    return dsl.component(convert, base_image=base_image, install_kfp_package=False)


def fingerprint(
    source: str,
    classes: List[str],
    run_id: str,
    modality: str,
    text_column: str,
    label_column: str,
) -> str:
    """The source's fingerprint (paths, sizes, modification times): feeds convert's cache key. Never cached itself:
    the DAG passes the run's id as ``run_id``, an input that changes on every run whatever the caching setting."""
    from components.cli import start_step
    from components.convert.fingerprint import fingerprint_source

    start_step()
    return fingerprint_source(source, tuple(classes), modality, text_column, label_column)


def make_fingerprint_component(base_image: str):
    """The fingerprint step, running in ``base_image``."""
    return dsl.component(fingerprint, base_image=base_image, install_kfp_package=False)
