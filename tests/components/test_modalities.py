"""The modalities (``components.modalities``): what each answers for the steps, and one contract that every
modality keeps through convert, train, export and predict."""

from __future__ import annotations

import os

import pytest

from components.cli import UsageError
from components.modalities import MODALITIES, check_same_modality, modality_of, named, spec_of
from components.modalities.image import IMAGE
from components.modalities.text import TEXT

IMAGE_FACTS = {"modality": "image", "image_size": 24, "num_classes": 3, "class_names": ["a", "b", "c"]}
TEXT_FACTS = {
    "modality": "text",
    "sequence_length": 12,
    "vocabulary_size": 50,
    "num_classes": 2,
    "class_names": ["neg", "pos"],
}


def test_an_artifact_names_its_modality_and_one_without_the_key_holds_images():
    assert modality_of(TEXT_FACTS) is TEXT and modality_of(IMAGE_FACTS) is IMAGE
    assert modality_of({"image_size": 24}) is IMAGE  # (the first conversions wrote no modality)
    with pytest.raises(UsageError, match=r"^modality 'audio' is not one of image, text$"):
        modality_of({"modality": "audio"})
    assert sorted(MODALITIES) == ["image", "text"]


@pytest.mark.parametrize(
    ("facts", "size", "shape"), [(IMAGE_FACTS, (24, None), (24, 24, 3)), (TEXT_FACTS, (12, 12), (12,))]
)
def test_each_modality_reads_its_input_from_the_facts(facts, size, shape):
    modality = modality_of(facts)
    assert modality.input_size(facts) == size
    assert modality.example_shape(facts) == shape
    spec = modality.spec(facts)
    assert (spec.modality, spec.input_shape, spec.num_classes, spec.class_names) == (
        facts["modality"],
        shape,
        facts["num_classes"],
        tuple(facts["class_names"]),
    )


def test_a_model_reads_only_its_modalitys_examples_and_its_own_input():
    again = "pass the examples the model was trained from"
    with pytest.raises(UsageError) as raised:
        check_same_modality(TEXT_FACTS, IMAGE_FACTS, "m", "e", again)
    assert str(raised.value) == f"examples e hold images, but model m is a text model: {again}"
    check_same_modality(IMAGE_FACTS, {"image_size": 24}, "m", "e", again)  # (no key: images)
    with pytest.raises(UsageError, match=r"^examples e hold 32-pixel images, but model m was trained on 24-pixel"):
        IMAGE.check_input_matches(IMAGE_FACTS, {**IMAGE_FACTS, "image_size": 32}, "m", "e", again)
    with pytest.raises(UsageError, match=r"^examples e hold 16 tokens a text, but model m was trained on 12"):
        TEXT.check_input_matches(TEXT_FACTS, {**TEXT_FACTS, "sequence_length": 16}, "m", "e", again)


def test_a_client_sending_the_other_modality_is_told_what_the_model_takes():
    IMAGE.check_served(IMAGE, "m")
    with pytest.raises(UsageError) as raised:
        IMAGE.check_served(TEXT, "m")
    assert str(raised.value) == "model m is a text model: pass --text or --text-file, not image files"
    with pytest.raises(UsageError) as raised:
        TEXT.check_served(IMAGE, "m")
    assert str(raised.value) == "model m is an image model: pass image files, not --text or --text-file"


def test_augment_changes_images_and_is_refused_on_texts():
    assert IMAGE.augments and not TEXT.augments
    IMAGE.check_augment(True)
    TEXT.check_augment(False)
    with pytest.raises(UsageError, match=r"leave --augment out$"):
        TEXT.check_augment(True)


@pytest.mark.parametrize(
    ("modality", "fixtures", "sent"),
    [
        ("image", ("converted", "trained", "exported"), "image"),
        ("text", ("text_examples", "trained_text", "exported_text"), "a wonderful film, I loved it"),
    ],
)
def test_each_modality_keeps_one_contract_from_conversion_to_prediction(
    request, image_folder, modality, fixtures, sent
):
    """Each modality through convert, train, export and predict (the session's steps, in-process): every artifact
    names it, the model records the input its modality describes, the model was built for the conversion's spec,
    what travels with the examples travels with the model and the export, and what a client sends gets an answer."""
    from components.artifacts.model import load_model_config
    from components.artifacts.records import EXPORT, MODEL_CONFIG
    from pipeline.predict import predict, predict_texts

    (examples_dir, stats), (model_dir, _), (export_dir, _) = (request.getfixturevalue(name) for name in fixtures)
    export = EXPORT.read(export_dir)
    model_config = load_model_config(model_dir)
    expected = named(modality)
    assert modality_of(stats) is modality_of(model_config) is modality_of(export) is expected
    assert stats["modality"] == model_config["modality"] == export["modality"] == modality  # each says it, no default
    recorded = expected.model_input_facts(stats, expected.read_vocabulary(examples_dir))
    assert {key: model_config[key] for key in recorded} == recorded, MODEL_CONFIG.name
    assert spec_of(model_config) == expected.spec(stats)
    for name in expected.companion_files:  # (a text's vocabulary: the ids mean its tokens everywhere)
        with open(os.path.join(examples_dir, name), "rb") as handle:
            content = handle.read()
        for folder in (model_dir, export_dir):
            with open(os.path.join(folder, name), "rb") as handle:
                assert handle.read() == content, (folder, name)
    if modality == "image":
        folder = os.path.join(image_folder, stats["class_names"][0])
        answers, errors = predict(export_dir, [os.path.join(folder, sorted(os.listdir(folder))[0])])
    else:
        answers, errors = predict_texts(export_dir, [sent], [])
    assert not errors and len(answers) == 1
    labels = [label for label, _ in answers[0].top]
    assert labels and set(labels) <= set(stats["class_names"])
