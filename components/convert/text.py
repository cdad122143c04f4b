"""Text -> sharded TFRecords with a vocabulary, as an Apache Beam pipeline: the IMDB-on-TPU article's preprocessing.

Sources: folders of text files per class (``<root>/<class>/*.txt``), or the aclImdb layout, whose split folders set
the split (``<root>/train/<class>/``, ``<root>/test/<class>/``; ``unsup/`` and the files beside the class folders
are left out); or a CSV (with a header) or JSONL file of text and label columns. Each text is standardised
(``components.tokenizing``: lowercase, HTML line breaks and punctuation to spaces, split on whitespace); texts the
same once lowercased and stripped of punctuation are kept once; the vocabulary is built by Beam from the training
split only (no leakage into validation and test): id 0 pads, id 1 is out-of-vocabulary, then the most frequent
tokens (ties by token), ``vocabulary_size`` ids in all. Each example holds ``tokens`` (int64, ``sequence_length``
ids: the first tokens, padded at the end with 0, as Keras's ``TextVectorization`` pads), ``text`` (the raw UTF-8
bytes), ``class``, ``label`` and ``one_hot_class``; ``vocabulary.txt`` (one token a line, in id order: an empty line
for padding, ``[UNK]``) and ``stats.json`` go beside the splits. Empty files, files that are not UTF-8 and binary
files are quarantined with their reason.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from components.artifacts.conversion import ExamplesStats
from components.cli import one_line
from components.convert.common import (
    DUPLICATE_TAG,
    QUARANTINE_TAG,
    Gather,
    KeepFirstCopy,
    WriteShards,
    check_output_is_empty,
    check_quarantined,
    finish_shards,
    marked_if_it_fails,
    summarize_counts,
    unusable_said,
    write_records,
)
from components.convert.config import check_beam_args, check_split_options, check_text_options
from components.convert.split_keys import split_digest
from components.convert.staging import ReadRows, default_pipeline_args, one_local_worker, sample_often, staged_rows
from components.convert.text_listing import TextListing, list_text_source
from components.params import CONVERT, TEXT
from components.schema import (
    SPLIT_METHOD,
    SPLITS,
    _bytes_feature,
    _delimited,
    _int64_feature,
    check_class_count,
    check_classes_found,
)
from components.storage import check_writable, write_atomically
from components.tokenizing import (
    OUT_OF_VOCABULARY,
    PADDING,
    STANDARDIZATION,
    VOCABULARY_FILE,
    standardize,
    text_key,
    token_ids,
    vocabulary_bytes,
)

log = logging.getLogger(__name__)

MODALITY = "text"
# one shard per this many texts of a split (aclImdb's 25,000 reviews: about 33 MB of TFRecords at 250 tokens)
TEXTS_PER_SHARD = 25_000


@dataclass(frozen=True)
class TextConvertConfig:
    """What to convert and how.

    Args:
        source: a folder of ``<class>/*.txt`` (or aclImdb's ``train|test/<class>/*.txt``), or a ``.csv`` / ``.jsonl``
            file with ``text_column`` and ``label_column``; local or on any Beam filesystem (``gs://``).
        output_dir: where ``<split>/*.tfrec``, ``vocabulary.txt``, ``stats.json`` and ``quarantine.jsonl`` go.
        vocabulary_size: ids in the vocabulary, padding and out-of-vocabulary included (the article: 15,000).
        sequence_length: token ids per example, padded or truncated (the article: 250).
        validation_fraction, test_fraction: share of texts hashed into those splits where the source does not set
            the split (aclImdb's test folder sets test; its validation is hashed out of train).
        text_column, label_column: the columns of a CSV or JSONL source.
        max_bad_fraction: the job fails when more than this share of the texts cannot be used.
        classes: the class names in index order; empty: the sorted folder names or labels.
        pipeline_args: Beam pipeline options passed through as they are.
    """

    source: str
    output_dir: str
    vocabulary_size: int = TEXT["vocabulary_size"].default
    sequence_length: int = TEXT["sequence_length"].default
    validation_fraction: float = CONVERT["validation_fraction"].default
    test_fraction: float = CONVERT["test_fraction"].default
    text_column: str = TEXT["text_column"].default
    label_column: str = TEXT["label_column"].default
    max_bad_fraction: float = CONVERT["max_bad_fraction"].default
    num_shards: int = CONVERT["num_shards"].default
    classes: tuple[str, ...] = CONVERT["classes"].default
    pipeline_args: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        check_text_options(self)
        check_split_options(self, "texts")
        check_beam_args(self.pipeline_args, [f"--{f.replace('_', '-')}" for f in self.__dataclass_fields__])


def decode_text(content: bytes) -> str:
    """The text of a file's bytes; ``ValueError`` with the reason for what is not text: binary (NUL bytes), not
    UTF-8, empty, or no words once standardised."""
    if b"\x00" in content:
        raise ValueError("binary file (NUL bytes): not text")
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"not UTF-8 ({err.reason} at byte {err.start}): save it as UTF-8") from None
    if not text.strip():
        raise ValueError("empty: no text")
    if not standardize(text):
        raise ValueError("no words once standardised (only punctuation or markup)")
    return text


class ReadTexts(beam.DoFn):
    """(id, class index, split, text or None) -> (split digest, (id, class index, split, text, split digest)), or a
    quarantine record naming why the item is not a text. Texts the same once standardised share the split digest
    (``components.convert.split_keys``): they meet, and one is kept."""

    def __init__(self):
        self._read = beam.metrics.Metrics.counter("convert", "texts_read")
        self._quarantined = beam.metrics.Metrics.counter("convert", "texts_quarantined")

    def process(self, item):
        where, class_index, split, text = item
        try:
            if text is None:
                with FileSystems.open(where) as handle:
                    content = handle.read()
            else:
                content = text.encode("utf-8")
            text = decode_text(content)
        except ValueError as err:
            self._quarantined.inc()
            yield beam.pvalue.TaggedOutput(QUARANTINE_TAG, {"path": where, "reason": str(err)})
            return
        except Exception as err:  # gone since the listing, unreadable: one bad file must not sink the job
            self._quarantined.inc()
            yield beam.pvalue.TaggedOutput(QUARANTINE_TAG, {"path": where, "reason": one_line(err, with_type=True)})
            return
        self._read.inc()
        key = split_digest(text_key(text))
        yield key, (where, class_index, split, text, key)


def build_vocabulary(counts: list[tuple[str, int]], size: int) -> list[str]:
    """Padding, out-of-vocabulary, then the ``size - 2`` most frequent tokens (ties by token, so that reruns agree)."""
    ranked = sorted(counts, key=lambda pair: (-pair[1], pair[0]))
    return [PADDING, OUT_OF_VOCABULARY, *(token for token, _ in ranked[: size - 2])]


def serialize_text_example(tokens: Sequence[int], text: str, class_index: int, label: str, num_classes: int) -> bytes:
    """One serialized ``tf.train.Example`` of the text schema (protobuf wire format, fields in name order, as
    ``components.schema.serialize_example`` writes images): ``class``, ``label``, ``one_hot_class``, ``text``,
    ``tokens``."""
    import struct

    one_hot = [0.0] * num_classes
    one_hot[class_index] = 1.0
    feature = {
        "class": _int64_feature([class_index]),
        "label": _bytes_feature(label.encode("utf-8")),
        "one_hot_class": _delimited(0x12, _delimited(0x0A, struct.pack(f"<{num_classes}f", *one_hot))),
        "text": _bytes_feature(text.encode("utf-8")),
        "tokens": _int64_feature(tokens),
    }
    entries = b"".join(
        _delimited(0x0A, _delimited(0x0A, name.encode()) + _delimited(0x12, value)) for name, value in feature.items()
    )
    return _delimited(0x0A, entries)


class Tokenize(beam.DoFn):
    """(class index, text) -> (class index, serialized example), with the vocabulary as a side input; counts the
    tokens, the out-of-vocabulary ones and the truncated texts."""

    def __init__(self, class_names: Sequence[str], length: int):
        self._class_names = tuple(class_names)
        self._length = length
        self._index: dict[str, int] | None = None

    def process(self, element, vocabulary, split: str):
        if self._index is None:
            self._index = {token: i for i, token in enumerate(vocabulary) if i >= 2}
        class_index, text = element
        ids, count, unknown = token_ids(text, self._index, self._length)
        example = serialize_text_example(ids, text, class_index, self._class_names[class_index], len(self._class_names))
        yield beam.pvalue.TaggedOutput("tally", (split, (1, count, unknown, int(count > self._length))))
        yield class_index, example


def _sum_tallies(tallies):
    totals = [0, 0, 0, 0]
    for tally in tallies:
        for i, value in enumerate(tally):
            totals[i] += value
    return tuple(totals)


def write_text_stats(
    outcome: dict[str, list], vocabulary, *, output_dir: str, config, listing, shards: dict[str, int]
) -> dict:
    """Writes the shards no example went to (empty), then ``vocabulary.txt``, ``quarantine.jsonl``,
    ``duplicates.jsonl`` and ``stats.json`` (each atomically), from the ``outcome`` gathered (``write_stats``'s, and
    each split's ``tally``)."""
    quarantine, duplicates = outcome["quarantine"], outcome["duplicates"]
    stats = summarize_counts(finish_shards(outcome["written"], output_dir, shards), listing.class_names)
    by_split = dict(outcome["tally"])
    tokens = {}
    for split in SPLITS:
        texts, count, unknown, truncated = by_split.get(split, (0, 0, 0, 0))
        tokens[split] = {
            "mean_tokens": count / texts if texts else None,
            "out_of_vocabulary": unknown / count if count else None,
            "truncated": truncated / texts if texts else None,
        }
    stats.update(
        modality=MODALITY,
        quarantined=len(quarantine),
        duplicates=len(duplicates),
        fingerprint=listing.fingerprint,
        source=config.source,
        shards=shards,
        input_bytes=listing.total_bytes,
        vocabulary_size=len(vocabulary),
        vocabulary_file=VOCABULARY_FILE,
        vocabulary_basis="train split only",
        sequence_length=config.sequence_length,
        standardization=STANDARDIZATION,
        splits_from_source=list(listing.splits_from_source),
        split_method=SPLIT_METHOD,
        tokens=tokens,
    )
    write_atomically(f"{output_dir}/{VOCABULARY_FILE}", vocabulary_bytes(vocabulary))
    write_records(output_dir, quarantine, duplicates)
    stats = ExamplesStats(**stats).write(output_dir)
    return stats


def text_graph(
    pipeline,
    config: TextConvertConfig,
    listing: TextListing,
    staged: dict,
    shards: dict[str, int],
    validation_fraction: float,
    test_fraction: float,
) -> None:
    """Adds the text conversion to ``pipeline``: the listing's rows read from the ``staged`` files
    (``components.convert.staging.staged_rows``), each text read, byte-identical texts kept once, the vocabulary
    counted on the train split, the splits tokenized and written in ``shards`` shards, and the stats."""
    output_dir = config.output_dir.rstrip("/")
    summary = dataclasses.replace(listing, items=(), rejected=())  # what the stats need, without the rows
    rejected = pipeline | "ListingRejects" >> ReadRows(staged["rejected"])
    read = (
        pipeline
        | "ListTexts" >> ReadRows(staged["items"], spread=not one_local_worker(pipeline.options))
        | "Read" >> beam.ParDo(ReadTexts()).with_outputs(QUARANTINE_TAG, main="read")
    )
    # texts the same once standardised meet here (keyed by their split digest): each is kept once, in one split; a
    # test item of aclImdb stays in test, a train item goes to train or (hashed) validation
    unique = (
        read["read"]
        | "GroupByContent" >> beam.GroupByKey()
        | "KeepOnePerContent"
        >> beam.ParDo(KeepFirstCopy(validation_fraction, test_fraction)).with_outputs(DUPLICATE_TAG, *SPLITS)
    )
    vocabulary = (
        unique["train"]
        | "Tokens" >> beam.FlatMap(lambda element: standardize(element[1]))
        | "CountTokens" >> beam.combiners.Count.PerElement()
        | "AllTokenCounts" >> beam.combiners.ToList()
        | "Vocabulary" >> beam.Map(build_vocabulary, config.vocabulary_size)
    )
    tallies, examples = [], {}
    for split in SPLITS:
        tokenized = unique[split] | f"Tokenize{split.title()}" >> beam.ParDo(
            Tokenize(listing.class_names, config.sequence_length), beam.pvalue.AsSingleton(vocabulary), split
        ).with_outputs("tally", main="examples")
        examples[split] = tokenized["examples"]
        tallies.append(tokenized["tally"])
    outcome = {
        "written": examples | "Write" >> WriteShards(output_dir, shards),
        "tally": tallies | "AllTallies" >> beam.Flatten() | "SumTallies" >> beam.CombinePerKey(_sum_tallies),
        "quarantine": (rejected, read[QUARANTINE_TAG]) | "AllQuarantined" >> beam.Flatten(),
        "duplicates": unique[DUPLICATE_TAG],
    }
    _ = (
        outcome
        | "Outcome" >> Gather()
        | "WriteStats"
        >> beam.Map(
            lambda found, vocabulary: write_text_stats(
                found, vocabulary, output_dir=output_dir, config=config, listing=summary, shards=shards
            ),
            beam.pvalue.AsSingleton(vocabulary),
        )
    )


def run_text(config: TextConvertConfig) -> dict:
    """Runs the text conversion and returns the stats written to ``<output_dir>/stats.json``."""
    from components.schema import read_stats

    check_output_is_empty(config.output_dir)
    check_writable(config.output_dir, "--output")
    listing = list_text_source(config.source, config.classes, config.text_column, config.label_column)
    check_class_count(listing.class_names, config.source)
    if config.classes:
        check_classes_found(listing, config.source)
    rows, unusable = unusable_said(len(listing.items), len(listing.rejected))  # (a table's rows, in every line)
    log.info(
        "found %d texts in %d classes under %s%s: %s",
        len(listing.items),
        len(listing.class_names),
        config.source,
        rows,
        ", ".join(listing.class_names),
    )
    output_dir = config.output_dir.rstrip("/")
    # the splits the source sets are not hashed out again: aclImdb's test folder is the test split
    test_fraction = 0.0 if "test" in listing.splits_from_source else config.test_fraction
    validation_fraction = 0.0 if "validation" in listing.splits_from_source else config.validation_fraction
    shards = {split: config.num_shards or max(1, -(-len(listing.items) // TEXTS_PER_SHARD)) for split in SPLITS}
    with marked_if_it_fails(output_dir):
        started = time.monotonic()
        rows = {"items": listing.items, "rejected": listing.rejected}
        options = PipelineOptions(default_pipeline_args(config.pipeline_args))
        sample_often(options)
        with staged_rows(rows, config.pipeline_args) as staged, beam.Pipeline(options=options) as pipeline:
            text_graph(pipeline, config, listing, staged, shards, validation_fraction, test_fraction)
        stats = read_stats(output_dir)
        seconds = time.monotonic() - started
        log.info(
            "converted %d texts in %.1fs (%.0f texts/s): %s; vocabulary %d ids; quarantined %d%s, duplicates dropped "
            "%d",
            stats["num_examples"],
            seconds,
            len(listing.items) / max(seconds, 1e-9),
            ", ".join(f"{split} {stats['counts'][split]}" for split in SPLITS),
            stats["vocabulary_size"],
            stats["quarantined"],
            unusable,
            stats["duplicates"],
        )
        total, noun = len(listing.items) + len(listing.rejected), "rows" if listing.rejected else "texts"
        check_quarantined(stats, total, noun, config.max_bad_fraction, output_dir)
    return stats
