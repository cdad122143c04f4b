"""The built-in ``ngrams`` text model's layers: the word pairs it hashes, the bag it weighs as TF-IDF does, what it
counts from the training texts, and a saved model that loads back."""

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


def test_a_bag_without_idf_is_the_sum_over_the_square_root_of_the_count_and_an_empty_text_is_zeros():
    from components.models.text_layers import NGramBag

    rng = np.random.default_rng(0)
    grams = np.array([[3, 4, 4, 0], [0, 0, 0, 0]], dtype=np.int32)
    vectors = rng.normal(size=(2, 4, 5)).astype(np.float32)
    bag = np.asarray(NGramBag()([grams, vectors]))
    np.testing.assert_allclose(bag[0], vectors[0, :3].sum(axis=0) / np.sqrt(3), rtol=1e-6)
    np.testing.assert_array_equal(bag[1], np.zeros(5))


def test_the_adapted_bag_weighs_one_hot_grams_as_scikit_learns_tfidf_does():
    """On one-hot vectors the bag is a text's TF-IDF row: scikit-learn's ``TfidfVectorizer`` (smooth idf, L2 norm) on
    the same grams, counted from the same training texts; a gram no training text holds weighs nothing."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    from components.models.text_layers import NGramBag, document_frequencies

    size = 8
    train = np.array([[2, 3, 3, 0], [2, 4, 0, 0], [5, 2, 6, 6], [3, 0, 0, 0]], dtype=np.int32)
    texts = np.array([[2, 3, 4, 7], [6, 5, 0, 0]], dtype=np.int32)  # 7: in no training text
    assert document_frequencies(train, size).tolist() == [3, 0, 3, 2, 1, 1, 1, 0]  # padding: rows that hold some
    bag = NGramBag(size)
    bag.build(None)
    bag.adapt_to(document_frequencies(train, size), len(train))
    one_hot = np.eye(size, dtype=np.float32)[texts]
    rows = np.asarray(bag([texts, one_hot]))

    def words(ids):
        return " ".join(f"g{i}" for i in ids if i > 0)

    vectorizer = TfidfVectorizer(token_pattern=r"\S+").fit([words(row) for row in train])
    expected = vectorizer.transform([words(row) for row in texts]).toarray()
    columns = [int(name[1:]) for name in vectorizer.get_feature_names_out()]
    np.testing.assert_allclose(rows[:, columns], expected, rtol=1e-5)
    assert np.abs(rows[:, [0, 1, 7]]).max() == 0  # padding, and the grams no training text holds
    # a repeated gram: each occurrence weighs its idf, and the norm is over the occurrences
    idf = bag.idf.numpy()
    repeated = np.asarray(bag([np.array([[3, 3, 2, 0]], np.int32), np.eye(size, dtype=np.float32)[[[3, 3, 2, 0]]]]))
    weights = np.array([2 * idf[3], idf[2]]) / np.sqrt(2 * idf[3] ** 2 + idf[2] ** 2)
    np.testing.assert_allclose(repeated[0, [3, 2]], weights, rtol=1e-5)


def test_adapt_counts_the_models_grams_over_every_training_batch():
    from components.models.builtin import ngrams
    from components.models.spec import ModelSpec
    from components.models.text_layers import NGramBag, adapt

    model = ngrams(ModelSpec.for_texts(4, 10, 2), embedding_dim=4, buckets=7, char_buckets=0)
    batches = [np.array([[2, 3, 0, 0]], np.int32), np.array([[2, 2, 5, 0], [9, 0, 0, 0]], np.int32)]
    assert adapt(model, iter(batches)) == 3
    idf = next(layer for layer in model.layers if isinstance(layer, NGramBag)).idf.numpy()
    # word 2 is in 2 of the 3 texts, words 3, 5 and 9 in one; the pair (2, 3) in one
    np.testing.assert_allclose(idf[[2, 3, 5, 9]], np.log(4 / np.array([3, 2, 2, 2])) + 1, rtol=1e-6)
    assert idf[10 + (2 * 10 + 3) % 7] == np.float32(np.log(4 / 2) + 1)
    assert idf[4] == 0 and idf[0] == 0  # word 4: in no training text
    from components.models.builtin import lstm

    assert adapt(lstm(ModelSpec.for_texts(4, 10, 2)), iter(batches)) == 0  # nothing to adapt


def test_an_ngrams_model_saved_whole_loads_back_in_a_fresh_process(tmp_path):
    """``load_trained_model`` registers the layers itself: a process that never built the model loads it."""
    import subprocess
    import sys

    from components.models.builtin import ngrams
    from components.models.spec import ModelSpec
    from components.models.text_layers import adapt
    from tests.conftest import REPO_ROOT

    model = ngrams(ModelSpec.for_texts(6, 50, 3), embedding_dim=8, buckets=101, char_buckets=97)
    ids = np.array([[2, 3, 4, 0, 0, 0], [7, 7, 1, 9, 0, 0]], dtype=np.int32)
    vocabulary = ["", "[UNK]", *(f"word{index}" for index in range(48))]
    # (the idfs and the words' grams are saved and loaded with it)
    adapt(model, [ids[:1], np.array([[2, 7, 9, 0, 0, 0]], np.int32)], vocabulary)
    model.save(tmp_path / "model.keras")
    np.save(tmp_path / "ids.npy", ids)
    script = (
        "import sys, numpy as np; from components.models import load_trained_model; "
        "folder = sys.argv[1]; model = load_trained_model(folder); "
        "np.save(folder + '/answers.npy', np.asarray(model(np.load(folder + '/ids.npy'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    np.testing.assert_allclose(np.load(tmp_path / "answers.npy"), np.asarray(model(ids)), rtol=1e-6)


def test_a_words_character_grams_are_3_to_5_characters_of_the_marked_word():
    from components.models.text_layers import char_grams

    assert char_grams("net") == ["<ne", "net", "et>", "<net", "net>", "<net>"]
    assert char_grams("a") == ["<a>"]


def test_the_gram_table_gives_each_gram_one_id_shared_by_the_words_that_hold_it():
    from components.models.text_layers import char_gram_table, char_grams

    vocabulary = ["", "[UNK]", "net", "nets", "cat"]
    table = char_gram_table(vocabulary, buckets=100, per_word=12)
    assert not table[:2].any()  # padding and out-of-vocabulary hold no grams
    assert (table[2, :6] > 0).all() and not table[2, 6:].any()  # "net": 6 grams, then zeros
    # "nets" begins with "<ne", "net" as "net" does; "cat" shares none of "net"'s grams
    assert table[3, 0] == table[2, 0] and table[3, 1] == table[2, 1]
    assert not set(table[4][table[4] > 0]) & set(table[2][table[2] > 0])
    assert len(set(table.ravel()) - {0}) == len({gram for word in vocabulary[2:] for gram in char_grams(word)})
    short = char_gram_table(vocabulary, buckets=100, per_word=4)  # a long word keeps its first grams
    assert short.shape == (5, 4) and (short[2:] > 0).all() and (short[3, :2] == short[2, :2]).all()
    full = char_gram_table(vocabulary, buckets=5)  # 4 own ids, then shared: every id within the buckets
    assert sorted(set(full.ravel())) == [0, 1, 2, 3, 4]


def test_the_adapted_character_grams_score_scikit_learns_char_wb_tfidf_of_the_words_in_the_vocabulary():
    """With one-hot embeddings the scores are the grams' TF-IDF row times the kernel: scikit-learn's
    ``TfidfVectorizer(analyzer="char_wb")`` (words padded with spaces where ours are marked ``<word>``; smooth idf, L2
    norm) fitted on the same training texts, on texts that hold no gram twice (``NGramBag`` says how the two weigh a
    repeated one); an out-of-vocabulary word and a gram no training text holds add nothing. Both ways to the sum: a
    batch of 2 texts (gathered and embedded) and one of 24 (projected first)."""
    import re

    import keras
    from sklearn.feature_extraction.text import TfidfVectorizer

    from components.models.text_layers import CharGrams, adapt, char_grams

    words = ["net", "nets", "network", "cat", "cats", "dog", "server", "serve", "tree", "three", "street", "rest"]
    vocabulary = ["", "[UNK]", *words]
    length, buckets, classes = 3, 400, 200  # 2 texts embedded hold less than 14 words projected, 24 more
    ids = keras.Input((length,), dtype="int32")
    model = keras.Model(ids, CharGrams(len(vocabulary), buckets, buckets, classes)(ids))
    train = np.array([[2, 3, 0], [4, 2, 7], [5, 6, 9], [8, 8, 10], [11, 12, 0], [13, 2, 0]], np.int32)
    assert adapt(model, [train[:2], train[2:]], vocabulary) == len(train)
    layer = model.layers[1]
    layer.embeddings.assign(np.eye(buckets, dtype=np.float32))  # one-hot: a gram's vector is its id
    kernel = np.random.default_rng(0).normal(size=(buckets, classes)).astype(np.float32)
    layer.kernel.assign(kernel)
    gram_ids = {}  # each gram of the vocabulary: its id, as the table holds it
    for word, row in zip(words, layer.table.numpy()[2:], strict=True):
        gram_ids.update(zip(char_grams(word), row[: len(char_grams(word))], strict=True))

    def text(row):
        return " ".join(vocabulary[i] for i in row if i > 1)

    vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5)).fit([text(row) for row in train])
    # scikit-learn's " net" and "et " are our "<net" and "et>"
    marked = [re.sub(" $", ">", re.sub("^ ", "<", gram)) for gram in vectorizer.get_feature_names_out()]
    columns = [gram_ids[gram] for gram in marked]
    for texts in (
        np.array([[3, 12, 1], [13, 4, 0]], np.int32),
        np.tile(np.array([[2, 9, 0], [11, 1, 1], [10, 0, 0]], np.int32), (8, 1)),
    ):
        tfidf = np.zeros((len(texts), buckets))
        tfidf[:, columns] = vectorizer.transform([text(row) for row in texts]).toarray()
        np.testing.assert_allclose(np.asarray(model(texts)), tfidf @ kernel, rtol=1e-5, atol=1e-6)


def test_a_character_bag_needs_the_vocabulary_of_its_ids():
    import pytest

    from components.models.builtin import ngrams
    from components.models.spec import ModelSpec
    from components.models.text_layers import adapt

    model = ngrams(ModelSpec.for_texts(4, 10, 2), embedding_dim=4, buckets=7, char_buckets=11)
    batches = [np.array([[2, 3, 0, 0]], np.int32)]
    with pytest.raises(ValueError, match="needs the vocabulary"):
        adapt(model, batches)
    with pytest.raises(ValueError, match="takes 10 token ids, and the vocabulary has 3"):
        adapt(model, batches, ["", "[UNK]", "net"])


def test_training_sets_the_default_models_grams_from_the_examples_vocabulary_and_idfs_from_their_train_split(
    text_examples,
):
    """``Text.adapt``, as training calls it: the table holds each word of the examples' ``vocabulary.txt`` as
    ``char_gram_table`` makes it, and a gram weighs its idf over the train split's texts (the split's own count)."""
    from components.artifacts.examples import make_dataset
    from components.modalities import spec_of
    from components.modalities.text import TEXT
    from components.models.builtin import ngrams
    from components.models.text_layers import CharGrams, char_gram_table, document_frequencies, smooth_idf
    from components.tokenizing import read_vocabulary

    examples_dir, stats = text_examples
    model = ngrams(spec_of(stats))
    TEXT.adapt(model, examples_dir, stats)
    layer = next(layer for layer in model.layers if isinstance(layer, CharGrams))
    vocabulary = read_vocabulary(f"{examples_dir}/vocabulary.txt")
    table = char_gram_table(vocabulary, layer.buckets)
    np.testing.assert_array_equal(layer.table.numpy(), table)
    batches = make_dataset(examples_dir, "train", TEXT.reading(stats), 64, training=False)
    ids = np.concatenate([tokens for tokens, _ in batches.as_numpy_iterator()])
    assert len(ids) == stats["counts"]["train"]
    texts_holding = document_frequencies(table[ids].reshape(len(ids), -1), layer.buckets)
    np.testing.assert_allclose(layer.idf.numpy(), smooth_idf(texts_holding, len(ids)), rtol=1e-6)
    assert (layer.idf.numpy()[np.unique(table[ids])[1:]] > 1).all()  # every gram the texts hold weighs


def test_the_character_buckets_are_none_or_two_or_more():
    import pytest

    from components.models.builtin import ngrams
    from components.models.spec import ModelSpec

    for wrong in (1, -3):
        with pytest.raises(ValueError, match=f"char_buckets must be 0 .* not {wrong}"):
            ngrams(ModelSpec.for_texts(4, 10, 2), char_buckets=wrong)


def test_the_exports_float_weights_leave_out_the_gram_table(tmp_path):
    """export.json's ``weights_bytes`` (what the int8 file's size is held against) counts the float32 weights: 4
    bytes a parameter, less the character-gram table (int32 ids, [vocabulary, GRAMS_PER_WORD])."""
    from components.export.common import format_entries
    from components.models.builtin import ngrams
    from components.models.spec import ModelSpec
    from components.models.text_layers import GRAMS_PER_WORD

    vocabulary = 50
    model = ngrams(ModelSpec.for_texts(6, vocabulary, 3), embedding_dim=8, buckets=101, char_buckets=97)
    figures = format_entries(model, str(tmp_path), {"tflite_int8": b"0" * 100}, str(tmp_path), {}, 0)
    floats = model.count_params() - vocabulary * GRAMS_PER_WORD
    assert figures["saved_model"]["weights_bytes"] == 4 * floats
    assert figures["int8_size_vs_float_weights"] == 100 / (4 * floats)
