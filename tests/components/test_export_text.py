"""Export of a text model (issue 15): the SavedModel takes raw strings and tokenises them in its graph exactly as the
Beam conversion did; the TFLite files take ids and carry their labels and vocabulary; predict answers for texts."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from components.modalities import reading_of
from tests.conftest import TEXT_SEQUENCE_LENGTH, run_cli


def test_the_graph_tokenises_every_test_text_as_beam_did(text_examples, exported_text):
    """On every test example: the SavedModel's ``tokenize`` of the raw text gives the conversion's ids."""
    import tensorflow as tf

    from components.artifacts.examples import make_dataset

    examples, stats = text_examples
    output, report = exported_text
    tokenize = tf.saved_model.load(os.path.join(output, "saved_model")).signatures["tokenize"]
    dataset = make_dataset(examples, "test", reading_of(stats), 32, training=False, sources=True)
    compared, dressed = 0, 0
    for tokens, _, texts in dataset:
        graph = tokenize(text=texts)["tokens"].numpy()
        for mine, theirs, text in zip(graph, tokens.numpy(), texts.numpy(), strict=True):
            assert mine.tolist() == theirs.tolist(), text.decode()
            compared += 1
            dressed += any(ch in text.decode() for ch in "<'ÉßΟ\u00a0\t\u3000İ")
    assert compared == stats["counts"]["test"] > 0
    assert dressed >= 5, "the test texts should hold markup, punctuation and Unicode"
    assert report["parity"]["token_agreement"] == 1.0
    assert report["parity"]["num_examples"] == compared


def test_serving_default_takes_raw_strings_and_agrees_with_the_trained_model(
    text_examples, trained_text, exported_text
):
    import tensorflow as tf

    from components.export.common import build_cpu_model

    output, report = exported_text
    serving = tf.saved_model.load(os.path.join(output, "saved_model")).signatures["serving_default"]
    texts = ["A superb, lovely film!<br /><br />Really GOOD.", "Awful... the plot was dull and BORING", "x"]
    answer = serving(text=tf.constant(texts))
    assert [label.decode() for label in answer["label"].numpy()[:2]] == ["pos", "neg"]
    assert answer["probabilities"].shape == (3, 2)
    # the same as the trained model on the ids the conversion's tokeniser gives
    from components.tokenizing import read_vocabulary, token_ids

    vocabulary = read_vocabulary(os.path.join(output, "vocabulary.txt"))
    index = {token: i for i, token in enumerate(vocabulary)}
    ids = np.array([token_ids(text, index, TEXT_SEQUENCE_LENGTH)[0] for text in texts], dtype=np.int32)
    # like with like: the export computes in float32, so the trained weights are loaded back into a float32 network
    # (model.keras would bring back the policy it was trained in: bfloat16 differs by up to 1e-4)
    trained, _ = build_cpu_model(trained_text[0])
    np.testing.assert_allclose(answer["probabilities"].numpy(), trained(ids).numpy(), atol=1e-5)
    assert report["parity"]["argmax_agreement"] == 1.0 and report["parity"]["max_probability_difference"] < 1e-5
    assert report["signatures"]["serving_default"]["inputs"] == ["text"]
    assert report["modality"] == "text" and report["sequence_length"] == TEXT_SEQUENCE_LENGTH


def test_the_served_accuracy_is_the_saved_models_on_the_test_texts_as_clients_send_them(text_examples, exported_text):
    """export.json's raw_texts, which run-local's summary shows as "client texts": the SavedModel fed each raw test
    string, scored here from the test split's texts and labels."""
    import tensorflow as tf

    from components.artifacts.examples import make_dataset
    from components.schema import read_stats

    examples_dir, _ = text_examples
    output, report = exported_text
    serving = tf.saved_model.load(os.path.join(output, "saved_model")).signatures["serving_default"]
    right = total = 0
    for _, labels, texts in make_dataset(
        examples_dir, "test", reading_of(read_stats(examples_dir)), 32, training=False, sources=True
    ):
        answers = serving(text=texts)["class_id"].numpy()
        right += int((answers == labels.numpy().argmax(-1)).sum())
        total += len(answers)
    assert report["raw_texts"] == {"split": "test", "num_texts": total, "test_accuracy": right / total}


def test_tflite_files_take_ids_and_their_accuracy_is_recorded(text_examples, exported_text):
    from ai_edge_litert.interpreter import Interpreter

    from components.artifacts.tflite import packed_file, packed_labels

    output, report = exported_text
    saved_accuracy = report["formats"]["saved_model"]["test_accuracy"]
    assert saved_accuracy >= 0.9
    assert report["standardization"] == "lower_split_punctuation"
    with open(os.path.join(output, "standardization.txt"), "rb") as handle:
        assert handle.read() == b"lower_split_punctuation"
    for name, file in (("tflite_float", "model_float.tflite"), ("tflite_int8", "model_int8.tflite")):
        with open(os.path.join(output, file), "rb") as handle:
            content = handle.read()
        interpreter = Interpreter(model_content=content)
        (source,) = interpreter.get_input_details()
        assert source["dtype"] == np.int32 and source["shape"].tolist() == [1, TEXT_SEQUENCE_LENGTH]
        assert packed_labels(content) == ["neg", "pos"]
        with open(os.path.join(output, "vocabulary.txt"), "rb") as vocabulary:
            assert packed_file(content, "vocabulary.txt") == vocabulary.read()
        # how predict tokenises texts for it: the conversion's standardisation, packed beside the vocabulary
        assert packed_file(content, "standardization.txt") == b"lower_split_punctuation"
        assert report["formats"][name]["test_accuracy"] >= saved_accuracy - 0.05, report["formats"]
    # the LSTM's loop cannot be calibrated by the converter: int8 weights, float activations, and smaller
    assert report["formats"]["tflite_int8"]["quantization"] == "dynamic_range"
    assert report["formats"]["tflite_int8"]["bytes"] < report["formats"]["tflite_float"]["bytes"]


def test_the_convolutions_int8_file_is_full_integer(text_examples, tmp_path):
    """Without a loop, the int8 file is quantized throughout (uint8 out), and still classifies; exported with the
    SavedModel alone, it has no TFLite file."""
    from ai_edge_litert.interpreter import Interpreter

    from components.export.core import ExportConfig
    from components.export.core import run as export
    from components.train.config import TrainConfig
    from components.train.core import run

    examples, _ = text_examples
    run(
        TrainConfig(
            examples_dir=examples,
            model_dir=str(tmp_path / "model"),
            model_name="cnn1d",
            epochs=6,
            per_replica_batch_size=16,
            backend="tensorflow",
        ),
        env={},
    )
    report = export(
        ExportConfig(model_dir=str(tmp_path / "model"), examples_dir=examples, output_dir=str(tmp_path / "export"))
    )
    int8 = report["formats"]["tflite_int8"]
    assert int8["quantization"] == "full_integer"
    assert int8["test_accuracy"] >= report["formats"]["saved_model"]["test_accuracy"] - 0.05
    interpreter = Interpreter(model_path=int8["path"])
    assert interpreter.get_output_details()[0]["dtype"] == np.uint8
    assert report["parity"]["token_agreement"] == 1.0
    # the same model with --formats saved_model: no TFLite file converted, the served figure the same
    alone = export(
        ExportConfig(
            model_dir=str(tmp_path / "model"),
            examples_dir=examples,
            output_dir=str(tmp_path / "alone"),
            formats=("saved_model",),
        )
    )
    assert list(alone["formats"]) == ["saved_model"]
    assert not [name for name in os.listdir(tmp_path / "alone") if name.endswith(".tflite")]
    assert alone["raw_texts"] == report["raw_texts"]


def test_predict_prints_the_top_labels_of_texts(exported_text, tmp_path):
    output, _ = exported_text
    review = tmp_path / "review.txt"
    review.write_text("Nice, superb and lovely.<br />A GREAT film!", encoding="utf-8")
    for model in (output, os.path.join(output, "model_float.tflite")):
        done = run_cli(
            "pipeline",
            "predict",
            "--model",
            model,
            "--text",
            "awful, dull and boring",
            "--text-file",
            str(review),
            "--top",
            "1",
            "--json",
        )
        assert done.returncode == 0, done.stderr
        # an answer without TensorFlow's start-up lines (-v shows them); LiteRT says it made its CPU delegate
        assert [line for line in done.stderr.splitlines() if "XNNPACK delegate for CPU" not in line] == []
        answers = [json.loads(line) for line in done.stdout.splitlines()]
        assert [answer["top"][0]["label"] for answer in answers] == ["neg", "pos"], answers
        assert answers[0]["text"] == "awful, dull and boring" and answers[1]["path"] == str(review)


def test_predict_reads_a_folder_of_texts_as_its_txt_files(exported_text, tmp_path, capsys):
    """``--text-file`` of a folder stands for its ``.txt`` files at any depth (a folder per class, as the conversion
    reads texts), in the order of their paths."""
    from pipeline.__main__ import main

    output, _ = exported_text
    for label, text in (("pos", "Nice, superb and lovely. A GREAT film!"), ("neg", "awful, dull and boring")):
        (tmp_path / "reviews" / label).mkdir(parents=True)
        (tmp_path / "reviews" / label / "1.txt").write_text(text, encoding="utf-8")
    assert main(["predict", "--model", output, "--text-file", str(tmp_path / "reviews"), "--top", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.rsplit(" ", 1)[0] for line in lines] == [
        f"{tmp_path / 'reviews' / 'neg' / '1.txt'}: neg",
        f"{tmp_path / 'reviews' / 'pos' / '1.txt'}: pos",
    ]


def test_an_empty_text_is_named_not_answered_and_the_others_are(exported_text, tmp_path, capsys):
    """The conversion quarantines an empty text; predict does not answer one with the model's bias either."""
    from pipeline.__main__ import main

    output, _ = exported_text
    (tmp_path / "blank.txt").write_text(" \n", encoding="utf-8")
    texts = ["--text", "", "--text", "awful, dull and boring", "--text", " "]
    texts += ["--text-file", str(tmp_path / "blank.txt")]
    assert main(["predict", "--model", output, *texts, "--top", "1"]) == 2
    out, err = capsys.readouterr()
    assert [line.rsplit(" ", 1)[0] for line in out.strip().splitlines()] == ["'awful, dull and boring': neg"]
    assert err.splitlines() == [
        "error: --text 1 is empty: nothing to classify",
        "error: --text 3 is empty: nothing to classify",
        f"error: text file {tmp_path / 'blank.txt'} is empty: nothing to classify",
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--text", "good"], "pass either images or --text/--text-file"),
        (["--text-file", "/nowhere/review.txt"], "text file /nowhere/review.txt cannot be read"),
    ],
)
def test_predict_on_text_says_what_is_wrong_in_one_line(exported_text, tmp_path, args, message):
    output, _ = exported_text
    extra = [str(tmp_path / "image.jpg")] if args[0] == "--text" else []
    done = run_cli("pipeline", "predict", "--model", output, *args, *extra)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
