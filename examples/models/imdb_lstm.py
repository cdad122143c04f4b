"""The IMDB-sentiment LSTM of the "LSTM on a TPU" article, written as a model of your own.

    .venv/bin/python -m pipeline run-local --source path/to/aclImdb/train \
        --model examples/models/imdb_lstm.py:build --hparam units=64

For texts, ``spec.inputs()`` is the token ids, ``[sequence_length]`` int32 (0 pads at the end, 1 is a word outside
the vocabulary), and ``spec.vocabulary_size`` the number of ids. The exported model takes raw strings: the pipeline
puts the tokenisation in front of it.
"""

import keras
from keras import layers

SEARCH_SPACE = {"units": [16, 32, 64]}


def build(spec, units: int = 32, embedding_dim: int = 32, dropout: float = 0.0):
    """Embedding -> LSTM -> softmax, the padding masked (``mask_zero``)."""
    return keras.Sequential(
        [
            spec.inputs(),
            layers.Embedding(spec.vocabulary_size, embedding_dim, mask_zero=True),
            layers.LSTM(units, dropout=dropout),
            layers.Dense(spec.num_classes, activation="softmax", dtype="float32"),
        ],
        name="imdb_lstm",
    )
