"""A local run's settings (``LocalRunConfig``) and the demo's."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pipeline.accelerators import DEFAULT_ACCELERATOR
from pipeline.images import DEFAULT_IMAGES, Images

DEFAULT_WORK_DIR = os.path.join("runs", "local")


SUMMARY_FILE = "summary.json"


DEMO_EPOCHS = 15


MODEL_CHECK_LOG = "model-check.log"  # the up-front check of a model of one's own: its traceback, where it raised


@dataclass(frozen=True)
class LocalRunConfig:
    """A local run of the DAG.

    Args:
        work_dir: holds ``data/`` (the demo images), ``artifacts/`` (every step's outputs) and ``summary.json``.
        source: an image folder, a CSV manifest, a NumPy .npz or a TFRecord glob; empty runs the demo
            (scikit-learn's digits written as JPEGs under ``work_dir``).
        image_size: None: auto, the source images' typical size, at most 192 (the demo digits: 16, or the least
            a built-in model takes).
        epochs: None picks 15 for the demo and the pipeline's default otherwise; 0: auto.
        demo_per_class: write at most this many demo images per class (None: all 1,797); for quick checks.
        beam_args: Beam pipeline options for the convert step.
        parameters: any other pipeline parameters (``model_name``, ``per_replica_batch_size``, ...).
        cache: as Vertex AI's ``enable_caching=True``: every step's cache on (``<work_dir>/cache``). The fingerprint
            step and the baseline lookup still run each time (they take the run's id), so new or changed images
            convert and train again, and unchanged ones are cache hits down to the export.
        registry: a local folder registry: each blessed export becomes its next numbered version and the default
            one, and the default version is the next run's baseline; "": no registry.
        verbose: everything the orchestrator and the steps print goes to the terminal too, not only to
            ``<work_dir>/run.log`` (which always has it).
        resume: continue the run interrupted in ``work_dir`` (Ctrl-C, SIGTERM) when it had the same parameters and
            data: the same run id, its finished steps reused, training from its last backup
            (``pipeline.local.resume``); False starts over.
        runner: ``subprocess`` (kfp.local's SubprocessRunner: the steps in this Python) or ``docker``
            (DockerRunner: each step in the image the DAG gives it, ``images``, as the invoking user).
        images: where the step images are, for ``docker`` (``make images`` builds them under the defaults).
        accelerator: for ``docker``, the compile target whose training image the train step runs in (as a plain
            container here; on Vertex AI, a custom job on that machine).
        screenshot: once the run is done, draw the evaluate step's report with a headless browser into
            ``report.png`` beside it, in the step's artifact (the step images carry no browser: this runs here).
    """

    work_dir: str = DEFAULT_WORK_DIR
    source: str = ""
    image_size: int | None = None
    epochs: int | None = None
    demo_per_class: int | None = None
    beam_args: tuple[str, ...] = ()
    parameters: dict = field(default_factory=dict)
    cache: bool = False
    registry: str = ""
    verbose: bool = False
    resume: bool = True
    runner: str = "subprocess"
    images: Images = DEFAULT_IMAGES
    accelerator: str = DEFAULT_ACCELERATOR
    screenshot: bool = False
