"""The JSON artifacts' records: written with their format version, refused in one line when another version of the
pipeline made them, left aside (with a warning) where a baseline's may be."""

from __future__ import annotations

import hashlib
import json
import logging

import pytest

from components.artifacts.model import History, ModelConfig
from components.artifacts.records import EXPORT, FORMAT_KEY, HISTORY, METRICS, RECORDS, STATS, FormatVersionError
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


def test_a_typed_record_is_its_file_read_back_and_refused_in_one_line_without_its_fields(tmp_path):
    folder = str(tmp_path)
    assert History.read_if_any(folder) is None
    history = History({"loss": [0.9, 0.4]}, 2, 3.5, kept_epoch=2, kept_index=1)
    history.write(folder)
    written = json.loads((tmp_path / HISTORY.name).read_text())
    assert written[FORMAT_KEY] == HISTORY.version and written["history"] == {"loss": [0.9, 0.4]}
    assert written["stopped_after_epoch"] is None  # every field is in the file, None where it has no value
    assert History.read(folder) == history == History.read_if_any(folder)
    del written["train_seconds"], written["epochs"]
    (tmp_path / HISTORY.name).write_text(json.dumps(written))
    with pytest.raises(UsageError) as lacking:
        History.read(folder)
    assert str(lacking.value) == f"model dir {folder}: its history.json has no epochs, train_seconds; retrain"
    (tmp_path / HISTORY.name).write_text(json.dumps({"history": {}, "epochs": 1, "train_seconds": 1.0}))
    with pytest.raises(FormatVersionError, match=r"^model dir .* was made by an older version .*: retrain$"):
        History.read_if_any(folder)


def test_a_model_config_is_typed_and_reads_as_the_facts_it_has(tmp_path):
    from components.modalities import TEXT, modality_of

    config = ModelConfig(
        model_name="text_bilstm",
        model={"ref": "text_bilstm", "kind": "builtin", "sha256": "", "file": ""},
        hparams={},
        modality="text",
        num_classes=2,
        class_names=["neg", "pos"],
        backend="jax",
        precision="float32",
        augment=False,
        sequence_length=8,
        vocabulary_size=64,
    )
    assert modality_of(config) is TEXT and config["sequence_length"] == 8 == config.sequence_length
    assert "image_size" not in config and config.get("image_size") is None  # (an image model's, not a text's)
    with pytest.raises(KeyError):
        config["image_size"]
    assert dict(config)["class_names"] == ["neg", "pos"] and len(config) == len(dict(config))
    config.write(str(tmp_path))
    assert ModelConfig.read(str(tmp_path)) == config
    with pytest.raises(TypeError):  # a fact the record does not declare is a mistake in the writer
        ModelConfig(**{**dict(config), "colour": "blue"})


def test_a_conversions_stats_without_its_facts_are_refused_in_one_line(tmp_path):
    from components.schema import read_stats

    (tmp_path / STATS.name).write_text(json.dumps({FORMAT_KEY: STATS.version, "counts": {"train": 3}}))
    with pytest.raises(UsageError) as lacking:
        read_stats(str(tmp_path))
    assert str(lacking.value) == (
        f"examples dir {tmp_path}: its stats.json has no class_names, num_classes, num_examples, modality; convert "
        "the data again"
    )


def test_an_export_lists_its_files_reads_as_its_facts_and_is_refused_in_one_line_without_them(tmp_path):
    """What register, predict, deploy and the summary read: the record written last, each other file listed; one of
    this format without the export's facts is refused in one line naming them, through its ``saved_model/`` too."""
    from components.artifacts.exported import check_export, read_export
    from components.modalities import modality_of
    from tests.conftest import record_export

    (tmp_path / "saved_model").mkdir()
    (tmp_path / "saved_model" / "saved_model.pb").write_bytes(b"graph")
    written = record_export(tmp_path, "d" * 64, class_names=["neg", "pos"])
    assert written.files == {"saved_model/saved_model.pb": {"bytes": 5, "sha256": hashlib.sha256(b"graph").hexdigest()}}
    assert check_export(str(tmp_path)) == written == read_export(f"{tmp_path}/saved_model")
    assert modality_of(written).name == "image" and written.class_names == ["neg", "pos"]
    assert "raw_texts" not in written and written.raw_texts is None  # a fact of texts: not an image export's
    (tmp_path / "export.json").write_text(
        json.dumps({FORMAT_KEY: EXPORT.version, "model_digest": "d" * 64, "files": {}})
    )
    with pytest.raises(UsageError) as lacking:
        read_export(f"{tmp_path}/saved_model")
    assert str(lacking.value).startswith(f"export {tmp_path}: its export.json has no modality, class_names, formats, ")
    assert str(lacking.value).endswith(", trained_backend; export it again")


def test_an_evaluation_without_its_figures_is_refused_in_one_line_and_a_whole_one_reads_back(tmp_path):
    """What export's report, register's import and the summary read of evaluate's ``metrics.json``."""
    from components.artifacts.evaluation import Evaluation
    from tests.conftest import made_up_evaluation

    (tmp_path / METRICS.name).write_text(json.dumps({FORMAT_KEY: METRICS.version, "accuracy": 0.5}))
    with pytest.raises(UsageError) as lacking:
        Evaluation.read(str(tmp_path))
    assert str(lacking.value).startswith(f"evaluation {tmp_path}: its metrics.json has no num_examples, class_names, ")
    assert str(lacking.value).endswith(", blessing, report_html; evaluate again")
    METRICS.write(str(tmp_path), made_up_evaluation(accuracy=0.5))
    found = Evaluation.read(str(tmp_path))
    assert (found.accuracy, found.split, found.baseline_metrics) == (0.5, "test", None)
    assert "baseline_metrics" not in found  # (no baseline: the file has no such key, as evaluate writes it)


def test_data_checks_without_their_outcome_are_refused_in_one_line_and_a_search_is_read_back(tmp_path):
    """What evaluate (``--data-checks``) and the run-local summary read of check-data's output; what the summary
    reads of a local search."""
    from components.artifacts.data_statistics import read_checks
    from components.artifacts.model import Tuning
    from components.artifacts.records import CHECKS

    (tmp_path / CHECKS.name).write_text(json.dumps({FORMAT_KEY: CHECKS.version, "checks": []}))
    with pytest.raises(UsageError) as lacking:
        read_checks(str(tmp_path))
    assert str(lacking.value) == (
        f"data checks {tmp_path}: its data_checks.json has no examples, baseline, baseline_statistics, baseline_note, "
        "blocked, blocking, warnings, accepted_data_change, thresholds; check the data again"
    )
    trials = [{"trial": 1, "parameters": {"learning_rate": 0.01}, "val_accuracy": 0.5}]
    searched = Tuning("val_accuracy", "MAXIMIZE", [], trials, trials[0])
    searched.write(str(tmp_path))
    assert Tuning.read(str(tmp_path)) == searched and Tuning.read_if_any(str(tmp_path / "none")) is None


def test_a_baselines_record_without_its_fields_is_left_aside_with_a_warning(tmp_path, caplog):
    """A run goes on without a baseline's record it cannot read, as without one of another version: the model in
    service's kept evaluation (the prediction mix) and its export (whether the candidate is the same model)."""
    from components.artifacts.evaluation import kept_evaluation
    from components.register.core import export_record

    (tmp_path / METRICS.name).write_text(json.dumps({FORMAT_KEY: METRICS.version, "accuracy": 0.5}))
    (tmp_path / EXPORT.name).write_text(json.dumps({FORMAT_KEY: EXPORT.version, "model_digest": "d" * 64}))
    with caplog.at_level(logging.WARNING):
        assert kept_evaluation(str(tmp_path)) is None and export_record(str(tmp_path)) is None
    assert caplog.messages[0].startswith(f"evaluation {tmp_path}: its metrics.json has no num_examples, class_names, ")
    assert caplog.messages[0].endswith(", blessing, report_html: left aside")
    assert caplog.messages[1].startswith(f"export {tmp_path}: its export.json has no modality, class_names, ")
