"""Compiling the DAG to ``pipeline.yaml`` (the KFP v2 IR that Vertex AI Pipelines runs)."""

from __future__ import annotations

import os
import tempfile

from pipeline.images import DEFAULT_IMAGES, Images

DEFAULT_OUTPUT = "pipeline.yaml"


def compile_pipeline(output: str = DEFAULT_OUTPUT, images: Images = DEFAULT_IMAGES) -> str:
    """Compiles the pipeline into ``output`` (written to a temporary name, then renamed); returns the path."""
    from kfp import compiler

    from pipeline.dag import build_pipeline

    directory = os.path.dirname(os.path.abspath(output))
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".pipeline-", suffix=".yaml", dir=directory)
    os.close(handle)
    try:
        compiler.Compiler().compile(build_pipeline(images), temporary)
        os.replace(temporary, output)
    except BaseException:
        os.unlink(temporary)
        raise
    return output
