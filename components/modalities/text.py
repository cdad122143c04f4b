"""Texts: ``int32`` token ids of the conversion's vocabulary (``vocabulary.txt``, which travels with the examples,
the model and the data checks), ``sequence_length`` of them, padded with 0."""

from __future__ import annotations

from collections.abc import Mapping

from components.artifacts.examples import Reading
from components.cli import UsageError
from components.modalities.base import Modality
from components.models.spec import ModelSpec
from components.tokenizing import VOCABULARY_FILE

ADAPT_BATCH = 1024  # training texts counted at a time when a text model adapts to them


class Text(Modality):
    name, items, a_model, augments, sent_as = "text", "texts", "a text model", False, "--text or --text-file"
    companion_files = (VOCABULARY_FILE,)

    def input_size(self, facts: Mapping) -> tuple[int, int | None]:
        return facts["sequence_length"], facts["sequence_length"]

    def example_shape(self, facts: Mapping) -> tuple[int, ...]:
        return (facts["sequence_length"],)

    def input_facts(self, facts: Mapping) -> dict:
        return {"sequence_length": facts["sequence_length"], "vocabulary_size": facts["vocabulary_size"]}

    def reading(self, facts: Mapping) -> Reading:
        """The token ids, int32 ``[sequence_length]``; their text as the source; no augmentation."""
        from components.schema import text_feature_spec

        def element(example: dict, sources: bool) -> tuple:
            import tensorflow as tf

            tokens = tf.cast(example["tokens"], tf.int32)
            return (tokens, example["one_hot_class"], *([example["text"]] if sources else []))

        spec = text_feature_spec(int(facts["sequence_length"]), int(facts["num_classes"]))
        return Reading(spec, element, pictures=False)

    def spec(self, facts: Mapping) -> ModelSpec:
        return ModelSpec.for_texts(
            int(facts["sequence_length"]),
            int(facts["vocabulary_size"]),
            int(facts["num_classes"]),
            facts.get("class_names", ()),
        )

    def check_augment(self, augment: bool) -> None:
        if augment:
            raise UsageError(
                "--augment applies to images (random flips, brightness and saturation): texts get no augmentation; "
                "leave --augment out"
            )

    def training_kind(self, pretrained: bool) -> str:
        return "text model or pretrained head"

    def check_input_matches(self, model: Mapping, examples: Mapping, model_dir: str, examples_dir: str, again: str):
        from components.tokenizing import vocabulary_digest

        if int(model["sequence_length"]) != int(examples["sequence_length"]):
            raise UsageError(
                f"examples {examples_dir} hold {examples['sequence_length']} tokens a text, but model "
                f"{model_dir} was trained on {model['sequence_length']}: {again}"
            )
        if not model.get("vocabulary_sha256"):
            raise UsageError(
                f"model {model_dir} does not record its vocabulary (trained before text models kept it): train it again"
            )
        if vocabulary_digest(self.read_vocabulary(examples_dir)) != model.get("vocabulary_sha256"):
            raise UsageError(
                f"examples {examples_dir} were tokenised with another vocabulary than model {model_dir} "
                f"(their {VOCABULARY_FILE} differs): {again}"
            )

    def model_input_facts(self, stats: Mapping, vocabulary: list | None) -> dict:
        from components.tokenizing import standardization_of, vocabulary_digest

        return {
            "sequence_length": stats["sequence_length"],
            "vocabulary_size": stats["vocabulary_size"],
            "vocabulary_sha256": vocabulary_digest(vocabulary),
            "standardization": standardization_of(stats),
        }

    def read_vocabulary(self, examples_dir: str) -> list | None:
        from components.tokenizing import read_vocabulary

        return read_vocabulary(f"{examples_dir.rstrip('/')}/{VOCABULARY_FILE}")

    def served_tokens(self, folder: str, facts: Mapping) -> tuple[list | None, str | None]:
        from components.storage import exists
        from components.tokenizing import standardization_of

        kept = exists(f"{folder.rstrip('/')}/{VOCABULARY_FILE}")
        return (self.read_vocabulary(folder) if kept else None), standardization_of(facts)

    def baseline_differs(self, baseline: Mapping, candidate: Mapping, baseline_kind: str) -> str:
        if baseline_kind != "trained":  # an export takes the raw texts and tokenises them with its own vocabulary
            return ""
        ours, theirs = int(candidate["sequence_length"]), int(baseline["sequence_length"])
        if ours != theirs:
            return f"sequence length differs (baseline {theirs} tokens, candidate {ours})"
        if baseline.get("vocabulary_sha256") != candidate.get("vocabulary_sha256"):
            return "vocabulary differs (a trained baseline reads ids of its own; pass its export instead)"
        return ""

    def load_baseline(self, kind: str, path: str, facts: Mapping):
        """A trained baseline is fed token ids (of its own vocabulary: ``baseline_differs`` checked it); an export,
        the raw texts, which it tokenises with its own vocabulary (``TextExport``)."""
        if kind == "trained":
            from components.models import load_trained_model

            return load_trained_model(path)
        import tensorflow as tf

        return TextExport(tf.saved_model.load(path).signatures["serving_default"])

    def adapt(self, model, examples_dir: str, facts: Mapping) -> None:
        """The ``ngrams`` bags' inverse document frequencies and the vocabulary words' character n-grams
        (``text_layers.adapt``), counted over the whole train split, the same on every process (nothing for a model
        without those bags)."""
        import logging

        from components.artifacts.examples import make_dataset
        from components.models.text_layers import adapt

        batches = make_dataset(examples_dir, "train", self.reading(facts), ADAPT_BATCH, training=False)
        tokens = (tokens for tokens, _ in batches.as_numpy_iterator())
        texts = adapt(model, tokens, self.read_vocabulary(examples_dir))
        if texts:
            logging.getLogger(__name__).info(
                "inverse document frequencies of the grams counted over the %d training texts", texts
            )

    def describe(self, facts: Mapping, classes: int) -> str:
        return (
            f"texts of {classes} classes, {facts.get('sequence_length')} tokens each, a vocabulary of "
            f"{facts.get('vocabulary_size')}"
        )

    def check_arguments(self, spec: ModelSpec) -> list[str]:
        return ["--sequence-length", str(spec.sequence_length), "--vocabulary-size", str(spec.vocabulary_size)]


class TextExport:
    """An exported text model as evaluate's ``predict_split`` calls a baseline: fed the raw texts (``takes_text``)."""

    takes_text = True

    def __init__(self, serving):
        self.serving = serving

    def __call__(self, texts, training=False):
        return self.serving(text=texts)["probabilities"]


TEXT = Text()
