"""``run-local --runner docker``: each step in the image the DAG gives it, through kfp.local's DockerRunner, as the
invoking user, with the folders the run needs bound at their own paths."""

from __future__ import annotations

import logging
import os

from pipeline.images import LIGHT_IMAGE, PIPELINE_IMAGE, Images

log = logging.getLogger(__name__)


def check_docker(images: Images, train_image: str) -> None:
    """Before anything runs: the Docker client is installed, a Docker engine answers, and the images the local DAG's
    steps run in are here."""
    from components.cli import UsageError

    try:
        import docker
    except ModuleNotFoundError:
        raise UsageError(
            "--runner docker needs the Docker client, the project's `docker` extra: `uv sync --extra docker` (make "
            "setup has it), or pip install 'tpu-image-pipeline[docker]'"
        ) from None

    try:
        client = docker.from_env()
        client.ping()
    except Exception as err:  # no engine, no socket, no permission on it
        raise UsageError(
            f"--runner docker: no Docker engine answers ({type(err).__name__}): start one, or leave "
            "--runner out to run the steps in this Python"
        ) from None
    for image in (images.uri(PIPELINE_IMAGE), images.uri(LIGHT_IMAGE), images.uri(train_image)):
        if not client.images.list(name=image):
            raise UsageError(
                f"--runner docker: image {image} is not here: build it with `make images` (REGISTRY=... "
                "TAG=... to match --image-registry and --image-tag)"
            )


def docker_runner(shared: list[str], environment: dict[str, str]):
    """kfp.local's DockerRunner (``check_docker`` first). The steps run as the invoking user (so that what they write
    is the user's, and they can write what the user can), with ``shared`` folders (the work dir, the source, ...)
    bound at their own paths and ``environment`` set (kfp.local binds only the pipeline root)."""
    import docker
    from kfp import local

    folders = sorted({folder_of(path) for path in shared if path})
    folders = [f for f in folders if not any(f.startswith(other + os.sep) for other in folders)]  # once, at the top
    mounts = [docker.types.Mount(target=path, source=path, type="bind") for path in folders]
    return local.DockerRunner(user=f"{os.getuid()}:{os.getgid()}", mounts=mounts, environment=environment)


def folder_of(path: str) -> str:
    """The folder to bind for a path a step reads: itself, or the folder of a file (a manifest, an .npz) or of a glob's
    first wildcard."""
    import glob

    path = os.path.abspath(path)
    while glob.has_magic(path) or (os.path.exists(path) and not os.path.isdir(path)):
        path = os.path.dirname(path)
    return path
