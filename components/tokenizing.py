"""Text to token ids, twice over: in Python for the Beam conversion, and as TensorFlow ops inside the exported
SavedModel, so that serving tokenises raw strings exactly as the training examples were tokenised.

Standardisation: lowercase (Unicode), HTML line breaks (``<br />``, any case) to spaces, each ASCII punctuation
character to a space (``SPLIT_PUNCTUATION``: ``e-mail`` is two tokens), then split on runs of whitespace (every
character Python's ``str.split`` takes for whitespace). The IMDB article's standardisation, Keras's
``lower_and_strip_punctuation``, removes punctuation instead (``STRIP_PUNCTUATION``: ``e-mail`` is ``email``); each
conversion records which one it used (``stats.json``'s ``standardization``), and every later step tokenises by that
record (a conversion made before it was recorded stripped punctuation). Ids: 0 pads, 1 is
out of vocabulary, then the vocabulary's tokens in ``vocabulary.txt`` order (one a line); a text's first
``sequence_length`` tokens, padded at the end with 0.

The two versions are kept equal by construction (the same patterns, the whitespace set written out for RE2) and by
tests that tokenise every test example (``tests/components/test_export_text.py``) and every whitespace and
punctuation character (``tests/components/test_tokenizing.py``) both ways.
"""

from __future__ import annotations

import re
import string

VOCABULARY_FILE = "vocabulary.txt"
# beside an export's vocabulary (and packed in its TFLite files): the standardisation's name, one line
STANDARDIZATION_FILE = "standardization.txt"
PADDING, OUT_OF_VOCABULARY = "", "[UNK]"  # ids 0 and 1, as Keras's TextVectorization names them
PADDING_ID, OUT_OF_VOCABULARY_ID = 0, 1
# what standardisation strips: HTML line breaks (aclImdb's reviews hold "<br />"), then ASCII punctuation
LINE_BREAK = r"<br[ \t\n\v\f\r]*/?>"  # matched after lowercasing; the same class in Python and RE2
PUNCTUATION = f"[{re.escape(string.punctuation)}]"
# the characters str.split() splits on (str.isspace()): the graph turns each into a space before splitting, as
# tf.strings.split alone splits on ASCII whitespace only (written out: finding them takes 0.1 s in every process)
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)

_LINE_BREAK, _PUNCTUATION = re.compile(LINE_BREAK), re.compile(PUNCTUATION)

# what punctuation becomes: a space (the default: on short technical texts, such as package descriptions, it scores
# 0.6 to 1.2 points above removing it, bench/RESULTS.md), or nothing (the article's)
SPLIT_PUNCTUATION, STRIP_PUNCTUATION = "lower_split_punctuation", "lower_strip_punctuation"
PUNCTUATION_TO = {SPLIT_PUNCTUATION: " ", STRIP_PUNCTUATION: ""}
STANDARDIZATION = SPLIT_PUNCTUATION  # what a conversion uses and records now


def standardization_of(facts: dict) -> str:
    """The standardisation that a conversion's ``stats.json`` or a model's ``model_config.json`` records; one from
    before it was recorded (no such key, or a sentence) stripped punctuation."""
    recorded = facts.get("standardization")
    return recorded if recorded in PUNCTUATION_TO else STRIP_PUNCTUATION


def standardize(text: str, standardization: str = STANDARDIZATION) -> list[str]:
    """The tokens of a text: lowercased, HTML line breaks to spaces, ASCII punctuation to spaces (or removed, under
    ``STRIP_PUNCTUATION``), split on whitespace."""
    return _PUNCTUATION.sub(PUNCTUATION_TO[standardization], _LINE_BREAK.sub(" ", text.lower())).split()


def text_key(text: str) -> bytes:
    """A text's split key (``components.convert.split_keys``): its words with punctuation removed
    (``STRIP_PUNCTUATION``), joined by spaces, UTF-8. Texts with one key are copies of one text."""
    return " ".join(standardize(text, STRIP_PUNCTUATION)).encode("utf-8")


def token_ids(
    text: str, index: dict[str, int], length: int, standardization: str = STANDARDIZATION
) -> tuple[list[int], int, int]:
    """(ids padded or truncated to ``length``, tokens in the text, of which out of vocabulary)."""
    tokens = standardize(text, standardization)
    ids = [index.get(token, OUT_OF_VOCABULARY_ID) for token in tokens]
    unknown = sum(1 for i in ids if i == OUT_OF_VOCABULARY_ID)
    return (ids + [PADDING_ID] * length)[:length], len(tokens), unknown


def vocabulary_bytes(vocabulary: list[str]) -> bytes:
    """``vocabulary.txt``'s content: one token a line, in id order."""
    return "".join(f"{token}\n" for token in vocabulary).encode("utf-8")


def parse_vocabulary(content: bytes) -> list[str]:
    """The tokens of a ``vocabulary.txt``, in id order (the first line, padding, is empty; a last line without its
    newline still counts)."""
    lines = content.decode("utf-8").split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def read_vocabulary(path: str) -> list[str]:
    """Reads ``vocabulary.txt`` (local or ``gs://``); ``UsageError`` when it is missing or not a vocabulary."""
    from components.cli import UsageError
    from components.storage import exists, open_read

    if not exists(path):
        raise UsageError(f"{path} does not exist: a text model needs the vocabulary its examples were converted with")
    with open_read(path) as handle:
        tokens = parse_vocabulary(handle.read())
    if tokens[:2] != [PADDING, OUT_OF_VOCABULARY]:
        raise UsageError(
            f"{path} is not a vocabulary of this pipeline: its first lines must be padding (empty) and "
            f"{OUT_OF_VOCABULARY}; convert the texts with `python -m components.convert`"
        )
    return tokens


def vocabulary_digest(tokens: list[str]) -> str:
    """sha256 of a vocabulary: a text model's ids mean its tokens, and no other vocabulary's."""
    import hashlib

    return hashlib.sha256(vocabulary_bytes(tokens)).hexdigest()


class GraphTokenizer:
    """The same tokenisation as TensorFlow ops: ``tokenizer(strings [N]) -> int32 ids [N, sequence_length]``. Holds a
    lookup table of the vocabulary (its tokens are constants in the graph); track it in a SavedModel (``table``)."""

    def __init__(self, vocabulary: list[str], sequence_length: int, standardization: str = STANDARDIZATION):
        import tensorflow as tf

        self.sequence_length, self.punctuation_to = sequence_length, PUNCTUATION_TO[standardization]
        tokens = list(vocabulary[2:])  # ids 0 and 1 are padding and out-of-vocabulary: never looked up
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(tokens, tf.string), tf.range(2, len(tokens) + 2, dtype=tf.int64)
            ),
            default_value=OUT_OF_VOCABULARY_ID,
        )

    def __call__(self, strings):
        import tensorflow as tf

        text = tf.strings.lower(strings, encoding="utf-8")
        text = tf.strings.regex_replace(text, LINE_BREAK, " ")
        text = tf.strings.regex_replace(text, PUNCTUATION, self.punctuation_to)
        text = tf.strings.regex_replace(text, "[" + "".join(f"\\x{{{ord(c):04x}}}" for c in WHITESPACE) + "]+", " ")
        ids = self.table.lookup(tf.strings.split(text))  # ragged: each text's tokens
        # the first sequence_length ids, padded at the end
        ids = ids.to_tensor(default_value=PADDING_ID, shape=[None, self.sequence_length])
        return tf.cast(ids, tf.int32)
