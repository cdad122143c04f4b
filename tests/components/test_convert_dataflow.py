"""The conversion as it runs on Dataflow: the KFP step hands a remote runner the artifact's gs:// URI (Dataflow's
workers have no /gcs mount), and the job graph holds the listing's file name, not its rows (Dataflow refuses graphs
over about 20 MB). A remote runner is stood in for by Beam's in-process engine under another name, which records the
graph it is given; Cloud Storage is gcp-storage-emulator (the ``gcs`` fixture)."""

from __future__ import annotations

import json
import os
from typing import ClassVar

import pytest
import tensorflow as tf
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from components.cli import UsageError
from components.convert.core import (
    ConvertConfig,
    conversion_graph,
    run,
    split_for_digest,
)
from components.convert.items import encode_image, oriented_size
from components.convert.listing import ImageListing
from components.convert.split_keys import image_key, split_digest
from components.convert.text import TextConvertConfig
from components.decoding import conversion_square
from components.schema import SPLITS, serialize_example
from tests.conftest import BUCKET, COLORS, IN_MEMORY, image_bytes

STAND_IN = f"--runner={__name__}.RemoteStandInRunner"


class RemoteStandInRunner(FnApiRunner):
    """A runner that is not local by name (as DataflowRunner), run in this process; keeps each graph it ran, as
    its workers read it (``readable``)."""

    graphs: ClassVar[list[bytes]] = []
    worker_images: ClassVar[list[str]] = []

    def run_pipeline(self, pipeline, options):
        from apache_beam.options.pipeline_options import WorkerOptions

        RemoteStandInRunner.graphs.append(readable(pipeline.to_runner_api()))
        RemoteStandInRunner.worker_images.append(options.view_as(WorkerOptions).sdk_container_image)
        return super().run_pipeline(pipeline, options)


def readable(graph) -> bytes:
    """A job graph's bytes, each step's pickled function unpacked (Beam compresses them): a path the workers are
    handed is in them."""
    import base64
    import bz2

    from apache_beam.portability.api import beam_runner_api_pb2

    parts = [graph.SerializeToString()]
    for transform in graph.components.transforms.values():
        if transform.spec.urn == "beam:transform:pardo:v1":
            payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload).do_fn.payload
            parts.append(bz2.decompress(base64.b64decode(payload)))
    return b"".join(parts)


def blob_names(gcs, prefix: str) -> set[str]:
    return {blob.name for blob in gcs.client.list_blobs(BUCKET, prefix=prefix)}


@pytest.mark.parametrize("modality", ["image", "text"])
def test_the_kfp_step_on_a_remote_runner_writes_to_the_artifacts_gcs_uri(gcs, modality):
    from kfp import dsl

    from tests.conftest import convert_step as convert

    if modality == "image":
        for name in ("cat", "dog"):
            for n in range(5):
                gcs.blob(f"flow/{name}/{n}.jpg").upload_from_string(image_bytes(COLORS[name], (30 + n, 20), seed=n))
        source = f"gs://{BUCKET}/flow"
    else:
        lines = [
            json.dumps({"text": f"a {label} review number {n}", "label": label})
            for label in ("pos", "neg")
            for n in range(6)
        ]
        gcs.blob("flow-texts/reviews.jsonl").upload_from_string("\n".join(lines).encode())
        source = f"gs://{BUCKET}/flow-texts/reviews.jsonl"
    uri = f"gs://{BUCKET}/root/run-1/convert-{modality}/examples"
    examples = dsl.Dataset(uri=uri)
    assert examples.path.startswith("/gcs/")  # what KFP's launcher mounts in the step's container, and nowhere else
    RemoteStandInRunner.graphs.clear()
    RemoteStandInRunner.worker_images.clear()
    worker = "europe-docker.pkg.dev/p/r/beam-worker:1"  # what the DAG passes: the image of its registry and tag
    count = convert(
        source=source,
        examples=examples,
        image_size=8,
        vocabulary_size=20,
        modality=modality,
        beam_args=[STAND_IN, f"--temp_location=gs://{BUCKET}/tmp"],
        worker_image=worker,
    )
    (graph,) = RemoteStandInRunner.graphs
    assert RemoteStandInRunner.worker_images == [worker]  # the workers run the beam-worker image
    mount_named = b"/gcs/" in graph  # nothing the workers run may name the mount
    assert not mount_named and uri.encode() in graph
    names = blob_names(gcs, uri.removeprefix(f"gs://{BUCKET}/"))
    prefix = uri.removeprefix(f"gs://{BUCKET}/")
    assert f"{prefix}/stats.json" in names and any(n.endswith(".tfrec") for n in names)
    assert count == (10 if modality == "image" else 12) == sum(examples.metadata["counts"].values())
    assert not os.path.exists(f"/gcs/{BUCKET}/root/run-1/convert-{modality}")
    assert not blob_names(gcs, "tmp/"), "the staged listing was left behind"


def test_the_local_engine_still_writes_through_the_artifacts_path(tmp_path):
    from kfp import dsl

    from tests.conftest import convert_step as convert

    for name in ("cat", "dog"):
        os.makedirs(tmp_path / "src" / name)
        for n in range(4):
            (tmp_path / "src" / name / f"{n}.jpg").write_bytes(image_bytes(COLORS[name], (30, 20 + n), seed=n))
    examples = dsl.Dataset(uri=str(tmp_path / "examples"))
    assert convert(source=str(tmp_path / "src"), examples=examples, image_size=8, beam_args=list(IN_MEMORY)) == 8
    assert os.path.isfile(tmp_path / "examples" / "stats.json")


def test_a_remote_runner_without_a_temp_location_is_one_line(tmp_path):
    folder = tmp_path / "src" / "cat"
    folder.mkdir(parents=True)
    for n in range(2):
        (folder / f"{n}.jpg").write_bytes(image_bytes(COLORS["cat"], seed=n))
    (tmp_path / "src" / "dog").mkdir()
    (tmp_path / "src" / "dog" / "0.jpg").write_bytes(image_bytes(COLORS["dog"]))
    config = ConvertConfig(
        source=str(tmp_path / "src"),
        output_dir=str(tmp_path / "out"),
        image_size=8,
        pipeline_args=(STAND_IN, "--sdk_container_image=r/beam-worker:t"),
    )
    with pytest.raises(UsageError, match=r"^--runner RemoteStandInRunner needs --temp_location gs://BUCKET/tmp"):
        run(config)
    assert not os.path.exists(tmp_path / "out" / "stats.json")


def test_a_remote_runner_without_a_worker_image_is_refused_before_anything_runs(tmp_path):
    """Dataflow's workers must import the conversion's code: without --sdk_container_image or --setup_file they
    would fail minutes into the job. The command line refuses it in one line; the DAG's step adds its own registry's
    beam-worker image where none is given, and keeps one that is."""
    from components.convert.staging import with_worker_image

    dataflow = ["--runner=DataflowRunner", "--project=p", "--region=europe-west4", "--temp_location=gs://b/tmp"]
    for config in (ConvertConfig, TextConvertConfig):
        with pytest.raises(
            UsageError,
            match=r"^--runner DataflowRunner needs --sdk_container_image REGISTRY/beam-"
            r"worker:TAG \(make images builds it;",
        ):
            config(source="gs://b/photos", output_dir="gs://b/out", pipeline_args=tuple(dataflow))
    image = "europe-docker.pkg.dev/p/r/beam-worker:1"
    assert with_worker_image(dataflow, image) == [*dataflow, f"--sdk_container_image={image}"]
    own = [*dataflow, "--sdk_container_image=mine/worker:2"]
    assert with_worker_image(own, image) == own and with_worker_image(IN_MEMORY, image) == list(IN_MEMORY)
    ConvertConfig(source="gs://b/photos", output_dir="gs://b/out", pipeline_args=(*dataflow, "--setup_file=setup.py"))


def test_the_job_graph_of_a_million_images_stays_under_one_megabyte(tmp_path):
    """Dataflow refuses a job graph over about 20 MB: the rows are read from the staged file, not embedded."""
    import apache_beam as beam

    classes = tuple(f"class-{n}" for n in range(10))
    items = tuple((f"gs://{BUCKET}/photos/{n % 10}/IMG_{n:07d}.jpg", n % 10, "") for n in range(1_000_000))
    listing = ImageListing(classes, items, total_bytes=3 * 10**11, fingerprint="f" * 64)
    config = ConvertConfig(source=f"gs://{BUCKET}/manifest.csv", output_dir=f"gs://{BUCKET}/out", image_size=192)
    pipeline = beam.Pipeline(options=beam.options.pipeline_options.PipelineOptions([STAND_IN]))
    staged = {"items": f"gs://{BUCKET}/tmp/items.jsonl", "rejected": f"gs://{BUCKET}/tmp/rejected.jsonl"}
    conversion_graph(pipeline, config, listing, staged, {split: 100 for split in SPLITS}, None)
    size = len(pipeline.to_runner_api().SerializeToString())
    assert size < 1_000_000, f"the job graph is {size} bytes"


@pytest.mark.parametrize(
    "args, spread",
    [
        ((STAND_IN,), True),
        (IN_MEMORY, False),
        (("--direct_running_mode=multi_threading", "--direct_num_workers=2"), True),
    ],
)
def test_the_rows_are_spread_over_workers_unless_one_local_worker_runs_them_all(args, spread):
    """A remote runner reads the small listing file as one bundle, on one worker: a Reshuffle spreads its rows. Beam's
    local engine with one worker runs every bundle in this process, on the conversion's own threads: no grouping."""
    import apache_beam as beam

    from components.convert.core import default_pipeline_args

    listing = ImageListing(("a", "b"), (("a/1.jpg", 0, ""), ("b/1.jpg", 1, "")), total_bytes=2, fingerprint="f")
    config = ConvertConfig(source="photos", output_dir="out", image_size=8)
    options = beam.options.pipeline_options.PipelineOptions(default_pipeline_args(args))
    pipeline = beam.Pipeline(runner="FnApiRunner", options=options)
    conversion_graph(
        pipeline, config, listing, {"items": "i.jsonl", "rejected": "r.jsonl"}, dict.fromkeys(SPLITS, 1), None
    )
    labels = [t.unique_name for t in pipeline.to_runner_api().components.transforms.values()]
    assert any(label.endswith("ListImages/Spread") for label in labels) == spread


def test_the_text_job_graph_holds_no_row_of_a_large_table(tmp_path):
    import apache_beam as beam

    from components.convert.text import TextConvertConfig, text_graph
    from components.convert.text_listing import TextListing

    rows = tuple((f"reviews.csv:{n}", n % 2, "", f"review {n} " + "words " * 40) for n in range(200_000))
    listing = TextListing(("neg", "pos"), rows, total_bytes=10**8, fingerprint="f" * 64)
    config = TextConvertConfig(source=f"gs://{BUCKET}/reviews.csv", output_dir=f"gs://{BUCKET}/out")
    pipeline = beam.Pipeline(options=beam.options.pipeline_options.PipelineOptions([STAND_IN]))
    staged = {"items": f"gs://{BUCKET}/tmp/items.jsonl", "rejected": f"gs://{BUCKET}/tmp/rejected.jsonl"}
    text_graph(pipeline, config, listing, staged, {split: 4 for split in SPLITS}, 0.1, 0.1)
    graph = pipeline.to_runner_api().SerializeToString()
    row_inside = b"review 12345 " in graph
    assert not row_inside and len(graph) < 1_000_000, f"the job graph is {len(graph)} bytes"


def test_the_staged_listing_gives_each_image_once_in_the_split_of_its_key(tmp_path):
    """The TFRecords hold exactly the examples a direct computation gives: every listed image read once, byte-identical
    copies kept once (the first path), each in the split its perceptual key hashes to or that its manifest row
    names."""
    sources = {}
    for name in ("cat", "dog", "fish"):
        for n in range(9):
            sources[f"{name}/{n}.png"] = image_bytes(COLORS[name], (24 + n, 18), fmt="PNG", seed=n)
    sources["fish/copy-of-cat-0.png"] = sources["cat/0.png"]  # a copy under another class: dropped, flagged
    for relative, content in sources.items():
        os.makedirs(tmp_path / "src" / os.path.dirname(relative), exist_ok=True)
        (tmp_path / "src" / relative).write_bytes(content)
    rows = [f"{'test' if n == 1 else 'training'},src/{name}/{n}.png,{name}" for name in ("cat", "dog") for n in (1, 2)]
    (tmp_path / "manifest.csv").write_text("\n".join([*rows, "bogus,src/cat/3.png,cat"]) + "\n")
    for source, fractions in ((tmp_path / "src", (0.3, 0.3)), (tmp_path / "manifest.csv", (0.3, 0.3))):
        output = tmp_path / f"out-{source.name}"
        config = ConvertConfig(
            source=str(source),
            output_dir=str(output),
            image_size=8,
            max_bad_fraction=0.5,
            validation_fraction=fractions[0],
            test_fraction=fractions[1],
            pipeline_args=IN_MEMORY,
        )
        stats = run(config)
        classes = stats["class_names"]
        expected = {split: set() for split in SPLITS}
        if source.name == "manifest.csv":
            kept = {
                (f"src/{name}/{n}.png", name, "test" if n == 1 else "train") for name in ("cat", "dog") for n in (1, 2)
            }
        else:
            kept = {(r, r.split("/")[0], None) for r in sources if r != "fish/copy-of-cat-0.png"}
        for relative, name, split in kept:
            content = sources[relative.removeprefix("src/")]
            path = str(tmp_path / "src" / relative.removeprefix("src/"))
            jpeg = encode_image(content, 8, config.jpeg_quality)
            example = serialize_example(
                jpeg, classes.index(name), name, (8, 8), len(classes), source=path, source_size=oriented_size(content)
            )
            key = split_digest(image_key(conversion_square(content, 8)))
            expected[split or split_for_digest(key, *fractions)].add(example)
        for split in SPLITS:
            found = [r.numpy() for r in tf.data.TFRecordDataset(tf.io.gfile.glob(f"{output}/{split}/*.tfrec"))]
            assert len(found) == len(set(found)) and set(found) == expected[split], (source.name, split)
        quarantined = [json.loads(line) for line in (output / "quarantine.jsonl").read_text().splitlines()]
        duplicates = [json.loads(line) for line in (output / "duplicates.jsonl").read_text().splitlines()]
        if source.name == "manifest.csv":
            assert [q["path"] for q in quarantined] == [f"{tmp_path / 'manifest.csv'}:5"] and not duplicates
        else:
            assert not quarantined
            assert duplicates == [
                {
                    "path": str(tmp_path / "src/fish/copy-of-cat-0.png"),
                    "label_conflict": True,
                    "duplicate_of": str(tmp_path / "src/cat/0.png"),
                }
            ]
