"""The layers of the built-in ``ngrams`` text model, registered with Keras so that a saved ``model.keras`` loads
(``components.models.load_trained_model`` imports this module first), and ``adapt``, which sets what they learn from
the training texts before training (their grams' inverse document frequencies, and the vocabulary's character
n-grams)."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

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
        """scikit-learn's smooth idf (``smooth_idf``)."""
        self.idf.assign(smooth_idf(document_frequencies, documents))

    def call(self, inputs):
        grams, vectors = inputs
        weights = ops.cast(grams > 0, vectors.dtype)
        if self.size is not None:
            weights = weights * ops.cast(ops.take(self.idf, grams), vectors.dtype)
        norm = ops.sqrt(ops.maximum(ops.sum(weights * weights, axis=1, keepdims=True), 1e-12))
        return ops.sum(vectors * ops.expand_dims(weights / norm, -1), axis=1)

    def get_config(self):
        return {**super().get_config(), "size": self.size}


def smooth_idf(document_frequencies: np.ndarray, documents: int) -> np.ndarray:
    """scikit-learn's smooth idf, ``ln((1 + documents) / (1 + df)) + 1``; 0 for a gram no training text holds (as
    TF-IDF leaves out a term it never saw) and for padding (id 0)."""
    df = np.asarray(document_frequencies, np.float64)
    idf = np.where(df > 0, np.log((1 + documents) / (1 + df)) + 1, 0.0)
    idf[0] = 0.0
    return idf.astype("float32")


# a word's character n-grams (fastText's subwords): 3 to 5 characters of the word marked "<word>"; a word of more
# than 14 characters keeps its first GRAMS_PER_WORD (the shortest first)
CHAR_GRAM_SIZES = range(3, 6)
GRAMS_PER_WORD = 40
# CharGrams embeds each position's grams where that tensor is the smaller, else projects every gram to the classes
# first (JAX on a CPU, 250 ids a text, 4,500 words, 8 classes: the first is 3x faster for 1 text, level at 4, 5x
# slower at 8, 20x at 32); a batch of unknown size counts as this many texts (a SavedModel's serving signature)
UNKNOWN_BATCH = 32


def char_grams(word: str) -> list[str]:
    """``"net"`` -> ``["<ne", "net", "et>", "<net", "net>", "<net>"]``."""
    marked = f"<{word}>"
    return [marked[i : i + n] for n in CHAR_GRAM_SIZES for i in range(len(marked) - n + 1)]


def char_gram_table(vocabulary: Sequence[str], buckets: int, per_word: int = GRAMS_PER_WORD) -> np.ndarray:
    """``[len(vocabulary), per_word]`` int32: each word's character n-gram ids, 0 after its last and for padding and
    out-of-vocabulary (ids 0 and 1). Each distinct gram gets its own id from 1, in the order of the vocabulary (the
    most frequent words first), until ``buckets - 1`` are taken; later grams share ids by their CRC-32."""
    own: dict[str, int] = {}

    def gram_id(gram: str) -> int:
        found = own.get(gram)
        if found is None:
            if len(own) < buckets - 1:
                found = own[gram] = len(own) + 1
            else:
                found = zlib.crc32(gram.encode("utf-8")) % (buckets - 1) + 1
        return found

    table = np.zeros((len(vocabulary), per_word), np.int32)
    for row, word in enumerate(vocabulary[2:], start=2):
        ids = [gram_id(gram) for gram in char_grams(word)[:per_word]]
        table[row, : len(ids)] = ids
    return table


@keras.saving.register_keras_serializable(package="tpu_pipeline")
class CharGrams(keras.layers.Layer):
    """Token ids ``[N, L]`` -> ``[N, classes]``: what the words' character n-grams add to each class's score, so that
    words that share a stem share what they learn. The grams' bag, weighted as TF-IDF weighs a text's terms (as
    ``NGramBag``: each occurrence by its gram's idf, over the L2 norm of the weights), embedded in ``embedding_dim``,
    then a dense layer to the classes (``kernel``, no bias). Which grams each vocabulary word holds is ``table`` (set
    by ``set_vocabulary``), the idfs are set by ``adapt_to``; before both, every text scores zeros.

    Two ways to the same sum, by the size of what each holds: each position's grams gathered and embedded (a TFLite
    call's one text; batches where the classes are many), or every gram projected to the classes first and each
    vocabulary word summed once (batches of a few classes)."""

    def __init__(
        self,
        vocabulary_size: int,
        buckets: int,
        embedding_dim: int,
        classes: int,
        grams_per_word: int = GRAMS_PER_WORD,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size, self.buckets, self.classes = int(vocabulary_size), int(buckets), int(classes)
        self.embedding_dim, self.grams_per_word = int(embedding_dim), int(grams_per_word)

    def build(self, input_shape):
        words, per_word = self.vocabulary_size, self.grams_per_word
        self.table = self.add_weight(
            shape=(words, per_word), dtype="int32", initializer="zeros", trainable=False, name="table"
        )
        self.embeddings = self.add_weight(shape=(self.buckets, self.embedding_dim), initializer="uniform", name="grams")
        self.kernel = self.add_weight(
            shape=(self.embedding_dim, self.classes), initializer="glorot_uniform", name="kernel"
        )
        # zeros until adapted: no gram weighs anything (id 0, padding, never does)
        self.idf = self.add_weight(shape=(self.buckets,), initializer="zeros", trainable=False, name="idf")

    def set_vocabulary(self, vocabulary: Sequence[str]) -> None:
        if len(vocabulary) != self.vocabulary_size:
            raise ValueError(
                f"the model takes {self.vocabulary_size} token ids, and the vocabulary has {len(vocabulary)}"
            )
        self.table.assign(char_gram_table(vocabulary, self.buckets, self.grams_per_word))

    def adapt_to(self, document_frequencies: np.ndarray, documents: int) -> None:
        """scikit-learn's smooth idf (``smooth_idf``)."""
        self.idf.assign(smooth_idf(document_frequencies, documents))

    def grams(self, ids: np.ndarray) -> np.ndarray:
        """``[n, L]`` token ids -> ``[n, L * grams_per_word]`` the texts' gram ids (numpy, for counting)."""
        return np.asarray(ops.convert_to_numpy(self.table))[ids].reshape(len(ids), -1)

    def call(self, ids):
        ids = ops.cast(ids, "int32")
        weights = ops.cast(ops.take(self.idf, self.table), self.compute_dtype)  # [V, K]
        texts, length = ids.shape[0], ids.shape[1]
        texts = texts if isinstance(texts, int) else UNKNOWN_BATCH  # (None, or symbolic, when traced without one)
        # the larger intermediate decides: [N, L, K, embedding_dim] embedded, or [V, K, classes] projected
        if texts * length * self.embedding_dim < self.vocabulary_size * self.classes:
            at = ops.take(weights, ids, axis=0)  # [N, L, K]
            vectors = ops.take(self.embeddings, ops.take(self.table, ids, axis=0), axis=0)  # [N, L, K, D]
            scores = ops.matmul(ops.sum(vectors * ops.expand_dims(at, -1), axis=(1, 2)), self.kernel)
            squares = ops.sum(at * at, axis=(1, 2))
        else:
            grams = ops.matmul(self.embeddings, self.kernel)  # [buckets, classes]
            words = ops.sum(ops.take(grams, self.table, axis=0) * ops.expand_dims(weights, -1), axis=1)  # [V, C]
            scores = ops.sum(ops.take(words, ids, axis=0), axis=1)
            squares = ops.sum(ops.take(ops.sum(weights * weights, axis=1), ids, axis=0), axis=1)
        return scores / ops.expand_dims(ops.sqrt(ops.maximum(squares, 1e-12)), -1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.classes)

    def get_config(self):
        return {
            **super().get_config(),
            "vocabulary_size": self.vocabulary_size,
            "buckets": self.buckets,
            "embedding_dim": self.embedding_dim,
            "classes": self.classes,
            "grams_per_word": self.grams_per_word,
        }


def document_frequencies(grams: np.ndarray, size: int) -> np.ndarray:
    """How many rows of ``grams`` ([N, G] ids below ``size``) hold each id."""
    ordered = np.sort(grams, axis=1)
    first = np.ones(ordered.shape, bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    return np.bincount(ordered[first], minlength=size)


def adapt(model, token_batches: Iterable[np.ndarray], vocabulary: Sequence[str] = ()) -> int:
    """Sets what ``model``'s bags learn from the training texts before training: each ``CharGrams``'s table from
    ``vocabulary`` (the conversion's tokens in id order), and each bag's idf from the texts' token ids
    (``token_batches``: [n, sequence_length] arrays, every training text once; an ``NGramBag`` after one
    ``WordPairs``). Returns the texts counted (0 when the model has nothing to adapt)."""
    pairs = [layer for layer in model.layers if isinstance(layer, WordPairs)]
    bags = [layer for layer in model.layers if isinstance(layer, NGramBag) and layer.size is not None]
    counted = []  # (the grams of a batch of texts, the layers whose idf they set, each gram id's count)
    if bags and len(pairs) == 1:

        def pair_grams(ids):
            return np.asarray(ops.convert_to_numpy(pairs[0](ids)))

        counted.append((pair_grams, bags, np.zeros(bags[0].size, np.int64)))
    for layer in model.layers:
        if isinstance(layer, CharGrams):
            if not len(vocabulary):
                raise ValueError(f"{layer.name} reads the words' characters: adapt needs the vocabulary")
            layer.set_vocabulary(vocabulary)
            counted.append((layer.grams, [layer], np.zeros(layer.buckets, np.int64)))
    if not counted:
        return 0
    documents = 0
    for ids in token_batches:
        ids = np.asarray(ids, np.int32)
        for grams_of, _, counts in counted:
            counts += document_frequencies(grams_of(ids), len(counts))
        documents += len(ids)
    for _, layers, counts in counted:
        for layer in layers:
            layer.adapt_to(counts, documents)
    return documents
