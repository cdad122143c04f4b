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
from components.convert.listing import csv_header, fingerprint_of, in_class_order, visible_files
from components.params import CONVERT, TEXT
from components.storage import open_read, read_bytes

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
    """The fingerprint of a text source (the same as its conversion's ``stats.json`` records)."""
    if source.lower().endswith(TABLE_SUFFIXES):
        return table_fingerprint(source, text_column, label_column)
    return list_text_source(source, classes, text_column, label_column).fingerprint


def table_fingerprint(path: str, text_column: str, label_column: str) -> str:
    """``list_text_table``'s fingerprint, from the table read 4 MiB at a time (memory flat however large it is), with
    its checks of the file and (a CSV's header) of its columns; its rows are the conversion's to check."""
    check_table(path, text_column, label_column)
    if path.lower().endswith(".csv"):
        check_columns(path, set(csv_header(path)), text_column, label_column)
    (meta,) = visible_files(path) or [None]
    with open_read(path, chunk_bytes=TABLE_CHUNK) as handle:
        return fingerprint_of([meta] if meta else [], chunks=iter(lambda: handle.read(TABLE_CHUNK), b""))


TABLE_CHUNK = 1 << 22


def check_table(path: str, text_column: str, label_column: str) -> None:
    if "://" not in path and not os.path.isfile(path):
        raise UsageError(f"data path {path} does not exist: pass a .csv or .jsonl of {text_column} and {label_column}")


def check_columns(path: str, columns: set, text_column: str, label_column: str) -> None:
    """A one-line error naming the column missing from ``columns`` and the flag that names the right one."""
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
    check_table(path, text_column, label_column)
    content = read_bytes(path)
    try:
        decoded = content.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise UsageError(
            f"data path {path} is not UTF-8 text ({err.reason} at byte {err.start}): save it as UTF-8"
        ) from None
    rows, rejected = [], []
    if path.lower().endswith(".jsonl"):
        # (lines end at "\n" only: JSON strings may hold U+2028 and the like, which splitlines() would cut at)
        for number, line in enumerate(decoded.split("\n"), start=1):
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
            rows.append((number, row))
        columns = set().union(*(row.keys() for _, row in rows)) if rows else set()
    else:
        reader = csv.DictReader(io.StringIO(decoded))
        columns = set(reader.fieldnames or ())
        rows = [(number, row) for number, row in enumerate(reader, start=2)]
    check_columns(path, columns, text_column, label_column)
    labelled = []
    for number, row in rows:
        text, label = row.get(text_column), row.get(label_column)
        label = "" if label is None else str(label).strip()
        if not label:
            rejected.append({"path": f"{path}:{number}", "reason": f"no {label_column}"})
        elif not isinstance(text, str):
            rejected.append({"path": f"{path}:{number}", "reason": f"{text_column} is not a string"})
        else:
            labelled.append((f"{path}:{number}", label, text))
    class_names = tuple(sorted({label for _, label, _ in labelled}))
    index = {name: i for i, name in enumerate(class_names)}
    items = tuple((where, index[label], "", text) for where, label, text in labelled)
    (meta,) = visible_files(path) or [None]
    return TextListing(
        class_names,
        items,
        len(content),
        tuple(rejected),
        fingerprint=fingerprint_of([meta] if meta else [], extra=content),
    )


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
        raise UsageError(f"data path {source} holds no texts: every row or file was rejected (see the log)")
    return in_class_order(listing, classes, source, "classes") if classes else listing
