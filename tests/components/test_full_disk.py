"""A full disk (a real one: a small tmpfs, ENOSPC): one line naming what could not be written and the space left, no
half-written file left behind, and the same command works once there is room."""

from __future__ import annotations

import errno
import os
import re

import pytest

from components.cli import disk_full
from tests.conftest import run_cli


def test_a_file_that_does_not_fit_leaves_nothing_behind_and_says_so_in_one_line(small_disk):
    from components.storage import write_atomically

    disk, _ = small_disk
    target = disk / "stats.json"
    with pytest.raises(OSError) as raised:
        write_atomically(str(target), b"x" * 200_000)
    assert raised.value.errno == errno.ENOSPC
    assert os.listdir(disk) == []  # neither the file nor its temporary copy
    line = disk_full(RuntimeError("the step failed")) or ""
    assert line == ""  # (any other error is not a full disk)
    line = disk_full(raised.value)
    assert re.match(rf"the disk is full: no space left to write {disk}/stats.json \(\d+\.\d MiB free there\)", line)
    assert line.endswith("MiB free there): free some space or write elsewhere, then run the same command again")
    # wrapped as Beam re-raises a worker's error (its message only)
    wrapped = RuntimeError(f"OSError: [Errno 28] No space left on device: '{disk}/train/train-00000-of-00001.tfrec'")
    assert disk_full(wrapped).startswith(f"the disk is full: no space left to write {disk}/train/train-00000-of-00001")


def test_a_conversion_that_fills_the_disk_ends_in_one_line_and_converts_once_there_is_room(small_disk, image_folder):
    disk, grow = small_disk
    output = disk / "examples"
    command = ("components.convert", "--source", image_folder, "--output", str(output), "--image-size", "64")
    full = run_cli(*command)
    assert full.returncode == 1, full.stderr[-3000:]
    assert "Traceback" not in full.stderr, full.stderr[-3000:]
    last = full.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the disk is full: no space left") and last.endswith("run the same command again")
    left = [os.path.join(folder, name) for folder, _, names in os.walk(output) for name in names]
    assert not [path for path in left if ".tmp-" in path], left
    grow("16m")
    again = run_cli(*command)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "holds a conversion that failed: removing what it wrote" in again.stderr
