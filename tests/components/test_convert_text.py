"""Text to TFRecords with Beam: aclImdb's folders, CSV and JSONL files; a vocabulary from the training split only;
quarantine with reasons; byte-identical texts kept once. The tests write their own small text sets."""

from __future__ import annotations

import json
import os
import string
from collections import Counter

import pytest

from components.artifacts.records import STATS
from components.cli import UsageError
from components.convert.__main__ import main as convert
from components.schema import SPLITS
from tests.conftest import BUCKET, IN_MEMORY

POSITIVE = [
    "A great film.<br /><br />Great acting, GREAT story!",
    "Loved it: wonderful, moving and great fun.",
    "Wonderful cast; a moving story. Loved the ending!",
    "Great great great. Loved every minute of it.",
    "What a wonderful, wonderful film (truly moving).",
    "Moving, funny and great: I loved it.",
    "Best film of the year, wonderful from start to end.",
    "Great story, great cast, loved it!!",
]
NEGATIVE = [
    "An awful film.<br />Boring acting, awful story.",
    "Hated it: boring, dull and awful.",
    "Dull cast; a boring story. Hated the ending!",
    "Awful awful awful. Hated every minute of it.",
    "What a boring, dull film (truly awful).",
    "Dull, slow and awful: I hated it.",
    "Worst film of the year, boring from start to end.",
    "Awful story, awful cast, hated it!!",
]
# only in the test folder: words frequent enough to top the vocabulary, were it built from every split
TEST_ONLY = {"pos": ["Zebra-striped " + "quokka " * 12], "neg": ["Xylophone " + "kumquat " * 12]}


def tokens_of(text: str) -> list[str]:
    """The standardisation, written here on its own: lowercase, <br /> and punctuation to spaces."""
    text = text.lower().replace("<br />", " ")
    return text.translate(str.maketrans(string.punctuation, " " * len(string.punctuation))).split()


def write(path, content: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(content)


@pytest.fixture(scope="module")
def imdb(tmp_path_factory):
    """A small aclImdb: train/{pos,neg}, test/{pos,neg}, train/unsup (ignored), the files aclImdb has beside them,
    and one empty, one Latin-1, one binary file and one duplicate."""
    root = tmp_path_factory.mktemp("aclImdb")
    for label, texts in (("pos", POSITIVE), ("neg", NEGATIVE)):
        for n, text in enumerate(texts):
            write(f"{root}/train/{label}/{n}_8.txt", text.encode())
        for n, text in enumerate([*texts[:2], *TEST_ONLY[label]]):
            write(f"{root}/test/{label}/{n}_7.txt", (text + " (seen again)").encode())
    write(f"{root}/train/unsup/0_0.txt", b"No label here: great awful unlabelled text.")
    write(f"{root}/imdb.vocab", b"the\nand\n")
    write(f"{root}/train/labeledBow.feat", b"0:1 1:2\n")
    write(f"{root}/train/pos/empty_1.txt", b"   \n")
    write(f"{root}/train/neg/latin_1.txt", "Un film g\xe2ch\xe9".encode("latin-1"))
    write(f"{root}/train/neg/binary_1.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    write(f"{root}/test/pos/copy_9.txt", POSITIVE[3].encode())  # the bytes of train/pos/3_8.txt
    output = tmp_path_factory.mktemp("text-examples") / "examples"
    # in this process (the command line's main): the one-line errors and exit codes of every step's command line
    # are tested in tests/pipeline/test_cli_mistakes.py
    assert (
        convert(
            [
                "--source",
                str(root),
                "--output",
                str(output),
                "--vocabulary-size",
                "12",
                "--sequence-length",
                "8",
                "--max-bad-fraction",
                "0.2",
                *IN_MEMORY,
            ]
        )
        == 0
    )
    return root, output


def read_split(output, split: str) -> list[dict]:
    import tensorflow as tf

    spec = {
        "tokens": tf.io.FixedLenFeature([8], tf.int64),
        "text": tf.io.FixedLenFeature([], tf.string),
        "class": tf.io.FixedLenFeature([], tf.int64),
        "label": tf.io.FixedLenFeature([], tf.string),
        "one_hot_class": tf.io.FixedLenFeature([2], tf.float32),
    }
    files = sorted(tf.io.gfile.glob(f"{output}/{split}/*.tfrec"))
    records = []
    for serialized in tf.data.TFRecordDataset(files):
        parsed = tf.io.parse_single_example(serialized, spec)
        records.append({key: value.numpy() for key, value in parsed.items()})
    return records


def test_aclimdb_folders_set_the_splits_and_unsup_is_left_out(imdb):
    _, output = imdb
    with open(output / "stats.json") as handle:
        stats = json.load(handle)
    assert stats["modality"] == "text" and stats["class_names"] == ["neg", "pos"]
    assert stats["splits_from_source"] == ["test", "train"]
    # test: the 3 texts of each test folder and copy_9, whose bytes train/pos/3_8.txt repeats (the first path in
    # order is kept: test/ sorts before train/); train and validation: the other 15 texts, validation hashed out
    assert stats["counts"]["test"] == 7 and stats["per_class"]["test"] == {"neg": 3, "pos": 4}
    assert stats["counts"]["train"] + stats["counts"]["validation"] == 15
    assert stats["counts"]["validation"] > 0
    texts = {split: [r["text"].decode() for r in read_split(output, split)] for split in SPLITS}
    assert not [t for t in texts["train"] + texts["validation"] if "seen again" in t]
    assert [t for t in texts["test"] if "seen again" not in t] == [POSITIVE[3]]
    assert not [t for split in SPLITS for t in texts[split] if "unlabelled" in t]


def test_bad_files_are_quarantined_with_reasons_and_duplicates_kept_once(imdb):
    root, output = imdb
    with open(output / "quarantine.jsonl") as handle:
        quarantined = {os.path.basename(r["path"]): r["reason"] for r in map(json.loads, handle)}
    assert sorted(quarantined) == ["binary_1.txt", "empty_1.txt", "latin_1.txt"]
    assert quarantined["empty_1.txt"].startswith("empty")
    assert quarantined["latin_1.txt"].startswith("not UTF-8")
    assert quarantined["binary_1.txt"].startswith("binary file")
    with open(output / "duplicates.jsonl") as handle:
        (duplicate,) = map(json.loads, handle)
    assert duplicate == {"path": f"{root}/train/pos/3_8.txt", "duplicate_of": f"{root}/test/pos/copy_9.txt"}
    kept = [r for split in SPLITS for r in read_split(output, split) if r["text"].decode() == POSITIVE[3]]
    assert len(kept) == 1


def test_the_vocabulary_comes_from_the_training_split_only(imdb):
    _, output = imdb
    with open(output / "vocabulary.txt", encoding="utf-8") as handle:
        vocabulary = handle.read().split("\n")[:-1]
    assert vocabulary[:2] == ["", "[UNK]"] and len(vocabulary) == 12
    train = [r["text"].decode() for r in read_split(output, "train")]
    counts = Counter(token for text in train for token in tokens_of(text))
    expected = [token for token, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]]
    assert vocabulary[2:] == expected
    held_out = {
        token
        for split in ("validation", "test")
        for r in read_split(output, split)
        for token in tokens_of(r["text"].decode())
    } - set(counts)
    assert {"zebra", "striped", "quokka", "xylophone", "kumquat"} <= held_out
    assert not held_out & set(vocabulary)


def test_tokens_are_the_vocabulary_ids_padded_or_truncated_at_the_end(imdb):
    _, output = imdb
    with open(output / "vocabulary.txt", encoding="utf-8") as handle:
        index = {token: i for i, token in enumerate(handle.read().split("\n")[:-1]) if i >= 2}
    with open(output / "stats.json") as handle:
        stats = json.load(handle)
    seen_padding = seen_truncation = False
    for split in SPLITS:
        for record in read_split(output, split):
            words = tokens_of(record["text"].decode())
            ids = [index.get(word, 1) for word in words][:8]
            assert list(record["tokens"]) == ids + [0] * (8 - len(ids))
            assert record["label"].decode() == stats["class_names"][record["class"]]
            assert list(record["one_hot_class"]) == [float(i == record["class"]) for i in range(2)]
            seen_padding |= len(words) < 8
            seen_truncation |= len(words) > 8
    assert seen_padding and seen_truncation
    assert 0 < stats["tokens"]["train"]["truncated"] < 1 and stats["sequence_length"] == 8


def test_a_csv_with_modality_text_and_a_jsonl_found_by_its_suffix(tmp_path, caplog):
    rows = [(text, "pos") for text in POSITIVE] + [(text, "neg") for text in NEGATIVE]
    import csv

    with open(tmp_path / "reviews.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["review", "sentiment"])
        writer.writerows([*rows, ("", "pos"), ("A text with no label", "")])
    with open(tmp_path / "reviews.jsonl", "w", encoding="utf-8") as handle:
        for text, label in rows:
            handle.write(json.dumps({"review": text, "sentiment": label}) + "\n")
    caplog.set_level("INFO", logger="components.convert.text")
    # the CSV is found to be texts by its header naming the columns given, as with --modality text
    for source, extra in (("reviews.csv", ["--modality", "text"]), ("reviews.csv", []), ("reviews.jsonl", [])):
        output = tmp_path / f"out-{source}-{len(extra)}"
        columns = ["--text-column", "review", "--label-column", "sentiment", "--max-bad-fraction", "0.2"]
        assert convert(["--source", str(tmp_path / source), "--output", str(output), *columns, *extra, *IN_MEMORY]) == 0
        with open(output / "stats.json") as handle:
            stats = json.load(handle)
        assert stats["modality"] == "text" and stats["num_examples"] == 16, source
        assert stats["class_names"] == ["neg", "pos"]
        with open(output / "quarantine.jsonl") as handle:
            reasons = sorted(json.loads(line)["reason"] for line in handle)
        assert reasons == (["empty: no text", "no sentiment"] if source.endswith(".csv") else []), source
    # the lines agree on the CSV's 18 rows: 17 texts and a row without a label; 16 converted, 2 quarantined
    said = [r.getMessage() for r in caplog.records if r.name == "components.convert.text"]
    assert f"found 17 texts in 2 classes under {tmp_path / 'reviews.csv'} (18 rows, 1 unusable): neg, pos" in said
    assert any(
        line.startswith("converted 16 texts")
        and line.endswith("quarantined 2 (1 of them unusable rows), duplicates dropped 0")
        for line in said
    ), said


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (
            lambda p: write(f"{p}/r.jsonl", b'{"text": "good", "stars": 5}\n'),
            "has no column 'label' (its columns: stars, text): name the right one with --label-column",
        ),
        (
            lambda p: [write(f"{p}/one/{n}.txt", f"text {n}".encode()) for n in range(3)],
            "has one class (one): a classifier needs at least 2 classes",
        ),
        *(  # (not: has no column 'text')
            (lambda p, held=held: write(f"{p}/r.jsonl", held), "has no columns: it holds no texts as a JSON object")
            for held in (b"", b'[{"text": "good", "label": "pos"}]\n')
        ),
    ],
)
def test_bad_sources_are_one_line_errors(tmp_path, setup, message):
    setup(tmp_path)
    source = str(tmp_path / "r.jsonl") if os.path.exists(tmp_path / "r.jsonl") else str(tmp_path)
    with pytest.raises(UsageError) as raised:
        convert(["--source", source, "--output", str(tmp_path / "out"), "--modality", "text", *IN_MEMORY])
    (line,) = str(raised.value).splitlines()
    assert line.startswith(f"data path {source} ") and message in line, line


def test_a_folder_with_no_text_files_is_one_line(tmp_path):
    os.makedirs(tmp_path / "empty" / "pos")
    with pytest.raises(UsageError) as raised:
        convert(["--source", str(tmp_path / "empty"), "--output", str(tmp_path / "out"), "--modality", "text"])
    assert str(raised.value) == (
        f"data path {tmp_path / 'empty'} holds no text files: expected <root>/<class_name>/*.txt or aclImdb's "
        "<root>/train|test/<class_name>/*.txt"
    )


def test_a_folder_of_images_taken_for_texts_is_one_line_before_converting(tmp_path):
    """``--modality text`` on a folder of photos: every file would be quarantined as binary after the whole
    conversion; it is refused at once."""
    from tests.conftest import image_bytes

    for name in ("cat", "dog"):
        os.makedirs(tmp_path / "photos" / name)
        (tmp_path / "photos" / name / "1.jpg").write_bytes(image_bytes((200, 10, 10)))
    with pytest.raises(UsageError) as raised:
        convert(["--source", str(tmp_path / "photos"), "--output", str(tmp_path / "out"), "--modality", "text"])
    assert str(raised.value) == (
        f"data path {tmp_path / 'photos'} holds images, not texts: leave --modality auto (or pass image) for them; "
        "texts are <root>/<class_name>/*.txt"
    )
    assert not (tmp_path / "out").exists()


def test_a_jsonl_on_gcs_is_converted_into_gcs(gcs):
    from components.convert.text import TextConvertConfig, run_text
    from components.storage import read_json

    lines = [
        json.dumps({"text": t, "label": label})
        for label, texts in (("pos", POSITIVE), ("neg", NEGATIVE))
        for t in texts
    ]
    gcs.blob("texts/reviews.jsonl").upload_from_string("\n".join(lines).encode())
    output = f"gs://{BUCKET}/text-examples"
    stats = run_text(
        TextConvertConfig(
            source=f"gs://{BUCKET}/texts/reviews.jsonl", output_dir=output, vocabulary_size=20, pipeline_args=IN_MEMORY
        )
    )
    assert stats["num_examples"] == 16 and read_json(f"{output}/stats.json") == {
        "format_version": STATS.version,
        **stats,
    }
    names = {blob.name for blob in gcs.client.list_blobs(BUCKET, prefix="text-examples/")}
    assert "text-examples/vocabulary.txt" in names


def test_classes_fix_the_class_ids_and_a_label_outside_them_is_one_line(tmp_path):
    from components.convert.text_listing import list_text_source

    for label in ("neg", "pos"):
        write(f"{tmp_path}/r/{label}/1.txt", f"a {label} text".encode())
    listing = list_text_source(str(tmp_path / "r"), classes=("pos", "neg"))
    assert listing.class_names == ("pos", "neg")
    assert {os.path.basename(os.path.dirname(where)): index for where, index, _, _ in listing.items} == {
        "pos": 0,
        "neg": 1,
    }
    with pytest.raises(UsageError, match=r"has classes not in --classes: neg$"):
        list_text_source(str(tmp_path / "r"), classes=("pos",))


def test_auto_tells_texts_from_images_by_what_the_class_folders_mostly_hold(tmp_path):
    """A .jsonl and a folder of .txt files are texts; an image folder with a LICENSE.txt per class stays images; a
    CSV is texts when its header names the text and label columns, else an image manifest (which has no header)."""
    from components.convert.listing import resolve_modality
    from tests.conftest import image_bytes

    photos = tmp_path / "photos"
    for name, color in (("cat", (200, 10, 10)), ("dog", (10, 200, 10))):
        os.makedirs(photos / name)
        for index in range(3):
            (photos / name / f"{index}.jpg").write_bytes(image_bytes(color, seed=index))
        (photos / name / "LICENSE.txt").write_text("CC-BY 4.0")
    reviews = tmp_path / "reviews"
    for name in ("pos", "neg"):
        os.makedirs(reviews / "train" / name)
        (reviews / "train" / name / "1.txt").write_text(f"a {name} review")
    (tmp_path / "rows.jsonl").write_text('{"text": "good", "label": "pos"}')
    assert resolve_modality("auto", str(photos)) == "image"
    assert resolve_modality("auto", str(reviews)) == "text"
    assert resolve_modality("auto", str(tmp_path / "rows.jsonl")) == "text"
    assert resolve_modality("auto", str(tmp_path / "manifest.csv")) == "image"  # (not there: convert says so)
    assert resolve_modality("text", str(tmp_path / "manifest.csv")) == "text"
    (tmp_path / "manifest.csv").write_text(f"training,{photos}/cat/0.jpg,cat\ntest,{photos}/dog/0.jpg,dog\n")
    (tmp_path / "reviews.csv").write_text("\ufeffid, review ,stars\n1,good,5\n")
    assert resolve_modality("auto", str(tmp_path / "manifest.csv")) == "image"
    assert resolve_modality("auto", str(tmp_path / "reviews.csv")) == "image"  # no "text" and "label" columns
    assert resolve_modality("auto", str(tmp_path / "reviews.csv"), text_column="review", label_column="stars") == "text"
    assert resolve_modality("auto", str(tmp_path / "reviews.csv"), text_column="review") == "image"
    with pytest.raises(UsageError, match=r"^--modality 'sound' does not exist: choose one of auto, image, text$"):
        resolve_modality("sound", str(photos))


def test_a_jsonl_text_may_hold_line_separators_inside_its_strings(tmp_path):
    """U+2028 and U+0085 are legal unescaped in JSON strings: a row holding them is one row, not two broken ones."""
    from components.convert.text_listing import list_text_table

    rows = [{"text": "first line\u2028second\u0085third", "label": "pos"}, {"text": "plain", "label": "neg"}]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(row, ensure_ascii=False) for row in rows), encoding="utf-8")
    listing = list_text_table(str(path), "text", "label")
    assert sorted(item[3] for item in listing.items) == sorted(row["text"] for row in rows) and not listing.rejected


def test_a_hidden_folder_is_no_class_of_texts(tmp_path):
    from components.convert.text_listing import list_text_folder

    for path in ("pos/1.txt", "neg/2.txt", ".ipynb_checkpoints/3.txt"):
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text("some words")
    assert list_text_folder(str(tmp_path)).class_names == ("neg", "pos")


def test_a_text_conversion_speaks_of_texts(caplog):
    """(It told users of a text source to add images.)"""
    from components.convert.common import warn_small_classes

    caplog.set_level("WARNING", logger="components.convert.common")
    warn_small_classes({"modality": "text", "small_classes": {"test": {"neg": 2}}})
    warn_small_classes({"small_classes": {"validation": {"cat": 1, "dog": 3}}})
    assert [record.getMessage() for record in caplog.records] == [
        "few test examples (under 5) for class neg (2): its test figures will say little; add texts or change the "
        "split fractions",
        "few validation examples (under 5) for class cat (1), dog (3): its validation figures will say little; add "
        "images or change the split fractions",
    ]
