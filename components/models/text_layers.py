"""The layers of the built-in ``ngrams`` text model, registered with Keras so that a saved ``model.keras`` loads
(``components.models.load_trained_model`` imports this module first), and ``adapt``, which sets what they learn from
the training texts before training (their grams' inverse document frequencies)."""

from __future__ import annotations

from collections.abc import Iterable

import keras
import numpy as np
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
    """``[grams, their vectors]`` -> the vectors weighted as TF-IDF weighs a text's terms: each by its gram's inverse
    document frequency (``idf``, set by ``adapt``), over the L2 norm of the weights of the text's grams (the norm sums
    each occurrence's square, where TF-IDF squares a repeated term's summed weight), padding (id 0) left out.
    A bag of unit length where the vectors are one-hot, as TF-IDF's L2-normalised rows are.

    ``size``: the number of gram ids (the ``idf`` table's length). Without it (and before ``adapt``), every weight is
    1: the vectors' sum over the square root of their count."""

    def __init__(self, size: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.size = None if size is None else int(size)

    def build(self, input_shape):
        if self.size is not None:
            self.idf = self.add_weight(shape=(self.size,), initializer="ones", trainable=False, name="idf")

    def adapt_to(self, document_frequencies: np.ndarray, documents: int) -> None:
        """scikit-learn's smooth idf, ``ln((1 + documents) / (1 + df)) + 1``; 0 for a gram no training text holds
        (as TF-IDF leaves out a term it never saw) and for padding."""
        df = np.asarray(document_frequencies, np.float64)
        idf = np.where(df > 0, np.log((1 + documents) / (1 + df)) + 1, 0.0)
        idf[0] = 0.0
        self.idf.assign(idf.astype("float32"))

    def call(self, inputs):
        grams, vectors = inputs
        weights = ops.cast(grams > 0, vectors.dtype)
        if self.size is not None:
            weights = weights * ops.cast(ops.take(self.idf, grams), vectors.dtype)
        norm = ops.sqrt(ops.maximum(ops.sum(weights * weights, axis=1, keepdims=True), 1e-12))
        return ops.sum(vectors * ops.expand_dims(weights / norm, -1), axis=1)

    def get_config(self):
        return {**super().get_config(), "size": self.size}


def document_frequencies(grams: np.ndarray, size: int) -> np.ndarray:
    """How many rows of ``grams`` ([N, G] ids below ``size``) hold each id."""
    ordered = np.sort(grams, axis=1)
    first = np.ones(ordered.shape, bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    return np.bincount(ordered[first], minlength=size)


def adapt(model, token_batches: Iterable[np.ndarray]) -> int:
    """Sets each ``NGramBag``'s idf in ``model`` (after a ``WordPairs``) from the training texts' token ids
    (``token_batches``: [n, sequence_length] arrays, every training text once); returns the texts counted (0 when
    the model has nothing to adapt)."""
    pairs = [layer for layer in model.layers if isinstance(layer, WordPairs)]
    bags = [layer for layer in model.layers if isinstance(layer, NGramBag) and layer.size is not None]
    if not bags or len(pairs) != 1:
        return 0
    (pair,), size = pairs, bags[0].size
    counts, documents = np.zeros(size, np.int64), 0
    for ids in token_batches:
        grams = np.asarray(ops.convert_to_numpy(pair(np.asarray(ids, np.int32))))
        counts += document_frequencies(grams, size)
        documents += len(grams)
    for bag in bags:
        bag.adapt_to(counts, documents)
    return documents
