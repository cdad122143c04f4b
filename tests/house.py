"""The figures of the code's shape that the house issues set bounds on, counted over ``components/`` and
``pipeline/`` (``third_party/``, ``bench/`` and the tests aside): ``make house`` prints them, JSON last.

- ``modality_branches``: the ``if``/``elif``/``while``/conditional expressions whose test reads a modality (a name
  or attribute holding "modality", or the key ``"modality"``) and names one (``"text"``, ``IMAGE``, ...), and the
  ``match`` statements on a modality, by file, outside ``components/modalities/`` and the source sniffing in
  ``components/convert/listing.py`` (a test that compares two modalities is no branch for one);
- ``both_sizes``: the functions that take both ``image_size`` and ``sequence_length``;
- ``long_files``: the ``.py`` files over 450 lines;
- ``format_skips``: the ``# fmt: skip`` and ``# fmt: off`` comments (comments, not strings that quote them), in every
  ``.py`` file of the tree;
- ``doc_words``: the words (as ``wc -w`` counts them, code blocks included) of the README and ``docs/*.md``, by page;
- ``results_lines``: the lines of ``bench/RESULTS.md``."""

from __future__ import annotations

import ast
import glob
import json
import os
import re
import sys
import tokenize
from collections import Counter
from token import COMMENT

from tests.conftest import REPO_ROOT

CODE = ("components", "pipeline")
MODALITY_HOME = ("components/modalities/", "components/convert/listing.py")
MODALITY_NAMES = ("image", "text")
MODALITY_CONSTANTS = ("IMAGE", "TEXT", "IMAGE_MODEL", "TEXT_MODEL", "IMAGES", "TEXTS")
LONG_FILE_LINES = 450
USER_DOCS = ("README.md", "docs/*.md")
RESULTS = "bench/RESULTS.md"
SKIPPED_TREES = (".venv", ".tools", ".git", "third_party", "runs", "node_modules")
FORMAT_OPT_OUT = re.compile(r"#\s*fmt:\s*(skip|off)\b")  # a comment that opts out of ruff format


def python_files(tops: tuple[str, ...], root: str = REPO_ROOT) -> list[str]:
    """The ``.py`` files below ``tops`` (paths relative to ``root``, ``/``-separated), the skipped trees and hidden
    folders (``.venv``, ``.serving``: installed packages) left out."""
    found = []
    for top in tops:
        for folder, folders, names in os.walk(os.path.join(root, top)):
            folders[:] = sorted(name for name in folders if name not in SKIPPED_TREES and not name.startswith("."))
            found += [
                os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
                for name in sorted(names)
                if name.endswith(".py")
            ]
    return found


def reads_modality(test: ast.AST) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Name) and "modality" in node.id.lower():
            return True
        if isinstance(node, ast.Attribute) and "modality" in node.attr.lower():
            return True
        if isinstance(node, ast.Constant) and node.value == "modality":
            return True
    return False


def names_a_modality(test: ast.AST) -> bool:
    """Whether ``test`` names one modality (``"text"``, ``IMAGE``, ``TEXT_MODEL``, ...): a branch for that one, where
    comparing two modalities (``baseline.modality is not ours``) is not."""
    for node in ast.walk(test):
        if isinstance(node, ast.Constant) and node.value in MODALITY_NAMES:
            return True
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        if name.upper() in MODALITY_CONSTANTS:
            return True
    return False


def is_modality_branch(test: ast.AST) -> bool:
    return reads_modality(test) and names_a_modality(test)


def modality_branches(tree: ast.AST) -> int:
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.If | ast.IfExp | ast.While):
            count += is_modality_branch(node.test)
        elif isinstance(node, ast.Match):
            count += reads_modality(node.subject)
    return count


def both_sizes(tree: ast.AST) -> list[str]:
    functions = (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))
    return [
        function.name
        for function in functions
        if {"image_size", "sequence_length"}
        <= {arg.arg for arg in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]}
    ]


def figures(root: str = REPO_ROOT) -> dict:
    branches, sizes, long_files = Counter(), {}, {}
    for path in python_files(CODE, root):
        with open(os.path.join(root, path), encoding="utf-8") as handle:
            source = handle.read()
        tree = ast.parse(source, filename=path)
        if not path.startswith(MODALITY_HOME) and (count := modality_branches(tree)):
            branches[path] = count
        if names := both_sizes(tree):
            sizes[path] = names
        if (lines := source.count("\n")) > LONG_FILE_LINES:
            long_files[path] = lines
    skips = Counter()
    for path in python_files(("",), root):
        with open(os.path.join(root, path), encoding="utf-8") as handle:
            comments = [token.string for token in tokenize.generate_tokens(handle.readline) if token.type == COMMENT]
        if count := sum(bool(FORMAT_OPT_OUT.match(comment)) for comment in comments):
            skips[path] = count
    words = Counter()
    for pattern in USER_DOCS:
        for path in sorted(glob.glob(os.path.join(root, pattern))):
            with open(path, encoding="utf-8") as handle:
                words[os.path.relpath(path, root).replace(os.sep, "/")] = len(handle.read().split())
    try:
        with open(os.path.join(root, RESULTS), encoding="utf-8") as handle:
            results_lines = handle.read().count("\n")
    except FileNotFoundError:
        results_lines = 0
    return {
        "modality_branches": {"total": sum(branches.values()), "by_file": dict(branches.most_common())},
        "both_sizes": sizes,
        "long_files": dict(sorted(long_files.items(), key=lambda item: -item[1])),
        "format_skips": {"total": sum(skips.values()), "by_file": dict(skips.most_common())},
        "doc_words": {"total": sum(words.values()), "by_file": dict(words.most_common())},
        "results_lines": results_lines,
    }


def main() -> int:
    found = figures()
    print(f"modality branches outside components/modalities/: {found['modality_branches']['total']}")
    for path, count in found["modality_branches"]["by_file"].items():
        print(f"  {count:3d}  {path}")
    print(f"functions taking both image_size and sequence_length: {sum(map(len, found['both_sizes'].values()))}")
    for path, names in found["both_sizes"].items():
        print(f"       {path}: {', '.join(names)}")
    print(f"files over {LONG_FILE_LINES} lines: {len(found['long_files'])}")
    for path, lines in found["long_files"].items():
        print(f"  {lines:5d}  {path}")
    print(f"# fmt: skip / off: {found['format_skips']['total']}")
    print(f"words in the README and docs/: {found['doc_words']['total']}")
    print(f"lines of {RESULTS}: {found['results_lines']}")
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
