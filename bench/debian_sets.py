"""Real sets that nobody here made, built from Debian's packages, for ``bench/quality.py``, ``bench/text_models.py``
and ``bench/image_models.py``:

- ``short.csv``: the short descriptions of 230 packages in each of 7 sections (``text,label``);
- ``long.csv``: the long descriptions of 200 packages in each of 8 sections;
- ``icons/``: 48-pixel RGBA PNGs of 5 icon contexts (apps, devices, mimetypes, places, status) from 4 icon themes
  (GNOME, MATE, Oxygen and Tango, whose 32-pixel PNGs are scaled up), at most 90 a theme and context: some are one
  icon drawn by several artists.

Package texts come from the package index apt keeps (``/var/lib/apt/lists/*_Packages.lz4``: run ``apt-get update``
first where there is none); the icon themes are fetched with ``apt-get download``. Sampling is seeded, so one index
gives the same sets.

    .venv/bin/python bench/debian_sets.py --out DIR
"""

from __future__ import annotations

import argparse
import csv
import glob
import os
import random
import subprocess
import tempfile

SHORT = ("utils", "net", "science", "admin", "games", "sound", "graphics")
LONG = (*SHORT, "text")
THEMES = {  # package: the folder of its PNGs, one per context
    "gnome-icon-theme": "usr/share/icons/gnome/48x48",
    "mate-icon-theme": "usr/share/icons/mate/48x48",
    "oxygen-icon-theme": "usr/share/icons/oxygen/base/48x48",
    "tango-icon-theme": "usr/share/icons/Tango/32x32",
}
CONTEXTS = ("apps", "devices", "mimetypes", "places", "status")


def packages(index: str) -> list[dict[str, str]]:
    """The index's packages: each one's fields, its description's first line and, as ``long``, the rest."""
    text = subprocess.run(["lz4", "-dc", index], capture_output=True, check=True).stdout.decode("utf-8")
    found = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line.startswith(" ") and key == "Description":
                if line.strip() != ".":
                    fields["long"] = f"{fields.get('long', '')} {line.strip()}".strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        found.append(fields)
    return found


def write_texts(found: list[dict], sections: tuple, per: int, long: bool, path: str) -> int:
    rng, rows = random.Random(7), []
    for section in sections:
        texts = sorted(
            {
                f"{p['Description']} {p.get('long', '')}".strip() if long else p["Description"]
                for p in found
                if p.get("Section") == section and p.get("Description")
            }
        )
        rng.shuffle(texts)
        rows += [(text, section) for text in texts[:per]]
    rng.shuffle(rows)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return len(rows)


def write_icons(root: str, per: int = 90) -> int:
    from PIL import Image

    rng, written = random.Random(7), 0
    with tempfile.TemporaryDirectory() as work:
        subprocess.run(["apt-get", "download", *THEMES], cwd=work, check=True, capture_output=True)
        for package in THEMES:
            (deb,) = glob.glob(os.path.join(work, f"{package}_*.deb"))
            subprocess.run(["dpkg-deb", "-x", deb, os.path.join(work, package)], check=True)
        for context in CONTEXTS:
            os.makedirs(os.path.join(root, context), exist_ok=True)
            for package, folder in THEMES.items():
                pattern = os.path.join(work, package, folder, context, "*.png")
                files = sorted(path for path in glob.glob(pattern) if not os.path.islink(path))
                rng.shuffle(files)
                for path in files[:per]:
                    image = Image.open(path).convert("RGBA")
                    if image.size != (48, 48):
                        image = image.resize((48, 48), Image.LANCZOS)
                    theme = package.removesuffix("-icon-theme")
                    image.save(os.path.join(root, context, f"{theme}-{os.path.basename(path)}"))
                    written += 1
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the folder to write the sets into")
    args = parser.parse_args()
    indexes = sorted(glob.glob("/var/lib/apt/lists/*_main_binary-amd64_Packages.lz4"))
    if not indexes:
        raise SystemExit("no package index in /var/lib/apt/lists: run apt-get update first")
    os.makedirs(args.out, exist_ok=True)
    found = packages(indexes[0])
    print("short.csv:", write_texts(found, SHORT, 230, False, os.path.join(args.out, "short.csv")), "texts")
    print("long.csv:", write_texts(found, LONG, 200, True, os.path.join(args.out, "long.csv")), "texts")
    print("icons/:", write_icons(os.path.join(args.out, "icons")), "images")


if __name__ == "__main__":
    main()
