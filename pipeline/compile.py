"""Compiling the DAG to ``pipeline.yaml`` (the KFP v2 IR that Vertex AI Pipelines runs)."""

from __future__ import annotations

import os
import tempfile

from pipeline.accelerators import DEFAULT_ACCELERATOR, Scheduling
from pipeline.images import DEFAULT_IMAGES, Images

DEFAULT_OUTPUT = "pipeline.yaml"


def compile_pipeline(
    output: str = DEFAULT_OUTPUT,
    images: Images = DEFAULT_IMAGES,
    accelerator: str = DEFAULT_ACCELERATOR,
    scheduling: Scheduling | None = None,
    notify_emails: tuple[str, ...] = (),
) -> str:
    """Compiles the pipeline for ``accelerator``, its machines obtained as ``scheduling`` says, each run's outcome
    mailed to ``notify_emails`` (none: no mail step), into ``output`` (written to a temporary name, then renamed)."""
    from pipeline.accelerators import machine_spec

    machine_spec(accelerator)  # a one-line error before anything is written
    scheduling = scheduling or Scheduling()
    scheduling.check_target(accelerator)
    from kfp import compiler

    from components.storage import check_writable
    from pipeline.dag import build_pipeline, check_notify_emails

    check_notify_emails(notify_emails)
    directory = os.path.dirname(os.path.abspath(output))
    check_writable(directory, "the folder of --output")
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".pipeline-", suffix=".yaml", dir=directory)
    os.close(handle)
    try:
        pipeline = build_pipeline(images, accelerator, scheduling=scheduling, notify_emails=notify_emails)
        compiler.Compiler().compile(pipeline, temporary)
        os.replace(temporary, output)
    except BaseException:
        os.unlink(temporary)
        raise
    return output
