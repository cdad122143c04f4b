"""What the image and the text conversions share: the split of an example by a hash of its bytes, the
de-duplication, the quarantine and duplicates records, the shards' writing, the counts, and the checks of the
options and the output folder."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from components.cli import UsageError
from components.schema import (
    FAILED_FILE,
    QUARANTINE_FILE,
    SHARD_SUFFIX,
    SMALL_CLASS_EXAMPLES,
    SPLITS,
    small_classes,
)
from components.storage import write_atomically

log = logging.getLogger(__name__)


DUPLICATES_FILE = "duplicates.jsonl"
QUARANTINE_TAG = "quarantine"
DUPLICATE_TAG = "duplicate"


def check_split_options(config, items: str) -> None:
    """The fractions and the shard count a conversion config shares (images or texts): one-line errors."""
    for name in ("validation_fraction", "test_fraction", "max_bad_fraction"):
        value = getattr(config, name)
        if not 0.0 <= value < 1.0:
            raise UsageError(f"--{name.replace('_', '-')} {value} is out of range: use a fraction in [0, 1)")
    if config.validation_fraction + config.test_fraction >= 1.0:
        raise UsageError(f"--validation-fraction plus --test-fraction must leave some {items} for training (< 1)")
    if config.num_shards < 0:
        raise UsageError(f"--num-shards {config.num_shards} is negative: use 0 (automatic) or a positive count")


def check_beam_args(args: Sequence[str], own_flags: Sequence[str] = ()) -> None:
    """Options are passed to Beam only when some Beam pipeline option (of any runner) takes them: Beam itself would
    only log "Unparseable argument" and go on with its defaults, so a mistyped flag of ours would be silently lost.
    A one-line error names the first unknown one and the closest known option, ours (``own_flags``) or Beam's."""
    import difflib

    from apache_beam.options.pipeline_options import _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    for option_class in {str(c): c for c in PipelineOptions.__subclasses__()}.values():
        option_class._add_argparse_args(parser)
    _, unknown = parser.parse_known_args(list(args))
    for arg in unknown:
        if not arg.startswith("-"):
            continue
        name = arg.split("=", 1)[0]
        if name in own_flags:
            raise UsageError(f"{name} is not a Beam pipeline option: pass it as an option of its own, not to Beam")
        known = [*own_flags, *(option for action in parser._actions for option in action.option_strings)]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f", did you mean {close[0]}?" if close else ": see --help, and Beam's pipeline options"
        raise UsageError(f"unknown option {name}{hint}")


class ConversionError(RuntimeError):
    """The conversion ran but its result cannot be trusted (too many bad images)."""


def content_digest(content: bytes) -> bytes:
    return hashlib.sha256(content).digest()


def split_for_digest(digest: bytes, validation_fraction: float, test_fraction: float) -> str:
    bucket = int.from_bytes(digest[:8], "big") / 2.0**64
    if bucket < test_fraction:
        return "test"
    if bucket < test_fraction + validation_fraction:
        return "validation"
    return "train"


def check_output_is_empty(output_dir: str) -> None:
    """The output must hold exactly what this conversion writes: a folder that already holds files (an earlier
    conversion's shards, say) is refused in one line, before anything is read or written. A failed conversion's
    folder (``FAILED_FILE``) is taken over: emptied first."""
    from components.storage import exists

    if exists(f"{output_dir.rstrip('/')}/{FAILED_FILE}"):
        log.info("--output %s holds a conversion that failed: removing what it wrote, to convert again", output_dir)
        remove_tree(output_dir)
    if "://" not in output_dir:
        if os.path.isfile(output_dir):
            raise UsageError(f"--output {output_dir} is a file: pass a new or empty folder")
        found = os.path.isdir(output_dir) and any(os.scandir(output_dir))
    else:
        found = bool(FileSystems.match([output_dir.rstrip("/") + "/**"], limits=[1])[0].metadata_list)
    if found:
        raise UsageError(
            f"--output {output_dir} already holds files (an earlier conversion?): pass a new or empty folder, or "
            "remove it first; its shards would otherwise mix with this conversion's"
        )


def remove_tree(folder: str) -> None:
    """Everything under ``folder`` (local or any Beam filesystem)."""
    import shutil

    if "://" not in folder:
        shutil.rmtree(folder, ignore_errors=True)
        return
    (result,) = FileSystems.match([folder.rstrip("/") + "/**"])
    if result.metadata_list:
        FileSystems.delete([meta.path for meta in result.metadata_list])


@contextlib.contextmanager
def marked_if_it_fails(output_dir: str):
    """A conversion that fails (a crash, too many bad files, an interruption) once it has written into
    ``output_dir`` leaves ``FAILED_FILE`` there with its reason: the later steps refuse that folder, and the next
    conversion into it takes it over."""
    from components.cli import one_line
    from components.storage import write_json

    try:
        yield
    except BaseException as err:
        written = (os.path.isdir(output_dir) and any(os.scandir(output_dir))) if "://" not in output_dir else True
        if written:
            failure = {"reason": one_line(err, with_type=True), "failed_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
            write_json(f"{output_dir.rstrip('/')}/{FAILED_FILE}", failure)
        raise


class KeepFirstCopy(beam.DoFn):
    """Byte-identical images are kept once (the first path in order), so that no image is in two splits or twice
    in one; the others are listed as duplicates, with a flag when their folder says another class. The kept example
    goes to its split: the manifest's ``ML_USE`` when given, else the one the content hash picks."""

    def __init__(self, validation_fraction: float, test_fraction: float):
        self._fractions = (validation_fraction, test_fraction)

    def process(self, element):
        digest, copies = element
        copies = sorted(copies, key=lambda copy: copy[0])
        kept_path, kept_class, source_split, example = copies[0]
        for path, class_index, _, _ in copies[1:]:
            record = {"path": path, "duplicate_of": kept_path}
            if class_index != kept_class:
                record["label_conflict"] = True
            yield beam.pvalue.TaggedOutput(DUPLICATE_TAG, record)
        split = source_split or split_for_digest(digest, *self._fractions)
        yield beam.pvalue.TaggedOutput(split, (kept_class, example))


def count_key(element, split: str):
    class_index, _ = element
    return (split, class_index)


@beam.ptransform_fn
def WriteSplit(pcoll, output_dir: str, split: str, num_shards: int):  # noqa: N802 (a PTransform's name)
    """(class index, serialized example) -> ``<dir>/<split>/<split>-SSSSS-of-NNNNN.tfrec``."""
    return (
        pcoll
        | "Payload" >> beam.Map(lambda element: element[1])
        | "Shards"
        >> beam.io.WriteToTFRecord(
            f"{output_dir}/{split}/{split}", file_name_suffix=SHARD_SUFFIX, num_shards=num_shards
        )
    )


def write_records(output_dir: str, quarantine: list[dict], duplicates: list[dict]) -> None:
    """``quarantine.jsonl`` and ``duplicates.jsonl``, a record a line in path order (each written atomically)."""
    for name, records in ((QUARANTINE_FILE, quarantine), (DUPLICATES_FILE, duplicates)):
        lines = "".join(
            json.dumps(record, sort_keys=True) + "\n" for record in sorted(records, key=lambda r: r["path"])
        )
        write_atomically(f"{output_dir}/{name}", lines.encode())


def summarize_counts(counts: Iterable[tuple[tuple[str, int], int]], class_names: Sequence[str]) -> dict:
    """Counts per split and per class (by name), from ``((split, class_index), count)`` pairs."""
    per_class = {split: {name: 0 for name in class_names} for split in SPLITS}
    for (split, class_index), count in counts:
        per_class[split][class_names[class_index]] += count
    per_split = {split: sum(per_class[split].values()) for split in SPLITS}
    return {
        "class_names": list(class_names),
        "num_classes": len(class_names),
        "counts": per_split,
        "per_class": per_class,
        "small_classes": small_classes(per_class),
        "num_examples": sum(per_split.values()),
    }


def warn_small_classes(stats: dict) -> None:
    items = "texts" if stats.get("modality") == "text" else "images"
    for split, names in stats.get("small_classes", {}).items():
        log.warning(
            "few %s examples (under %d) for class %s: its %s figures will say little; add %s or change the split "
            "fractions", split, SMALL_CLASS_EXAMPLES, ", ".join(f"{name} ({count})" for name, count in names.items()),
            split, items,
        )  # fmt: skip
