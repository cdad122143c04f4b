"""The convert step as a lightweight KFP component: a thin wrapper over ``components.convert.core``."""

from typing import List

from kfp import dsl
from kfp.dsl import Dataset, Output


def convert(
    source: str,
    examples: Output[Dataset],
    image_size: int = 192,
    validation_fraction: float = 0.1,
    test_fraction: float = 0.1,
    num_shards: int = 0,
    max_bad_fraction: float = 0.01,
    max_pixels: int = 178_956_970,
    classes: List[str] = [],  # noqa: B006 (KFP reads the default; nothing mutates it)  # components.decoding.DEFAULT_MAX_PIXELS: KFP runs this source alone
    beam_args: List[str] = [],  # noqa: B006 (KFP reads the default; nothing mutates it)
) -> int:
    """Converts an image folder into sharded TFRecords; returns the number of examples written."""
    from components.cli import configure_logging
    from components.convert.core import ConvertConfig, run

    configure_logging()
    stats = run(
        ConvertConfig(
            source=source,
            output_dir=examples.path,
            image_size=image_size,
            validation_fraction=validation_fraction,
            test_fraction=test_fraction,
            num_shards=num_shards,
            max_bad_fraction=max_bad_fraction,
            max_pixels=max_pixels,
            classes=tuple(classes),
            pipeline_args=tuple(beam_args or ()),
        )
    )
    examples.metadata.update(
        {
            "counts": stats["counts"],
            "class_names": stats["class_names"],
            "image_size": stats["image_size"],
            "quarantined": stats["quarantined"],
        }
    )
    return stats["num_examples"]


def make_component(base_image: str):
    """The KFP component, running in ``base_image`` (which has this project and kfp installed)."""
    return dsl.component(convert, base_image=base_image, install_kfp_package=False)
