"""An output that cannot be written is a one-line error naming the path and the user, before any work starts, in
every command. The folder is one the kernel refuses to anyone (under sysfs), so that the test holds for root too,
which CI runs as (root writes through a folder's read-only permission bits)."""

from __future__ import annotations

import pytest

from components.cli import UsageError

REFUSED = "/sys/tpu-image-pipeline-test/out"  # sysfs: creating anything here is refused, whatever the user


def commands(examples: str, model: str, tmp, out: str = REFUSED) -> dict:
    from components.check_data.__main__ import main as check_data
    from components.convert.__main__ import main as convert
    from components.evaluate.__main__ import main as evaluate
    from components.export.__main__ import main as export
    from components.train.__main__ import main as train
    from pipeline.__main__ import main as pipeline

    return {
        "convert": lambda: convert(["--source", str(tmp / "photos"), "--output", out]),
        "check-data": lambda: check_data(["--examples", examples, "--output", out]),
        "train": lambda: train(["--examples", examples, "--model-dir", out, "--epochs", "1"]),
        "evaluate": lambda: evaluate(["--examples", examples, "--model-dir", model, "--output", out]),
        "export": lambda: export(["--model-dir", model, "--examples", examples, "--output", out]),
        "compile": lambda: pipeline(["compile", "--output", out + "/pipeline.yaml"]),
        "run-local": lambda: pipeline(["run-local", "--work-dir", out]),
    }


# what each command calls the path it cannot write: its flag (train's folder also comes from Vertex AI's
# AIP_MODEL_DIR, hence its name; compile's --output is a file, whose folder is probed)
FLAGS = {
    "convert": "--output",
    "check-data": "--output",
    "train": "model dir",
    "evaluate": "--output",
    "export": "--output",
    "compile": "the folder of --output",
    "run-local": "--work-dir",
}


@pytest.mark.parametrize("command", list(FLAGS))
def test_every_command_names_an_output_it_cannot_write(converted, trained, tmp_path, command):
    from tests.conftest import write_image_folder

    write_image_folder(tmp_path / "photos", per_class=2)
    (examples, _), (model, _) = converted, trained
    with pytest.raises(
        UsageError,
        match=rf"^{FLAGS[command]} /sys/tpu-image-pipeline-test.* cannot be written by user "
        r"\S+ \(uid \d+\): ",
    ):
        commands(examples, model, tmp_path)[command]()


def test_processes_checking_one_new_folder_at_once_all_pass(tmp_path):
    """The hosts of a slice check the same model dir at the same time: one's clean-up must not fail another."""
    import threading

    from components.storage import check_writable

    errors = []

    def check():
        for _ in range(50):
            try:
                check_writable(str(tmp_path / "shared" / "model"), "model dir")
            except Exception as err:  # any failure, not only the one-line kind: a thread's own would be lost
                errors.append(err)

    threads = [threading.Thread(target=check) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


@pytest.mark.parametrize("command", list(FLAGS))
@pytest.mark.parametrize("under", [False, True], ids=["a-file", "under-a-file"])
def test_every_command_names_an_output_that_is_a_file(converted, trained, tmp_path, command, under):
    from tests.conftest import write_image_folder

    if command == "compile" and not under:  # (its --output is a file: that of a folder is named below)
        return
    write_image_folder(tmp_path / "photos", per_class=2)
    (examples, _), (model, _) = converted, trained
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    out = str(tmp_path / "notes.txt" / "out") if under else str(tmp_path / "notes.txt")
    where = f"under a file, {tmp_path}/notes.txt" if under else "a file"
    with pytest.raises(UsageError, match=rf"^{FLAGS[command]} {out}.* is {where}: pass a new or empty folder$"):
        commands(examples, model, tmp_path, out)[command]()
    assert (tmp_path / "notes.txt").read_text() == "a file, not a folder"
