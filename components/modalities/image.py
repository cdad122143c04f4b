"""Images: ``uint8`` pixels of a square side (the conversion's ``image_size``), scaled inside the model."""

from __future__ import annotations

from collections.abc import Mapping

from components.artifacts.examples import Reading
from components.cli import UsageError
from components.modalities.base import Modality
from components.models.spec import ModelSpec


class Image(Modality):
    name, items, a_model, augments, sent_as = "image", "images", "an image model", True, "image files"

    def input_size(self, facts: Mapping) -> tuple[int, int | None]:
        return facts["image_size"], None

    def example_shape(self, facts: Mapping) -> tuple[int, ...]:
        return (facts["image_size"], facts["image_size"], 3)

    def input_facts(self, facts: Mapping) -> dict:
        return {"image_size": facts["image_size"], "image_size_auto": facts.get("image_size_auto") or ""}

    def reading(self, facts: Mapping) -> Reading:
        """JPEGs decoded as the conversion and the serving graph decode them, ``[size, size, 3]`` uint8; their
        source files; random flips, brightness and saturation for ``--augment``."""
        from components.artifacts.examples import augment_image, decode_image
        from components.schema import SOURCE_FEATURE, feature_spec, source_feature_spec

        size = int(facts["image_size"])

        def element(example: dict, sources: bool) -> tuple:
            image = decode_image(example["image"], size)
            return (image, example["one_hot_class"], *([example[SOURCE_FEATURE]] if sources else []))

        spec = feature_spec(int(facts["num_classes"]))
        return Reading(spec, element, source_feature_spec(), augment_image, pictures=True)

    def spec(self, facts: Mapping) -> ModelSpec:
        return ModelSpec.for_images(int(facts["image_size"]), int(facts["num_classes"]), facts.get("class_names", ()))

    def training_kind(self, pretrained: bool) -> str:
        return "text model or pretrained head" if pretrained else "image model from scratch"

    def check_input_matches(self, model: Mapping, examples: Mapping, model_dir: str, examples_dir: str, again: str):
        if int(model["image_size"]) != int(examples["image_size"]):
            raise UsageError(
                f"examples {examples_dir} hold {examples['image_size']}-pixel images, but model {model_dir} was "
                f"trained on {model['image_size']}-pixel ones: {again}"
            )

    def model_input_facts(self, stats: Mapping, vocabulary: list | None) -> dict:
        return {"image_size": stats["image_size"]}  # (uint8 pixels: the model scales them itself)

    def baseline_differs(self, baseline: Mapping, candidate: Mapping, baseline_kind: str) -> str:
        ours, theirs = int(candidate["image_size"]), int(baseline["image_size"])
        return "" if ours == theirs else f"image size differs (baseline {theirs} px, candidate {ours} px)"

    def load_baseline(self, kind: str, path: str, facts: Mapping):
        """Fed uint8 pixels: a trained model scales them itself, an export takes them through its ``serving_images``
        signature."""
        import tensorflow as tf

        from components.models import load_trained_model

        if kind == "trained":
            return load_trained_model(path)
        signatures = tf.saved_model.load(path).signatures
        if "serving_images" not in signatures:
            raise UsageError(f"baseline {path} has no serving_images signature: pass a model this pipeline exported")
        serving = signatures["serving_images"]
        return lambda images, training=False: serving(images=tf.cast(images, tf.uint8))["probabilities"]

    def check_model_takes(self, loaded, facts: Mapping, where: str) -> None:
        from components.models import check_image_size

        check_image_size(loaded, facts["image_size"], where)

    def takes(self, min_image_size: int) -> str:
        return f"images of {min_image_size}+ px"

    def describe(self, facts: Mapping, classes: int) -> str:
        return f"images of {classes} classes, {facts.get('image_size') or ''} px"

    def check_arguments(self, spec: ModelSpec) -> list[str]:
        return ["--image-size", str(spec.image_size)]


IMAGE = Image()
