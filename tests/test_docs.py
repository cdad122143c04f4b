"""The user docs' links: every relative link in the README, docs/ and bench/RESULTS.md names a file that exists and,
with an anchor, a heading of that file (as GitHub slugs it)."""

from __future__ import annotations

import glob
import os
import re

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = [
    "README.md",
    "bench/RESULTS.md",
    *sorted(os.path.relpath(p, REPO_ROOT) for p in glob.glob(os.path.join(REPO_ROOT, "docs", "*.md"))),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(path: str) -> str:
    """The page without its fenced code blocks and inline code."""
    with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as handle:
        text = re.sub(r"^```.*?^```", "", handle.read(), flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: str) -> set[str]:
    with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as handle:
        text = re.sub(r"^```.*?^```", "", handle.read(), flags=re.M | re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


def test_slug_follows_github():
    assert slug("Speed (`bench/train.py`)") == "speed-benchtrainpy"
    assert slug("What runs where, and what is proven here") == "what-runs-where-and-what-is-proven-here"
    assert slug("The gate: blessing, export, registry") == "the-gate-blessing-export-registry"


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(os.path.join(REPO_ROOT, resolved)):
            broken.append(f"{target}: no file {resolved}")
        elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved}")
    assert not broken, f"{page}: " + "; ".join(broken)
