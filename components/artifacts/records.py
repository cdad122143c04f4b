"""The JSON files the steps hand each other, read and written only here, each with its ``format_version``.

A file without this code's version (an artifact made before the versions were written, or by a newer release) is
refused in one line that says what makes it again: ``convert again``, ``retrain``, ``export again``; so is one of
this version that lacks a field its record must have (``Typed``). A baseline's record is the one exception: evaluate,
check-data and register leave one of another format, or one that lacks a field, aside with a warning
(``read_current``, ``other_version``), so that a registry kept from an older release does not stop a run."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, ClassVar, TypeVar

from components.cli import UsageError

log = logging.getLogger(__name__)

T = TypeVar("T", bound="Typed")

FORMAT_KEY = "format_version"


class FormatVersionError(UsageError):
    """An artifact this code does not read: made by an older (or a newer) version of the pipeline."""


@dataclass(frozen=True)
class Record:
    """One kind of JSON artifact: its file name, the format this code writes and reads, what its folder is called in
    an error, which step writes it and what makes it again."""

    name: str
    version: int
    folder: str  # "examples dir", "model dir", ...
    step: str  # the step whose output holds it
    remake: str  # what to do with one of another format

    def path(self, folder: str) -> str:
        return folder if folder.endswith("/" + self.name) else f"{folder.rstrip('/')}/{self.name}"

    def exists(self, folder: str) -> bool:
        from components.storage import exists

        return exists(self.path(folder))

    def write(self, folder: str, value: Mapping) -> dict:
        """Writes ``value`` (whole or not at all) with this code's format version; returns what it wrote."""
        from components.storage import write_json

        record = {FORMAT_KEY: self.version, **{key: item for key, item in value.items() if key != FORMAT_KEY}}
        write_json(self.path(folder), record)
        return record

    def read(self, folder: str) -> dict:
        """The record in ``folder`` (a local path or a ``gs://`` URI); a one-line error when there is none, when it
        is no JSON object, or when another version of the pipeline made it."""
        found = self.read_any(folder)
        self.check(found, f"{self.folder} {folder}")
        return found

    def read_any(self, folder: str, missing_ok: bool = False) -> dict | None:
        """The record in ``folder`` whatever its format (a baseline's, judged by ``other_version``; the registry's own
        pointers); a one-line error when it is no JSON object, and when there is none (None with ``missing_ok``).
        One request on ``gs://``."""
        import json

        from components.storage import read_bytes_if_any

        content = read_bytes_if_any(self.path(folder))
        if content is None:
            if missing_ok:
                return None
            raise UsageError(f"{self.folder} {folder} has no {self.name}: pass the {self.step} step's output")
        try:
            found = json.loads(content)
        except ValueError:
            found = None
        if not isinstance(found, dict):
            raise UsageError(
                f"{self.folder} {folder}: its {self.name} is not the {self.step} step's JSON; {self.remake}"
            )
        return found

    def read_if_any(self, folder: str) -> dict | None:
        """``read``, or None where ``folder`` holds no such file."""
        found = self.read_any(folder, missing_ok=True)
        if found is not None:
            self.check(found, f"{self.folder} {folder}")
        return found

    def read_current(self, folder: str) -> dict | None:
        """The record in ``folder`` where this code reads its format; None where there is none, and, with a
        warning, where another version made it (a baseline's, which a run goes on without)."""
        found = self.read_any(folder, missing_ok=True)
        if found is not None and (other := self.other_version(found)):
            log.warning("%s %s was made by %s: left aside", self.folder, folder, other)
            return None
        return found

    def other_version(self, value: Mapping) -> str:
        """Which version of the pipeline made ``value`` where it is not this one's format ("" where it is): "an
        older version of this pipeline (stats.json format 0, this one reads 1)"."""
        found = value.get(FORMAT_KEY)
        if found == self.version:
            return ""
        newer = isinstance(found, int) and found > self.version
        return (
            f"{'a newer' if newer else 'an older'} version of this pipeline ({self.name} format "
            f"{found if isinstance(found, int) else 0}, this one reads {self.version})"
        )

    def check(self, value: Mapping, where: str) -> None:
        """A one-line error where ``value`` is not of this code's format: what to do about it with it."""
        if other := self.other_version(value):
            newer = other.startswith("a newer")
            raise FormatVersionError(f"{where} was made by {other}: {'upgrade the pipeline' if newer else self.remake}")


class Typed:
    """A frozen dataclass of one record's fields (its ``RECORD``): the only way its file is read or written. Each
    field is a key of the file; a field without a default must be there, or the file is not this format's."""

    RECORD: ClassVar[Record]

    @classmethod
    def from_dict(cls: type[T], value: Mapping, where: str) -> T:
        """The record from its file's ``value`` (its format checked); ``where``: the folder, for the error."""
        cls.RECORD.check(value, where)
        if lacking := cls.lacking(value):
            raise UsageError(f"{where}: its {cls.RECORD.name} has no {', '.join(lacking)}; {cls.RECORD.remake}")
        return cls(**{f.name: value[f.name] for f in fields(cls) if f.name in value})  # type: ignore[arg-type]

    @classmethod
    def made_by(cls, value: Mapping) -> str:
        """Which version of the pipeline made ``value`` (a file's content) where this code does not read it as this
        record ("" where it does): another format's, or this one's without fields the record must have."""
        if other := cls.RECORD.other_version(value):
            return other
        lacking = cls.lacking(value)
        return f"a version of this pipeline that did not record {', '.join(lacking)}" if lacking else ""

    @classmethod
    def lacking(cls, value: Mapping) -> list[str]:
        """The fields without a default that ``value`` (a file's content) does not have."""
        kinds = fields(cls)  # type: ignore[arg-type]
        return [f.name for f in kinds if f.name not in value and f.default is f.default_factory is MISSING]

    @classmethod
    def read(cls: type[T], folder: str) -> T:
        """The record in ``folder``; a one-line error when there is none or it is not this code's."""
        return cls.from_dict(cls.RECORD.read_any(folder), f"{cls.RECORD.folder} {folder}")

    @classmethod
    def read_if_any(cls: type[T], folder: str) -> T | None:
        """``read``, or None where ``folder`` holds no such file."""
        found = cls.RECORD.read_any(folder, missing_ok=True)
        return None if found is None else cls.from_dict(found, f"{cls.RECORD.folder} {folder}")

    @classmethod
    def read_current(cls: type[T], folder: str) -> T | None:
        """``read``, or None where ``folder`` holds no such file, and, with a warning, where another version of the
        pipeline made it or it lacks a field (a baseline's, which a run goes on without)."""
        found = cls.RECORD.read_current(folder)
        if found is not None and (lacking := cls.lacking(found)):
            where, named = f"{cls.RECORD.folder} {folder}", ", ".join(lacking)
            log.warning("%s: its %s has no %s: left aside", where, cls.RECORD.name, named)
            return None
        return None if found is None else cls.from_dict(found, f"{cls.RECORD.folder} {folder}")

    def write(self, folder: str) -> dict:
        """Writes the record into ``folder``, whole or not at all; returns what it wrote."""
        return self.RECORD.write(folder, self.to_dict())

    def to_dict(self) -> dict:
        """The record as its file holds it: every field."""
        return asdict(self)  # type: ignore[call-overload]


class Facts(Typed, Mapping):
    """A typed record that also reads as (and is written as) the mapping of its fields that have a value (None:
    the fact is not this record's, an image size in a text model's). A conversion's ``stats.json``, a model's
    ``model_config.json`` and an ``export.json`` describe their input with the same keys, which
    ``components.modalities`` reads from any of them."""

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key) if key in self._names() else None
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._names() if getattr(self, name) is not None)

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(item.name for item in fields(cls))  # type: ignore[arg-type]

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def to_dict(self) -> dict:
        """The record as its file holds it: the facts it has (none of another modality's, for one)."""
        return dict(self)


STATS = Record("stats.json", 1, "examples dir", "convert", "convert the data again")
# model config 2: the built-in ngrams gained the words' character grams (hyperparameter char_buckets), which a
# model of format 1 does not have: rebuilt by its recorded hyperparameters, it would not take its own weights
MODEL_CONFIG = Record("model_config.json", 2, "model dir", "train", "retrain")
HISTORY = Record("history.json", 1, "model dir", "train", "retrain")
TUNING = Record("tuning.json", 1, "model dir", "train", "retrain")
EXPORT = Record("export.json", 1, "export", "export", "export it again")
METRICS = Record("metrics.json", 1, "evaluation", "evaluate", "evaluate again")
CHECKS = Record("data_checks.json", 1, "data checks", "check-data", "check the data again")
DATA_STATS = Record("data_stats.json", 1, "data statistics", "check-data", "check the data again")
VERSION = Record("version.json", 1, "registered version", "register", "register the model again")
DEFAULT = Record("default", 1, "model registry", "register", "register a model again")
RECORDS = (STATS, MODEL_CONFIG, HISTORY, TUNING, EXPORT, METRICS, CHECKS, DATA_STATS, VERSION, DEFAULT)
