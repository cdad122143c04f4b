"""The JSON artifacts' records: written with their format version, refused in one line when another version of the
pipeline made them, left aside (with a warning) where a baseline's may be."""

from __future__ import annotations

import json
import logging

import pytest

from components.artifacts.records import FORMAT_KEY, METRICS, RECORDS, STATS, FormatVersionError
from components.cli import UsageError


def test_a_record_is_written_with_its_format_version_and_read_back(tmp_path):
    written = STATS.write(str(tmp_path), {"counts": {"train": 3}, FORMAT_KEY: 0})
    assert (
        json.loads((tmp_path / STATS.name).read_text())
        == written
        == {FORMAT_KEY: STATS.version, "counts": {"train": 3}}
    )
    assert STATS.read(str(tmp_path)) == written == STATS.read_current(str(tmp_path))


def test_one_of_another_version_is_refused_with_what_to_do(tmp_path):
    (tmp_path / STATS.name).write_text(json.dumps({"counts": {}}))
    with pytest.raises(FormatVersionError) as older:
        STATS.read(str(tmp_path))
    assert str(older.value) == (
        f"examples dir {tmp_path} was made by an older version of this pipeline (stats.json format 0, this one reads "
        f"{STATS.version}): convert the data again"
    )
    (tmp_path / STATS.name).write_text(json.dumps({FORMAT_KEY: STATS.version + 1}))
    with pytest.raises(FormatVersionError, match=r"made by a newer version .*: upgrade the pipeline$"):
        STATS.read(str(tmp_path))


def test_a_missing_or_damaged_record_is_one_line(tmp_path):
    with pytest.raises(UsageError) as missing:
        METRICS.read(str(tmp_path))
    assert str(missing.value) == f"evaluation {tmp_path} has no metrics.json: pass the evaluate step's output"
    (tmp_path / METRICS.name).write_text("[1, 2")
    with pytest.raises(UsageError, match=r"its metrics.json is not the evaluate step's JSON; evaluate again$"):
        METRICS.read(str(tmp_path))


def test_a_baselines_record_of_another_version_is_left_aside_with_a_warning(tmp_path, caplog):
    assert METRICS.read_current(str(tmp_path)) is None and not caplog.records  # none: nothing to say
    (tmp_path / METRICS.name).write_text(json.dumps({"accuracy": 0.5}))
    with caplog.at_level(logging.WARNING):
        assert METRICS.read_current(str(tmp_path)) is None
    assert caplog.messages == [
        f"evaluation {tmp_path} was made by an older version of this pipeline (metrics.json format 0, this one reads "
        f"{METRICS.version}): left aside"
    ]


def test_each_record_has_a_file_of_its_own():
    assert len({record.name for record in RECORDS}) == len(RECORDS)
