"""The train step as a lightweight KFP component: a thin wrapper over ``components.train.core``."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output


def train(
    examples: Input[Dataset],
    model: Output[Model],
    model_name: str,
    hparams: list,
    epochs: int,
    weights: str,
    fine_tune_epochs: int,
    fine_tune_blocks: int,
    fine_tune_learning_rate: float,
    per_replica_batch_size: int,
    learning_rate: float,
    lr_schedule: str,
    precision: str,
    backend: str,
    hosts: int,
    jit_compile: bool,
    steps_per_execution: int,
    augment: bool,
    seed: int,
    tune_trials: int,
) -> float:
    """Trains the model on the examples; returns the final validation accuracy (training accuracy if none). ImageNet
    weights are downloaded once into the pipeline root's bucket (``keras-weights/``), where later runs find them.
    ``tune_trials`` above 0: a local hyperparameter search of that many trials, the best one's model kept (on Vertex
    AI the DAG runs a tuning job instead, and this step with 0). On Cloud Storage the backup sits under the bucket's
    ``checkpoints/`` by a key of the inputs, so that a retried task, or the same run submitted again, resumes after
    its last backed-up epoch."""
    given = dict(locals())  # (the parameters, read before anything else is named here)
    import dataclasses

    from components.params import TRAIN
    from components.step_server import start_step
    from components.train.config import TrainConfig, lasting_checkpoint_dir
    from components.train.core import run
    from components.train.placement import trains_on_tensorflow
    from components.train.transfer import weights_cache_for
    from components.train.tuning import search

    start_step(lambda: trains_on_tensorflow(backend, precision, hosts, examples.path))
    config = TrainConfig(
        **{**{name: given[name] for name in TRAIN}, "hparams": tuple(hparams), "hosts": hosts},
        examples_dir=examples.path,
        model_dir=model.path,
        weights_cache=weights_cache_for(model.uri),
    )
    # on Cloud Storage, a backup a retried task or a resubmitted run with the same inputs resumes from
    config = dataclasses.replace(config, checkpoint_dir=lasting_checkpoint_dir(config, model.uri))
    result = search(config, tune_trials) if tune_trials else run(config)
    model.metadata.update(
        {
            "framework": "keras",
            "backend": result["backend"],
            "model_name": result["model_name"],
            "model_sha256": result["model"]["sha256"],
            "hparams": result["hparams"],
            "strategy": result["strategy"],
            "replicas": result["replicas"],
            "processes": result["processes"],
            "precision": result["precision"],
            "global_batch_size": result["global_batch_size"],
        }
    )
    final = result["final"]
    return float(final.get("val_accuracy", final["accuracy"]))


def make_component(base_image: str):
    """The KFP component, running in ``base_image`` (which has this project and kfp installed)."""
    return dsl.component(train, base_image=base_image, install_kfp_package=False)
