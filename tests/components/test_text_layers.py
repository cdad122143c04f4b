"""The built-in ``ngrams`` text model's layers: the word pairs it hashes, the bag it sums, and a saved model that
loads back."""

from __future__ import annotations

import numpy as np


def test_word_pairs_hash_each_pair_of_neighbours_past_the_vocabulary_and_skip_padding():
    from components.models.text_layers import WordPairs

    ids = np.array([[5, 6, 7, 0, 0], [9, 0, 0, 0, 0], [14_999, 14_998, 1, 1, 0]], dtype=np.int32)
    grams = np.asarray(WordPairs(15_000, 40_009)(ids))
    assert grams.shape == (3, 9)
    np.testing.assert_array_equal(grams[:, :5], ids)  # the words first, as they are
    pairs = grams[:, 5:]
    # by hand: (first * 15000 + second) mod 40009, past the 15,000 ids of the vocabulary; 0 where either is padding
    assert pairs[0].tolist() == [15_000 + (5 * 15_000 + 6) % 40_009, 15_000 + (6 * 15_000 + 7) % 40_009, 0, 0]
    assert pairs[1].tolist() == [0, 0, 0, 0]
    assert pairs[2, 0] == 15_000 + (14_999 * 15_000 + 14_998) % 40_009  # no int32 overflow on the largest ids
    assert ((pairs[2, :3] >= 15_000) & (pairs[2, :3] < 15_000 + 40_009)).all() and pairs[2, 3] == 0


def test_the_bag_is_the_sum_over_the_square_root_of_the_count_and_an_empty_text_is_zeros():
    from components.models.text_layers import NGramBag

    rng = np.random.default_rng(0)
    grams = np.array([[3, 4, 4, 0], [0, 0, 0, 0]], dtype=np.int32)
    vectors = rng.normal(size=(2, 4, 5)).astype(np.float32)
    bag = np.asarray(NGramBag()([grams, vectors]))
    np.testing.assert_allclose(bag[0], vectors[0, :3].sum(axis=0) / np.sqrt(3), rtol=1e-6)
    np.testing.assert_array_equal(bag[1], np.zeros(5))


def test_an_ngrams_model_saved_whole_loads_back_in_a_fresh_process(tmp_path):
    """``load_trained_model`` registers the layers itself: a process that never built the model loads it."""
    import subprocess
    import sys

    from components.models.builtin import ngrams
    from components.models.spec import ModelSpec
    from tests.conftest import REPO_ROOT

    model = ngrams(ModelSpec.for_texts(6, 50, 3), embedding_dim=8, buckets=101)
    ids = np.array([[2, 3, 4, 0, 0, 0], [7, 7, 1, 9, 0, 0]], dtype=np.int32)
    model.save(tmp_path / "model.keras")
    np.save(tmp_path / "ids.npy", ids)
    script = (
        "import sys, numpy as np; from components.models import load_trained_model; "
        "folder = sys.argv[1]; model = load_trained_model(folder); "
        "np.save(folder + '/answers.npy', np.asarray(model(np.load(folder + '/ids.npy'))))"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "answers.npy"), np.asarray(model(ids)), rtol=1e-6)
