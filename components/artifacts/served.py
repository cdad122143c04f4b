"""The one test figure that stands for the served model, as the run-local summary and the export's report lead with
it: the exported SavedModel's accuracy on the test files or texts as clients send them, beside the test split's noise
and the run's other figures only where they differ from it by more than that noise.

Both read it from a run's facts (a dict): ``counts`` (the split counts), ``test_accuracy`` (the trained model's, as
evaluate measured it), ``raw_files`` or ``raw_texts`` and ``formats`` (the export's record; absent when nothing was
exported) and ``data_checks`` (``test_copies``: the test examples with a near-copy in train).
"""

from __future__ import annotations

import html
import math

# the run's other test figures, by the names the summary gives them
OTHER_FIGURES = {
    "saved_model": "the SavedModel on the TFRecords",
    "tflite_float": "TFLite float32",
    "tflite_int8": "TFLite int8",
}
# where evaluate's report takes the served model's figure, once the export has measured it (``with_served``)
SERVED_MARKER = "<!-- the served model -->"


def served_figure(facts: dict) -> dict:
    """The one test figure that stands for the served model: the exported SavedModel's accuracy on the test files or
    texts as clients send them (without them, on the test TFRecords); with nothing exported, the trained model's.
    Beside it: the test split's noise (one standard error of that accuracy, at least one example in all) and the
    run's other test figures (the trained model's, each exported file's) that differ from it by more."""
    raw, texts = facts.get("raw_files") or {}, facts.get("raw_texts") or {}
    formats = facts.get("formats") or {}
    if raw.get("num_files"):
        accuracy, examples = raw["test_accuracy"], raw["num_files"]
        what = f"the SavedModel on the {examples} test files as clients send them"
        left = [f"{raw['without_file']} without a file"] if raw.get("without_file") else []
        left += [f"{count} {kind} refused" for kind, count in (raw.get("refused_formats") or {}).items()]
        what += f" ({', '.join(left)})" if left else ""
    elif texts.get("num_texts"):
        accuracy, examples = texts["test_accuracy"], texts["num_texts"]
        what = f"the SavedModel on the {examples} test texts as clients send them (raw strings)"
    elif "saved_model" in formats:
        accuracy, examples = formats["saved_model"]["test_accuracy"], facts["counts"]["test"]
        what = f"the SavedModel on the {examples} test examples' TFRecords"
    else:
        accuracy, examples = facts["test_accuracy"], facts["counts"]["test"]
        what = f"the trained model on the {examples} test examples (nothing exported)"
    noise = max(math.sqrt(accuracy * (1 - accuracy) / examples), 1 / examples) if examples else 0.0
    led_by = None if raw.get("num_files") or texts.get("num_texts") else "saved_model"  # (the figure shown already)
    others = {"the trained model": facts["test_accuracy"]}
    others.update(
        {OTHER_FIGURES.get(name, name): entry["test_accuracy"] for name, entry in formats.items() if name != led_by}
    )
    differ = {
        name: value for name, value in others.items() if value is not None and abs(value - accuracy) > noise + 1e-9
    }
    return {
        "accuracy": accuracy,
        "examples": examples,
        "what": what,
        "noise": round(noise, 4),
        "differ": differ,
        "exported": bool(formats),
    }


def served_lines(facts: dict) -> list[str]:
    """The served figure in words: its line (with the near-copies that may flatter it), then the other figures
    where they differ from it by more than the test split's noise, or that none does."""
    served = facts.get("served") or served_figure(facts)
    line = f"{served['accuracy']:.4f}: {served['what']}"
    copies = (facts.get("data_checks") or {}).get("test_copies") or {}
    if copies.get("found"):
        line += (
            f"; {copies['found']} of the {copies['compared']} test examples have a near-copy in train, which "
            "flatters it"
        )
    if served["differ"]:
        shown = ", ".join(f"{name} {value:.4f}" for name, value in served["differ"].items())
        return [line, f"beyond the test split's noise (±{served['noise']:.4f}): {shown}"]
    if served.get("exported"):
        return [
            line,
            f"the trained model and every exported file agree within the test split's noise (±{served['noise']:.4f})",
        ]
    return [line]


def with_served(report_html: str, facts: dict) -> str:
    """Evaluate's report, led by the served model's figure (in place of its ``SERVED_MARKER``, above everything
    but its title); a report without the marker gets it after its title."""
    first, *others = served_lines(facts)
    section = f'<p class="served"><b>Served model: test accuracy {html.escape(first, quote=False)}</b></p>' + "".join(
        f"<p>{html.escape(line, quote=False)}</p>" for line in others
    )
    if SERVED_MARKER in report_html:
        return report_html.replace(SERVED_MARKER, section, 1)
    title_end = report_html.find("</h1>")
    at = title_end + len("</h1>") if title_end >= 0 else 0
    return report_html[:at] + section + report_html[at:]
