"""Image folder -> sharded TFRecords in the codelab schema, as an Apache Beam pipeline.

The listing and every check on the user's input happen in the driver before anything is written; the per-image work
(read, decode, resize, crop, re-encode, serialize) runs in Beam, so the same code runs on the DirectRunner and on
Dataflow. The split of each image is decided by a hash of its perceptual key
(``components.convert.split_keys``): the same image lands in the same split on every rerun, wherever it is stored,
and its near-copies with it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from components.artifacts.conversion import ExamplesStats
from components.cli import UsageError
from components.convert.adopt import adopt
from components.convert.common import (
    DUPLICATE_TAG,
    QUARANTINE_TAG,
    Gather,
    KeepFirstCopy,
    WriteShards,
    WriteUniqueShard,
    bound_beam_storage_retries,
    check_output_is_empty,
    check_quarantined,
    content_shard_key,
    finish_shards,
    marked_if_it_fails,
    split_for_digest,
    summarize_counts,
    unusable_said,
    write_records,
)
from components.convert.config import check_beam_args, check_split_options
from components.convert.items import Converter, ItemSettings, worker_processes
from components.convert.listing import FINGERPRINT_BASIS, ImageListing, is_tfrecord_source, list_source
from components.convert.sizing import auto_image_size, auto_num_shards, typical_shorter_side
from components.convert.split_keys import split_digest
from components.convert.staging import ReadRows, default_pipeline_args, one_local_worker, sample_often, staged_rows
from components.decoding import DEFAULT_MAX_PIXELS
from components.imaging import AUTO_IMAGE_SIZE, image_size_mistake
from components.params import CONVERT
from components.schema import SPLIT_METHOD, SPLITS, check_class_count, check_classes_found, read_stats
from components.storage import check_writable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConvertConfig:
    """What to convert and how.

    Args:
        source: an image folder ``<root>/<class_name>/*.jpg|png``, local or on any Beam filesystem (``gs://``).
        output_dir: where ``<split>/<split>-SSSSS-of-NNNNN.tfrec``, ``stats.json`` and ``quarantine.jsonl`` go.
        image_size: side of the square images written (resize to fill, then centre-crop); ``AUTO_IMAGE_SIZE`` (0,
            ``--image-size auto``): the source images' typical shorter side, at most 192 (``auto_image_size``).
        validation_fraction, test_fraction: share of images hashed into those splits; the rest is ``train``.
        num_shards: shards per split; 0 picks a count for ~150 MB shards.
        jpeg_quality: quality of the re-encoded JPEGs.
        max_bad_fraction: the job fails when more than this share of the images cannot be read.
        max_pixels: images with more pixels are quarantined as decompression bombs.
        classes: the class names in index order; empty: the sorted folder names or manifest labels. Labels outside
            it are quarantined (manifests) or refused (folders).
        threads: parallel conversions per worker: worker processes of their own on the local engine for local files
            (``local_processes``), threads elsewhere; 0: one per core (four threads per core for ``gs://`` sources).
        pipeline_args: Beam pipeline options passed through as they are (``--runner DataflowRunner ...``).
    """

    source: str
    output_dir: str
    image_size: int = CONVERT["image_size"].default
    validation_fraction: float = CONVERT["validation_fraction"].default
    test_fraction: float = CONVERT["test_fraction"].default
    num_shards: int = CONVERT["num_shards"].default
    jpeg_quality: int = 95
    max_bad_fraction: float = CONVERT["max_bad_fraction"].default
    max_pixels: int = DEFAULT_MAX_PIXELS
    classes: tuple[str, ...] = CONVERT["classes"].default
    threads: int = 0
    pipeline_args: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.image_size != AUTO_IMAGE_SIZE and (mistake := image_size_mistake(self.image_size)):
            raise UsageError(f"--image-size {mistake}")
        check_split_options(self, "images")
        if not 1 <= self.jpeg_quality <= 100:
            raise UsageError(f"--jpeg-quality {self.jpeg_quality} is out of range: use 1 to 100")
        if self.threads < 0:
            raise UsageError(f"--threads {self.threads} is negative: use 0 (one per core) or a positive count")
        if self.max_pixels < 1:
            raise UsageError(f"--max-pixels {self.max_pixels} must be positive")
        check_beam_args(self.pipeline_args, [f"--{f.replace('_', '-')}" for f in self.__dataclass_fields__])


def assign_split(key: bytes, validation_fraction: float, test_fraction: float) -> str:
    """The split of an example, from a hash of its split key (``components.convert.split_keys``): stable across
    reruns, paths and machines."""
    return split_for_digest(split_digest(key), validation_fraction, test_fraction)


def run(config: ConvertConfig) -> dict:
    """Runs the conversion and returns the stats written to ``<output_dir>/stats.json``.

    A TFRecord source (``*.tfrec`` glob) is validated and used as it is instead (``components.convert.adopt``).
    """
    check_output_is_empty(config.output_dir)
    check_writable(config.output_dir, "--output")
    if is_tfrecord_source(config.source):
        return adopt(config, conversion_threads(config))
    listing = list_source(config.source, config.classes)
    check_class_count(listing.class_names, config.source)
    if config.classes:
        check_classes_found(listing, config.source)
    options = pipeline_options(config)
    processes = local_processes(options, config, listing)
    if processes:
        worker_processes(processes)  # they start importing now, while the graph is built
    auto = None
    if config.image_size == AUTO_IMAGE_SIZE:
        size, auto = auto_image_size(listing.shorter_side or typical_shorter_side([item[0] for item in listing.items]))
        log.info("--image-size auto: %d (%s)", size, auto)
        config = dataclasses.replace(config, image_size=size)
    # a manifest's rows that name no usable image, and a folder's files named as none, are counted beside its
    # images, in every line below
    rows, unusable = (
        unusable_said(len(listing.items), len(listing.rejected))
        if listing.rejected
        else unusable_said(len(listing.items), len(listing.others), "non-image", "files")
    )
    log.info(
        "found %d images in %d classes under %s%s: %s",
        len(listing.items),
        len(listing.class_names),
        config.source,
        rows,
        ", ".join(listing.class_names),
    )
    output_dir = config.output_dir.rstrip("/")
    fractions = {
        "train": 1.0 - config.validation_fraction - config.test_fraction,
        "validation": config.validation_fraction,
        "test": config.test_fraction,
    }
    shards = {
        split: config.num_shards or auto_num_shards(len(listing.items) * fractions[split], config.image_size)
        for split in SPLITS
    }
    with marked_if_it_fails(output_dir):
        started = time.monotonic()
        sample_often(options)
        with (
            staged_rows(
                {"items": listing.items, "rejected": listing.rejected + listing.others}, config.pipeline_args
            ) as staged,
            beam.Pipeline(options=options) as pipeline,
        ):
            conversion_graph(pipeline, config, listing, staged, shards, auto)
        stats = read_stats(output_dir)
        seconds = time.monotonic() - started
        log.info(
            "converted %d images in %.1fs (%.0f images/s): %s; quarantined %d%s, duplicates dropped %d",
            stats["num_examples"],
            seconds,
            len(listing.items) / max(seconds, 1e-9),
            ", ".join(f"{split} {stats['counts'][split]}" for split in SPLITS),
            stats["quarantined"],
            unusable,
            stats["duplicates"],
        )
        total, noun = len(listing.items) + len(listing.rejected), "rows" if listing.rejected else "images"
        check_quarantined(stats, total, noun, config.max_bad_fraction, output_dir, left_out=len(listing.others))
    return stats


def conversion_graph(
    pipeline, config: ConvertConfig, listing: ImageListing, staged: dict, shards: dict[str, int], auto: str | None
) -> None:
    """Adds the conversion to ``pipeline``: the listing's rows read from the ``staged`` files (``staged_rows``), each
    image converted, byte-identical images kept once, the splits written in ``shards`` shards, and the stats."""
    output_dir = config.output_dir.rstrip("/")
    processes = local_processes(pipeline.options, config, listing)
    rejected = pipeline | "ListingRejects" >> ReadRows(staged["rejected"])
    converted = (
        pipeline
        | "ListImages" >> ReadRows(staged["items"], spread=not one_local_worker(pipeline.options))
        | "Batch" >> beam.BatchElements(min_batch_size=64, max_batch_size=512)
        | "Convert"
        >> beam.ParDo(ConvertImages(config, listing.class_names, len(listing.items), processes)).with_outputs(
            QUARANTINE_TAG, SIZES_TAG, main="converted"
        )
    )
    fractions = (config.validation_fraction, config.test_fraction)
    if any(split for _, _, split in listing.items):
        # a manifest names splits: byte-identical images meet first (keyed by content digest), so that each is kept
        # once, in the split of its first path (or, where the manifest names none, its split key's); then each
        # split's examples meet in their shards
        unique = (
            converted["converted"]
            | "GroupByContent" >> beam.GroupByKey()
            | "KeepOnePerContent" >> beam.ParDo(KeepFirstCopy(*fractions)).with_outputs(DUPLICATE_TAG, *SPLITS)
        )
        written = {split: unique[split] for split in SPLITS} | "Write" >> WriteShards(output_dir, shards)
    else:
        # the split key picks both the split and the shard: near-copies land in one split, and byte-identical
        # images (one key) meet in the shard they are written to, one grouping for both
        unique = (
            converted["converted"]
            | "ContentShard" >> beam.Map(content_shard_key, fractions, shards)
            | "GroupByShard" >> beam.GroupByKey()
            | "Write" >> beam.ParDo(WriteUniqueShard(output_dir, shards)).with_outputs(DUPLICATE_TAG, main="written")
        )
        written = unique["written"]
    quarantined = (rejected, converted[QUARANTINE_TAG]) | "AllQuarantined" >> beam.Flatten()
    outcome = {
        "written": written,
        "quarantine": quarantined,
        "duplicates": unique[DUPLICATE_TAG],
        "sizes": converted[SIZES_TAG],
    } | "Outcome" >> Gather()
    _ = outcome | "WriteStats" >> beam.Map(
        write_stats,
        output_dir=output_dir,
        class_names=listing.class_names,
        config=config,
        shards=shards,
        input_bytes=listing.total_bytes,
        fingerprint=listing.fingerprint,
        image_size_auto=auto,
    )


def pipeline_options(config: ConvertConfig) -> PipelineOptions:
    """Beam's options: the user's (``--runner DataflowRunner --project ...``) as given, plus the local defaults."""
    return PipelineOptions(default_pipeline_args(config.pipeline_args))


class Progress:
    """Logs images done / total, the rate and the time left, at most every ``every`` seconds and at the end.

    Thread-safe; one per process. In the default local run (one process) the counts are the job's; with several
    worker processes each logs its own share, and Beam's ``images_converted`` counter holds the job's total (the
    Dataflow console shows it).
    """

    def __init__(self, total: int, every: float = 5.0):
        self.total = total
        self.every = every
        self.done = 0
        self.started = self.last = time.monotonic()
        self.lock = threading.Lock()

    def add(self, count: int, driver_pid: int) -> None:
        with self.lock:
            self.done += count
            now = time.monotonic()
            if now - self.last < self.every and self.done < self.total:
                return
            self.last = now
            done, seconds = self.done, now - self.started
        rate = done / max(seconds, 1e-9)
        if os.getpid() == driver_pid:
            left = (self.total - done) / rate if rate else float("inf")
            log.info(
                "processed %d/%d images (%.0f%%), %.0f images/s, %s left",
                done,
                self.total,
                100.0 * done / max(self.total, 1),
                rate,
                f"{left:.0f}s" if math.isfinite(left) else "?",
            )
        else:
            log.info("worker %d: processed %d images, %.0f images/s (of %d)", os.getpid(), done, rate, self.total)


_progress: dict[int, Progress] = {}


_progress_lock = threading.Lock()


# the output of the counts of each shorter side of the images a bundle converted ({side: images})
SIZES_TAG = "sizes"


class ConvertImages(beam.DoFn):
    """A batch of (path, class index, split) -> (content digest, (path, class index, split, serialized example,
    split digest)),
    or quarantine records; at a bundle's end, the counts of its images' shorter sides (``SIZES_TAG``). Each batch is
    read and converted on ``processes`` worker processes of this machine
    (``local_processes``), or else on a pool of threads (I/O and Pillow release the GIL), so that one worker process
    uses every core, and reads from Cloud Storage overlap."""

    def __init__(self, config: ConvertConfig, class_names: Sequence[str], total: int, processes: int = 0):
        self._config = config
        self._settings = ItemSettings(config.image_size, config.jpeg_quality, config.max_pixels, tuple(class_names))
        self._processes = processes
        self._total = total
        self._driver_pid = os.getpid()
        self._job = uuid.uuid4().hex  # the progress key: one count per job and process
        self._converted = beam.metrics.Metrics.counter("convert", "images_converted")
        self._quarantined = beam.metrics.Metrics.counter("convert", "images_quarantined")

    def setup(self):
        bound_beam_storage_retries()  # (on a Dataflow worker, a process of its own)
        self._converter = Converter(self._settings, self._processes, conversion_threads(self._config))
        with _progress_lock:  # one per process and job, shared by the DoFn instances of its threads
            self._progress = _progress.setdefault(self._job, Progress(self._total))

    def teardown(self):
        self._converter.close()

    def start_bundle(self):
        self._sides: dict[int, int] = {}

    def process(self, batch):
        self._converter.submit(batch)
        yield from self._outputs(self._converter.results(keep=self._converter.in_flight))

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindows

        for output in self._outputs(self._converter.results()):
            if isinstance(output, beam.pvalue.TaggedOutput):
                yield beam.pvalue.TaggedOutput(output.tag, GlobalWindows.windowed_value(output.value))
            else:
                yield GlobalWindows.windowed_value(output)
        if self._sides:
            yield beam.pvalue.TaggedOutput(SIZES_TAG, GlobalWindows.windowed_value(self._sides))

    def _outputs(self, results):
        done = 0
        for result in results:
            done += 1
            if isinstance(result, dict):
                self._quarantined.inc()
                yield beam.pvalue.TaggedOutput(QUARANTINE_TAG, result)
            else:
                self._converted.inc()
                digest, value, side = result
                self._sides[side] = self._sides.get(side, 0) + 1
                yield digest, value
        if done:
            self._progress.add(done, self._driver_pid)


def local_processes(options: PipelineOptions, config: ConvertConfig, listing: ImageListing) -> int:
    """Worker processes for the conversion: one per conversion thread (``conversion_threads``) where Beam's local
    engine runs every bundle in this process (``one_local_worker``) and every item is a file of this machine; 0
    (threads) elsewhere, or where there would be one."""
    count = conversion_threads(config)
    local = one_local_worker(options) and not any("://" in path for path, _, _ in listing.items)
    return count if local and count > 1 else 0


def conversion_threads(config: ConvertConfig) -> int:
    """``config.threads``, or one per core for local files and four per core for remote ones (I/O-bound)."""
    if config.threads:
        return config.threads
    cores = os.cpu_count() or 1
    return cores * 4 if "://" in config.source else cores


def median_of_counts(counts: Iterable[dict[int, int]]) -> int | None:
    """The median (an int, as ``typical_shorter_side``'s) of values given as {value: count} dicts, summed; None for
    none."""
    import statistics

    values = [value for found in counts for value, count in found.items() for _ in range(count)]
    return int(statistics.median(values)) if values else None


def write_stats(
    outcome: dict[str, list],
    output_dir: str,
    class_names: Sequence[str],
    config: ConvertConfig,
    shards: dict[str, int],
    input_bytes: int,
    fingerprint: str = "",
    image_size_auto: str | None = None,
) -> dict:
    """Writes the shards no example went to (empty), then ``stats.json``, ``quarantine.jsonl`` and
    ``duplicates.jsonl`` (each to a temporary name, then renamed), from the ``outcome`` gathered: each shard
    ``written`` (split, shard, counts per class), the ``quarantine`` and ``duplicates`` records.
    ``source_image_size`` in the stats: the median shorter side of the images converted (their ``sizes``: counts of
    each shorter side); ``image_size_auto``: why ``--image-size auto`` chose the size it did (None: the size was
    given)."""
    quarantine, duplicates = outcome["quarantine"], outcome["duplicates"]
    stats = summarize_counts(finish_shards(outcome["written"], output_dir, shards), class_names)
    stats.update(
        quarantined=len(quarantine),
        duplicates=len(duplicates),
        fingerprint=fingerprint,
        fingerprint_basis=FINGERPRINT_BASIS,
        modality="image",
        image_size=config.image_size,
        image_size_auto=image_size_auto,
        source_image_size=median_of_counts(outcome["sizes"]),
        source=config.source,
        shards=shards,
        input_bytes=input_bytes,
        split_method=SPLIT_METHOD,
    )
    write_records(output_dir, quarantine, duplicates)
    stats = ExamplesStats(**stats).write(output_dir)
    return stats
