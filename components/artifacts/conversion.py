"""The convert step's record of its examples: ``stats.json`` (beside the TFRecords, ``components.schema``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from components.artifacts.records import STATS, Facts, Record


@dataclass(frozen=True)
class ExamplesStats(Facts):
    """``stats.json``: what a conversion holds.

    - Its classes and counts: ``class_names`` (in index order), ``num_classes``, ``counts`` (per split),
      ``per_class`` (per split, per class name), ``small_classes`` (per split, the classes with few examples),
      ``num_examples``; ``quarantined`` and ``duplicates``, the records of ``quarantine.jsonl`` and
      ``duplicates.jsonl``.
    - Where it came from: ``source``, its ``fingerprint`` (and what it is taken over), ``input_bytes``, ``shards``
      (per split); ``split_method``, how examples were hashed into splits (``components.convert.common``).
    - Its input (``components.modalities``): ``modality``; images: ``image_size`` (and ``image_size_auto``, why
      auto chose it), ``source_image_size`` (the images' median shorter side); texts: ``sequence_length``,
      ``vocabulary_size``, ``vocabulary_file``, ``vocabulary_basis``, ``standardization``, ``splits_from_source``,
      ``tokens`` (per split: mean tokens, out-of-vocabulary and truncated shares).
    - Existing TFRecords used as they are (``adopted``): their ``files`` per split, and
      ``duplicates_in_two_splits``.

    It reads as the mapping of its facts too (``Facts``)."""

    RECORD: ClassVar[Record] = STATS

    class_names: list[str]
    num_classes: int
    counts: dict[str, int]
    num_examples: int
    modality: str
    per_class: dict[str, dict[str, int]] = field(default_factory=dict)
    small_classes: dict[str, dict[str, int]] = field(default_factory=dict)
    quarantined: int = 0
    duplicates: int = 0
    fingerprint: str = ""
    fingerprint_basis: str | None = None
    source: str = ""
    shards: dict[str, int] | None = None
    input_bytes: int | None = None
    split_method: int = 1  # (a conversion that does not say was split by file bytes: components.schema.SPLIT_METHODS)
    image_size: int | None = None
    image_size_auto: str | None = None
    source_image_size: int | None = None
    sequence_length: int | None = None
    vocabulary_size: int | None = None
    vocabulary_file: str | None = None
    vocabulary_basis: str | None = None
    standardization: str | None = None
    splits_from_source: list[str] | None = None
    tokens: dict | None = None
    adopted: bool = False
    files: dict[str, list[str]] | None = None
    duplicates_in_two_splits: int | None = None
