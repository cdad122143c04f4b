"""What the image and the text conversions share: the split of an example by a hash of its split key, the
de-duplication, the quarantine and duplicates records, the shards' writing, the counts, and the checks of the
options and the output folder."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterable, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from components.cli import UsageError
from components.modalities import modality_of
from components.schema import (
    FAILED_FILE,
    QUARANTINE_FILE,
    SHARD_SUFFIX,
    SMALL_CLASS_EXAMPLES,
    SPLITS,
    record_bytes,
    small_classes,
)
from components.storage import write_atomically

log = logging.getLogger(__name__)


DUPLICATES_FILE = "duplicates.jsonl"
QUARANTINE_TAG = "quarantine"
DUPLICATE_TAG = "duplicate"


class ConversionError(RuntimeError):
    """The conversion ran but its result cannot be trusted (too many bad images)."""


def split_for_digest(digest: bytes, validation_fraction: float, test_fraction: float) -> str:
    bucket = int.from_bytes(digest[:8], "big") / 2.0**64
    if bucket < test_fraction:
        return "test"
    if bucket < test_fraction + validation_fraction:
        return "validation"
    return "train"


def bound_beam_storage_retries() -> None:
    """Every Cloud Storage call of this process, the client's and Beam's (its GCS filesystem's throttling retry, a
    shared object read at each call), retried for ``storage_deadline()`` seconds at most."""
    from apache_beam.io.gcp import gcsio_retry

    from components.cli import storage_deadline
    from components.storage import bound_storage_retries

    bound_storage_retries()
    gcsio_retry.DEFAULT_RETRY_WITH_THROTTLING_COUNTER._timeout = storage_deadline()


def check_output_is_empty(output_dir: str) -> None:
    """The output must hold exactly what this conversion writes: a folder that already holds files (an earlier
    conversion's shards, say) is refused in one line, before anything is read or written. A failed conversion's
    folder (``FAILED_FILE``) is taken over: emptied first."""
    from components.storage import exists, remove_tree

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
            marker = f"{output_dir.rstrip('/')}/{FAILED_FILE}"
            try:
                write_json(marker, failure)
            except Exception:  # (a full disk, an outage): the error raised stays the first one
                with contextlib.suppress(OSError):
                    if "://" not in marker:  # an empty marker takes no space
                        open(marker, "wb").close()
        if isinstance(err, RuntimeError) and str(err).startswith("KeyboardInterrupt"):
            # Beam re-raises an interruption (Ctrl-C) in a step as a RuntimeError: it is an interruption again
            raise KeyboardInterrupt() from err
        raise


def duplicates_of(copies: Sequence[tuple[str, int]]) -> list[dict]:
    """Of byte-identical copies, (path, class index) each, in path order: the duplicates records of all but the first,
    which is kept, flagged when their folder says another class."""
    kept_path, kept_class = copies[0]
    records = []
    for path, class_index in copies[1:]:
        record = {"path": path, "duplicate_of": kept_path}
        if class_index != kept_class:
            record["label_conflict"] = True
        records.append(record)
    return records


class KeepFirstCopy(beam.DoFn):
    """Copies (byte-identical images; texts the same once standardised) are kept once (the first path in order), so
    that no example is in two splits or twice in one; the others are listed as duplicates, with a flag when their
    folder says another class. The kept example goes to its split: the manifest's ``ML_USE`` when given, else the
    one its split key's hash picks (``components.convert.split_keys``)."""

    def __init__(self, validation_fraction: float, test_fraction: float):
        self._fractions = (validation_fraction, test_fraction)

    def process(self, element):
        _, copies = element
        copies = sorted(copies, key=lambda copy: copy[0])
        for record in duplicates_of([(path, class_index) for path, class_index, *_ in copies]):
            yield beam.pvalue.TaggedOutput(DUPLICATE_TAG, record)
        _, kept_class, source_split, example, key = copies[0]
        split = source_split or split_for_digest(key, *self._fractions)
        yield beam.pvalue.TaggedOutput(split, (kept_class, example))


def shard_path(output_dir: str, split: str, shard: int, num_shards: int) -> str:
    """``<dir>/<split>/<split>-SSSSS-of-NNNNN.tfrec``, the names Beam's own TFRecord writer gives."""
    return f"{output_dir}/{split}/{split}-{shard:05d}-of-{num_shards:05d}{SHARD_SUFFIX}"


def shard_key(element, split: str, num_shards: int):
    """(class index, serialized example) -> ((split, shard), (CRC-32C, class index, example)). The shard comes from
    the example's CRC-32C, which its record stores anyway: every rerun writes an example to the same shard."""
    import google_crc32c

    class_index, example = element
    crc = google_crc32c.value(example)
    return (split, crc % num_shards), (crc, class_index, example)


class WriteShard(beam.DoFn):
    """((split, shard), its examples) -> one shard, written whole under a temporary name then renamed (a reader, or
    a retried bundle, never sees half a shard) -> (split, shard, {class index: examples})."""

    def __init__(self, output_dir: str, shards: dict[str, int]):
        self._output_dir = output_dir
        self._shards = dict(shards)

    def process(self, element):
        (split, shard), records = element
        yield split, shard, self._write(split, shard, records)

    def _write(self, split: str, shard: int, records) -> dict[int, int]:
        """Writes (CRC-32C, class index, example) records as the shard; -> {class index: examples}."""
        counts: dict[int, int] = {}
        with written_atomically(shard_path(self._output_dir, split, shard, self._shards[split])) as handle:
            for crc, class_index, example in records:
                handle.write(record_bytes(example, crc))
                counts[class_index] = counts.get(class_index, 0) + 1
        return counts


def content_shard_key(element, fractions: tuple[float, float], shards: dict[str, int]):
    """(content digest, (path, class index, split, example, split digest)) -> ((split, shard), the same): the split
    and the shard both from the split key's digest, for a source that names no split, so that near-copies (which
    share the key) land in one split, and byte-identical copies (which share it too) meet in one shard."""
    key = element[1][4]
    split = split_for_digest(key, *fractions)
    return (split, int.from_bytes(key[8:16], "big") % shards[split]), element


class WriteUniqueShard(WriteShard):
    """((split, shard), its (content digest, (path, class index, split, example, split digest)) pairs) -> one shard
    holding each content once, its first path's example (``KeepFirstCopy``'s rule, here within the shard all copies
    meet in), written as ``WriteShard`` writes; the other copies as duplicates records -> (split, shard, {class
    index: count}).
    The shard's examples are read once (on Dataflow, a second pass would read the shuffle again): each goes to a
    local spill file as it comes, and memory holds their paths alone; the kept ones are then copied from it."""

    def process(self, element):
        import tempfile

        import google_crc32c

        (split, shard), pairs = element
        copies: dict[bytes, list[tuple[str, int, int, int]]] = {}
        with tempfile.TemporaryFile() as spill:
            for digest, (path, class_index, _, example, _) in pairs:
                copies.setdefault(digest, []).append((path, class_index, spill.tell(), len(example)))
                spill.write(example)
            kept = []
            for found in copies.values():
                found.sort()
                kept.append(found[0])  # (the same path twice is one image)
                for record in duplicates_of([(path, class_index) for path, class_index, _, _ in found]):
                    yield beam.pvalue.TaggedOutput(DUPLICATE_TAG, record)

            def first_copies():
                for _, class_index, offset, size in sorted(kept, key=lambda copy: copy[2]):  # (as they came)
                    spill.seek(offset)
                    example = spill.read(size)
                    yield google_crc32c.value(example), class_index, example

            yield split, shard, self._write(split, shard, first_copies())


@contextlib.contextmanager
def written_atomically(path: str):
    """A handle on a temporary file beside ``path`` (any Beam filesystem), renamed to ``path`` once written, removed
    if writing fails."""
    import uuid

    temporary = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    handle = FileSystems.create(temporary)
    try:
        yield handle
        handle.close()
    except BaseException as err:
        with contextlib.suppress(Exception):  # (closing flushes: on a full disk it fails too)
            handle.close()
        with contextlib.suppress(Exception):
            FileSystems.delete([temporary])
        if isinstance(err, OSError) and err.errno is not None and not err.filename:
            err.filename = path  # (a failed write names no file)
        elif isinstance(err, Exception) and "://" in path:
            err.add_note(f"while writing {path}")  # (a storage client's error names no object)
        raise
    FileSystems.rename([temporary], [path])


def finish_shards(
    written: Iterable[tuple[str, int, dict[int, int]]], output_dir: str, shards: dict[str, int]
) -> list[tuple[tuple[str, int], int]]:
    """Writes the shards no example went to, empty (each split has all of its ``shards``), and returns the counts
    as ``((split, class index), count)`` pairs."""
    written = list(written)
    done = {(split, shard) for split, shard, _ in written}
    for split in SPLITS:
        for shard in range(shards[split]):
            if (split, shard) not in done:
                with written_atomically(shard_path(output_dir, split, shard, shards[split])):
                    pass
    return [((split, class_index), count) for split, _, counts in written for class_index, count in counts.items()]


@beam.ptransform_fn
def WriteShards(splits, output_dir: str, shards: dict[str, int]):  # noqa: N802 (a PTransform's name)
    """{split: (class index, serialized example)} -> ``<dir>/<split>/<split>-SSSSS-of-NNNNN.tfrec``, ``shards[split]``
    shards each, through one grouping for all splits; -> (split, shard, {class index: count}) of each shard written
    (``finish_shards`` writes the others)."""
    keyed = [splits[split] | f"Shard{split.title()}" >> beam.Map(shard_key, split, shards[split]) for split in SPLITS]
    return (
        keyed
        | "AllSplits" >> beam.Flatten()
        | "GroupByShard" >> beam.GroupByKey()
        | "Write" >> beam.ParDo(WriteShard(output_dir, shards))
    )


@beam.ptransform_fn
def Gather(named):  # noqa: N802 (a PTransform's name)
    """{name: PCollection} -> one element: {name: the elements of its PCollection, in a list}: what the stats are
    written from, gathered through one grouping (each costs Beam's local engine stages of its own)."""
    tagged = [
        pcoll | f"Tag{name.title()}" >> beam.Map(lambda element, name: (name, element), name)
        for name, pcoll in named.items()
    ]
    return (
        tagged
        | "All" >> beam.Flatten()
        | "Gather" >> beam.combiners.ToList()
        | "ByName" >> beam.Map(by_name, sorted(named))
    )


def by_name(pairs: Iterable[tuple[str, object]], names: Sequence[str]) -> dict[str, list]:
    found: dict[str, list] = {name: [] for name in names}
    for name, element in pairs:
        found[name].append(element)
    return found


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
    items = modality_of(stats).items
    for split, names in stats.get("small_classes", {}).items():
        log.warning(
            "few %s examples (under %d) for class %s: its %s figures will say little; add %s or change the split "
            "fractions",
            split,
            SMALL_CLASS_EXAMPLES,
            ", ".join(f"{name} ({count})" for name, count in names.items()),
            split,
            items,
        )


def unusable_said(items: int, rejected: int, kind: str = "unusable", unit: str = "rows") -> tuple[str, str]:
    """What the found and the converted lines add for a listing's ``rejected`` entries beside its ``items`` (a
    manifest's or a table's rows that name nothing usable, a folder's files named as no image): "" for none."""
    if not rejected:
        return "", ""
    return f" ({items + rejected} {unit}, {rejected} {kind})", f" ({rejected} of them {kind} {unit})"


def check_quarantined(
    stats: dict, total: int, noun: str, max_bad_fraction: float, output_dir: str, left_out: int = 0
) -> None:
    """After a conversion of ``total`` items (``noun``: images, rows, texts): the small classes warned of, and a
    ``ConversionError`` when more than ``max_bad_fraction`` of them were quarantined (``left_out`` quarantine records
    aside: files named as no image, not counted)."""
    warn_small_classes(stats)
    bad = stats["quarantined"] - left_out
    bad_fraction = bad / max(1, total)
    if bad_fraction > max_bad_fraction:
        raise ConversionError(
            f"{bad} of {total} {noun} could not be converted ({bad_fraction:.1%} > "
            f"--max-bad-fraction {max_bad_fraction:.1%}): see {output_dir}/{QUARANTINE_FILE}"
        )
