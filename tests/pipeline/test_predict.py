"""``python -m pipeline predict``: the exported SavedModel answers for image files on the CPU, the codelab's last
step; a bad image is reported on one line and the others are still answered."""

from __future__ import annotations

import json
import warnings

import pytest

from components.cli import UsageError
from pipeline.__main__ import main
from tests.conftest import CLASSES, COLORS, image_bytes


def write(path, content: bytes) -> str:
    path.write_bytes(content)
    return str(path)


def test_top_3_labels_for_every_format_and_a_bad_image_reported_alone(exported, tmp_path, capsys):
    output, _ = exported
    images = {
        "cat": write(tmp_path / "cat.jpg", image_bytes(COLORS["cat"], (80, 60), "JPEG", seed=71)),
        "fish": write(tmp_path / "fish.png", image_bytes(COLORS["fish"], (50, 90), "PNG", seed=72)),
        "dog": write(tmp_path / "dog.webp", image_bytes(COLORS["dog"], (64, 64), "WEBP", seed=73)),
    }
    broken = write(tmp_path / "broken.jpg", b"\xff\xd8 not really a jpeg")
    code = main(["predict", "--model", output, images["cat"], broken, images["fish"], images["dog"]])
    assert code == 2  # one image could not be used
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert len(lines) == 3
    for line, (truth, path) in zip(lines, images.items(), strict=True):
        assert line.startswith(f"{path}: ")
        top = [item.rsplit(" ", 1) for item in line.split(": ", 1)[1].split(", ")]
        labels, probabilities = [label for label, _ in top], [float(p) for _, p in top]
        assert len(top) == 3 and set(labels) == set(CLASSES)
        assert probabilities == sorted(probabilities, reverse=True) and abs(sum(probabilities) - 1.0) < 0.01
        assert labels[0] == truth
    (error,) = captured.err.strip().splitlines()
    assert error.startswith(f"error: image {broken} cannot be used: ")


def test_json_output_and_the_saved_model_folder_itself(exported, tmp_path, capsys):
    output, _ = exported
    image = write(tmp_path / "fish.jpg", image_bytes(COLORS["fish"], (40, 40), "JPEG", seed=74))
    assert main(["predict", "--model", f"{output}/saved_model", "--top", "1", "--json", image]) == 0
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert record["path"] == image and [t["label"] for t in record["top"]] == ["fish"]


def test_a_folder_of_images_is_answered_file_by_file_at_any_depth(exported, tmp_path, capsys):
    """A folder given as an image stands for the image files under it, at any depth, in the order of their paths (a
    folder per class, as the conversion reads them, works as it is); its other files are left out and counted on
    stderr, and a folder without an image file is an error of its own, the others still answered."""
    output, _ = exported
    photos = tmp_path / "photos"
    for name in CLASSES:
        (photos / name).mkdir(parents=True)
    expected = {
        str(photos / "cat" / "b.JPG"): "cat",
        str(photos / "cat" / "a.png"): "cat",
        str(photos / "fish" / "c.jpeg"): "fish",
        str(photos / "dog" / "d.webp"): "dog",
    }
    formats = {"JPG": "JPEG", "png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}
    for seed, (path, name) in enumerate(expected.items()):
        write(tmp_path / path, image_bytes(COLORS[name], (40, 40), formats[path.rsplit(".", 1)[1]], seed=80 + seed))
    (photos / "notes.txt").write_text("taken in May")
    (photos / "cat" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")  # hidden: not even counted
    (tmp_path / "empty").mkdir()
    single = write(tmp_path / "single.png", image_bytes(COLORS["fish"], (40, 40), "PNG", seed=90))
    code = main(["predict", "--model", output, "--top", "1", str(photos), str(tmp_path / "empty"), single])
    assert code == 2  # the folder without images
    captured = capsys.readouterr()
    answered = [line.split(": ", 1) for line in captured.out.strip().splitlines()]
    assert [path for path, _ in answered] == [*sorted(expected), single]
    assert [top.rsplit(" ", 1)[0] for _, top in answered] == [expected[path] for path in sorted(expected)] + ["fish"]
    assert captured.err.strip().splitlines() == [
        f"note: folder {photos}: 4 image files; 1 other file left out (notes.txt): images are JPEG, PNG, GIF, BMP or "
        "WebP files (.jpg, .jpeg, .png, .gif, .bmp, .webp)",
        f"error: folder {tmp_path / 'empty'} holds no image file: images are JPEG, PNG, GIF, BMP or WebP files (.jpg, "
        ".jpeg, .png, .gif, .bmp, .webp)",
    ]


def test_a_folder_that_is_not_an_export_is_a_one_line_error(tmp_path):
    with pytest.raises(UsageError, match=f"model {tmp_path} is not an export: expected the export step's output"):
        main(["predict", "--model", str(tmp_path), "x.jpg"])


@pytest.mark.parametrize("file", ["model_float.tflite", "model_int8.tflite"])
def test_the_tflite_files_answer_too_through_litert(exported, tmp_path, capsys, file):
    """The TFLite files run on LiteRT (ai-edge-litert), not on TensorFlow's deprecated ``tf.lite.Interpreter``,
    which warns that it is to be deleted."""
    output, _ = exported
    image = write(tmp_path / "cat.jpg", image_bytes(COLORS["cat"], (70, 50), "JPEG", seed=75))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["predict", "--model", f"{output}/{file}", image]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{image}: cat ")
    assert not [w for w in caught if "tf.lite.Interpreter" in str(w.message)]


def test_a_tflite_file_on_its_own_names_the_classes_from_its_packed_labels(exported, tmp_path, capsys):
    """Copied away from its export (no export.json beside it), the file still answers with class names: they are
    packed in it, with its metadata."""
    import shutil

    output, _ = exported
    alone = tmp_path / "alone" / "digits.tflite"
    alone.parent.mkdir()
    shutil.copy(f"{output}/model_int8.tflite", alone)
    image = write(tmp_path / "fish.png", image_bytes(COLORS["fish"], (30, 30), "PNG", seed=76))
    assert main(["predict", "--model", str(alone), "--json", image]) == 0
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(t["label"] for t in record["top"]) == sorted(CLASSES)
    assert record["top"][0]["label"] == "fish"


def test_many_files_are_answered_a_batch_at_a_time_in_their_order(exported, tmp_path, capsys):
    """More files than a batch (memory bounded by a batch, whatever the count), an unusable one among them: every
    other file answered, in the order given, as it is answered in a request of its own."""
    from pipeline.predict import PREDICT_BATCH, predict

    output, _ = exported
    names = [CLASSES[i % len(CLASSES)] for i in range(2 * PREDICT_BATCH + 3)]
    paths = [
        write(tmp_path / f"{i}.jpg", image_bytes(COLORS[name], (24, 24), "JPEG", seed=i))
        for i, name in enumerate(names)
    ]
    broken = write(tmp_path / "broken.png", b"\x89PNG\r\n\x1a\n cut short")
    paths.insert(PREDICT_BATCH + 1, broken)
    answers, errors = predict(output, paths, top=1)
    assert [answer.path for answer in answers] == [path for path in paths if path != broken]
    assert len(errors) == 1 and errors[0].startswith(f"image {broken} cannot be used")
    around = [path for path in paths[PREDICT_BATCH - 1 : PREDICT_BATCH + 3] if path != broken]  # a batch's edge
    alone = {answer.path: answer.top[0] for answer in predict(output, around, top=1)[0]}
    for answer in answers:
        if answer.path in alone:
            assert answer.top[0][0] == alone[answer.path][0]
            assert abs(answer.top[0][1] - alone[answer.path][1]) < 1e-4


def test_an_unfinished_or_damaged_export_is_refused_in_one_line_naming_it(exported, tmp_path):
    """An export cut short (a full disk: no export.json, written last), a file changed since (its size or sha256 is
    not export.json's), a SavedModel alone without its variables, a truncated TFLite file: one line each, naming the
    model and what to do, never a traceback and never an answer from a half-written model."""
    import os
    import shutil

    output, _ = exported
    image = write(tmp_path / "cat.jpg", image_bytes(COLORS["cat"], (40, 40), "JPEG", seed=77))
    copy = tmp_path / "export"
    shutil.copytree(output, copy)
    (copy / "export.json").rename(tmp_path / "export.json")
    with pytest.raises(UsageError) as raised:
        main(["predict", "--model", str(copy), image])
    assert str(raised.value) == (
        f"export {copy} is unfinished: it has no export.json, which the export step "
        "writes last; export it again (python -m components.export, or the same run-local "
        "command)"
    )
    (tmp_path / "export.json").rename(copy / "export.json")
    (data,) = (copy / "saved_model" / "variables").glob("variables.data-*")
    data.write_bytes(data.read_bytes()[:-8] + b"\0" * 8)  # the same size, other bytes
    for given in (copy, copy / "saved_model"):
        with pytest.raises(
            UsageError,
            match=rf"^export {copy} is damaged: saved_model/variables/{data.name} is not "
            r"the file exported \(\d+ bytes, sha256 \w{12}; exported: \d+ bytes, sha256 \w{12}\); "
            "export it again",
        ):
            main(["predict", "--model", str(given), image])
    alone = tmp_path / "alone"
    shutil.copytree(output + "/saved_model", alone)
    os.remove(alone / "variables" / "variables.index")
    with pytest.raises(UsageError, match=rf"^model {alone} cannot be loaded: .*; export it again$"):
        main(["predict", "--model", str(alone), image])
    cut = tmp_path / "cut.tflite"
    cut.write_bytes((copy / "model_float.tflite").read_bytes()[:1000])
    with pytest.raises(UsageError, match=rf"^model {cut} cannot be loaded: .*; export it again$"):
        main(["predict", "--model", str(cut), image])
