"""The local run's summary leads with one figure for the served model, and shows the others only where they
differ from it by more than the test split's noise."""

from __future__ import annotations

from components.artifacts.served import served_figure
from pipeline.local.summary import data_check_rows, served_rows


def demo_like(**changes) -> dict:
    summary = {
        "counts": {"train": 1400, "validation": 197, "test": 200},
        "test_accuracy": 0.99,
        "raw_files": {"num_files": 200, "test_accuracy": 0.99, "tfrecord_test_accuracy": 0.99},
        "formats": {
            "saved_model": {"test_accuracy": 0.99},
            "tflite_float": {"test_accuracy": 0.985},
            "tflite_int8": {"test_accuracy": 0.97},
        },
        "data_checks": {"test_copies": {"found": 0, "compared": 200}},
    }
    return {**summary, **changes}


def test_the_served_figure_is_the_savedmodel_on_the_files_as_sent_and_only_what_differs_is_shown():
    served = served_figure(demo_like())
    # by hand: one standard error of 0.99 over 200 examples is sqrt(0.99 * 0.01 / 200) = 0.00704
    assert served["noise"] == 0.0070
    assert served["what"] == "the SavedModel on the 200 test files as clients send them"
    assert served["differ"] == {"TFLite int8": 0.97}  # 0.985 is within 0.0070 of 0.99, 0.97 is not
    rows = served_rows(demo_like())
    assert rows == [
        ("test accuracy", "0.9900: the SavedModel on the 200 test files as clients send them"),
        ("", "beyond the test split's noise (±0.0070): TFLite int8 0.9700"),
    ]
    agreeing = demo_like(formats={"saved_model": {"test_accuracy": 0.99}, "tflite_int8": {"test_accuracy": 0.985}})
    assert served_rows(agreeing)[1] == (
        "",
        "the trained model and every exported file agree within the test split's noise (±0.0070)",
    )


def test_texts_nothing_exported_and_near_copies():
    texts = demo_like(raw_files=None, raw_texts={"num_texts": 151, "test_accuracy": 0.8212})
    assert served_rows(texts)[0] == (
        "test accuracy",
        "0.8212: the SavedModel on the 151 test texts as clients send them (raw strings)",
    )
    refused = demo_like(
        data_checks={"test_copies": {"found": 12, "compared": 200}}, raw_files=None, formats={}, test_accuracy=0.6
    )
    assert served_rows(refused) == [
        (
            "test accuracy",
            "0.6000: the trained model on the 200 test examples (nothing exported); 12 of the 200 test examples "
            "have a near-copy in train, which flatters it",
        )
    ]
    # a small split: the noise is at least one example (1 / 20 over sqrt(0.95 * 0.05 / 20) = 0.0487)
    small = demo_like(
        counts={"test": 20}, raw_files=None, formats={"saved_model": {"test_accuracy": 0.95}}, test_accuracy=0.95
    )
    assert served_figure(small)["noise"] == 0.05
    assert served_figure(small)["what"] == "the SavedModel on the 20 test examples' TFRecords"


def test_the_data_checks_line_counts_the_skipped_checks_apart_from_the_passed():
    checks = {"checks": 15, "skipped": 2, "warnings": [], "accepted": [], "note": "", "path": "d.json"}
    assert data_check_rows(checks) == [("data checks", "15 checks: 13 passed, 2 skipped  d.json")]
    assert data_check_rows({**checks, "skipped": 0}) == [("data checks", "15 checks, all passed  d.json")]
    warned = {**checks, "warnings": ["class mix moved"], "note": "first version"}
    assert data_check_rows(warned) == [
        ("data checks", "15 checks, 1 to read, 2 skipped (first version)  d.json"),
        ("", "warn: class mix moved"),
    ]


def test_an_interruption_names_the_last_finished_epoch_and_where_a_rerun_resumes(tmp_path):
    """Backups are taken every --backup-interval, so the epoch log may run ahead of the last backup: the line names
    both (it said "after epoch 1" when epoch 3 had finished, and the rerun trained epochs 2 and 3 again)."""
    import json

    from components.artifacts.checkpoints import BACKUP_DIR, BACKUP_METADATA, EPOCH_LOG_FILE
    from pipeline.local.summary import epochs_done

    spec = {"root": {"inputDefinitions": {"parameters": {"epochs": {}, "fine_tune_epochs": {}}}}}

    def said(logged: int, backed_up: int | None) -> str:
        checkpoints = tmp_path / f"{logged}-{backed_up}"
        checkpoints.mkdir()
        lines = [json.dumps({"epoch": epoch, "loss": 1.0 / epoch}) for epoch in range(1, logged + 1)]
        (checkpoints / EPOCH_LOG_FILE).write_text("".join(line + "\n" for line in lines))
        if backed_up is not None:
            (checkpoints / BACKUP_DIR).mkdir()
            (checkpoints / BACKUP_DIR / BACKUP_METADATA).write_text(json.dumps({"epoch": backed_up}))
        return epochs_done(str(checkpoints), {"epochs": 15}, spec)

    assert said(3, 1) == " (after epoch 3 of 15; it resumes after epoch 1, its last backup)"
    assert said(3, 3) == " (after epoch 3 of 15)"
    assert said(2, None) == " (after epoch 2 of 15; no backup yet: training starts over)"
    assert said(0, None) == ""
    # a restart drops the epochs an earlier attempt ran past its backup (they run again): stopped in epoch 4, the
    # second attempt has finished epoch 3, not the first attempt's 5
    from components.artifacts.checkpoints import read_epoch_log, trim_epoch_log

    resumed = tmp_path / "5-3"
    said(5, 3)
    trim_epoch_log(str(resumed / EPOCH_LOG_FILE), 3)
    assert [record["epoch"] for record in read_epoch_log(str(resumed / EPOCH_LOG_FILE))] == [1, 2, 3]
    assert epochs_done(str(resumed), {"epochs": 15}, spec) == " (after epoch 3 of 15)"


def test_an_interrupted_fine_tuning_resumes_from_the_kept_head_when_its_backup_is_older(tmp_path):
    """A backbone's head kept (head.weights.h5): fine-tuning goes on from the head's last epoch, whatever the head's
    last backup held."""
    import json

    from components.artifacts.checkpoints import BACKUP_DIR, BACKUP_METADATA, EPOCH_LOG_FILE, HEAD_WEIGHTS
    from pipeline.local.summary import epochs_done

    spec = {"root": {"inputDefinitions": {"parameters": {"epochs": {}, "fine_tune_epochs": {}}}}}
    (tmp_path / BACKUP_DIR).mkdir()
    (tmp_path / BACKUP_DIR / BACKUP_METADATA).write_text(json.dumps({"epoch": 18}))  # the head's, older
    (tmp_path / HEAD_WEIGHTS).write_bytes(b"weights")
    (tmp_path / EPOCH_LOG_FILE).write_text("".join(json.dumps({"epoch": n}) + "\n" for n in range(1, 23)))
    said = epochs_done(str(tmp_path), {"epochs": 20, "fine_tune_epochs": 10}, spec)
    assert said == " (after epoch 22 of 30; it resumes after epoch 20, its last backup)"
