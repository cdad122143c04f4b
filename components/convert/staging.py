"""Where a conversion's Beam pipeline runs and how its listing reaches the workers.

The driver lists the source (every check on the user's input happens there), then stages the listing as a JSON-lines
file that the pipeline reads with ``ReadFromText``: the job graph holds the file's name, not its rows. Dataflow refuses
a job graph over about 20 MB (apache/beam#14122), which ``beam.Create`` of a few hundred thousand paths would pass.
On Dataflow the file goes under ``--temp_location`` (which Dataflow requires anyway, on Cloud Storage); on the local
engine, under the machine's temporary folder. It is removed when the conversion ends, whatever the outcome.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, StandardOptions

from components.cli import UsageError

log = logging.getLogger(__name__)

# Beam's in-process engine, named rather than DirectRunner (see ``default_pipeline_args``)
LOCAL_RUNNER = "FnApiRunner"
# runners whose workers are this process or its children, which see this machine's files (and KFP's /gcs mount)
LOCAL_RUNNERS = ("DirectRunner", "FnApiRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner", "PrismRunner")
LISTING_FOLDER = "tpu-pipeline-listings"
# how often the local engine samples a bundle's state (Beam's default: 200 ms, see ``sample_often``)
LOCAL_SAMPLING_PERIOD_MS = 20


def runner_name(pipeline_args: Sequence[str]) -> str | None:
    """The runner ``pipeline_args`` name (its class name, without a module path), or None when they name none."""
    runner = PipelineOptions(list(pipeline_args)).view_as(StandardOptions).runner
    return None if runner is None else runner.rsplit(".", 1)[-1]


def runs_locally(pipeline_args: Sequence[str]) -> bool:
    """Whether the pipeline runs on this machine (the default local engine, or a direct runner named): its workers
    then see local paths, KFP's ``/gcs`` mount included; Dataflow's workers see only Cloud Storage."""
    return runner_name(pipeline_args) in (None, *LOCAL_RUNNERS)


def check_worker_code(pipeline_args: Sequence[str]) -> None:
    """A remote runner's workers must be able to import the conversion's code: a one-line error, before anything
    runs, for one given neither ``--sdk_container_image`` (our ``beam-worker`` image, which has it) nor
    ``--setup_file`` (which stages it): without them its workers fail minutes into the job."""
    from apache_beam.options.pipeline_options import SetupOptions, WorkerOptions

    # (no runner named: the local engine; and no PipelineOptions made, which sets logging up with Beam's defaults)
    if not any(str(arg).startswith("--runner") for arg in pipeline_args) or runs_locally(pipeline_args):
        return
    options = PipelineOptions(list(pipeline_args))
    if options.view_as(WorkerOptions).sdk_container_image or options.view_as(SetupOptions).setup_file:
        return
    raise UsageError(
        f"--runner {runner_name(pipeline_args)} needs --sdk_container_image REGISTRY/beam-worker:TAG (make images "
        "builds it; the DAG passes the beam-worker image of its own registry and tag) or --setup_file: its workers "
        "could not import the conversion's code"
    )


def with_worker_image(pipeline_args: Sequence[str], image: str) -> list[str]:
    """The Beam options with ``--sdk_container_image`` set to ``image`` where they name a remote runner and neither
    a worker image nor a setup file (the DAG's default: the beam-worker image of the registry and tag it was compiled
    for)."""
    from apache_beam.options.pipeline_options import SetupOptions, WorkerOptions

    args = list(pipeline_args)
    if runs_locally(args) or not image:
        return args
    options = PipelineOptions(args)
    if options.view_as(WorkerOptions).sdk_container_image or options.view_as(SetupOptions).setup_file:
        return args
    return [*args, f"--sdk_container_image={image}"]


def default_pipeline_args(pipeline_args: Sequence[str]) -> list[str]:
    """Beam options as given, plus the local defaults unless set: the DirectRunner's in-process engine (Beam's
    ``FnApiRunner``) in one process, whose conversion threads use every core (``ConvertConfig.threads``).

    Named rather than ``DirectRunner`` because Beam 2.77's ``DirectRunner`` first tries to download and start the
    Prism runner from GitHub: a local run must not depend on the network, nor change engine when it is reachable.
    """
    args = list(pipeline_args)
    runner = runner_name(args)
    if runner is None:
        runner = LOCAL_RUNNER
        args.append(f"--runner={runner}")
    if runner in ("DirectRunner", LOCAL_RUNNER):
        if not any(a.startswith("--direct_running_mode") for a in args):
            args.append("--direct_running_mode=in_memory")
        if not any(a.startswith("--direct_num_workers") for a in args):
            args.append("--direct_num_workers=1")
    return args


def listing_folder(pipeline_args: Sequence[str]) -> str:
    """Where the listing is staged: ``--temp_location`` when given, else this machine's temporary folder for a local
    runner. A remote runner without ``--temp_location`` is a one-line error: its workers could not read a local file."""
    temp_location = PipelineOptions(list(pipeline_args)).view_as(GoogleCloudOptions).temp_location
    if temp_location:
        return f"{temp_location.rstrip('/')}/{LISTING_FOLDER}"
    if runs_locally(pipeline_args):
        return f"{tempfile.gettempdir()}/{LISTING_FOLDER}"
    raise UsageError(
        f"--runner {runner_name(pipeline_args)} needs --temp_location gs://BUCKET/tmp among the Beam options: the "
        "listing of the source is staged there for its workers"
    )


@contextlib.contextmanager
def staged_rows(groups: dict[str, Iterable[Sequence | dict]], pipeline_args: Sequence[str]) -> Iterator[dict]:
    """Writes each group of rows (tuples or dicts, JSON-serialisable) to a JSON-lines file of its own under
    ``listing_folder`` and yields {group: path}; the files are removed on the way out."""
    folder = f"{listing_folder(pipeline_args)}/{uuid.uuid4().hex}"
    paths = {name: f"{folder}/{name}.jsonl" for name in groups}
    try:
        for name, rows in groups.items():
            with FileSystems.create(paths[name]) as handle:
                for row in rows:
                    handle.write(json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n")
        yield paths
    finally:
        written = [path for path in paths.values() if FileSystems.exists(path)]
        with contextlib.suppress(Exception):  # a listing left in a temporary folder harms nothing
            FileSystems.delete(written)
            if "://" not in folder:
                os.rmdir(folder)


def _row(line: str):
    value = json.loads(line)
    return tuple(value) if isinstance(value, list) else value


def one_local_worker(options: PipelineOptions) -> bool:
    """Whether the pipeline runs on Beam's in-process engine with one worker (``default_pipeline_args``' default):
    its bundles run one after another in this process, where the conversion's own threads use every core."""
    from apache_beam.options.pipeline_options import DirectOptions

    runner = options.view_as(StandardOptions).runner
    direct = options.view_as(DirectOptions)
    return (
        runner in ("DirectRunner", LOCAL_RUNNER)
        and direct.direct_running_mode == "in_memory"
        and direct.direct_num_workers == 1
    )


def sample_often(options: PipelineOptions) -> None:
    """On Beam's in-process engine with one worker (``one_local_worker``): its state sampler samples every
    ``LOCAL_SAMPLING_PERIOD_MS`` rather than every 200 ms. Beam ends each bundle by joining the sampler's thread, which
    sleeps a whole period between samples once a bundle has run a second (its period grows from 2 ms to 200 ms): the
    end of a long bundle waited 100 ms on average, for nothing (``bench/convert.py``: 0.1 s of 2.1 s). The sampler is
    a thread of C that wakes, reads a counter and sleeps. For this process's later pipelines too; nothing where the
    sampler's signature is not the one this was written for (the bench shows the difference)."""
    from apache_beam.runners.worker import statesampler

    init = statesampler.StateSampler.__init__
    if one_local_worker(options) and init.__defaults__ in (
        (statesampler.DEFAULT_SAMPLING_PERIOD_MS,),
        (LOCAL_SAMPLING_PERIOD_MS,),
    ):
        init.__defaults__ = (LOCAL_SAMPLING_PERIOD_MS,)


@beam.ptransform_fn
def ReadRows(pbegin, path: str, spread: bool = False):  # noqa: N802 (a PTransform's name)
    """The rows ``staged_rows`` wrote to ``path``, as tuples (or dicts), read in parallel by the workers.
    ``spread``: then spread over the workers (a ``Reshuffle``: a small file is read as one bundle, on one worker);
    not worth its grouping where one local worker runs every bundle (``one_local_worker``)."""
    # validate=False: the file is written before the pipeline runs, not before its graph is built
    rows = pbegin | "Lines" >> beam.io.ReadFromText(path, validate=False) | "Parse" >> beam.Map(_row)
    return rows | "Spread" >> beam.Reshuffle() if spread else rows
