"""The layers of the built-in ``ngrams`` text model, registered with Keras so that a saved ``model.keras`` loads
(``components.models.load_trained_model`` imports this module first)."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="tpu_pipeline")
class WordPairs(keras.layers.Layer):
    """Token ids ``[N, L]`` -> ``[N, 2L - 1]``: the words, then each pair of neighbours hashed into one of
    ``buckets`` ids from ``vocabulary_size`` on (0, padding, where either word is padding)."""

    def __init__(self, vocabulary_size: int, buckets: int, **kwargs):
        super().__init__(**kwargs)
        self.vocabulary_size, self.buckets = int(vocabulary_size), int(buckets)

    def call(self, ids):
        ids = ops.cast(ids, "int32")
        first, second = ids[:, :-1], ids[:, 1:]
        # (first * vocabulary_size + second) mod buckets, each factor reduced first so that int32 holds the product
        hashed = ops.mod(ops.mod(first, self.buckets) * (self.vocabulary_size % self.buckets) + second, self.buckets)
        pairs = ops.where((first > 0) & (second > 0), hashed + self.vocabulary_size, 0)
        return ops.concatenate([ids, pairs], axis=1)

    def get_config(self):
        return {**super().get_config(), "vocabulary_size": self.vocabulary_size, "buckets": self.buckets}


@keras.saving.register_keras_serializable(package="tpu_pipeline")
class NGramBag(keras.layers.Layer):
    """``[grams, their vectors]`` -> the vectors' sum over the square root of their count, padding (id 0) left out:
    a bag of unit length where the vectors are one-hot, as TF-IDF's L2-normalised rows are."""

    def call(self, inputs):
        grams, vectors = inputs
        present = ops.cast(ops.expand_dims(grams > 0, -1), vectors.dtype)
        count = ops.maximum(ops.sum(present, axis=1), 1)
        return ops.sum(vectors * present, axis=1) / ops.sqrt(count)
