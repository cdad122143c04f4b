"""``make house`` counts what the house issues bound (tests/house.py), and the tree keeps the bounds that hold."""

from __future__ import annotations

import textwrap

from tests.house import LONG_FILE_LINES, RESULTS, figures

BRANCHY = textwrap.dedent(
    """\
    def pick(config, spec, image_size, sequence_length):
        if config["modality"] == "text":  # 1
            return 1
        elif spec.modality == "image":  # 2
            return 2
        size = 3 if modality_of(spec) == "text" else 4  # 3: a name holding "modality"
        match spec.modality:  # 4
            case "text":
                return size
        if config.get("kind") == "text":  # not counted: no modality read
            return 5
        if spec.modality != config["modality"]:  # not counted: two modalities compared, none named
            return 6
        return "if modality == 'text'"  # fmt: skip


    def one_size(image_size, *, sequence_length=None):
        return image_size
    """
)


def test_house_counts_what_it_says_and_leaves_out_the_modalities_and_quoted_opt_outs(tmp_path):
    (tmp_path / "components" / "modalities").mkdir(parents=True)
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "third_party").mkdir()
    (tmp_path / "components" / "step.py").write_text(BRANCHY)
    (tmp_path / "components" / "modalities" / "text.py").write_text(BRANCHY)  # the modality's home: not counted
    (tmp_path / "pipeline" / "long.py").write_text("x = 1\n" * (LONG_FILE_LINES + 1))
    (tmp_path / "pipeline" / "short.py").write_text("x = 1\n" * LONG_FILE_LINES)
    (tmp_path / "pipeline" / "quoted.py").write_text(
        'OPT_OUT = "# fmt: skip"\n# fmt: off\nTABLE = (1,  2)\n# fmt: on\n'
    )
    (tmp_path / "third_party" / "vendored.py").write_text("x = 1  # fmt: skip\n")  # vendored: not counted
    (tmp_path / ".serving" / "lib").mkdir(parents=True)
    (tmp_path / ".serving" / "lib" / "installed.py").write_text("x = 1  # fmt: skip\n")  # installed: not counted
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# A title\n\n```sh\nmake run\n```\n")
    (tmp_path / "docs" / "guide.md").write_text("Type  `make test`,\tthen\nwait.\n")
    (tmp_path / "docs" / "notes.txt").write_text("not a page")  # not counted
    (tmp_path / "bench").mkdir()
    (tmp_path / RESULTS).write_text("| a |\n|---|\n| 1 |\n")

    found = figures(str(tmp_path))

    assert found["modality_branches"] == {"total": 4, "by_file": {"components/step.py": 4}}
    assert found["both_sizes"] == {
        "components/modalities/text.py": ["pick", "one_size"],
        "components/step.py": ["pick", "one_size"],
    }
    assert found["long_files"] == {"pipeline/long.py": LONG_FILE_LINES + 1}
    assert found["format_skips"] == {
        "total": 3,
        "by_file": {"components/modalities/text.py": 1, "components/step.py": 1, "pipeline/quoted.py": 1},
    }
    assert found["doc_words"] == {"total": 12, "by_file": {"README.md": 7, "docs/guide.md": 5}}  # as wc -w counts
    assert found["results_lines"] == 3


def test_the_tree_takes_ruff_formats_output_with_at_most_ten_opt_outs():
    assert figures()["format_skips"]["total"] <= 10


def test_no_module_of_components_or_pipeline_is_over_450_lines():
    assert figures()["long_files"] == {}


def test_at_most_five_modality_branches_stand_outside_the_modalities():
    assert figures()["modality_branches"]["total"] <= 5


def test_the_readme_and_docs_stay_under_ten_thousand_words_and_the_bench_results_under_250_lines():
    found = figures()
    assert found["doc_words"]["total"] < 10_000, found["doc_words"]
    assert found["results_lines"] < 250
