"""The default text model against TF-IDF + logistic regression over several random splits of one CSV (``text,label``),
in one process: a single split's test set of 150 texts moves a figure by 0.7 points a text, too coarse to tell two
text models apart. Each split holds out 30% for test and 10% for validation; the vocabulary comes from its train
part. For each standardisation (punctuation to spaces, the default; removed, the IMDB article's), the built-in model
(``--model``, ``ngrams`` by default: adapted to the train part, trained as ``run-local`` trains it: Adam keeping the
weights' moving average, at ``auto``'s learning rate and epochs, batch 32, stopped and the weights of the best
validation loss kept) is scored beside scikit-learn's TF-IDF of words and word pairs into a logistic regression (C=10),
trained on the same train part. Prints each split's figures and their means; the last line is a JSON object.

    .venv/bin/python bench/text_models.py --source CSV [--splits 3] [--model ngrams]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from collections import Counter

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)


def read_csv(path: str) -> tuple[list[str], np.ndarray]:
    with open(path, encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    names = sorted({row["label"] for row in rows})
    return [row["text"] for row in rows], np.array([names.index(row["label"]) for row in rows])


def token_matrix(texts, train, standardization: str, vocabulary_size: int, length: int):
    """(ids [N, length] under a vocabulary of the train part's most frequent tokens, the vocabulary: its tokens in id
    order)."""
    from components.tokenizing import OUT_OF_VOCABULARY, PADDING, standardize, token_ids

    counts = Counter(token for i in train for token in standardize(texts[i], standardization))
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[: vocabulary_size - 2]
    index = {token: i + 2 for i, (token, _) in enumerate(ranked)}
    ids = np.array([token_ids(text, index, length, standardization)[0] for text in texts], np.int32)
    return ids, [PADDING, OUT_OF_VOCABULARY, *index]


def model_accuracy(name: str, ids, vocabulary: list[str], labels, parts, seed: int) -> float:
    import keras

    from bench.image_models import fit_as_training_does
    from components.modalities import auto_training
    from components.models import load
    from components.models.spec import ModelSpec
    from components.models.text_layers import adapt

    train, validation, test = parts
    keras.utils.set_random_seed(seed)
    classes = int(labels.max()) + 1
    model = load(name).build(ModelSpec.for_texts(ids.shape[1], len(vocabulary), classes))
    adapt(model, [ids[train]], vocabulary)
    _, auto = auto_training("text", pretrained=False)
    one_hot = keras.utils.to_categorical(labels, classes)
    rate, epochs = auto["learning_rate"], auto["epochs"]
    fit_as_training_does(model, rate, epochs, (ids[train], one_hot[train]), (ids[validation], one_hot[validation]))
    return float((model.predict(ids[test], verbose=0).argmax(-1) == labels[test]).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True, help="a CSV with text and label columns")
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--model", default="ngrams")
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from components.params import TEXT
    from components.tokenizing import SPLIT_PUNCTUATION, STRIP_PUNCTUATION

    texts, labels = read_csv(args.source)
    vocabulary_size, length = TEXT["vocabulary_size"].default, TEXT["sequence_length"].default
    figures: dict[str, list[float]] = {}
    started = time.monotonic()
    for seed in range(args.splits):
        order = np.random.RandomState(seed).permutation(len(texts))
        n = len(texts)
        test, validation, train = order[: 3 * n // 10], order[3 * n // 10 : 4 * n // 10], order[4 * n // 10 :]
        baseline = make_pipeline(
            TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True), LogisticRegression(C=10, max_iter=2000)
        )
        baseline.fit([texts[i] for i in train], labels[train])
        predicted = baseline.predict([texts[i] for i in test])
        figures.setdefault("TF-IDF 1-2 grams + LogReg", []).append(float((predicted == labels[test]).mean()))
        for standardization in (SPLIT_PUNCTUATION, STRIP_PUNCTUATION):
            ids, vocabulary = token_matrix(texts, train, standardization, vocabulary_size, length)
            accuracy = model_accuracy(args.model, ids, vocabulary, labels, (train, validation, test), seed)
            figures.setdefault(f"{args.model}, {standardization}", []).append(accuracy)
        print(
            f"split {seed} ({len(train)} train, {len(test)} test):",
            ", ".join(f"{name} {values[-1]:.4f}" for name, values in figures.items()),
            flush=True,
        )
    means = {name: float(np.mean(values)) for name, values in figures.items()}
    base = means["TF-IDF 1-2 grams + LogReg"]
    for name, mean in means.items():
        print(f"{name}: mean {mean:.4f} over {args.splits} splits ({mean / base:.3f}x TF-IDF + LogReg)")
    print(
        json.dumps(
            {
                "source": args.source,
                "splits": args.splits,
                "texts": len(texts),
                "means": means,
                "ratios": {name: mean / base for name, mean in means.items()},
                "per_split": figures,
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
