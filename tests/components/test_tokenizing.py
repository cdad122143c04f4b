"""Tokenisation, by hand-written cases: what a text becomes (standardised tokens, ids, padding and truncation), the
vocabulary file both ways, and the graph's tokeniser giving the same ids as Beam's Python on every whitespace and
punctuation character. No fixture: the module runs in a second (``make mutants`` runs it for every mutant)."""

from __future__ import annotations

import hashlib

import pytest

from components.cli import UsageError
from components.tokenizing import (
    SPLIT_PUNCTUATION,
    STRIP_PUNCTUATION,
    GraphTokenizer,
    parse_vocabulary,
    read_vocabulary,
    standardization_of,
    standardize,
    token_ids,
    vocabulary_bytes,
    vocabulary_digest,
)

VOCABULARY = ["", "[UNK]", "good", "film", "bad"]  # ids 0 (padding), 1 (unknown), then 2, 3, 4
INDEX = {token: i for i, token in enumerate(VOCABULARY)}


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("A superb, lovely film!<br /><br />Really GOOD.", ["a", "superb", "lovely", "film", "really", "good"]),
        ("one<BR>two<br/>three", ["one", "two", "three"]),
        ("don't (1/10) e-mail", ["don", "t", "1", "10", "e", "mail"]),
        ("python3-gi:amd64,x", ["python3", "gi", "amd64", "x"]),
        ("Straße\u00a0ΟΔΟΣ\tx", ["straße", "οδος", "x"]),
        ("  ...  ", []),
    ],
)
def test_standardize_lowercases_drops_markup_and_splits_on_punctuation_and_whitespace(text, tokens):
    assert standardize(text) == tokens


@pytest.mark.parametrize(
    "text, tokens",
    [("don't (1/10) e-mail", ["dont", "110", "email"]), ("A,b<br/>C", ["ab", "c"]), ("  ...  ", [])],
)
def test_the_articles_standardisation_removes_punctuation_instead(text, tokens):
    assert standardize(text, STRIP_PUNCTUATION) == tokens


def test_the_recorded_standardisation_is_read_and_an_unrecorded_one_stripped_punctuation():
    assert standardization_of({"standardization": SPLIT_PUNCTUATION}) == SPLIT_PUNCTUATION
    assert standardization_of({"standardization": STRIP_PUNCTUATION}) == STRIP_PUNCTUATION
    assert standardization_of({}) == STRIP_PUNCTUATION  # a conversion from before it was recorded
    # (what those conversions recorded instead: a sentence)
    old = {"standardization": "lowercase, HTML line breaks and ASCII punctuation removed, split on whitespace"}
    assert standardization_of(old) == STRIP_PUNCTUATION


def test_token_ids_pads_at_the_end_and_counts_the_unknown_tokens():
    assert token_ids("Good film, BAD film; odd", INDEX, 8) == ([2, 3, 4, 3, 1, 0, 0, 0], 5, 1)


def test_token_ids_keeps_the_first_tokens_of_a_long_text():
    assert token_ids("bad good film unseen film", INDEX, 3) == ([4, 2, 3], 5, 1)
    assert token_ids("", INDEX, 2) == ([0, 0], 0, 0)


def test_the_vocabulary_file_is_one_token_a_line_and_reads_back():
    content = b"\n[UNK]\ngood\nfilm\nbad\n"
    assert vocabulary_bytes(VOCABULARY) == content
    assert parse_vocabulary(content) == VOCABULARY
    assert parse_vocabulary(content.rstrip(b"\n")) == VOCABULARY  # a last line without its newline
    assert vocabulary_digest(VOCABULARY) == hashlib.sha256(content).hexdigest()
    assert vocabulary_digest(VOCABULARY[:-1]) != vocabulary_digest(VOCABULARY)


def test_read_vocabulary_reads_the_file_and_refuses_what_is_not_one(tmp_path):
    good = tmp_path / "vocabulary.txt"
    good.write_bytes("\n[UNK]\nnaïve\n".encode())
    assert read_vocabulary(str(good)) == ["", "[UNK]", "naïve"]
    missing = tmp_path / "missing.txt"
    with pytest.raises(UsageError) as raised:
        read_vocabulary(str(missing))
    assert str(raised.value) == (
        f"{missing} does not exist: a text model needs the vocabulary its examples were converted with"
    )
    other = tmp_path / "other.txt"
    other.write_bytes(b"[UNK]\n\ngood\n")  # the first two lines swapped
    with pytest.raises(
        UsageError,
        match=r"other.txt is not a vocabulary of this pipeline: its first lines must be "
        r"padding \(empty\) and \[UNK\]",
    ):
        read_vocabulary(str(other))


def test_the_graph_gives_hand_counted_ids():
    import tensorflow as tf

    texts = ["Good film, BAD film; odd", "bad good film unseen film", "", "FILM<br />good"]
    ids = GraphTokenizer(VOCABULARY, 4)(tf.constant(texts)).numpy()
    assert ids.dtype == "int32" and ids.shape == (4, 4)
    assert ids.tolist() == [[2, 3, 4, 3], [4, 2, 3, 1], [0, 0, 0, 0], [3, 2, 0, 0]]


def test_the_written_out_whitespace_is_every_character_python_splits_on():
    from components.tokenizing import WHITESPACE

    found = "".join(chr(code) for code in range(0x110000) if chr(code).isspace())
    assert found == WHITESPACE


def test_the_graph_and_python_tokenise_every_whitespace_and_punctuation_alike():
    """Beyond the test set: every character Python splits on, all of ASCII punctuation, markup in odd spellings, a
    final sigma, letters whose lowercase is longer, and truncation, through the graph and through Beam's Python."""
    import string

    import tensorflow as tf

    from components.tokenizing import WHITESPACE, GraphTokenizer, standardize, token_ids

    texts = [
        "x".join(WHITESPACE) + "y",
        string.punctuation.join(["a", "b"]) + " don't-stop (1/10)",
        "one<BR\t/>two<br>three<Br  />four<br/ >five<bR/>six",
        "ΟΔΟΣ ΣΑΣ ὈΔΥΣΣΕΎΣ İstanbul ǅungla Straße ﬁne ＡＢＣ",
        "tab\tnew\nline\rcarriage\x0bvt\x0cff\x1cfs\x85nel\u2028ls",
        " ".join(f"w{i}" for i in range(40)),  # longer than the sequence: truncated
        "",
        "!!! ... ???",  # punctuation only: nothing left
    ]
    for standardization in (SPLIT_PUNCTUATION, STRIP_PUNCTUATION):
        tokens = {token for text in texts for token in standardize(text, standardization)}
        vocabulary = ["", "[UNK]", *sorted(tokens)[::2]]
        index = {token: i for i, token in enumerate(vocabulary)}
        length = 12
        graph = GraphTokenizer(vocabulary, length, standardization)(tf.constant(texts)).numpy()
        for text, ids in zip(texts, graph, strict=True):
            assert ids.tolist() == token_ids(text, index, length, standardization)[0], (standardization, text)
        assert sum(len(standardize(text, standardization)) for text in texts) > 60  # the cases held tokens
