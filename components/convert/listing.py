"""What a source holds, without converting it: the images or texts of a folder, a manifest, a NumPy array, a table
or TFRecords, their class names and the source's fingerprint. Free of Beam and TensorFlow: the fingerprint step runs
this alone, in the light image (``containers/light``); local paths and ``gs://`` go through ``components.storage``."""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import io
import logging
import mimetypes
import os
from collections.abc import Sequence
from dataclasses import dataclass

from components.cli import UsageError, one_line
from components.decoding import IMAGE_FILES, IMAGE_SUFFIXES, NO_IMAGE
from components.params import CONVERT, TEXT
from components.schema import MODALITIES
from components.storage import find, iter_match, match, open_read, read_bytes

log = logging.getLogger(__name__)


def fingerprint_of(metadata, extra: bytes = b"", digest=None) -> str:
    """A digest of the files found (``components.storage.match``: path, size, mtime): new, removed or changed files
    change it, and so does a new format of any artifact (``components.artifacts.records``): the fingerprint is the
    conversion's cache key in the DAG, so that after such an upgrade the run converts and trains again instead of
    handing a cached artifact of the older format to a step that refuses it.

    The files' own digests are summed (modulo 2**256): the same whatever order a listing gives them in, so that
    ``metadata`` streams through, however many files there are, without being held or sorted. ``extra``: bytes of
    the source's own (a manifest's), or ``digest``, a ``fingerprint_digest`` fed with them as they were read."""
    digest = digest or fingerprint_digest(extra)
    total = files = 0
    for meta in metadata:
        entry = f"{meta.path}\0{meta.size_in_bytes}\0{meta.last_updated_in_seconds}\n".encode()
        total += int.from_bytes(hashlib.sha256(entry).digest(), "big")
        files += 1
    digest.update(f"{files} files\0".encode() + (total % (1 << 256)).to_bytes(32, "big"))
    return digest.hexdigest()


def fingerprint_digest(extra: bytes = b""):
    """The digest a fingerprint starts from: the artifacts' format versions, then ``extra`` (more may follow)."""
    from components.artifacts.records import RECORDS

    formats = "".join(f"{record.name} format {record.version}\n" for record in RECORDS)
    return hashlib.sha256(formats.encode() + extra)


def in_class_order(listing, classes: Sequence[str], source: str, found: str):
    """A listing (images or texts: items ``(where, class index, ...)``) with its class ids in ``classes``' order
    (``--classes``); a one-line error naming what the source has outside it."""
    unknown = sorted(set(listing.class_names) - set(classes))
    if unknown:
        raise UsageError(f"data path {source} has {found} not in --classes: {', '.join(unknown)}")
    index = {name: i for i, name in enumerate(classes)}
    items = tuple((item[0], index[listing.class_names[item[1]]], *item[2:]) for item in listing.items)
    return dataclasses.replace(listing, class_names=tuple(classes), items=items)


def is_hidden(path: str) -> bool:
    return path.rstrip("/").split("/")[-1].startswith(".")


def visible_files(pattern: str) -> list:
    """The files ``pattern`` matches, but hidden ones (``.DS_Store``, ``._photo.jpg``)."""
    return list(iter_visible(pattern))


def iter_visible(pattern: str):
    """``visible_files``, one at a time as the listing finds them."""
    return (meta for meta in iter_match(pattern) if not is_hidden(meta.path))


IMAGE_TYPES = mimetypes.MimeTypes()  # Python's own table, not the host's /etc/mime.types: the same on every host


NO_IMAGE_SUFFIXES = (".db", ".ini")  # (Windows' Thumbs.db and desktop.ini, which Python's table does not know)


def named_no_image(path: str) -> bool:
    """Whether a file's name says it is no image: a suffix Python's table knows as another type (notes.txt,
    labels.csv), or Windows' Thumbs.db and desktop.ini. A name without a suffix, with an image type's (.heic, .tif)
    or with one the table does not know (.jfif, .jpg_large, .apng) may be an image: the conversion reads it to
    know."""
    suffix = os.path.splitext(path.rsplit("/", 1)[-1])[1].lower()
    kind = IMAGE_TYPES.guess_type("x" + suffix, strict=False)[0]
    return suffix in NO_IMAGE_SUFFIXES or (kind is not None and not kind.startswith("image/"))


@dataclass(frozen=True)
class ImageListing:
    """The images found under a source folder, with class names in index order (sorted)."""

    class_names: tuple[str, ...]
    items: tuple[tuple[str, int, str], ...]  # (path, class index, split from the source or "")
    total_bytes: int
    rejected: tuple[dict, ...] = ()  # quarantine records found while listing (manifest rows)
    fingerprint: str = ""  # changes when a file is added, removed, resized or modified (see ``fingerprint_of``)
    shorter_side: int | None = None  # every image's shorter side, where the source says it (a NumPy array)
    others: tuple[dict, ...] = ()  # quarantine records of a folder's files named as no image (not counted as bad)


FINGERPRINT_BASIS = (
    "sha256 over the source's file paths, sizes and modification times (and a manifest's bytes), and the artifacts' "
    "format versions"
)


def check_folder(root: str) -> str:
    """``root`` without its trailing ``/``; a one-line error where a local one is missing or no folder."""
    root = root.rstrip("/")
    if "://" not in root and not os.path.exists(root):
        raise UsageError(f"data path {root} does not exist: pass a folder of class subfolders of images")
    if "://" not in root and not os.path.isdir(root):
        raise UsageError(f"data path {root} is not a folder: expected <root>/<class_name>/*.jpg")
    return root


def list_image_folder(root: str) -> ImageListing:
    """Lists ``<root>/<class_name>/<image>``; raises ``UsageError`` naming the path when the layout is wrong."""
    root = check_folder(root)
    found, others = [], []
    for meta in class_files(root):
        (others if named_no_image(meta.path) else found).append(meta)
    by_class: dict[str, list] = {}
    for meta in found:
        class_name = meta.path.split("/")[-2]
        by_class.setdefault(class_name, []).append(meta)
    class_names = tuple(sorted(by_class))
    items = tuple(
        (meta.path, index, "")
        for index, name in enumerate(class_names)
        for meta in sorted(by_class[name], key=lambda m: m.path)
    )
    if not items:
        raise UsageError(f"data path {root} holds no images: expected <root>/<class_name>/*.jpg ({IMAGE_FILES})")
    return ImageListing(
        class_names,
        items,
        sum(m.size_in_bytes for m in found),
        others=tuple({"path": meta.path, "reason": NO_IMAGE} for meta in sorted(others, key=lambda m: m.path)),
        fingerprint=fingerprint_of(found + others),
    )


def class_files(root: str, class_names: set | None = None):
    """The files of ``<root>/<class_name>/``, one at a time, as the listing finds them, each class's name added to
    ``class_names``; a one-line error, once the listing is done, where there are none."""
    # every file in a class folder is an item or a quarantine record (one named as no image), never skipped;
    # a hidden folder (.thumbnails, .ipynb_checkpoints) is no class
    class_names = set() if class_names is None else class_names
    for meta in iter_visible(f"{root}/*/*"):
        folder = meta.path.rsplit("/", 1)[0]
        if not is_hidden(folder):
            class_names.add(folder.rsplit("/", 1)[-1])
            yield meta
    if not class_names:
        if next(iter_visible(f"{root}/*"), None):
            raise UsageError(f"data path {root} has images but no class subfolders: expected <root>/<class_name>/*.jpg")
        raise UsageError(f"data path {root} holds no images: expected <root>/<class_name>/*.jpg")


def image_folder_fingerprint(root: str, classes: Sequence[str] = CONVERT["classes"].default) -> str:
    """``list_image_folder(root).fingerprint``, with its checks (and ``--classes``'), from the listing as it
    streams: memory stays the same for a million files (and on ``gs://`` a call lists 1,000)."""
    root = check_folder(root)
    names: set[str] = set()
    fingerprint = fingerprint_of(class_files(root, names))
    unknown = sorted(names - set(classes)) if classes else []
    if unknown:
        raise UsageError(f"data path {root} has class folders not in --classes: {', '.join(unknown)}")
    return fingerprint


ML_USE_SPLITS = {"training": "train", "train": "train", "validation": "validation", "test": "test"}


def list_manifest(manifest: str, classes: Sequence[str] = CONVERT["classes"].default) -> ImageListing:
    """Reads a Vertex AI image-classification import file: rows ``[ML_USE,]IMAGE_URI,LABEL``.

    ``ML_USE`` (``training``, ``validation``, ``test``) becomes the example's split. Relative paths are resolved
    against the manifest's folder. Rows that cannot be used (wrong column count, unknown ``ML_USE``, an empty label,
    a label outside ``classes`` when given) become quarantine records, not errors.
    """
    if "://" not in manifest and not os.path.isfile(manifest):
        raise UsageError(f"manifest {manifest} does not exist: pass a CSV file of [ML_USE,]IMAGE_URI,LABEL rows")
    text = read_bytes(manifest).decode("utf-8-sig")
    base = manifest.rsplit("/", 1)[0] if "/" in manifest else "."
    rows, rejected, first_row, first_uri, header = [], [], {}, "", ""
    for number, row in enumerate(csv.reader(io.StringIO(text, newline="")), start=1):
        row = [cell.strip() for cell in row]
        where = f"{manifest}:{number}"
        if not any(row):
            continue
        if len(row) not in (2, 3):
            rejected.append(
                {"path": where, "reason": f"malformed row: {len(row)} columns, expected [ML_USE,]URI,LABEL"}
            )
            continue
        ml_use, uri, label = row if len(row) == 3 else ("", *row)
        split = ML_USE_SPLITS.get(ml_use.lower(), "" if not ml_use else None)
        if not (rows or rejected or header) and split in (None, "") and not set("./") & set(uri):
            header = ",".join(row)  # (column names: the paths' cell neither a path nor a file name)
            log.info("manifest %s: its line %d (%s) read as a header", manifest, number, header)
        elif split is None:
            rejected.append({"path": where, "reason": f"unknown ML_USE {ml_use!r}: use training, validation or test"})
        elif not label:
            rejected.append({"path": uri or where, "reason": "unknown label: the label column is empty"})
        elif classes and label not in classes:
            rejected.append({"path": uri, "reason": f"unknown label {label!r}: not one of --classes"})
        else:
            path = uri if "://" in uri or uri.startswith("/") else f"{base}/{uri}"
            if path in first_row:  # one image, one example: its first row's label (a class of no other row is none)
                first, first_label = first_row[path]
                other = f" with another label ({label!r}, not {first_label!r})" if label != first_label else ""
                rejected.append({"path": where, "reason": f"{uri} is listed again{other}: its row {first} is kept"})
                continue
            first_row[path] = (number, label)
            first_uri = first_uri or uri
            rows.append((path, label, split))
    if not rows:
        raise UsageError(f"manifest {manifest} has no usable rows: expected [ML_USE,]IMAGE_URI,LABEL lines")
    del first_row
    class_names = tuple(classes) or tuple(sorted({label for _, label, _ in rows}))
    index = {name: i for i, name in enumerate(class_names)}
    items = tuple((path, index[label], split) for path, label, split in rows)
    del rows
    found = find(path for path, _, _ in items).values()  # (by listing their folders, not a call a row)
    if not found:  # (every row a missing file, found only after the whole conversion: not a manifest of images)
        raise UsageError(
            f"manifest {manifest} names no image file that exists ({len(items) + len(rejected)} rows; the first: "
            f"{first_uri[:60]!r}): list images by paths relative to its folder or gs:// URIs, or, for a CSV of texts, "
            "pass --modality text with --text-column and --label-column"
        )
    fingerprint = fingerprint_of(found, extra=text.encode())
    return ImageListing(class_names, items, sum(m.size_in_bytes for m in found), tuple(rejected), fingerprint)


NPZ_EXPECTED = "arrays x (N,H,W[,C]) uint8 and y (N,) integer labels"


def npz_file(path: str) -> list:
    """The .npz file ``path`` as ``match`` finds it; a one-line error when it is not there."""
    found = match(path) if "://" in path or os.path.isfile(path) else []
    if not found:
        raise UsageError(f"array file {path} does not exist: pass a .npz with {NPZ_EXPECTED}")
    return found


def list_npz(path: str, classes: Sequence[str] = CONVERT["classes"].default) -> ImageListing:
    """A NumPy ``.npz`` with ``x`` (N,H,W[,C] uint8) and ``y`` (N,), as ``keras.datasets`` gives CIFAR-10.

    Class names: ``classes`` (names of ids 0..K-1), else a ``class_names`` array in the file, else the sorted label
    values as strings. Each image is an item ``<path>#<index>``.
    """
    import numpy as np

    found = npz_file(path)
    try:
        data = _npz_arrays(path)
    except Exception as err:
        raise UsageError(
            f"array file {path} cannot be read as .npz ({one_line(err, with_type=True)}): expected {NPZ_EXPECTED}"
        ) from None
    missing = [key for key in ("x", "y") if key not in data]
    if missing:
        raise UsageError(f"array file {path} has no {' or '.join(missing)} array: expected {NPZ_EXPECTED}")
    x, y = data["x"], np.asarray(data["y"]).reshape(-1)
    if x.dtype != np.uint8 or x.ndim not in (3, 4) or (x.ndim == 4 and x.shape[3] not in (1, 3, 4)):
        raise UsageError(f"array file {path}: x is {x.dtype} {x.shape}, expected {NPZ_EXPECTED}")
    if len(x) != len(y) or not np.issubdtype(y.dtype, np.integer):
        raise UsageError(f"array file {path}: y is {y.dtype} {y.shape} for {len(x)} images, expected {NPZ_EXPECTED}")
    values = sorted({int(v) for v in y})
    if classes or "class_names" in data:
        names = tuple(classes) or tuple(str(name) for name in data["class_names"])
        if values and (values[0] < 0 or values[-1] >= len(names)):
            raise UsageError(f"array file {path}: labels {values[0]}..{values[-1]} do not index {len(names)} classes")
        index = {value: value for value in values}
    else:
        names = tuple(str(value) for value in values)
        index = {value: i for i, value in enumerate(values)}
    items = tuple((f"{path}#{i}", index[int(label)], "") for i, label in enumerate(y))
    return ImageListing(
        names, items, int(x.nbytes), fingerprint=fingerprint_of(found), shorter_side=int(min(x.shape[1:3]))
    )


@functools.lru_cache(maxsize=2)
def _npz_arrays(path: str) -> dict:
    """The arrays of a .npz (each worker loads a file once)."""

    import numpy as np

    with np.load(io.BytesIO(read_bytes(path)), allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def list_source(source: str, classes: Sequence[str] = CONVERT["classes"].default) -> ImageListing:
    """An image folder, a CSV manifest or a NumPy .npz, by the source's form."""
    if source.lower().endswith(".csv"):
        return list_manifest(source, classes)
    if source.lower().endswith(".npz"):
        return list_npz(source, classes)
    listing = list_image_folder(source)
    return in_class_order(listing, classes, source, "class folders") if classes else listing


def source_fingerprint(source: str, classes: Sequence[str] = CONVERT["classes"].default) -> str:
    """The fingerprint of any source convert accepts, TFRecord globs included (the same as convert's ``stats.json``
    records); a one-line error for a source convert would refuse to list. A .npz's is its file's alone, as convert's:
    its arrays are not read (the conversion checks them), nor is NumPy needed."""
    if is_tfrecord_source(source):
        return fingerprint_of(match_tfrecords(source))
    if source.lower().endswith(".npz"):
        return fingerprint_of(npz_file(source))
    if source.lower().endswith(".csv"):
        return list_manifest(source, classes).fingerprint
    return image_folder_fingerprint(source, classes)


TFRECORD_SUFFIXES = (".tfrec", ".tfrecord", ".tfrecords")


def is_tfrecord_source(source: str) -> bool:
    return source.lower().endswith(TFRECORD_SUFFIXES)


def match_tfrecords(source: str) -> list:
    """The files (``components.storage.FileInfo``) a TFRecord path or glob matches, by path; a one-line error when
    none."""
    metadata = sorted(match(source), key=lambda m: m.path)
    if not metadata:
        raise UsageError(f"TFRecord source {source} matches no files: pass a glob such as gs://b/flowers/*.tfrec")
    return metadata


def is_text_source(
    source: str, text_column: str = TEXT["text_column"].default, label_column: str = TEXT["label_column"].default
) -> bool:
    """Whether ``source`` is a text source: a .jsonl; a .csv whose header names the text and label columns (an
    image manifest, ``[ML_USE,]IMAGE_URI,LABEL`` rows, has no header); or a folder whose class folders (directly or
    under aclImdb's split folders) hold more .txt files than images, among the first ``SAMPLED_FILES`` of them the
    listing finds, within its first ``LISTED_AT_MOST`` files (an image folder with a notes or LICENSE.txt per class
    stays an image folder)."""
    lowered = source.lower()
    if lowered.endswith(".jsonl"):
        return True
    if lowered.endswith(".csv"):
        return {text_column, label_column} <= set(csv_header(source))
    root = source.rstrip("/")
    texts = images = listed = 0
    depth = root.count("/")
    try:
        for listed, meta in enumerate(iter_match(f"{root}/**"), start=1):  # (a page of 1,000 a call on gs://)
            if meta.path.count("/") - depth in (2, 3):  # <root>/<class>/<file>, <root>/<split>/<class>/<file>
                name = meta.path.lower()
                texts += name.endswith(".txt")
                images += name.endswith(IMAGE_SUFFIXES)
            if texts + images >= SAMPLED_FILES or listed >= LISTED_AT_MOST:
                break
    except Exception:  # (the conversion says why it cannot be listed)
        pass
    return texts > images


def csv_header(path: str) -> list[str]:
    """The cells of a CSV file's first line, stripped ([] when it cannot be read: the conversion says why)."""
    try:
        with open_read(path, chunk_bytes=1 << 16) as handle:
            first = handle.read(1 << 16).decode("utf-8-sig", errors="replace").splitlines()[:1]
    except Exception:
        return []
    return [cell.strip() for row in csv.reader(first) for cell in row]


SAMPLED_FILES, LISTED_AT_MOST = 1000, 10_000


def resolve_modality(
    modality: str,
    source: str,
    text_column: str = TEXT["text_column"].default,
    label_column: str = TEXT["label_column"].default,
) -> str:
    """``image`` or ``text``: as given, or (``auto``) what the source holds (``is_text_source``, a CSV by the
    columns named)."""
    if modality not in MODALITIES:
        raise UsageError(f"--modality {modality!r} does not exist: choose one of {', '.join(MODALITIES)}")
    if modality == "auto":
        return "text" if is_text_source(source, text_column, label_column) else "image"
    return modality
