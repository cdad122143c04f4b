"""The data checks: golden statistics pairs decided by hand (no conversion), then real conversions of the demo
digits checked end to end, through the command line."""

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest

from components.artifacts.data_statistics import DataChecks, DataStatistics
from components.artifacts.records import CHECKS, DATA_STATS
from components.check_data import statistics as data_statistics
from components.check_data.core import CheckDataConfig, DataBlockedError, compare
from components.check_data.distributions import jensen_shannon
from components.check_data.leakage import check_leakage
from components.check_data.thresholds import threshold_values, verdict_of
from components.cli import UsageError
from components.schema import SPLIT_METHOD
from tests.conftest import REPO_ROOT

CLASSES = ["ant", "bee", "cow", "dog"]
LIMITS = threshold_values({})
SIDE = data_statistics.THUMBNAIL_SIDE**2
# what a check-data run records besides its rows and outcome (report reads the outcome)
MADE_UP_CHECKS = {
    "examples": "examples",
    "baseline": "",
    "baseline_statistics": "",
    "thresholds": LIMITS,
    "warnings": [],
}


def thumbnails(ids) -> np.ndarray:
    """One random grey thumbnail per example id: the same id, the same picture (a copy); distinct ids are unlike."""
    return np.stack([np.random.default_rng(i).integers(0, 256, SIDE, dtype=np.uint8) for i in ids]).reshape(-1, SIDE)


def version(
    per_class: dict, first_id: int = 0, quarantined: int = 0, reasons=None, brightness: int = 120, width: int = 640
):
    """Hand-made statistics of a version: ``per_class`` {split: [count per class in CLASSES order]}, examples
    numbered from ``first_id`` (train, then validation, then test), all of one brightness and contrast, from
    sources ``width`` x 480 pixels."""
    counts = {split: dict(zip(CLASSES, per_class[split], strict=True)) for split in ("train", "validation", "test")}
    keys, next_id, image = {}, first_id, {}
    for split, found in counts.items():
        total = sum(found.values())
        keys[split] = thumbnails(range(next_id, next_id + total))
        next_id += total
        levels = [0] * data_statistics.BRIGHTNESS_BINS
        levels[brightness] = total
        spread = [0] * data_statistics.CONTRAST_BINS
        spread[40] = total
        sizes = {name: [0] * bins for name, bins in data_statistics.SIZE_BINS.items()}
        sizes["width"][width // data_statistics.SIZE_STEP] = sizes["height"][480 // data_statistics.SIZE_STEP] = total
        sizes["aspect"][round(width / 480 / data_statistics.ASPECT_STEP)] = total
        image[split] = {"brightness": levels, "contrast": spread, "formats": {"jpg": total}, **sizes}
    statistics = {
        "format_version": DATA_STATS.version,
        "modality": "image",
        "class_names": [name for name in CLASSES if any(counts[split].get(name) for split in counts)],
        "counts": {split: sum(found.values()) for split, found in counts.items()},
        "per_class": {split: {name: n for name, n in found.items() if n} for split, found in counts.items()},
        "num_examples": sum(sum(found.values()) for found in counts.values()),
        "quarantined": quarantined,
        "duplicates": 0,
        "quarantine_reasons": reasons or {},
        "fingerprint": "",
        "source": "",
        "split_method": SPLIT_METHOD,
        "image": image,
    }
    return statistics, keys


def typed(statistics: dict) -> DataStatistics:
    """Hand-made statistics as the record a check-data run writes."""
    return DataStatistics.from_dict(statistics, "made up")


BALANCED = {"train": [100, 100, 100, 100], "validation": [25, 25, 25, 25], "test": [25, 25, 25, 25]}


def verdicts(rows) -> dict:
    return {(found["check"], found.get("split", "")): found["verdict"] for found in rows}


def outcome(new, base, **options):
    rows = compare(*new, *base, threshold_values(options.pop("thresholds", {})))
    return rows, verdict_of(rows, True, options.pop("accepted", False))


def test_a_class_nearly_absent_from_train_blocks_even_a_first_version_and_can_be_accepted():
    """Within one version: a class whose share of train is under a quarter of its share of validation and test
    blocks, with no baseline too (the model could not learn it); under a half warns; --accept-data-change goes on."""
    from components.check_data.distributions import check_split_mix

    limits = threshold_values({})
    absent = {"train": [100, 100, 100, 2], "validation": [25, 25, 25, 52], "test": [25, 25, 25, 53]}
    found = check_split_mix(version(absent)[0], limits)
    # by hand: class 3 is 2 / 302 of train (0.66%) and 105 / 255 of validation and test (41.2%): 0.0161 of it
    assert (found["verdict"], found["value"]) == ("block", 0.0161)
    assert found["detail"].startswith(
        "class " + CLASSES[3] + ": 0.7% of train (2 examples) against 41.2% of "
        "validation and test (105): it is nearly absent from what the model learns"
    )
    rows = compare(*version(absent), None, None, limits)  # a first version: nothing to compare with
    result = verdict_of(rows, False, False)
    assert result["blocked"] and result["blocking"] == ["split class mix: " + found["detail"]]
    assert verdict_of(rows, False, True)["blocked"] is False  # accepted
    # 0.47 of its held-out share, and 50 of its 90 set aside where a random split sets 37% aside: 3.6 standard
    # deviations over, so a warning, not a block
    few = {"train": [100, 100, 100, 40], "validation": [25, 25, 25, 25], "test": [25, 25, 25, 25]}
    assert check_split_mix(version(few)[0], limits)["verdict"] == "warn"
    # the same ratio on a few examples is what chance gives a small class (10 of 30 aside, where 9 are expected)
    small = {"train": [100, 100, 100, 20], "validation": [50, 50, 50, 5], "test": [50, 50, 50, 5]}
    assert check_split_mix(version(small)[0], limits)["verdict"] == "pass"
    assert check_split_mix(version(BALANCED)[0], limits)["verdict"] == "pass"


def test_the_same_statistics_pass_every_check():
    rows, result = outcome(version(BALANCED), version(BALANCED))
    assert set(verdicts(rows).values()) == {"pass"}
    assert result == {"blocked": False, "blocking": [], "warnings": [], "accepted_data_change": False}
    assert {found["check"] for found in rows} >= {
        "label set",
        "class mix",
        "examples",
        "quarantine rate",
        "leakage across splits",
        "leakage across versions",
        "brightness",
        "contrast",
        "formats",
        "source width",
        "source height",
        "source aspect",
    }
    assert rows[0] == {
        "check": "label set",
        "verdict": "pass",
        "severity": "block",
        "value": 0,
        "thresholds": {},
        "detail": "4 classes, as before",
    }


def test_a_class_dropped_blocks_and_names_it():
    dropped = {split: [*counts[:3], 0] for split, counts in BALANCED.items()}
    rows, result = outcome(version(dropped), version(BALANCED))
    assert verdicts(rows)[("label set", "")] == "block"
    # by hand: dog 25% -> 0% is the largest move of the train split's shares (the others 25% -> 33.3%)
    mix = next(found for found in rows if found["check"] == "class mix" and found["split"] == "train")
    assert mix["value"] == 0.25 and mix["detail"].startswith("class dog 25.0% -> 0.0%")
    assert result["blocked"]
    assert result["blocking"][0].startswith("label set: gone dog:")


def test_a_class_added_or_renamed_blocks():
    rows, _ = outcome(version(BALANCED), version({split: [*c[:3], 0] for split, c in BALANCED.items()}))
    label_row = next(found for found in rows if found["check"] == "label set")
    assert label_row["verdict"] == "block" and label_row["detail"].startswith("new dog:")
    renamed = version(BALANCED)[0]
    renamed["class_names"] = ["ant", "bee", "cow", "hound"]
    label_row = compare(renamed, version(BALANCED)[1], *version(BALANCED), LIMITS)[0]
    assert label_row["verdict"] == "block" and label_row["detail"].startswith("gone dog; new hound:")
    renamed["class_names"] = ["ant", "bee", "cat", "hound"]  # two each way: the names listed with commas
    label_row = compare(renamed, version(BALANCED)[1], *version(BALANCED), LIMITS)[0]
    assert label_row["detail"].startswith("gone cow, dog; new cat, hound:")


def test_the_same_classes_in_another_order_warn():
    reordered = version(BALANCED)[0]
    reordered["class_names"] = ["bee", "ant", "cow", "dog"]
    label_row = compare(reordered, version(BALANCED)[1], *version(BALANCED), LIMITS)[0]
    assert (label_row["check"], label_row["verdict"], label_row["severity"], label_row["value"]) == (
        "label set",
        "warn",
        "block",
        0,
    )
    assert label_row["detail"].endswith("ant, bee, cow, dog -> bee, ant, cow, dog")


def test_a_class_shift_of_twenty_points_warns_and_does_not_block():
    # train: ant from 100 of 400 (25%) to 180 of 400 (45%): 20 points, between the warn (10) and block (30) levels
    shifted = dict(BALANCED, train=[180, 80, 70, 70])
    rows, result = outcome(version(shifted), version(BALANCED))
    mix = next(found for found in rows if found["check"] == "class mix" and found["split"] == "train")
    assert mix["verdict"] == "warn" and mix["value"] == pytest.approx(0.20)
    assert "ant 25.0% -> 45.0%" in mix["detail"]
    assert not result["blocked"] and result["warnings"][0].startswith("class mix (train): class ant")


def test_a_class_shift_of_forty_points_blocks():
    rows, result = outcome(version(dict(BALANCED, train=[260, 50, 50, 40])), version(BALANCED))
    assert verdicts(rows)[("class mix", "train")] == "block" and result["blocked"]


def test_a_tiny_split_is_skipped_not_failed():
    tiny = dict(BALANCED, validation=[5, 0, 5, 0])  # 10 examples, a wild mix, under min_split_examples 20
    rows, result = outcome(version(tiny), version(BALANCED))
    assert verdicts(rows)[("class mix", "validation")] == "skipped"
    assert verdicts(rows)[("class mix", "test")] == "pass"  # the next split still compared
    skipped = next(found for found in rows if found["check"] == "class mix" and found["split"] == "validation")
    assert skipped["detail"] == "10 examples on one side, under min_split_examples 20: too few to compare shares"
    assert not result["blocked"]


def test_the_baselines_own_split_noise_raises_the_class_mix_thresholds():
    # the baseline's own train and validation differ by 8 points in class ant: a distance counts only above 16 points
    noisy = dict(BALANCED, validation=[33, 23, 22, 22])
    shifted = dict(BALANCED, train=[160, 80, 80, 80])  # 15 points
    rows, _ = outcome(version(shifted), version(noisy))
    mix = next(found for found in rows if found["check"] == "class mix" and found["split"] == "train")
    assert mix["thresholds"] == {"warn": pytest.approx(0.16), "block": 0.3}
    assert mix["verdict"] == "pass"
    rows, _ = outcome(version(shifted), version(BALANCED))  # the same shift against a clean baseline warns
    assert verdicts(rows)[("class mix", "train")] == "warn"


def test_a_baseline_with_a_wildly_mixed_validation_split_raises_the_class_mix_block_no_higher_than_half():
    # the baseline's validation: ant 70 of 100 against train's 25%: 45 points of its own; doubled, 90 points would
    # let a version of nothing but ants through (75 points); the floor stops at 50 points
    wild = dict(BALANCED, validation=[70, 10, 10, 10])
    only_ants = dict(BALANCED, train=[400, 0, 0, 0])
    rows, result = outcome(version(only_ants), version(wild))
    mix = next(found for found in rows if found["check"] == "class mix" and found["split"] == "train")
    assert mix["thresholds"] == {"warn": 0.5, "block": 0.5}
    assert mix["value"] == pytest.approx(0.75) and mix["verdict"] == "block" and result["blocked"]


def test_counts_block_below_half_and_warn_above_three_times():
    half = {split: [n // 2 - 1 for n in counts] for split, counts in BALANCED.items()}
    assert verdicts(outcome(version(half), version(BALANCED))[0])[("examples", "")] == "block"
    exactly_half = {"train": [50, 50, 50, 50], "validation": [13, 12, 13, 12], "test": [12, 13, 12, 13]}  # 300 of 600
    assert verdicts(outcome(version(exactly_half), version(BALANCED))[0])[("examples", "")] == "pass"
    quadruple = {split: [n * 4 for n in counts] for split, counts in BALANCED.items()}
    assert verdicts(outcome(version(quadruple), version(BALANCED))[0])[("examples", "")] == "warn"


def test_quarantine_warns_over_twice_the_baselines_rate_and_half_a_percent():
    # 600 examples: 5 quarantined is 0.83%, over 0.5% and over twice the baseline's 1 (0.17%)
    base = version(BALANCED, quarantined=1)
    rows, _ = outcome(version(BALANCED, quarantined=5, reasons={"not an image": 5}), base)
    quarantine = next(found for found in rows if found["check"] == "quarantine rate")
    assert quarantine["verdict"] == "warn" and "not an image 5" in quarantine["detail"]
    # 2 of 602 (0.33%) is over twice the baseline's rate but under half a percent
    assert verdicts(outcome(version(BALANCED, quarantined=2), base)[0])[("quarantine rate", "")] == "pass"


def test_test_images_copied_into_train_block():
    new, keys = version(BALANCED)
    keys["train"][:10] = keys["test"][:10]  # 10 of the 200 held-out examples sit in train too: 5%, at the edge
    rows, result = outcome((new, keys), version(BALANCED))
    assert verdicts(rows)[("leakage across splits", "")] == "warn" and not result["blocked"]
    keys["train"][10:11] = keys["validation"][:1]  # one more: 11 of 200, above 5%
    rows, result = outcome((new, keys), version(BALANCED))
    assert verdicts(rows)[("leakage across splits", "")] == "block" and result["blocked"]
    assert "11 of 200 validation and test examples have a near-copy in train" in result["blocking"][0]


def test_new_test_images_from_the_baselines_train_split_block():
    base = version(BALANCED, first_id=0)
    new, keys = version(BALANCED, first_id=10_000)  # other pictures, but 30 of its test ones are the baseline's train
    keys["test"][:30] = base[1]["train"][:30]
    rows, result = outcome((new, keys), base)
    assert verdicts(rows)[("leakage across versions", "")] == "block" and result["blocked"]
    assert verdicts(rows)[("leakage across splits", "")] == "pass"


def test_a_baseline_split_by_another_method_warns_and_never_blocks():
    """The first version after an upgrade of the split: its held-out examples sit in the baseline's train by design
    (the same examples, split another way); that warns, naming both methods, and the run goes on."""
    base = version(BALANCED, first_id=0)
    new, keys = version(BALANCED, first_id=10_000)
    keys["test"][:30] = base[1]["train"][:30]
    base[0].pop("split_method", None)  # a conversion from before: split by file bytes
    new["split_method"] = 2
    rows, result = outcome((new, keys), base)
    found = next(found for found in rows if found["check"] == "leakage across versions")
    assert found["verdict"] == "warn" and not result["blocked"]
    assert "the baseline was split by a hash of each file's bytes" in found["detail"]
    assert "this never blocks" in found["detail"]
    new["split_method"] = 1  # split the same way: the same leak blocks
    rows, result = outcome((new, keys), base)
    assert verdicts(rows)[("leakage across versions", "")] == "block" and result["blocked"]


def test_the_test_splits_own_copies_are_counted():
    new, keys = version(BALANCED)
    keys["train"][:7] = keys["test"][:7]
    keys["train"][7:10] = keys["validation"][:3]
    rows, _ = outcome((new, keys), version(BALANCED))
    found = next(found for found in rows if found["check"] == "leakage across splits")
    assert found["test_copies"] == {"found": 7, "compared": len(keys["test"])}


def test_a_copy_is_found_through_noise_and_a_different_picture_is_not():
    rng = np.random.default_rng(3)
    smooth = np.linspace(0, 255, SIDE).reshape(1, SIDE)
    originals = np.clip(smooth + rng.normal(0, 40, (20, SIDE)), 0, 255).astype(np.uint8)
    copies = np.clip(originals + rng.normal(0, 2, originals.shape), 0, 255).astype(np.uint8)  # re-encoding's noise
    from components.check_data.leakage import near_copies

    similarity, levels = LIMITS["near_duplicate_similarity"], LIMITS["near_duplicate_levels"]
    assert near_copies(copies, originals, similarity, text=False, levels=levels) == 20
    others = np.clip(smooth + rng.normal(0, 40, (20, SIDE)), 0, 255).astype(np.uint8)
    assert near_copies(others, originals, similarity, text=False, levels=levels) == 0
    flat = np.full((1, SIDE), 7, np.uint8)  # a flat picture has no shape to compare: never a copy
    assert near_copies(flat, flat, similarity, text=False, levels=levels) == 0


def low_contrast_pair(extra: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A picture of little contrast (grey 120, every other pixel 20 levels brighter), and a copy of it whose JPEG
    noise moved each pixel by 3 levels (up, up, down, down: nothing of the picture's own pattern), ``extra`` of
    them by one level more: a root-mean-square difference of exactly 3 levels (``extra`` 0), and a correlation of
    10/sqrt(109) = 0.958, by hand."""
    picture = np.where(np.arange(SIDE) % 2 == 0, 130, 110).astype(np.uint8)
    noise = np.where(np.arange(SIDE) % 4 < 2, 3, -3)
    noise[:extra] += np.sign(noise[:extra])
    return picture[None], (picture + noise).astype(np.uint8)[None]


def test_a_low_contrast_copy_is_found_by_its_small_difference_and_flat_noise_is_not():
    # re-encoded copies of a photograph of bricks or of a retina correlate at 0.957 to 0.998 (bench/near_copies.py)
    from components.check_data.leakage import near_copies

    similarity, levels = LIMITS["near_duplicate_similarity"], LIMITS["near_duplicate_levels"]
    picture, copy = low_contrast_pair()
    assert near_copies(copy, picture, similarity, text=False, levels=levels) == 1
    assert near_copies(copy, picture, similarity, text=False, levels=0.0) == 0  # the correlation alone misses it
    brighter = picture + np.uint8(40)  # 40 levels apart, but of one pattern: a copy by the correlation alone
    assert near_copies(brighter, picture, similarity, text=False, levels=levels) == 1
    _, further = low_contrast_pair(extra=2)  # two pixels one level further: just over 3 levels
    assert near_copies(further, picture, similarity, text=False, levels=levels) == 0
    # two pictures of noise on one grey differ by about 2.8 levels, but nothing in them agrees: not copies
    rng = np.random.default_rng(4)
    flat = np.clip(np.round(120 + rng.normal(0, 2, (2, SIDE))), 0, 255).astype(np.uint8)
    assert np.sqrt(((flat[0].astype(float) - flat[1]) ** 2).mean()) < levels
    assert near_copies(flat[:1], flat[1:], similarity, text=False, levels=levels) == 0
    # a held-out picture with a copy among many train ones counts once; one with none, not at all
    train = np.concatenate([flat, picture, picture])
    assert near_copies(np.concatenate([copy, further, flat[:1]]), train, similarity, text=False, levels=levels) == 2


def test_low_contrast_copies_across_the_splits_block_the_run():
    new, keys = version(BALANCED)
    picture, copy = low_contrast_pair()
    keys["train"][:11] = picture  # 11 of the 200 held-out examples are re-encoded copies of a train picture
    keys["test"][:11] = copy
    rows, result = outcome((new, keys), version(BALANCED))
    assert verdicts(rows)[("leakage across splits", "")] == "block" and result["blocked"]
    rows, result = outcome((new, keys), version(BALANCED), thresholds={"near_duplicate_levels": 0.0})
    assert verdicts(rows)[("leakage across splits", "")] == "pass"


def test_sources_of_another_size_warn_and_records_without_sizes_skip():
    rows, result = outcome(version(BALANCED, width=1280), version(BALANCED))  # 1280x480 against 640x480
    assert verdicts(rows)[("source width", "")] == verdicts(rows)[("source aspect", "")] == "warn"
    assert verdicts(rows)[("source height", "")] == "pass" and not result["blocked"]
    adopted, keys = version(BALANCED)
    for split in adopted["image"].values():  # as adopted TFRecords' statistics are: no source sizes at all
        split.update({name: [0] * len(split[name]) for name in ("width", "height", "aspect")})
    rows, _ = outcome((adopted, keys), version(BALANCED))
    for name in ("width", "height", "aspect"):
        skipped = next(found for found in rows if found["check"] == f"source {name}")
        assert skipped == {
            "check": f"source {name}",
            "verdict": "skipped",
            "severity": "warn",
            "value": None,
            "thresholds": {},
            "detail": "the records do not say their sources' sizes (TFRecords "
            "adopted as they are, or a conversion older than the data checks)",
        }
    for split in adopted["image"].values():  # statistics kept before the checks read the sources' sizes
        for name in ("width", "height", "aspect"):
            del split[name]
    rows, _ = outcome((adopted, keys), version(BALANCED))
    assert {verdicts(rows)[(f"source {name}", "")] for name in ("width", "height", "aspect")} == {"skipped"}


def test_the_formats_row_counts_each_sources_format_over_the_splits():
    mixed, keys = version(BALANCED)
    mixed["image"]["train"]["formats"] = {"jpg": 300, "png": 100}  # of its 400
    mixed["image"]["test"]["formats"] = {"jpg": 90, "webp": 10}  # of its 100
    rows, _ = outcome((mixed, keys), version(BALANCED))
    formats = next(found for found in rows if found["check"] == "formats")
    # by hand: jpg 300 + 100 (validation) + 90, png 100, webp 10
    assert formats["detail"] == "source formats: jpg 490, png 100, webp 10"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("gs://b/photos/cat/a.JPEG", "jpg"),
        ("/data/scan.tif", "tiff"),
        ("/data/photo.png", "png"),
        ("/data/digits.npz#12", "npz"),  # an array file's item
        ("/data/DIGITS.NPZ#3", "npz"),
        ("/data/run#2/digits.npz#7", "npz"),  # a "#" in a folder's name too: the item is after the last one
        ("/data/photos/#1 best.jpg", "jpg"),  # a "#" in a file's name: not an array item
        ("/data/README", "none"),
        ("", "unknown"),  # adopted TFRecords: no source recorded
    ],
)
def test_a_sources_format_is_its_extension_and_an_array_files_item_is_npz(source, expected):
    from components.check_data.statistics import source_format

    assert source_format(source) == expected


def test_a_distribution_is_compared_over_the_baselines_decile_bins():
    """Brightness spread evenly over 100 levels in the baseline: its deciles are 10 levels wide. A new version with
    every level shifted by 10 moves a tenth of its mass into the bin above the baseline's range: by hand, JS of
    (0.1 x 10, 0) against (0, 0.1 x 9, 0.1) is 0.1 (the disjoint tenths, each half of M)."""
    from components.check_data.distributions import quantile_bins, rebin

    spread = [0] * 256
    for level in range(100, 200):
        spread[level] = 10
    edges = quantile_bins(spread)
    assert edges.tolist() == [100, 110, 120, 130, 140, 150, 160, 170, 180, 190, 200]
    assert rebin(spread, edges).tolist() == [0, *[100] * 10, 0]
    shifted = [0] * 10 + spread[:-10]
    assert rebin(shifted, edges).tolist() == [0, 0, *[100] * 9, 100]
    assert jensen_shannon(rebin(spread, edges), rebin(shifted, edges)) == pytest.approx(0.1)


def test_a_small_baseline_validation_split_does_not_raise_the_distribution_threshold():
    base = version(BALANCED)[0]
    for split, level in (("train", 100), ("validation", 200)):  # train and validation of other brightness
        base["image"][split]["brightness"] = [0] * 256
        base["image"][split]["brightness"][level] = base["counts"][split]
    rows = compare(*version(BALANCED), base, version(BALANCED)[1], LIMITS)
    brightness = next(found for found in rows if found["check"] == "brightness")
    assert brightness["thresholds"] == {"warn": 0.5}  # the floor, capped: a divergence of 1 doubled would be 2
    base["counts"]["validation"] = 10  # too few to say what the split's noise is
    for name in base["per_class"]["validation"]:
        base["per_class"]["validation"][name] = 10 // 4
    base["image"]["validation"]["brightness"][200] = 10
    rows = compare(*version(BALANCED), base, version(BALANCED)[1], LIMITS)
    brightness = next(found for found in rows if found["check"] == "brightness")
    assert brightness["thresholds"] == {"warn": 0.1}


def test_a_leaky_baseline_raises_the_leakage_warning_no_higher_than_the_block():
    base, base_keys = version(BALANCED)
    base_keys["train"][:50] = np.concatenate([base_keys["validation"][:25], base_keys["test"][:25]])  # 25% leaked
    new, keys = version(BALANCED, first_id=10_000)
    keys["train"][:90] = np.concatenate([keys["validation"][:45], keys["test"][:45]])  # 45%
    rows = compare(new, keys, base, base_keys, LIMITS)
    leak = next(found for found in rows if found["check"] == "leakage across splits")
    assert leak["thresholds"] == {"warn": 0.05, "block": 0.05} and leak["verdict"] == "block"
    # a baseline that leaked 2 of its 200 held out (1%): the warning rises to twice that, 2%, under the block
    base_keys["train"][:50] = version(BALANCED, first_id=20_000)[1]["train"][:50]
    base_keys["train"][:2] = base_keys["validation"][:2]
    rows = compare(new, keys, base, base_keys, LIMITS)
    leak = next(found for found in rows if found["check"] == "leakage across splits")
    assert leak["thresholds"] == {"warn": 0.02, "block": 0.05}


def test_a_brightness_shift_warns_and_never_blocks():
    rows, result = outcome(version(BALANCED, brightness=200), version(BALANCED, brightness=120))
    assert verdicts(rows)[("brightness", "")] == "warn" and verdicts(rows)[("contrast", "")] == "pass"
    assert not result["blocked"]


def test_jensen_shannon_is_tfdvs_figure():
    # by hand: M = (0.75, 0.25); KL(P||M) = 0.5 log2(2/3) + 0.5 log2(2) = 0.20752; KL(Q||M) = log2(4/3) = 0.41504;
    # their mean 0.31128 (bits, not square-rooted)
    assert jensen_shannon([0.5, 0.5], [1.0, 0.0]) == pytest.approx(0.31128, abs=1e-5)
    assert jensen_shannon([1, 0], [0, 1]) == pytest.approx(1.0)
    assert jensen_shannon([3, 1], [3, 1]) == pytest.approx(0.0)


def test_without_a_baseline_blocking_rows_are_only_warnings():
    new, keys = version(BALANCED)
    keys["train"][:50] = keys["test"][:50]
    rows = compare(new, keys, None, None, LIMITS)
    # 50 of 200 held out: past the block level, a warning in the rows as in the outcome
    assert [(found["check"], found["verdict"], found["severity"]) for found in rows] == [
        ("leakage across splits", "warn", "warn"),
        ("split class mix", "pass", "block"),  # (the version alone, which blocks on a first version too)
    ]
    assert rows[0]["thresholds"] == {"warn": 0.0, "block": 0.05}  # any leak warns; no baseline raises the warning
    result = verdict_of(rows, has_baseline=False, accepted=False)
    assert not result["blocked"] and result["warnings"][0].startswith("leakage across splits:")


def test_accepting_the_change_goes_on_and_is_recorded():
    dropped = {split: [*counts[:3], 0] for split, counts in BALANCED.items()}
    _, result = outcome(version(dropped), version(BALANCED), accepted=True)
    assert not result["blocked"] and result["accepted_data_change"] and result["blocking"]


def test_a_threshold_can_be_set_and_an_unknown_one_is_refused():
    shifted = dict(BALANCED, train=[180, 80, 70, 70])
    rows, _ = outcome(version(shifted), version(BALANCED), thresholds={"class_mix_block": 0.15})
    assert verdicts(rows)[("class mix", "train")] == "block"
    with pytest.raises(
        UsageError, match=r"^data threshold class_mix_blok is not one of class_mix_warn, class_mix_block, "
    ):
        CheckDataConfig(examples_dir="e", output_dir="o", thresholds={"class_mix_blok": 0.1})
    # 0 or more: 0 is a threshold (nothing may move), a negative number or a word is refused in one line
    CheckDataConfig(examples_dir="e", output_dir="o", thresholds={"class_mix_warn": 0})
    for value in (-0.1, "high"):
        with pytest.raises(UsageError, match=rf"^data threshold class_mix_warn={value} must be a number of 0 or more$"):
            CheckDataConfig(examples_dir="e", output_dir="o", thresholds={"class_mix_warn": value})


# each check's severity, as the data checks' issue set them: what a verdict at its worst does to the run
SEVERITIES = {
    "label set": "block",
    "class mix": "block",
    "examples": "block",
    "quarantine rate": "warn",
    "leakage across splits": "block",
    "leakage across versions": "block",
    "brightness": "warn",
    "contrast": "warn",
    "source width": "warn",
    "source height": "warn",
    "source aspect": "warn",
    "formats": "warn",
    "token counts": "warn",
    "truncated share": "block",
    "out-of-vocabulary share": "block",
    "split class mix": "block",
}


def test_every_row_carries_its_checks_severity_whatever_its_verdict():
    tiny = dict(BALANCED, validation=[5, 0, 5, 0])  # a class mix row skipped
    sizeless = version(tiny)[0]
    for split in ("train", "validation", "test"):  # records that do not say their sources' sizes: skipped rows
        for name in ("width", "height", "aspect"):
            del sizeless["image"][split][name]
    reordered = version(BALANCED)[0]
    reordered["class_names"] = list(reversed(reordered["class_names"]))  # the label set row warns
    image_rows = [
        *compare(sizeless, version(tiny)[1], *version(BALANCED), LIMITS),
        *compare(reordered, version(BALANCED)[1], *version(BALANCED), LIMITS),
        *compare(
            *version({"train": [100, 100, 0, 0], **{s: [25, 25, 0, 0] for s in ("validation", "test")}}),
            *version(BALANCED),
            LIMITS,
        ),
    ]
    text_rows = compare(*text_version(0.1, 0.2), *text_version(0.01, 0.01), LIMITS)
    rows = image_rows + text_rows
    assert {found["verdict"] for found in rows} == {"pass", "warn", "block", "skipped"}
    assert {found["check"] for found in rows} == set(SEVERITIES)
    assert [(found["check"], found["severity"]) for found in rows] == [
        (found["check"], SEVERITIES[found["check"]]) for found in rows
    ]


def test_a_dropped_or_renamed_class_is_counted_and_said_in_full():
    renamed = version(BALANCED)[0]
    renamed["class_names"] = ["ant", "bee", "cow", "dingo"]
    (label,) = [
        found
        for found in compare(renamed, version(BALANCED)[1], *version(BALANCED), LIMITS)
        if found["check"] == "label set"
    ]
    assert label["value"] == 2  # dog gone, dingo new
    assert label["detail"] == (
        "gone dog; new dingo: the model in service cannot be compared with a model of other "
        "classes, and its clients would lose or gain classes"
    )
    same = next(
        found for found in compare(*version(BALANCED), *version(BALANCED), LIMITS) if found["check"] == "label set"
    )
    assert (same["verdict"], same["value"], same["detail"]) == ("pass", 0, "4 classes, as before")


def test_the_quarantine_row_names_each_reason_with_its_count():
    new = version(BALANCED, quarantined=6, reasons={"not an image": 4, "too many pixels": 2})
    rows, _ = outcome(new, version(BALANCED))
    quarantine = next(found for found in rows if found["check"] == "quarantine rate")
    # 6 of 606 items: 0.99%; the baseline's 0 of 600
    assert quarantine["detail"] == "6 quarantined (not an image 4, too many pixels 2); the baseline's rate 0.00%"
    assert quarantine["value"] == 0.0099 and quarantine["thresholds"] == {"warn": 0.005}


def test_the_class_mix_row_gives_the_jensen_shannon_divergence_and_rounds_to_four_places():
    from scipy.spatial.distance import jensenshannon

    # train: ant 100 of 300 (1/3) against 25%: 8.33 points, the largest move (bee 20%, cow and dog 23.3%)
    rows, _ = outcome(
        version(dict(BALANCED, train=[100, 60, 70, 70])),
        version(BALANCED),
        thresholds={"class_mix_warn": 0.0123456, "class_mix_block": 0.3123456},
    )
    mix = next(found for found in rows if found["check"] == "class mix" and found["split"] == "train")
    expected = jensenshannon([100, 60, 70, 70], [100] * 4, base=2) ** 2  # TFDV's figure (scipy normalises)
    assert mix["detail"] == f"class ant 25.0% -> 33.3%; Jensen-Shannon {expected:.4f}"
    assert mix["value"] == 0.0833 and mix["thresholds"] == {"warn": 0.0123, "block": 0.3123}
    # a split with exactly min_split_examples (20) on each side is compared, one fewer is not
    twenty = {"train": [5, 5, 5, 5], "validation": [5, 5, 5, 5], "test": [20, 0, 0, 0]}
    rows, _ = outcome(version(twenty), version(twenty))
    assert verdicts(rows)[("class mix", "test")] == "pass"
    rows, _ = outcome(version(dict(twenty, test=[19, 0, 0, 0])), version(twenty))
    assert verdicts(rows)[("class mix", "test")] == "skipped"


def test_a_baseline_of_exactly_min_split_examples_sets_the_class_mix_floor():
    # the baseline's train and validation: 20 each, ant 10 of 20 in train against 5 of 20 in validation (25 points)
    base = {"train": [10, 4, 3, 3], "validation": [5, 5, 5, 5], "test": [5, 5, 5, 5]}
    rows, _ = outcome(version(base), version(base))
    mix = next(found for found in rows if found["check"] == "class mix" and found["split"] == "train")
    assert mix["thresholds"] == {"warn": 0.5, "block": 0.5}  # twice 25 points
    rows, _ = outcome(version(base), version(dict(base, validation=[5, 5, 5, 4])))  # 19: too few to say
    mix = next(found for found in rows if found["check"] == "class mix" and found["split"] == "train")
    assert mix["thresholds"] == {"warn": 0.1, "block": 0.3}


def test_exactly_three_times_the_baselines_examples_passes():
    triple = {split: [n * 3 for n in counts] for split, counts in BALANCED.items()}
    rows, _ = outcome(version(triple), version(BALANCED))
    examples = next(found for found in rows if found["check"] == "examples")
    assert (examples["verdict"], examples["value"]) == ("pass", 3.0)
    assert examples["detail"] == "1800 examples against the baseline's 600"


def test_formats_the_baseline_never_had_are_compared_over_both_versions_formats():
    from scipy.spatial.distance import jensenshannon

    new, keys = version(BALANCED)
    new["image"]["validation"]["formats"] = {"png": 100}  # train and test stay jpg (400 + 100)
    rows, _ = outcome((new, keys), version(BALANCED))
    formats = next(found for found in rows if found["check"] == "formats")
    expected = jensenshannon([500, 100], [600, 0], base=2) ** 2  # jpg, png over every split, by hand
    assert formats["value"] == round(expected, 4) and formats["verdict"] == "pass"  # 0.0888, under 0.1
    everything_new = version(BALANCED)[0]
    for split in ("train", "validation", "test"):
        everything_new["image"][split]["formats"] = {"png": everything_new["counts"][split]}
    rows, _ = outcome((everything_new, keys), version(BALANCED))
    formats = next(found for found in rows if found["check"] == "formats")
    assert formats["value"] == 1.0  # disjoint: the divergence's maximum


def text_version(oov: float, truncated: float):
    statistics, keys = version(BALANCED)
    del statistics["image"]
    lengths = [0] * 12
    lengths[5] = 600
    split_figures = {"token_counts": lengths, "truncated_share": truncated, "out_of_vocabulary_share": oov}
    statistics.update(modality="text", text={split: split_figures for split in ("train", "validation", "test")})
    return statistics, {
        split: np.arange(len(found), dtype=np.uint64) + 1000 * i for i, (split, found) in enumerate(keys.items())
    }


def test_text_shares_of_every_split_are_weighed_by_their_examples():
    # train 400 examples at 10% out of vocabulary, validation and test 100 each at 40%: (40 + 40 + 40) / 600 = 20%
    base = text_version(oov=0.0, truncated=0.0)
    new = text_version(oov=0.0, truncated=0.0)
    new[0]["text"] = {split: dict(new[0]["text"][split], out_of_vocabulary_share=0.4) for split in new[0]["text"]}
    new[0]["text"]["train"]["out_of_vocabulary_share"] = 0.1
    rows, _ = outcome(new, base)
    oov = next(found for found in rows if found["check"] == "out-of-vocabulary share")
    assert oov["value"] == pytest.approx(0.2) and oov["detail"] == "0.0% -> 20.0%"
    assert oov["thresholds"] == {"warn": 0.02, "block": 0.1} and oov["severity"] == "block"


def test_the_truncated_share_is_compared_as_it_is_beside_the_served_vocabularys_share():
    """The served model's vocabulary changes only the out-of-vocabulary figure: the truncated share rises by its own
    12.3456 points, reported to 4 decimals."""
    base = text_version(oov=0.0, truncated=0.1)
    new = text_version(oov=0.0, truncated=0.223456)
    new[0]["text"] = {
        split: dict(figures, served_out_of_vocabulary_share=0.5) for split, figures in new[0]["text"].items()
    }
    rows, _ = outcome(new, base)
    truncated = next(found for found in rows if found["check"] == "truncated share")
    assert (truncated["value"], truncated["detail"]) == (0.1235, "10.0% -> 22.3%")
    oov = next(found for found in rows if found["check"] == "out-of-vocabulary share")
    assert oov["value"] == 0.5


def test_figures_of_versions_without_examples_are_zero():
    from components.check_data.distributions import overall, shares

    empty = {
        "counts": dict.fromkeys(("train", "validation", "test"), 0),
        "text": {split: {"truncated_share": 0.5} for split in ("train", "validation", "test")},
    }
    assert overall(empty, "truncated_share") == 0.0
    assert shares({}, ["a", "b"]).tolist() == [0.0, 0.0]
    # a class the counts leave out has none: the others' shares are of theirs alone
    assert shares({"a": 3, "b": 1}, ["a", "b", "c"]).tolist() == [0.75, 0.25, 0.0]


def test_a_rise_in_out_of_vocabulary_words_warns_at_two_points_and_blocks_at_ten():
    base = text_version(oov=0.03, truncated=0.1)
    rows, _ = outcome(text_version(oov=0.06, truncated=0.1), base)
    assert verdicts(rows)[("out-of-vocabulary share", "")] == "warn"
    rows, result = outcome(text_version(oov=0.14, truncated=0.1), base)
    assert verdicts(rows)[("out-of-vocabulary share", "")] == "block" and result["blocked"]
    assert verdicts(rows)[("truncated share", "")] == "pass"


# end to end: real conversions of the demo digits (the same source twice; copies spread over the splits)


def convert(source: str, output: str) -> str:
    from components.convert.core import ConvertConfig, run
    from tests.conftest import IN_MEMORY

    run(ConvertConfig(source=source, output_dir=output, image_size=32, pipeline_args=IN_MEMORY))
    return output


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> str:
    from components.demo_data import write_digits

    root = str(tmp_path_factory.mktemp("digits") / "digits")
    write_digits(root, per_class_limit=30)
    return root


def check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "components.check_data", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_same_source_converted_twice_passes_clean(digits, tmp_path):
    first = convert(digits, str(tmp_path / "first"))
    second = convert(digits, str(tmp_path / "second"))
    done = check("--examples", second, "--baseline", first, "--output", str(tmp_path / "checks"))
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "checks" / CHECKS.name).read_text())
    assert not result["blocked"] and result["warnings"] == []
    assert {found["verdict"] for found in result["checks"]} == {"pass"}
    # its statistics, written beside, are a baseline as they are: the next run compares with them alone
    third = check("--examples", second, "--baseline", str(tmp_path / "checks"), "--output", str(tmp_path / "again"))
    assert third.returncode == 0, third.stderr
    again = json.loads((tmp_path / "again" / CHECKS.name).read_text())
    assert [found["value"] for found in again["checks"]] == [found["value"] for found in result["checks"]]


def re_encoded_copies(digits: str, root) -> list[tuple[str, str, str]]:
    """Each digit and a copy of it re-encoded at JPEG quality 70 (other bytes, the same picture) under ``root``:
    (original path, copy path, class name) of each."""
    from PIL import Image

    pairs = []
    for class_name in sorted(os.listdir(digits)):
        os.makedirs(root / class_name)
        for name in sorted(os.listdir(os.path.join(digits, class_name))):
            with open(os.path.join(digits, class_name, name), "rb") as handle:
                original = handle.read()
            (root / class_name / name).write_bytes(original)
            buffer = io.BytesIO()
            Image.open(io.BytesIO(original)).save(buffer, format="JPEG", quality=70)
            (root / class_name / f"copy-{name}").write_bytes(buffer.getvalue())
            pairs.append((str(root / class_name / name), str(root / class_name / f"copy-{name}"), class_name))
    return pairs


def test_the_split_keeps_re_encoded_copies_together(digits, tmp_path):
    """Split by the perceptual key, a folder of digits and their re-encoded copies leaks little across splits (split
    by each file's bytes, about 4 in 5 held-out examples had their copy in train)."""
    re_encoded_copies(digits, tmp_path / "copied")
    examples = convert(str(tmp_path / "copied"), str(tmp_path / "examples"))
    done = check("--examples", examples, "--output", str(tmp_path / "checks"))
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "checks" / CHECKS.name).read_text())
    leak = next(found for found in result["checks"] if found["check"] == "leakage across splits")
    assert leak["value"] < 0.1, leak


def test_re_encoded_copies_spread_over_the_splits_block_the_run(digits, tmp_path):
    """A manifest that puts each digit in train and its re-encoded copy in validation or test."""
    pairs = re_encoded_copies(digits, tmp_path / "copied")
    rows = []
    for index, (original, copy, name) in enumerate(pairs):
        rows += [f"training,{original},{name}", f"{('validation', 'test')[index % 2]},{copy},{name}"]
    (tmp_path / "manifest.csv").write_text("\n".join(rows) + "\n")
    examples = convert(str(tmp_path / "manifest.csv"), str(tmp_path / "examples"))
    done = check("--examples", examples, "--output", str(tmp_path / "first-version"))
    # no baseline: the leakage is reported, and the run goes on
    assert done.returncode == 0, done.stderr
    assert "check data: warn leakage across splits: " in done.stderr
    baseline = convert(digits, str(tmp_path / "baseline"))
    done = check("--examples", examples, "--baseline", baseline, "--output", str(tmp_path / "checks"))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    blocked_at = lines.index("error: the new data is blocked before training:")
    reasons = lines[blocked_at + 1 : -1]
    assert reasons and all(line.startswith("  leakage across ") for line in reasons), done.stderr
    assert lines[-1] == (
        "  (pass --accept-data-change, the DAG's accept_data_change, to train on it anyway; the run records it)"
    )
    result = json.loads((tmp_path / "checks" / CHECKS.name).read_text())
    assert result["blocked"] and len(result["blocking"]) == len(reasons)
    leak = next(found for found in result["checks"] if found["check"] == "leakage across splits")
    assert leak["value"] > 0.9  # every held-out example is a copy of one in train
    accepted = check(
        "--examples", examples, "--baseline", baseline, "--output", str(tmp_path / "accepted"), "--accept-data-change"
    )
    assert accepted.returncode == 0 and json.loads(accepted.stdout)["blocking"] == result["blocking"]
    assert json.loads((tmp_path / "accepted" / CHECKS.name).read_text())["accepted_data_change"] is True


def test_a_blocked_run_says_each_reason_on_a_line_records_it_and_goes_on_when_accepted(converted, tmp_path):
    from components.check_data.core import run

    examples_dir, _ = converted
    baseline = tmp_path / "baseline"
    statistics, keys = version(BALANCED)
    data_statistics.write(str(baseline), typed(statistics), keys)  # ant, bee, cow, dog: 600 examples
    config = {"examples_dir": examples_dir, "output_dir": str(tmp_path / "checks"), "baseline": f"{baseline}/"}
    with pytest.raises(DataBlockedError) as blocked:
        run(CheckDataConfig(**config))
    lines = str(blocked.value).split("\n")
    reasons = lines[1:-1]  # the label set, the class mix of the splits, the examples: each on a line of its own
    assert lines[0] == "the new data is blocked before training:"
    assert (
        lines[-1] == "  (pass --accept-data-change, the DAG's accept_data_change, to train on it anyway; the run "
        "records it)"
    )
    assert reasons[0].startswith("  label set: gone ant, bee, cow; new cat, fish: ")
    assert reasons[-1].startswith("  examples: ") and len(reasons) >= 3
    with open(tmp_path / "checks" / CHECKS.name) as handle:
        written = json.load(handle)
    assert set(written) == {
        "format_version",
        "examples",
        "baseline",
        "baseline_statistics",
        "baseline_note",
        "blocked",
        "blocking",
        "warnings",
        "accepted_data_change",
        "thresholds",
        "checks",
    }
    assert (written["examples"], written["baseline"], written["baseline_statistics"]) == (
        examples_dir,
        f"{baseline}/",
        str(baseline),
    )
    assert written["blocked"] and written["blocking"] == [reason[2:] for reason in reasons]
    assert not written["accepted_data_change"]
    assert (written["thresholds"]["class_mix_block"], written["thresholds"]["count_block_below"]) == (0.3, 0.5)
    accepted = run(CheckDataConfig(**{**config, "output_dir": str(tmp_path / "accepted")}, accept_data_change=True))
    assert not accepted["blocked"] and accepted["accepted_data_change"] and accepted["blocking"] == written["blocking"]


def test_the_report_logs_each_check_that_did_not_pass_and_the_outcome(caplog):
    from components.check_data.core import report

    checks = [
        {"check": "label set", "verdict": "pass", "detail": "4 classes, as before"},
        {"check": "class mix", "verdict": "warn", "split": "train", "detail": "class ant 25.0% -> 45.0%"},
        {"check": "class mix", "verdict": "skipped", "split": "test", "detail": "10 examples on one side"},
        {"check": "examples", "verdict": "block", "detail": "100 examples against the baseline's 600"},
        {"check": "brightness", "verdict": "warn", "detail": "Jensen-Shannon divergence"},
        {"check": "leakage across splits", "verdict": "block", "detail": "3 test images in train"},
    ]
    accepted = {
        "baseline_note": "a note",
        "checks": checks,
        "blocked": False,
        "accepted_data_change": True,
        "blocking": [
            "examples: 100 examples against the baseline's 600",
            "leakage across splits: 3 test images in train",
        ],
    }
    caplog.set_level("INFO", logger="components.check_data.core")
    report(DataChecks(**{**MADE_UP_CHECKS, **accepted}))
    assert [record.getMessage() for record in caplog.records] == [
        "check data: a note",
        "check data: warn class mix (train): class ant 25.0% -> 45.0%",
        "check data: skipped class mix (test): 10 examples on one side",
        "check data: block, accepted examples: 100 examples against the baseline's 600",
        "check data: warn brightness: Jensen-Shannon divergence",
        "check data: block, accepted leakage across splits: 3 test images in train",
        "check data: 1 pass, 2 warn, 2 block, 1 skipped; blocking checks accepted (--accept-data-change): examples: "
        "100 examples against the baseline's 600; leakage across splits: 3 test images in train",
    ]
    caplog.clear()
    report(
        DataChecks(
            **{**MADE_UP_CHECKS, **accepted, "baseline_note": "", "blocked": True, "accepted_data_change": False}
        )
    )  # (the error says why)
    assert [record.getMessage() for record in caplog.records] == [
        "check data: warn class mix (train): class ant 25.0% -> 45.0%",
        "check data: skipped class mix (test): 10 examples on one side",
        "check data: warn brightness: Jensen-Shannon divergence",
        "check data: 1 pass, 2 warn, 2 block, 1 skipped",
    ]


def test_usage_errors_are_one_line_with_exit_code_2(tmp_path):
    done = check("--examples", str(tmp_path), "--output", str(tmp_path / "o"), "--threshold", "class_mix_block")
    assert done.returncode == 2
    assert (
        done.stderr == "error: data threshold 'class_mix_block' is not NAME=VALUE with a number: for example "
        "class_mix_block=0.25\n"
    )
    done = check("--examples", str(tmp_path / "nothing"), "--output", str(tmp_path / "o"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "has no stats.json: pass the convert step's output" in done.stderr
    done = check("--examples", str(tmp_path), "--baseline", str(tmp_path / "gone"), "--output", str(tmp_path / "o"))
    assert done.returncode == 2 and f"--baseline {tmp_path / 'gone'} does not exist: pass" in done.stderr


def test_a_data_block_is_a_step_failure_not_a_usage_error():
    assert DataBlockedError("x").exit_code == 1


def test_a_registered_version_is_found_from_its_saved_model_folder_and_an_older_model_is_no_baseline(tmp_path):
    from components.check_data.core import load_baseline

    statistics, keys = version(BALANCED)
    data_statistics.write(str(tmp_path / "3"), typed(statistics), keys)
    (tmp_path / "3" / "saved_model").mkdir()
    found, folder, note = load_baseline(str(tmp_path / "3" / "saved_model"))  # as the Model Registry names it
    assert folder == str(tmp_path / "3") and note == ""
    assert found[0] == typed(statistics) and np.array_equal(found[1]["test"], keys["test"])
    (tmp_path / "2" / "saved_model").mkdir(parents=True)  # registered before the data checks
    found, folder, note = load_baseline(str(tmp_path / "2" / "saved_model"))
    assert found is None and "holds no data_stats.json (an export step's output, or a model registered before" in note
    data_statistics.write(str(tmp_path / "1"), typed(statistics), keys)
    older = {key: value for key, value in statistics.items() if key != "format_version"}  # before the versions
    (tmp_path / "1" / "data_stats.json").write_text(json.dumps(older))
    with pytest.raises(UsageError, match=r"was made by an older version .*: check the data again$"):
        data_statistics.read(str(tmp_path / "1"))
    found, folder, note = load_baseline(str(tmp_path / "1"))
    older_note = f"the baseline {tmp_path / '1'}'s statistics were made by an older version of this pipeline"
    assert found is None and folder == "" and note.startswith(f"{older_note} (data_stats.json format 0, this one reads")
    lacking = {key: value for key, value in statistics.items() if key not in ("counts", "per_class")}
    (tmp_path / "1" / "data_stats.json").write_text(json.dumps(lacking))  # of this format, without two facts
    found, folder, note = load_baseline(str(tmp_path / "1"))
    assert (
        found is None
        and folder == ""
        and note.startswith(
            f"the baseline {tmp_path / '1'}'s statistics were made by a version of this pipeline that did not record "
            "counts, per_class: nothing to compare with"
        )
    )


def test_a_baseline_is_read_where_it_is_typed_and_one_that_is_not_there_is_one_line(tmp_path, converted, gcs):
    from components.check_data.core import load_baseline
    from tests.conftest import BUCKET

    first = "the first version, with no baseline: nothing to compare with; its own leakage is reported, never blocking"
    assert load_baseline("") == (None, "", first)
    statistics, keys = version(BALANCED)
    kept = tmp_path / "check-dataX"  # typed with a trailing slash; only the slash goes
    data_statistics.write(str(kept), typed(statistics), keys)
    found, folder, note = load_baseline(f"{kept}/")
    assert (found[0], folder, note) == (typed(statistics), str(kept), "")
    examples_dir, _ = converted  # a convert output: its statistics computed here, no note
    found, folder, note = load_baseline(f"{examples_dir}/")
    assert found is not None and (folder, note) == (examples_dir, "")
    missing = tmp_path / "nowhere"
    with pytest.raises(UsageError) as raised:
        load_baseline(str(missing))
    assert str(raised.value) == (
        f"--baseline {missing} does not exist: pass the check-data output, the examples or "
        "the registered model of the model in service"
    )
    # a folder without statistics, here or on Cloud Storage (where a folder is no object): no baseline, and why
    (tmp_path / "export").mkdir()
    for bare in (str(tmp_path / "export"), f"gs://{BUCKET}/export"):
        assert load_baseline(bare) == (
            None,
            "",
            (
                f"the baseline {bare} holds no data_stats.json (an export step's output, or a model registered before "
                "the data checks: a registered version keeps them): nothing to compare with; the new data's own "
                "leakage is reported, never blocking"
            ),
        )


def test_the_statistics_read_the_bytes_features_tensorflow_reads_without_importing_it():
    import tensorflow as tf

    from components.schema import bytes_features, int64_features, serialize_example

    ours = serialize_example(b"\xff\xd8jpeg", 2, "cow", (16, 16), 4, source="gs://b/cow/1.jpg", source_size=(640, 480))
    theirs = tf.train.Example(
        features=tf.train.Features(
            feature={
                "tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=[5, 300, 70000])),
                "one_hot_class": tf.train.Feature(float_list=tf.train.FloatList(value=[0.0, 1.0])),
                "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=["déjà vu".encode()])),
                "label": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b""])),
            }
        )
    ).SerializeToString()
    for serialized in (ours, theirs):
        parsed = tf.train.Example.FromString(serialized).features.feature
        names = ("image", "source", "text", "label", "tokens", "absent")
        expected = {
            name: parsed[name].bytes_list.value[0]
            for name in names
            if name in parsed and parsed[name].WhichOneof("kind") == "bytes_list"
        }
        assert bytes_features(serialized, names) == expected
    assert bytes_features(ours, ("image", "source")) == {"image": b"\xff\xd8jpeg", "source": b"gs://b/cow/1.jpg"}
    for serialized in (ours, theirs):
        parsed = tf.train.Example.FromString(serialized).features.feature
        names = ("class", "size", "source_size", "tokens", "label", "absent")
        expected = {
            name: list(parsed[name].int64_list.value)
            for name in names
            if name in parsed and parsed[name].WhichOneof("kind") == "int64_list"
        }
        assert int64_features(serialized, names) == expected
    assert int64_features(ours, ("source_size", "class")) == {"source_size": [640, 480], "class": [2]}
    # an int64 list written unpacked (a varint a value, as older writers do), and negative values
    unpacked = b"\x08\x80\x05\x08\xe0\x03"  # Int64List.value = 640, 480, each a varint of its own
    entry = b"\x0a\x0bsource_size\x12" + bytes([len(unpacked) + 2]) + b"\x1a" + bytes([len(unpacked)]) + unpacked
    example = b"\x0a" + bytes([len(entry) + 2]) + b"\x0a" + bytes([len(entry)]) + entry
    assert list(tf.train.Example.FromString(example).features.feature["source_size"].int64_list.value) == [640, 480]
    assert int64_features(example, ("source_size",)) == {"source_size": [640, 480]}
    negative = serialize_example(b"x", 0, "a", (-1, -(2**63)), 2)
    assert int64_features(negative, ("size",)) == {"size": [-1, -(2**63)]}


def test_image_statistics_of_hand_written_records_count_each_histogram_by_hand(tmp_path):
    import tensorflow as tf
    from PIL import Image

    from components.schema import SHARD_SUFFIX, serialize_example

    def png(pixels) -> bytes:
        buffer = io.BytesIO()
        Image.fromarray(np.asarray(pixels, dtype=np.uint8)).save(buffer, format="PNG")
        return buffer.getvalue()

    flat, white = png(np.full((16, 16), 100)), png(np.full((16, 16), 255))  # no spread
    halves = png(np.concatenate([np.zeros((8, 16)), np.full((8, 16), 255)]))  # mean 127.5, deviation 127.5

    def example(image, source=None, size=None):
        return serialize_example(image, 0, "ant", (16, 16), 2, source=source, source_size=size)

    odd = example(flat, "odd_/6.png", (640, 480)).replace(b"odd_/6.png", b"odd\xff/6.png")  # not UTF-8
    records = [
        example(flat, "gs://b/ant/1.png", (640, 480)),
        example(halves, "x/2.JPEG", (0, 0)),
        example(flat),
        example(flat, "gs://b/ant/4.png", (640, 480)),
        example(white, "big/5.jpg", (10000, 100)),
        odd,
        example(flat, "tiny/7.png", (1, 5)),
        example(flat, "tall/8.png", (100, 10000)),
    ]
    # (3: adopted, no source nor size)
    os.makedirs(tmp_path / "train")
    with tf.io.TFRecordWriter(str(tmp_path / "train" / f"train-00000-of-00001{SHARD_SUFFIX}")) as writer:
        for record in records:
            writer.write(record)
    found, keys = data_statistics.image_statistics(str(tmp_path), "train")
    nonzero = {
        name: {i: n for i, n in enumerate(found[name]) if n}
        for name in ("brightness", "contrast", "width", "height", "aspect")
    }
    # by hand: brightness 100 six times, round(127.5) = 128, 255; deviation 0 seven times and 127.5 in the last bin
    # (127). Sizes: 640 x 480 three times (width 640 / 16 = 40, height 30, aspect 1.333 / 0.05 = 26.7 -> 27);
    # 10000 x 100 in the last width bin (511), height 6, aspect 100 / 0.05 in the last (200); 100 x 10000: width 6,
    # the last height bin, aspect 0.01 / 0.05 -> 0; 1 x 5 in bin 0, 0, aspect 0.2 / 0.05 = 4; 0 x 0 and no size at
    # all are left out
    assert nonzero == {
        "brightness": {100: 6, 128: 1, 255: 1},
        "contrast": {0: 7, 127: 1},
        "width": {0: 1, 6: 1, 40: 3, 511: 1},
        "height": {0: 1, 6: 1, 30: 3, 511: 1},
        "aspect": {0: 1, 4: 1, 27: 3, 200: 1},
    }
    assert all(type(n) is int for name in nonzero for n in found[name])  # counts, as data_stats.json keeps them
    assert found["formats"] == {"png": 5, "jpg": 2, "unknown": 1}
    assert keys.shape == (8, data_statistics.THUMBNAIL_SIDE**2) and keys.dtype == np.uint8
    assert (keys[0] == 100).all() and (keys[4] == 255).all()
    empty, none = data_statistics.image_statistics(str(tmp_path), "validation")  # a split without examples
    assert none.shape == (0, data_statistics.THUMBNAIL_SIDE**2) and none.dtype == np.uint8  # as near_duplicates.npz
    assert empty["formats"] == {}  # keeps every split's keys
    assert not any(any(empty[name]) for name in ("brightness", "contrast", "width", "height", "aspect"))


def test_a_distributions_floor_is_twice_the_baselines_own_train_against_validation_divergence():
    from scipy.spatial.distance import jensenshannon

    from components.check_data.distributions import distribution_rows

    # the baseline's formats: train 80 jpg, 20 png; validation 70 jpg, 10 webp (20 or more each: its noise counts)
    base = {"train": {"jpg": 80, "png": 20}, "validation": {"jpg": 70, "webp": 10}, "test": {"jpg": 20}}
    own = jensenshannon([80, 20, 0], [70, 0, 10], base=2) ** 2  # jpg, png, webp, by hand
    found = distribution_rows("formats", base, base, LIMITS, categorical=True)
    assert found["thresholds"] == {"warn": round(min(2 * own, 0.5), 4)} and 0.1 < 2 * own < 0.5
    assert (found["value"], found["verdict"]) == (0.0, "pass")
    assert found["detail"] == "Jensen-Shannon divergence, every split, against the baseline's"
    exactly = {"train": {"jpg": 10, "png": 10}, "validation": {"jpg": 20}, "test": {}}  # exactly 20 on each side
    assert distribution_rows("formats", exactly, exactly, LIMITS, categorical=True)["thresholds"] == {"warn": 0.5}
    # a threshold set with more places than the row keeps
    found = distribution_rows("formats", exactly, exactly, threshold_values({"distribution_warn": 0.6123456}), True)
    assert found["thresholds"] == {"warn": 0.6123}
    # a baseline without a single value: its bins are empty and the figures zero, not an error
    empty = {split: [0] * 8 for split in ("train", "validation", "test")}
    assert distribution_rows("brightness", empty, empty, LIMITS)["value"] == 0.0


def test_jensen_shannon_quantile_bins_rebin_and_shares_at_their_edges():
    from components.check_data.distributions import quantile_bins, rebin, shares

    assert jensen_shannon([0, 0], [1, 1]) == jensen_shannon([1, 1], [0, 0]) == 0.0  # one side empty: no figure
    assert jensen_shannon([3, 1], [3, 1]) == 0.0 and jensen_shannon([1, 0], [0, 1]) == 1.0
    # ten levels of one example each: a bin a level, the edges at 1..9 (none at 0 or at the end)
    assert quantile_bins([1] * 10).tolist() == list(range(1, 10))
    # one example at level 2 of 5: a bin below it, its own, one above
    assert quantile_bins([0, 0, 1, 0, 0]).tolist() == [2, 3]
    assert quantile_bins([]).tolist() == quantile_bins([0, 0, 0]).tolist() == []
    assert quantile_bins([0, 0, 0]).dtype == np.int64 and rebin([1, 2], quantile_bins([0, 0])).tolist() == [3]
    assert quantile_bins([0, 0, 5]).tolist() == [2]  # all in the last level: a bin below it, and its own
    assert rebin([], np.array([2, 3])).tolist() == [0.0]
    assert rebin([1, 2, 3, 4, 5], np.array([2, 3])).tolist() == [3, 3, 9]
    assert shares({"a": 3}, ["a", "b"]).tolist() == [1.0, 0.0] and shares({}, ["a"]).tolist() == [0.0]


def test_thumbnails_average_boxes_and_unit_thumbnails_are_centred_at_unit_length_a_flat_one_zero():
    from PIL import Image

    side = data_statistics.THUMBNAIL_SIDE
    halves = np.zeros((2 * side, 2 * side), np.uint8)
    halves[:, side:] = 200  # left half black, right half 200: each 2x2 box averages to one of them exactly
    found = data_statistics.thumbnail(Image.fromarray(halves))
    assert found.dtype == np.uint8 and found.tolist() == ([0] * (side // 2) + [200] * (side // 2)) * side
    thumbnails = np.array([[0, 2, 0, 2], [7, 7, 7, 7], [1, 1, 3, 3], [0, 0, 0, 1]], np.uint8)
    with warnings.catch_warnings():  # (numpy warns of a division that leaves some of its output unwritten)
        warnings.simplefilter("error")
        units = data_statistics.unit_thumbnails(thumbnails)
    assert units.dtype == np.float32  # (a million train thumbnails: half the memory of float64)
    # the last row: less its mean 0.25, (-0.25, -0.25, -0.25, 0.75), of length 0.866 (under 1: still made unit)
    low = 0.25 / np.sqrt(0.75)
    np.testing.assert_allclose(
        units, [[-0.5, 0.5, -0.5, 0.5], [0, 0, 0, 0], [-0.5, -0.5, 0.5, 0.5], [-low, -low, -low, 3 * low]], atol=1e-6
    )


def test_the_examples_row_and_the_quarantine_rate_by_hand():
    rows, _ = outcome(
        version({"train": [101, 100, 100, 100], "validation": [25] * 4, "test": [25] * 4}), version(BALANCED)
    )
    examples = next(found for found in rows if found["check"] == "examples")
    assert examples["value"] == 1.0017 and examples["thresholds"] == {"block_below": 0.5, "warn_above": 3.0}  # 601/600
    from components.check_data.distributions import check_counts, quarantine_rate

    empty = {**version(BALANCED)[0], "num_examples": 0}  # a baseline without examples: no division by zero
    assert check_counts(version(BALANCED)[0], empty, LIMITS)["value"] == 600.0
    # duplicates dropped are items too: 5 quarantined of 90 kept, 5 quarantined and 5 duplicates
    assert quarantine_rate({"num_examples": 90, "quarantined": 5, "duplicates": 5}) == 0.05
    assert quarantine_rate({"num_examples": 95, "quarantined": 5}) == 0.05  # (older statistics: no duplicates)
    assert quarantine_rate({"num_examples": 0, "quarantined": 0, "duplicates": 0}) == 0.0
    # a folder's notes.txt, left out by the conversion and not counted against it, is no bad image here either
    left_out = {"not an image file": 1, "undecodable": 1}
    assert quarantine_rate({"num_examples": 98, "quarantined": 2, "duplicates": 0, "quarantine_reasons": left_out}) == (
        1 / 99
    )
    # 1 quarantined of 7 items; the baseline's 10 of 610, doubled: 0.0328
    new = {**version(BALANCED)[0], "num_examples": 6, "quarantined": 1}
    row = next(
        found
        for found in compare(
            new,
            version(BALANCED)[1],
            {**version(BALANCED)[0], "quarantined": 10, "num_examples": 600},
            version(BALANCED)[1],
            LIMITS,
        )
        if found["check"] == "quarantine rate"
    )
    assert (row["value"], row["thresholds"]) == (0.1429, {"warn": 0.0328})
    assert row["detail"] == "1 quarantined (none); the baseline's rate 1.64%"


def test_statistics_whose_keys_hold_pickled_objects_are_refused(tmp_path):
    """The near-duplicate keys come from a folder a registry keeps: an array of Python objects in it would run code
    when unpickled, so it is refused."""
    statistics, keys = version(BALANCED)
    data_statistics.write(str(tmp_path), typed(statistics), keys)
    with open(tmp_path / data_statistics.NEAR_DUPLICATES_NAME, "wb") as handle:
        np.savez(handle, train=np.array([{"not": "a key"}], dtype=object))
    with pytest.raises(ValueError, match="allow_pickle"):
        data_statistics.read(str(tmp_path))


def test_a_sources_size_is_read_as_its_exif_orientation_turns_it():
    from PIL import Image

    from components.convert.items import oriented_size

    for orientation, expected in ((1, (60, 40)), (3, (60, 40)), (6, (40, 60)), (8, (40, 60)), (5, (40, 60))):
        exif = Image.Exif()
        exif[0x0112] = orientation
        buffer = io.BytesIO()
        Image.new("RGB", (60, 40)).save(buffer, format="JPEG", exif=exif.tobytes())
        assert oriented_size(buffer.getvalue()) == expected, orientation


def test_computing_statistics_imports_neither_tensorflow_nor_beam(converted):
    examples_dir, _ = converted
    script = (
        "import sys; from components.check_data import statistics; statistics.compute(sys.argv[1]); "
        "print(sorted(m for m in ('tensorflow', 'apache_beam') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, examples_dir], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_many_held_out_examples_are_compared_through_an_even_sample(monkeypatch):
    from components.check_data import leakage

    monkeypatch.setattr(leakage, "MAX_COMPARED", 40)
    new, keys = version(BALANCED)  # 200 held-out examples, 40 of them compared
    keys["train"][:100] = keys["validation"]  # the first 100 of the 200: 20 of the 40 evenly spread
    rows, _ = outcome((new, keys), version(BALANCED))
    leak = next(found for found in rows if found["check"] == "leakage across splits")
    assert (
        leak["detail"]
        == "20 of 40 validation and test examples (an even sample of their 200) have a near-copy in train"
    )
    assert leak["value"] == 0.5
    # the sample takes the first and the last held-out example: copies of those two alone are 2 of the 40
    new, keys = version(BALANCED)
    keys["train"][0], keys["train"][1] = keys["validation"][0], keys["test"][-1]
    rows, _ = outcome((new, keys), version(BALANCED))
    leak = next(found for found in rows if found["check"] == "leakage across splits")
    assert leak["detail"].startswith("2 of 40 validation and test examples")
    # nothing held out: nothing leaks, of nothing
    empty = keys["test"][:0]
    limits = threshold_values({})
    assert leakage.leakage_share({"validation": empty, "test": empty}, keys["train"], limits, False)[:3] == (0.0, 0, 0)


def test_near_copies_are_found_through_train_in_chunks_as_through_all_of_it_at_once(monkeypatch):
    from components.check_data import leakage

    train = thumbnails(range(100))
    held_out = thumbnails([3, 6, 7, 50, 99, 500, 501])  # copies of 5 train examples, at the edges of chunks of 7
    held_out[5] = train[20] // 8  # and one of little contrast within a grey level of train's 20th
    flat = train[20] // 8
    train[20] = flat + (np.arange(SIDE) % 2).astype(np.uint8)
    limits = threshold_values({})
    counts = {}
    for chunk in (7, 1000):
        monkeypatch.setattr(leakage, "TRAIN_CHUNK", chunk)
        counts[chunk] = leakage.near_copies(
            held_out, train, limits["near_duplicate_similarity"], False, limits["near_duplicate_levels"]
        )
    assert counts == {7: 6, 1000: 6}


def test_a_large_split_is_sampled_over_shards_and_records_up_to_a_bound_and_the_leakage_rows_say_so(
    tmp_path, monkeypatch
):
    """The statistics and near-copy keys of a split of more than ``MAX_READ`` examples come from ``MAX_READ`` of
    them: the first shards that hold that many (the conversion shards by checksum: a random sample), their records
    evenly spaced; the leakage rows name the sample, and scale the share found in it to the whole split."""
    import tensorflow as tf
    from PIL import Image

    from components.schema import SHARD_SUFFIX, serialize_example

    def write(split: str, shards: int, per_shard: int) -> None:  # image i of grey level i
        os.makedirs(tmp_path / split)
        for shard in range(shards):
            name = f"{split}-{shard:05d}-of-{shards:05d}{SHARD_SUFFIX}"
            with tf.io.TFRecordWriter(str(tmp_path / split / name)) as writer:
                for level in range(shard * per_shard, (shard + 1) * per_shard):
                    buffer = io.BytesIO()
                    Image.fromarray(np.full((16, 16), level, np.uint8)).save(buffer, format="PNG")
                    writer.write(serialize_example(buffer.getvalue(), 0, "ant", (16, 16), 2))

    write("train", 3, 4)  # levels 0-3, 4-7, 8-11
    write("test", 1, 12)  # levels 0-11 in one shard
    read = {}
    for split in ("train", "test"):
        for bound in (4, 5, 100):
            monkeypatch.setattr(data_statistics, "MAX_READ", bound)
            found, keys = data_statistics.image_statistics(str(tmp_path), split, total=12)
            read[split, bound] = [level for level, n in enumerate(found["brightness"]) for _ in range(n)]
            assert [int(key[0]) for key in keys] == read[split, bound]
    monkeypatch.setattr(data_statistics, "MAX_READ", 4)  # adopted TFRecords (maybe a class a file): every file read
    found, _ = data_statistics.image_statistics(str(tmp_path), "train", total=12, adopted=True)
    assert [level for level, n in enumerate(found["brightness"]) for _ in range(n)] == [0, 3, 6, 9]
    assert read == {
        ("train", 4): [0, 1, 2, 3],  # the first shard
        ("train", 5): [0, 1, 3, 4, 6],  # two shards, 5 of their 8 records evenly spaced
        ("train", 100): list(range(12)),
        ("test", 4): [0, 3, 6, 9],  # the one shard, every third record
        ("test", 5): [0, 2, 4, 7, 9],
        ("test", 100): list(range(12)),
    }

    new, keys = version(BALANCED)
    base, base_keys = version(BALANCED, first_id=1000)
    keys["train"], base_keys["train"] = keys["train"][:250], base_keys["train"][:300]  # 250 of 400 read
    keys["train"][:20] = keys["validation"][:20]  # 20 copies found in the sample: 0.1 of 200, scaled by 400 / 250
    rows, _ = outcome((new, keys), (base, base_keys))
    found = {row["check"]: (row["value"], row["detail"]) for row in rows if row["check"].startswith("leakage")}
    assert found == {
        "leakage across splits": (
            0.16,
            "20 of 200 validation and test examples have a near-copy in train (a sample of 250 of its 400 examples: "
            "the share is scaled to all of them)",
        ),
        "leakage across versions": (
            0.0,
            "0 of 200 validation and test examples have a near-copy in the baseline's train split (a sample of 300 "
            "of its 400 examples: the share is scaled to all of them)",
        ),
    }


def test_texts_are_checked_under_the_served_models_vocabulary(text_examples, tmp_path):
    from components.check_data.core import run
    from components.tokenizing import OUT_OF_VOCABULARY, PADDING, VOCABULARY_FILE, vocabulary_bytes

    examples_dir, _ = text_examples
    same = run(CheckDataConfig(examples_dir=examples_dir, output_dir=str(tmp_path / "same"), baseline=examples_dir))
    checks = {found["check"]: found for found in same["checks"]}
    assert {"token counts", "truncated share", "out-of-vocabulary share"} <= set(checks)
    assert {found["verdict"] for found in same["checks"]} == {"pass"} and checks["out-of-vocabulary share"][
        "value"
    ] == 0
    # the output keeps the version's vocabulary beside its statistics: it is a baseline as it is
    with open(os.path.join(examples_dir, VOCABULARY_FILE), "rb") as handle:
        assert (tmp_path / "same" / VOCABULARY_FILE).read_bytes() == handle.read()
    # the model in service knew two words: nearly every token of the same texts is out of its vocabulary
    served = tmp_path / "served"
    shutil.copytree(tmp_path / "same", served)
    (served / VOCABULARY_FILE).write_bytes(vocabulary_bytes([PADDING, OUT_OF_VOCABULARY, "the", "a"]))
    with pytest.raises(DataBlockedError, match=r"\n  out-of-vocabulary share: \d+\.\d% -> \d+\.\d%\n"):
        run(CheckDataConfig(examples_dir=examples_dir, output_dir=str(tmp_path / "new"), baseline=str(served)))


def test_text_statistics_count_tokens_truncation_and_unknown_words_as_counted_by_hand(tmp_path):
    """40 distinct texts of 1 to 5 tokens (8 of each length), cut at 3 tokens; a served vocabulary that knows only
    each text's first token. By hand: 16 of 40 texts are truncated; 80 of the 120 tokens are unknown to it."""
    from components.check_data.statistics import compute
    from components.convert.text import TextConvertConfig, run_text
    from components.tokenizing import OUT_OF_VOCABULARY, PADDING
    from tests.conftest import IN_MEMORY

    texts = [[f"w{i}x{j}" for j in range(i % 5 + 1)] for i in range(40)]
    source = tmp_path / "texts.jsonl"
    source.write_text(
        "".join(
            json.dumps({"text": " ".join(words), "label": ("neg", "pos")[i % 2]}) + "\n"
            for i, words in enumerate(texts)
        )
    )
    run_text(
        TextConvertConfig(
            source=str(source),
            output_dir=str(tmp_path / "examples"),
            vocabulary_size=500,
            sequence_length=3,
            validation_fraction=0.2,
            test_fraction=0.2,
            pipeline_args=IN_MEMORY,
        )
    )
    served = [PADDING, OUT_OF_VOCABULARY, *(words[0] for words in texts)]
    statistics, keys = compute(str(tmp_path / "examples"), served)
    splits = statistics["text"].values()
    lengths = np.sum([split["token_counts"] for split in splits], axis=0)
    assert lengths[:6].tolist() == [0, 8, 8, 8, 8, 8] and lengths.sum() == 40
    examples = {name: int(np.sum(split["token_counts"])) for name, split in statistics["text"].items()}
    truncated = sum(split["truncated_share"] * examples[name] for name, split in statistics["text"].items())
    assert truncated == pytest.approx(16)
    tokens = {
        name: int(np.dot(split["token_counts"], np.arange(len(split["token_counts"]))))
        for name, split in statistics["text"].items()
    }
    unknown = sum(split["served_out_of_vocabulary_share"] * tokens[name] for name, split in statistics["text"].items())
    assert unknown == pytest.approx(80)
    own = sum(split["out_of_vocabulary_share"] * tokens[name] for name, split in statistics["text"].items())
    # the version's own vocabulary (500 ids) holds every train word, and no held-out one: each word is in one text
    assert own == pytest.approx(tokens["validation"] + tokens["test"]) and tokens["train"] > 0
    assert sum(len(found) for found in keys.values()) == 40 and len(set(np.concatenate(list(keys.values())))) == 40
    # each key: the first 8 bytes, big-endian, of the sha256 of the standardised tokens joined by spaces (the same
    # key in every version: a baseline kept by an older run must still match), as unsigned 64-bit integers
    assert all(found.dtype == np.uint64 for found in keys.values())
    expected = {int.from_bytes(hashlib.sha256(" ".join(words).encode()).digest()[:8], "big") for words in texts}
    assert set(np.concatenate(list(keys.values())).tolist()) == expected
    assert all(type(n) is int for split in splits for n in split["token_counts"])


def test_thresholds_are_read_from_name_value_items():
    from components.check_data.thresholds import parse_thresholds

    assert parse_thresholds([]) == {}
    assert parse_thresholds([" class_mix_block = 0.25", "leakage_block=1e-2"]) == {
        "class_mix_block": 0.25,
        "leakage_block": 0.01,
    }
    for item in (
        "class_mix_block",
        "class_mix_block=",
        "class_mix_block=high",
        "class_mix_block=nan",
        "class_mix_block=0.2=0.3",
    ):
        with pytest.raises(UsageError) as raised:
            parse_thresholds([item])
        assert str(raised.value) == (
            f"data threshold {item!r} is not NAME=VALUE with a number: for example class_mix_block=0.25"
        )


def test_text_statistics_put_long_texts_in_the_last_bin_and_an_empty_split_at_zero(monkeypatch):
    """By hand: a text of 2,000 tokens (past the last bin), a record without a text (an empty one), and a split
    with no examples at all, whose shares are 0, not a division by zero."""
    import tensorflow as tf

    from components.check_data import statistics

    def example(**features) -> bytes:
        feature = {
            name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[value])) for name, value in features.items()
        }
        return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

    records = {"train": [example(text=" ".join(["word"] * 2000).encode()), example(label=b"pos")], "test": []}
    monkeypatch.setattr(
        statistics, "read_examples", lambda examples_dir, split, limit=None, adopted=False: iter(records[split])
    )
    found, hashes = statistics.text_statistics("examples", "train", {"word": 2}, 250, served={})
    assert len(found["token_counts"]) == statistics.TOKEN_BINS
    assert (found["token_counts"][-1], found["token_counts"][0], sum(found["token_counts"])) == (1, 1, 2)
    assert found["truncated_share"] == 0.5  # 1 of the 2 is longer than 250 tokens
    assert (found["out_of_vocabulary_share"], found["served_out_of_vocabulary_share"]) == (0.0, 1.0)
    assert hashes.dtype == np.uint64 and len(set(hashes.tolist())) == 2
    empty, none = statistics.text_statistics("examples", "test", {"word": 2}, 250, served={})
    assert empty == {
        "token_counts": [0] * statistics.TOKEN_BINS,
        "truncated_share": 0.0,
        "out_of_vocabulary_share": 0.0,
        "served_out_of_vocabulary_share": 0.0,
    }
    assert len(none) == 0


def test_text_examples_on_gcs_typed_with_a_trailing_slash_are_checked_and_their_vocabulary_kept(text_examples, gcs):
    from components.check_data.core import run
    from components.tokenizing import VOCABULARY_FILE
    from tests.conftest import BUCKET

    examples_dir, _ = text_examples
    for folder, _, names in os.walk(examples_dir):
        for name in names:
            relative = os.path.relpath(os.path.join(folder, name), examples_dir)
            gcs.blob(f"text/examplesX/{relative}").upload_from_filename(os.path.join(folder, name))
    result = run(CheckDataConfig(examples_dir=f"gs://{BUCKET}/text/examplesX/", output_dir=f"gs://{BUCKET}/checksX/"))
    assert not result["blocked"] and result["baseline_note"].startswith("the first version")
    with open(os.path.join(examples_dir, VOCABULARY_FILE), "rb") as handle:
        assert gcs.blob(f"checksX/{VOCABULARY_FILE}").download_as_bytes() == handle.read()
    assert data_statistics.read(f"gs://{BUCKET}/checksX") is not None
    # the folders as typed, less the slash only (not "checksX//", nor "checks" for a name ending in X)
    written = sorted(blob.name for blob in gcs.list_blobs(prefix="checks"))
    assert written == [
        "checksX/data_checks.json",
        "checksX/data_stats.json",
        "checksX/near_duplicates.npz",
        f"checksX/{VOCABULARY_FILE}",
    ]


def test_statistics_kept_on_gcs_are_found_through_a_folder_typed_with_a_trailing_slash(gcs):
    """A baseline given as ``gs://.../1/`` (as users type folders) is the folder ``gs://.../1``: on Cloud Storage
    ``1//data_stats.json`` would be another object, and the checks would run as if there were no baseline."""
    from components.check_data import statistics
    from components.modalities.text import TEXT
    from components.tokenizing import OUT_OF_VOCABULARY, PADDING, VOCABULARY_FILE, vocabulary_bytes
    from tests.conftest import BUCKET

    kept, keys = version(BALANCED)
    words = [PADDING, OUT_OF_VOCABULARY, "the"]
    for folder in ("registry/1", "runs/check-dataX"):  # (only the slash goes: a name may end in any letter)
        statistics.write(f"gs://{BUCKET}/{folder}", typed(kept), keys)
        gcs.blob(f"{folder}/{VOCABULARY_FILE}").upload_from_string(vocabulary_bytes(words))
        found = statistics.read(f"gs://{BUCKET}/{folder}/")
        assert found is not None and found[0] == typed(kept)
        assert all(np.array_equal(found[1][split], keys[split]) for split in keys)
        assert TEXT.served_tokens(f"gs://{BUCKET}/{folder}/", {"standardization": "strip"})[0] == words


def test_both_leakage_rows_say_their_share_thresholds_and_counts_to_four_places():
    odd = {"train": [100, 100, 100, 100], "validation": [25, 25, 25, 25], "test": [25, 25, 25, 26]}  # 201 held out
    base, base_keys = version(odd)
    base_keys["train"][0] = base_keys["test"][0]  # the baseline leaked 1 of 201: the warning rises to 2/201
    new, keys = version(odd, first_id=10_000)
    keys["train"][:3] = keys["validation"][:3]  # 3 of 201 across the new splits
    base_keys["train"][1:4] = keys["test"][5:8]  # 3 of 201 in the baseline's train split
    rows = check_leakage(new, keys, base, base_keys, threshold_values({"leakage_block": 0.123456}))
    # by hand: 2/201 = 0.0099502, 3/201 = 0.0149254
    thresholds = {"warn": 0.01, "block": 0.1235}
    assert rows == [
        {
            "check": "leakage across splits",
            "verdict": "warn",
            "severity": "block",
            "value": 0.0149,
            "thresholds": thresholds,
            "detail": "3 of 201 validation and test examples have a near-copy in train",
            "test_copies": {"found": 0, "compared": 101},
        },
        {
            "check": "leakage across versions",
            "verdict": "warn",
            "severity": "block",
            "value": 0.0149,
            "thresholds": thresholds,
            "detail": "3 of 201 validation and test examples have a near-copy in the baseline's train split",
        },
    ]


def test_a_version_of_the_other_modality_blocks_with_nothing_else_compared():
    base, base_keys = version(BALANCED)
    new, keys = version(BALANCED, first_id=10_000)
    new = {**new, "modality": "text"}  # texts where the model in service learned images
    rows, result = outcome((new, keys), (base, base_keys))
    assert rows[1:-1] == [
        {
            "check": "modality",
            "verdict": "block",
            "severity": "block",
            "value": None,
            "thresholds": {},
            "detail": "image -> text",
        }
    ]
    assert [found["check"] for found in rows] == ["label set", "modality", "split class mix"] and result["blocked"]


def test_without_a_baseline_a_version_that_does_not_leak_passes():
    new, keys = version(BALANCED)
    assert [(found["verdict"], found["severity"]) for found in compare(new, keys, None, None, LIMITS)] == [
        ("pass", "block"),
        ("pass", "block"),  # (its split class mix)
    ]


def test_the_quarantine_is_counted_by_the_kind_of_each_reason_here_and_on_gcs(tmp_path, gcs):
    from components.schema import QUARANTINE_FILE
    from tests.conftest import BUCKET

    records = [
        {"path": "a.jpg", "reason": "missing file"},
        {"path": "b.jpg", "reason": "not an image: cannot identify image file"},
        {"path": "c.png", "reason": "too large: 90000000 pixels"},
        {"path": "d.png", "reason": "not an image: truncated"},
    ]
    content = "".join(json.dumps(record) + "\n" for record in records) + "\n"  # (a last empty line)
    expected = [("missing file", 1), ("not an image", 2), ("too large", 1)]  # by hand, in the order of the words
    local = tmp_path / "examples"
    local.mkdir()
    (local / QUARANTINE_FILE).write_text(content)
    assert list(data_statistics.quarantine_reasons(f"{local}/").items()) == expected
    gcs.blob(f"quarantineX/{QUARANTINE_FILE}").upload_from_string(content)
    assert list(data_statistics.quarantine_reasons(f"gs://{BUCKET}/quarantineX/").items()) == expected
    assert data_statistics.quarantine_reasons(str(tmp_path)) == {}  # no quarantine: nothing counted


def test_near_copies_are_counted_over_every_block_of_held_out_examples_and_texts_by_their_hash():
    from components.check_data.leakage import near_copies

    rng = np.random.default_rng(5)
    held_out = rng.integers(0, 256, (600, SIDE), dtype=np.uint8)  # noise: no two alike
    train = held_out[[0, 255, 256, 599]]  # the first and last of the first block, the first of the second, the last
    assert near_copies(held_out, train, LIMITS["near_duplicate_similarity"], text=False, levels=0.0) == 4
    # texts: a held-out text whose hash is in train is a copy
    assert near_copies(np.array([11, 12, 13]), np.array([12, 13, 14, 15]), 1.0, text=True, levels=0.0) == 2
    # an empty train split: nothing to compare with, no copy, texts or images
    for text in (False, True):
        assert near_copies(held_out, held_out[:0], 0.5, text=text, levels=3.0) == 0


def test_a_pair_exactly_at_either_similarity_is_a_copy(monkeypatch):
    from components.check_data import leakage

    # grey 119 and 121 in a pattern: less their mean, every pixel is -1 or +1, at unit length -1/16 or +1/16 exactly;
    # the copy swaps 4 pixels (two each way), so they correlate at (256 - 2 * 4) / 256 = 0.96875 exactly, and differ
    # by a root-mean-square of sqrt(4 * 2**2 / 256) = 0.25 levels
    picture = np.where(np.arange(SIDE) % 2 == 0, 121, 119).astype(np.uint8)
    copy = picture.copy()
    copy[:4] = picture[[1, 0, 3, 2]]
    picture, copy = picture[None], copy[None]
    assert leakage.near_copies(copy, picture, 0.96875, text=False, levels=0.0) == 1
    # under the similarity, found by the small difference where the correlation reaches the flat pictures' level
    assert leakage.near_copies(copy, picture, 0.99, text=False, levels=1.0) == 1
    assert leakage.near_copies(copy, picture, 0.99, text=False, levels=0.0) == 0
    monkeypatch.setattr(leakage, "FLAT_SIMILARITY", 0.96875)
    assert leakage.near_copies(copy, picture, 0.99, text=False, levels=1.0) == 1


def test_the_statistics_say_which_conversion_they_describe_and_count_each_split(tmp_path, converted):
    from components.check_data.statistics import compute
    from components.convert.text import TextConvertConfig, run_text
    from components.schema import STATS_FILE
    from tests.conftest import IN_MEMORY

    lines = [
        {"text": f"review number {i} was {('bad', 'good')[i % 2]}", "label": ("neg", "pos")[i % 2]} for i in range(20)
    ]
    lines += [lines[3], lines[4], {"label": "pos"}]  # two copies, kept once, and a row without a text
    source = tmp_path / "texts.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    examples = tmp_path / "examples"
    run_text(
        TextConvertConfig(
            source=str(source),
            output_dir=str(examples),
            vocabulary_size=100,
            sequence_length=8,
            max_bad_fraction=0.1,
            pipeline_args=IN_MEMORY,
        )
    )
    written = json.loads((examples / STATS_FILE).read_text())
    statistics, _ = compute(str(examples))
    assert (statistics["num_examples"], statistics["quarantined"], statistics["duplicates"]) == (20, 1, 2)
    assert statistics["source"] == str(source) and statistics["class_names"] == ["neg", "pos"]
    assert statistics["fingerprint"] == written["fingerprint"] and len(statistics["fingerprint"]) >= 16
    assert statistics["counts"] == written["counts"] and sum(statistics["counts"].values()) == 20
    # a conversion from before these fields: none of them, read as nothing
    for name in ("duplicates", "fingerprint", "source"):
        del written[name]
    (examples / STATS_FILE).write_text(json.dumps(written))
    older, _ = compute(str(examples))
    assert (older["duplicates"], older["fingerprint"], older["source"]) == (0, "", "")
    # images: every split's examples are in its histograms and its near-copy keys
    examples_dir, stats = converted
    statistics, keys = compute(examples_dir)
    for split, count in stats["counts"].items():
        assert sum(statistics["image"][split]["brightness"]) == count == len(keys[split]) > 0, split


def test_the_served_share_tokenises_as_the_served_model_does(monkeypatch):
    """A served model converted before punctuation split words knows ``email``; the new version's tokens are ``e``
    and ``mail``: under the served model's own standardisation its share is 0, under the new one it would be 1."""
    import tensorflow as tf

    from components.check_data import statistics
    from components.tokenizing import SPLIT_PUNCTUATION, STRIP_PUNCTUATION

    text = tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"E-mail"]))
    record = tf.train.Example(features=tf.train.Features(feature={"text": text})).SerializeToString()
    monkeypatch.setattr(
        statistics, "read_examples", lambda examples_dir, split, limit=None, adopted=False: iter([record])
    )
    own, served = {"e": 2, "mail": 3}, {"email": 2}
    found, _ = statistics.text_statistics("examples", "train", own, 250, served, SPLIT_PUNCTUATION, STRIP_PUNCTUATION)
    assert (found["out_of_vocabulary_share"], found["served_out_of_vocabulary_share"]) == (0.0, 0.0)
    found, _ = statistics.text_statistics("examples", "train", own, 250, served, SPLIT_PUNCTUATION)
    assert found["served_out_of_vocabulary_share"] == 1.0  # (the same standardisation for both)


def test_the_statistics_of_a_sampled_version_say_how_many_examples_of_each_split_they_read(converted, monkeypatch):
    examples_dir, stats = converted
    monkeypatch.setattr(data_statistics, "MAX_READ", 10)
    result, keys = data_statistics.compute(examples_dir)
    larger = {split for split, count in stats["counts"].items() if count > 10}
    assert larger and set(result["sampled"]) == larger
    for split in larger:
        assert result["sampled"][split] == 10  # (MAX_READ of the split's one shard)
        assert sum(result["image"][split]["brightness"]) == len(keys[split]) == result["sampled"][split]
    assert result["counts"] == stats["counts"]  # (the counts stay the conversion's)
