"""Choosing the Keras backend of a process, which has to happen before Keras is first imported."""

from __future__ import annotations

import os
import sys

from components.cli import UsageError

# JAX compiles every program it runs, even each weight's random initializer: a model of twenty layers is some twenty
# compilations (half a second each on a CPU) before its first step. Kept on disk, the next process that builds the
# same shapes loads them instead: run-local's model check, each iteration on a model, each step on one host.
JAX_CACHE_ENV = {
    "JAX_COMPILATION_CACHE_DIR": None,  # set below: the user's cache folder
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",  # JAX's default (1 s) skips the initializers
}


def jax_cache_dir(env) -> str:
    """Where JAX keeps its compiled programs: ``JAX_COMPILATION_CACHE_DIR`` when set, else the user's cache folder
    (``$XDG_CACHE_HOME``, else ``~/.cache``) under ``tpu-pipeline/jax``."""
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return env.get("JAX_COMPILATION_CACHE_DIR") or os.path.join(base, "tpu-pipeline", "jax")


def use_jax_cache(env) -> None:
    """JAX's persistent compilation cache for this process (and the ones it starts with ``env``), unless the user set
    its variables (``JAX_COMPILATION_CACHE_DIR=``, empty, turns it off) or the folder cannot be made."""
    if env.get("JAX_COMPILATION_CACHE_DIR") == "":
        return
    folder = jax_cache_dir(env)
    if "JAX_COMPILATION_CACHE_DIR" not in env:
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:  # a home folder this user cannot write (a container's): compile as JAX does by default
            return
    settings = {**JAX_CACHE_ENV, "JAX_COMPILATION_CACHE_DIR": folder}
    chosen = {name: env.setdefault(name, value) for name, value in settings.items()}
    jax = sys.modules.get("jax")
    if jax is not None:  # imported already: its flags read the environment then
        jax.config.update("jax_compilation_cache_dir", chosen["JAX_COMPILATION_CACHE_DIR"])
        jax.config.update(
            "jax_persistent_cache_min_compile_time_secs", float(chosen["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"])
        )


def activate_backend(backend: str, env: dict | None = None) -> None:
    """Makes ``backend`` (``jax`` or ``tensorflow``) the Keras backend of this process, JAX with its compilation
    cache. A process that already imported Keras keeps its backend, and a different one is a one-line error."""
    env = os.environ if env is None else env
    if backend == "jax":
        use_jax_cache(env)
    keras = sys.modules.get("keras")
    if keras is None:
        env["KERAS_BACKEND"] = backend
        return
    loaded = keras.backend.backend()
    if loaded != backend:
        from components.step_server import restart_cold

        restart_cold()  # a step run-local's step server started, with its Keras: the step again, in a fresh Python
        raise UsageError(
            f"--backend {backend}: Keras was already imported with the {loaded} backend in this process; start a "
            "new one (the steps' entry points set KERAS_BACKEND themselves)"
        )
