"""Retraining on new data: the fingerprint step makes a rerun over unchanged data a cache hit under kfp.local, and
new files a new conversion. The real components, KFP's local cache, no fakes.

No `from __future__ import annotations` here: KFP reads the pipeline's annotations at definition time."""

import json
import os

from kfp import dsl, local

from components.convert.component import make_component, make_fingerprint_component
from pipeline.images import DEFAULT_IMAGES, PIPELINE_IMAGE
from tests.conftest import COLORS, IN_MEMORY, image_bytes, write_image_folder


def test_unchanged_data_is_a_cache_hit_and_new_files_convert_again(tmp_path):
    image = DEFAULT_IMAGES.uri(PIPELINE_IMAGE)
    fingerprint_op, convert_op = make_fingerprint_component(image), make_component(image)

    @dsl.pipeline(name="fingerprint-then-convert")
    def fingerprint_then_convert(source: str) -> dsl.Dataset:
        fingerprinted = fingerprint_op(source=source)
        fingerprinted.set_caching_options(enable_caching=False)
        converted = convert_op(
            source=source, image_size=8, source_fingerprint=fingerprinted.output, beam_args=list(IN_MEMORY)
        )
        return converted.outputs["examples"]

    source = write_image_folder(tmp_path / "images", per_class=3)
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(tmp_path / "root"),
        workspace_root=str(tmp_path / "workspace"),
        enable_caching=True,
        cache_root=str(tmp_path / "cache"),
    )
    first = fingerprint_then_convert(source=source).output.uri
    second = fingerprint_then_convert(source=source).output.uri
    assert second == first, "a rerun over unchanged data should reuse the cached conversion"

    (tmp_path / "images" / "dog" / "new.png").write_bytes(image_bytes(COLORS["dog"], (33, 21), "PNG", seed=99))
    third = fingerprint_then_convert(source=source).output.uri
    assert third != first, "a new file should make a new conversion"
    with open(os.path.join(first, "stats.json")) as old, open(os.path.join(third, "stats.json")) as new:
        before, after = json.load(old), json.load(new)
    assert after["num_examples"] == before["num_examples"] + 1
    assert after["fingerprint"] != before["fingerprint"]
