"""What a text source holds: the texts of class folders (aclImdb's split folders too) or of a table (``.csv`` or
``.jsonl`` with a text and a label column), their class names and the source's fingerprint."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

from components.cli import UsageError
from components.convert.listing import (
    fingerprint_digest,
    fingerprint_of,
    in_class_order,
    visible_files,
)
from components.decoding import IMAGE_SUFFIXES
from components.params import CONVERT, TEXT
from components.storage import open_read

TABLE_SUFFIXES = (".csv", ".jsonl")


UNSUPERVISED = "unsup"  # aclImdb's unlabelled reviews


@dataclass(frozen=True)
class TextListing:
    """The texts of a source: class names in index order; items ``(id, class index, split or "", text or None)``,
    the text given for table rows and read by the workers for files."""

    class_names: tuple[str, ...]
    items: tuple[tuple[str, int, str, str | None], ...]
    total_bytes: int
    rejected: tuple[dict, ...] = ()
    fingerprint: str = ""
    splits_from_source: tuple[str, ...] = ()


def text_source_fingerprint(
    source: str,
    classes: Sequence[str] = CONVERT["classes"].default,
    text_column: str = TEXT["text_column"].default,
    label_column: str = TEXT["label_column"].default,
) -> str:
    """The fingerprint of a text source (the same as its conversion's ``stats.json`` records), with its checks; a
    table is read a piece at a time, its texts not kept."""
    if source.lower().endswith(TABLE_SUFFIXES):
        listing, texts = scan_table(source, text_column, label_column, keep_texts=False)
        if not texts:
            raise UsageError(no_texts(source))
        return (in_class_order(listing, classes, source, "classes") if classes else listing).fingerprint
    return list_text_source(source, classes, text_column, label_column).fingerprint


def no_texts(source: str) -> str:
    return f"data path {source} holds no texts: every row or file was rejected (see the log)"


def check_columns(path: str, columns: set, text_column: str, label_column: str) -> None:
    """A one-line error naming the column missing from ``columns`` and the flag that names the right one (or, with
    no column at all, what the file must hold)."""
    if not columns:  # (an empty file, a JSON array, a blank first line)
        raise UsageError(
            f"data path {path} has no columns: it holds no texts as a JSON object a line (.jsonl) or rows under a "
            f"header (.csv) naming {text_column} and {label_column}"
        )
    for column, flag in ((text_column, "--text-column"), (label_column, "--label-column")):
        if column not in columns:
            have = ", ".join(sorted(columns)) or "none"
            raise UsageError(
                f"data path {path} has no column {column!r} (its columns: {have}): name the right one with {flag}"
            )


def list_text_folder(root: str) -> TextListing:
    """``<root>/<class>/*`` or aclImdb's ``<root>/<split>/<class>/*``: every file in a class folder is an item."""
    root = root.rstrip("/")
    if "://" not in root and not os.path.isdir(root):
        raise UsageError(
            f"data path {root} is not a folder: pass <root>/<class_name>/*.txt, aclImdb's "
            "<root>/train|test/<class_name>/*.txt, or a .csv/.jsonl of texts and labels"
        )
    split_folders = ("train", "validation", "test")
    nested = [meta for meta in visible_files(f"{root}/*/*/*") if meta.path.split("/")[-3] in split_folders]
    kept, by_class, source_splits = [], {}, set()
    for meta in nested or visible_files(f"{root}/*/*"):
        parts = meta.path.rstrip("/").split("/")
        if parts[-2] == UNSUPERVISED or parts[-2].startswith("."):  # (a hidden folder is no class)
            continue
        kept.append(meta)
        split = parts[-3] if nested else ""
        source_splits.add(split)
        # a train folder's texts are hashed into train and validation (unless the source has a validation folder)
        by_class.setdefault(parts[-2], []).append((meta.path, "" if split == "train" else split))
    if not by_class:
        raise UsageError(
            f"data path {root} holds no text files: expected <root>/<class_name>/*.txt or aclImdb's "
            "<root>/train|test/<class_name>/*.txt"
        )
    if all(meta.path.lower().endswith(IMAGE_SUFFIXES) for meta in kept):  # (each would be quarantined as binary)
        raise UsageError(
            f"data path {root} holds images, not texts: leave --modality auto (or pass image) for them; texts are "
            "<root>/<class_name>/*.txt"
        )
    class_names = tuple(sorted(by_class))
    items = tuple(
        (path, index, split, None) for index, name in enumerate(class_names) for path, split in sorted(by_class[name])
    )
    return TextListing(
        class_names,
        items,
        sum(meta.size_in_bytes for meta in kept),
        fingerprint=fingerprint_of(kept),
        splits_from_source=tuple(sorted(source_splits - {""})),
    )


def list_text_table(path: str, text_column: str, label_column: str) -> TextListing:
    """A CSV (with a header) or JSONL file: a row per text. Rows without a text or a label are quarantined; a column
    missing from the file is a one-line error."""
    return scan_table(path, text_column, label_column)[0]


TABLE_CHUNK = 1 << 22  # a table is read 4 MiB at a time


class HashedReader(io.RawIOBase):
    """A binary file read through: each byte counted (``size``) and fed to ``digest`` as it goes."""

    def __init__(self, raw, digest):
        self.raw, self.digest, self.size = raw, digest, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.raw.read(len(buffer))
        self.digest.update(data)
        self.size += len(data)
        buffer[: len(data)] = data
        return len(data)


def scan_table(path: str, text_column: str, label_column: str, keep_texts: bool = True) -> tuple[TextListing, int]:
    """(the listing of a CSV or JSONL table, its texts' count), read a piece at a time; its texts and quarantine
    records kept only with ``keep_texts`` (the fingerprint step needs the classes and the fingerprint alone)."""
    if "://" not in path and not os.path.isfile(path):
        raise UsageError(f"data path {path} does not exist: pass a .csv or .jsonl of {text_column} and {label_column}")
    jsonl = path.lower().endswith(".jsonl")
    digest, rejected, labelled, labels, texts = fingerprint_digest(), [], [], set(), 0
    with open_read(path, chunk_bytes=TABLE_CHUNK) as handle:
        read = HashedReader(handle, digest)
        # (JSON lines end at "\n" only: JSON strings may hold U+2028 and the like, which splitlines() would cut at)
        text = io.TextIOWrapper(io.BufferedReader(read, TABLE_CHUNK), "utf-8-sig", newline="\n" if jsonl else "")
        try:
            rows, columns = (
                json_rows(text, path, rejected) if jsonl else csv_rows(text, path, text_column, label_column)
            )
            for number, row in rows:
                body, label = row.get(text_column), row.get(label_column)
                label = "" if label is None else str(label).strip()
                if not label:
                    rejected.append({"path": f"{path}:{number}", "reason": f"no {label_column}"})
                    continue
                if not isinstance(body, str):
                    rejected.append({"path": f"{path}:{number}", "reason": f"{text_column} is not a string"})
                    continue
                texts += 1
                labels.add(label)
                if keep_texts:
                    labelled.append((f"{path}:{number}", label, body))
        except UnicodeDecodeError as err:
            raise UsageError(f"data path {path} is not UTF-8 text ({err.reason}): save it as UTF-8") from None
        if jsonl:  # (a CSV's header was checked before its rows)
            check_columns(path, columns, text_column, label_column)
    class_names = tuple(sorted(labels))
    index = {name: i for i, name in enumerate(class_names)}
    items = tuple((where, index[label], "", body) for where, label, body in labelled)
    (meta,) = visible_files(path) or [None]
    fingerprint = fingerprint_of([meta] if meta else [], digest=digest)
    return TextListing(class_names, items, read.size, tuple(rejected) if keep_texts else (), fingerprint), texts


def csv_rows(text, path: str, text_column: str, label_column: str):
    """(rows of a CSV table, numbered as lines from 2, and its columns): a one-line error at once where its header
    lacks a column."""
    reader = csv.DictReader(text)
    columns = set(reader.fieldnames or ())
    check_columns(path, columns, text_column, label_column)
    return enumerate(reader, start=2), columns


def json_rows(text, path: str, rejected: list):
    """(the JSON objects of a JSONL table, numbered by line, and their keys, filled in as they are read): a line
    that is not an object becomes a quarantine record in ``rejected``."""
    columns: set = set()

    def rows():
        for number, line in enumerate(text, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                rejected.append({"path": f"{path}:{number}", "reason": f"not a JSON object: {err.msg}"})
                continue
            if not isinstance(row, dict):
                rejected.append({"path": f"{path}:{number}", "reason": "not a JSON object"})
                continue
            columns.update(row)
            yield number, row

    return rows(), columns


def list_text_source(
    source: str,
    classes: Sequence[str] = CONVERT["classes"].default,
    text_column: str = TEXT["text_column"].default,
    label_column: str = TEXT["label_column"].default,
) -> TextListing:
    if source.lower().endswith(TABLE_SUFFIXES):
        listing = list_text_table(source, text_column, label_column)
    else:
        listing = list_text_folder(source)
    if not listing.items:
        raise UsageError(no_texts(source))
    return in_class_order(listing, classes, source, "classes") if classes else listing
