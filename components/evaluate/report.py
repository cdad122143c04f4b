"""The evaluation report: one self-contained HTML file (no network, every picture embedded) that shows why a model
was or was not blessed: the blessing and its reasons, the training curves, the confusion matrix as a picture, the
per-class table, and a grid of misclassified test images with their true and predicted labels (for a text model,
the misclassified texts, quoted).

Pictures are drawn here with Pillow (the confusion matrix) and as inline SVG (the curves), so the report needs no
plotting library. It is viewable as a local file and, as a KFP ``HTML`` artifact, in the Vertex AI console.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence

from components.artifacts.model import History
from components.artifacts.served import SERVED_MARKER
from components.modalities import modality_of

MAX_MISCLASSIFIED = 24
MAX_TEXT_CHARACTERS = 600  # of a misclassified text shown in the report
CURVE_WIDTH, CURVE_HEIGHT = 420, 220


def data_uri(content: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(content).decode('ascii')}"


def luminance(color: Sequence[int]) -> float:
    """WCAG relative luminance of an sRGB colour."""
    linear = [c / 255 / 12.92 if c <= 10 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in color[:3]]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(one: Sequence[int], other: Sequence[int]) -> float:
    """WCAG contrast ratio of two colours (1 to 21; body text wants at least 4.5)."""
    light, dark = sorted((luminance(one), luminance(other)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def cell_colors(share: float, diagonal: bool) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """A confusion-matrix cell's (fill, text) colours: blue on the diagonal, red off it, darker as ``share`` (of
    its row) grows; the text black or white, whichever contrasts more (never under 4.5:1 on these fills)."""
    shade = int(255 - 200 * share)
    fill = (shade, shade, 255) if diagonal else (255, shade, shade)
    black, white = (0, 0, 0), (255, 255, 255)
    return fill, max((black, white), key=lambda text: contrast(fill, text))


def confusion_png(matrix: Sequence[Sequence[int]], class_names: Sequence[str], cell: int = 36) -> bytes:
    """The confusion matrix as a PNG: rows true, columns predicted, each row shaded by its share, counts written."""
    from PIL import Image, ImageDraw

    count = len(class_names)
    margin = 12 + 7 * max((len(name) for name in class_names), default=1)
    size = (margin + cell * count + 8, margin + cell * count + 8)
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    for row in range(count):
        total = sum(matrix[row]) or 1
        draw.text((4, margin + row * cell + cell // 3), str(class_names[row])[:24], fill="black")
        for column in range(count):
            fill, text = cell_colors(matrix[row][column] / total, row == column)
            box = (margin + column * cell, margin + row * cell, margin + (column + 1) * cell, margin + (row + 1) * cell)
            draw.rectangle(box, fill=fill, outline=(200, 200, 200))
            draw.text((box[0] + 4, box[1] + cell // 3), str(matrix[row][column]), fill=text)
    for column in range(count):  # the column's class name written upwards, whole (up to 24 characters)
        name = str(class_names[column])[:24]
        label = Image.new("RGB", (7 * len(name) + 6, 12), "white")
        ImageDraw.Draw(label).text((2, 0), name, fill="black")
        label = label.rotate(90, expand=True)
        image.paste(label, (margin + column * cell + cell // 3, max(0, margin - label.height - 4)))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def curve_svg(title: str, series: dict[str, Sequence[float]]) -> str:
    """A small line chart (inline SVG) of per-epoch values, one polyline per series."""
    colors = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728")
    values = [v for points in series.values() for v in points]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    left, top, width, height = 40, 24, CURVE_WIDTH - 50, CURVE_HEIGHT - 50
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{CURVE_WIDTH}" height="{CURVE_HEIGHT}" role="img">',
        f'<text x="{left}" y="16" font-size="13">{html.escape(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#ccc"/>',
        f'<text x="4" y="{top + 10}" font-size="10">{high:.3g}</text>',
        f'<text x="4" y="{top + height}" font-size="10">{low:.3g}</text>',
    ]
    for index, (name, points) in enumerate(series.items()):
        steps = max(len(points) - 1, 1)
        coordinates = " ".join(
            f"{left + width * i / steps:.1f},{top + height * (1 - (v - low) / span):.1f}" for i, v in enumerate(points)
        )
        color = colors[index % len(colors)]
        parts.append(f'<polyline points="{coordinates}" fill="none" stroke="{color}" stroke-width="2"/>')
        parts.append(
            f'<text x="{left + 8 + 110 * index}" y="{top + height + 20}" font-size="11" fill="{color}">'
            f"{html.escape(name)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def render(
    metrics: dict, history: History | None, misclassified: Sequence[tuple[bytes | None, str, str, float, str]]
) -> str:
    """The report's HTML. ``misclassified``: (JPEG bytes, true label, predicted label, its probability, the image's
    source file or "" when its records do not say); for a text, (None, ..., the text)."""
    blessing = metrics.get("blessing", {})
    verdict = "Blessed" if blessing.get("blessed") else "Not blessed"
    reasons = "".join(f"<li>{html.escape(reason)}</li>" for reason in blessing.get("reasons", []))
    few = "; ".join(
        f"{html.escape(split)}: " + ", ".join(f"{html.escape(name)} ({count})" for name, count in names.items())
        for split, names in metrics.get("small_classes", {}).items()
    )
    small = f"<p><b>Classes with few examples</b> (under 5 in a split; their figures say little): {few}</p>" * bool(few)
    curves = ""
    if history:
        per_epoch = history.history
        curves = curve_svg("loss", {k: per_epoch[k] for k in ("loss", "val_loss") if k in per_epoch})
        curves += curve_svg("accuracy", {k: per_epoch[k] for k in ("accuracy", "val_accuracy") if k in per_epoch})
    items = modality_of(metrics.get("training") or {}).items
    split = html.escape(str(metrics.get("split", "test")))
    matrix = data_uri(confusion_png(metrics["confusion_matrix"], metrics["class_names"]), "image/png")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Evaluation: {verdict}</title>
<style>{STYLE}.verdict{{font-size:22px;font-weight:bold;color:{"#2a7d2a" if blessing.get("blessed") else "#b22222"}}}
</style>
</head>
<body>
<h1>Evaluation of {html.escape(str(metrics.get("model_name", "the model")))} on the
{split} split</h1>{SERVED_MARKER}
<table class=facts>{run_facts(metrics, history)}</table>
<p class="verdict">{verdict}</p><ul>{reasons}</ul>{small}
<p>On {metrics["num_examples"]} {split} {items}{baseline_note(metrics)}:</p>
<table>{scores_table(metrics)}</table>
{data_checks_section(metrics.get("data_checks"), metrics.get("prediction_mix"))}
<h2>Training curves</h2>{curves or "<p>No training history.</p>"}
<h2>Confusion matrix</h2><p>Rows: true class; columns: predicted class.</p>
<img src="{matrix}" alt="confusion matrix">
<h2>Per class</h2>
<table>{per_class_table(metrics)}</table>
<h2>Misclassified test {items}</h2>{misclassified_grid(misclassified) or "<p>None.</p>"}
</body></html>
"""


STYLE = """body{font-family:sans-serif;margin:24px;max-width:1100px} table{border-collapse:collapse}
td,th{border:1px solid #ddd;padding:4px 10px;text-align:right} td:first-child{text-align:left}
figure{display:inline-block;margin:6px;text-align:center;font-size:12px;vertical-align:top}
.source{display:inline-block;max-width:160px;word-break:break-all;color:#555;font-size:10px}
.base{color:#555;background:#f6f6f6}
blockquote.text{border-left:4px solid #b22222;margin:8px 0;padding:4px 12px;background:#fafafa;white-space:pre-wrap}
blockquote.text footer{font-size:12px;color:#333}
.facts td{text-align:left} .facts td:first-child{font-weight:bold}
"""


def data_checks_section(checks: dict | None, prediction_mix: dict | None = None) -> str:
    """The data checks (the new data against the data the model in service learned from): a row per check, and
    the prediction mix's (the model in service's answers on this data against its own evaluation's), which
    evaluate checks."""
    if not checks and not prediction_mix:
        return ""
    checks = checks or {"checks": [], "accepted_data_change": False, "baseline_note": ""}
    accepted = checks["accepted_data_change"]

    def verdict(found: dict) -> str:
        shown = "block, accepted" if found["verdict"] == "block" and accepted else found["verdict"]
        color = {"pass": "#2a7d2a", "skipped": "#555"}.get(found["verdict"], "#b22222")
        return f'<span style="color:{color}">{html.escape(shown)}</span>'

    def cell(value) -> str:
        return "" if value is None else html.escape(f"{value:g}" if isinstance(value, float) else str(value))

    rows = "".join(
        f"<tr><td>{html.escape(found['check'])}</td><td>{html.escape(found.get('split', ''))}</td>"
        f"<td>{cell(found['value'])}</td>"
        f"<td>{html.escape(', '.join(f'{k} {v:g}' for k, v in found['thresholds'].items()))}</td>"
        f'<td>{verdict(found)}</td><td style="text-align:left">{html.escape(found["detail"])}</td></tr>'
        for found in [*checks["checks"], *([prediction_mix] if prediction_mix else [])]
    )
    note = f"<p>{html.escape(checks['baseline_note'])}</p>" if checks["baseline_note"] else ""
    head = "<tr><th>check</th><th>split</th><th>value</th><th>thresholds</th><th>verdict</th><th>detail</th></tr>"
    return (
        f"<h2>Data checks</h2><p>This data against the data the model in service learned from.</p>{note}"
        f"<table>{head}{rows}</table>"
    )


def scores_table(metrics: dict) -> str:
    """The rows of accuracy, accuracy on the client files, and top-k accuracy; the baseline's beside them."""
    base = metrics.get("baseline_metrics")
    top_k = metrics.get("top_k_accuracy", {})
    k = top_k.get("k", "k")
    scores = f"<tr><td>accuracy</td><td><b>{metrics['accuracy']:.4f}</b></td>"
    scores += f"<td class=base>{base['accuracy']:.4f}</td></tr>" if base else "</tr>"
    client = metrics.get("client_files") or {}
    if client.get("num_files"):  # the same examples' own files, before the TFRecords' JPEG encoding
        scores += (
            f"<tr><td>accuracy on the {client['num_files']} files as clients send them</td>"
            f"<td>{client['accuracy']:.4f}</td></tr>"
        )
    scores += f"<tr><td>top-{k} accuracy</td><td>{top_k.get('accuracy', 0.0):.4f}</td>"
    scores += f"<td class=base>{base['top_k_accuracy']['accuracy']:.4f}</td></tr>" if base else "</tr>"
    return "<tr><th></th><th>candidate</th>" + ("<th class=base>baseline</th></tr>" if base else "</tr>") + scores


def per_class_table(metrics: dict) -> str:
    """The rows of precision, recall and F1 by class; the baseline's beside them."""
    base = metrics.get("baseline_metrics")
    figures = ("precision", "recall", "f1")

    def per_class_row(name: str, c: dict) -> str:
        cells = "".join(f"<td>{c.get(f, 0.0):.3f}</td>" for f in figures)
        if base:
            b = base["per_class"].get(name, {})
            cells += "".join(f"<td class=base>{b.get(f, 0.0):.3f}</td>" for f in figures)
        return f"<tr><td>{html.escape(name)}</td>{cells}<td>{c['support']}</td></tr>"

    header = "".join(f"<th>{f if f != 'f1' else 'F1'}</th>" for f in figures)
    if base:
        header += "".join(f"<th class=base>baseline {f if f != 'f1' else 'F1'}</th>" for f in figures)
    rows = "".join(per_class_row(name, c) for name, c in metrics["per_class"].items())
    return f"<tr><th>class</th>{header}<th>support</th></tr>{rows}"


def misclassified_grid(misclassified: Sequence[tuple[bytes | None, str, str, float, str]]) -> str:
    """Each misclassified image with its labels and source; each misclassified text as a quote, its first
    ``MAX_TEXT_CHARACTERS`` characters."""
    grid = "".join(
        f'<figure><img src="{data_uri(jpeg, "image/jpeg")}" width="96" height="96" alt="misclassified">'
        f"<figcaption>true <b>{html.escape(truth)}</b><br>predicted {html.escape(predicted)} ({probability:.2f})"
        f"{f'<br><span class=source>{html.escape(source)}</span>' if source else ''}</figcaption></figure>"
        for jpeg, truth, predicted, probability, source in misclassified
        if jpeg is not None
    )
    return grid + "".join(
        f"<blockquote class=text><p>{html.escape(shorten(source))}</p>"
        f"<footer>true <b>{html.escape(truth)}</b>, predicted {html.escape(predicted)} ({probability:.2f})</footer>"
        "</blockquote>"
        for jpeg, truth, predicted, probability, source in misclassified
        if jpeg is None
    )


def shorten(text: str) -> str:
    """A text's first ``MAX_TEXT_CHARACTERS`` characters, an ellipsis when cut."""
    return text if len(text) <= MAX_TEXT_CHARACTERS else text[: MAX_TEXT_CHARACTERS - 1].rstrip() + "…"


def run_facts(metrics: dict, history: History | None) -> str:
    """The rows of the report's opening table: the model, the data, and how, where and how long it trained."""
    from components.models.source import described

    counts = metrics.get("counts", {})
    training = metrics.get("training", {})
    data = ", ".join(f"{counts[split]} {split}" for split in ("train", "validation", "test") if split in counts)
    epochs = history and history.epochs
    if history and history.resumed_after_epoch:
        epochs = f"{epochs} (resumed after epoch {history.resumed_after_epoch})"
    hardware = training.get("accelerator")
    if hardware:
        devices, processes = training.get("replicas") or 1, training.get("processes") or 1
        hardware = f"{hardware}, {devices} device(s), {processes} process(es)"
    seconds = history and history.train_seconds
    shape = modality_of(training).describe(training, len(metrics.get("class_names", [])))
    rows = [
        (
            "model",
            f"{described(metrics.get('model_name', ''), training.get('model'), training.get('hparams'))} "
            f"({metrics.get('model_dir', '')})",
        ),
        ("data", f"{data} {shape} ({metrics.get('examples_dir', '')})"),
        ("pretrained", pretrained_facts(training)),
        ("epochs", epochs),
        ("precision", training.get("precision")),
        ("hardware", hardware),
        ("backend", training.get("backend")),
        ("global batch", training.get("global_batch_size")),
        ("training time", f"{seconds:.1f} s" if history else None),
    ]
    return "".join(
        f"<tr><td>{name}</td><td>{html.escape(str(value))}</td></tr>" for name, value in rows if value not in (None, "")
    )


def pretrained_facts(training: dict) -> str | None:
    """A pretrained backbone's weights and its two phases (None for a model trained from scratch)."""
    if training.get("weights") in (None, "none"):
        return None
    phases = f"{training.get('head_epochs')} epochs of its head, the backbone frozen"
    tuned = training.get("fine_tune")
    if tuned:
        phases += (
            f", then {tuned['epochs']} fine-tuning its top {tuned['blocks']} blocks at learning rate "
            f"{tuned['learning_rate']:g}"
        )
    return f"{training['weights']} weights: {phases}"


def baseline_note(metrics: dict) -> str:
    """Which model the baseline column is, when there is one."""
    if not metrics.get("baseline_metrics"):
        return ""
    return f", beside the baseline {html.escape(str(metrics.get('blessing', {}).get('baseline') or ''))}"
