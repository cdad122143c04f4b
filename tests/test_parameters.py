"""Every pipeline parameter is declared once (``components/params.py``): its default literal appears nowhere else in
the code, not in a step config, a KFP wrapper, the DAG's signature or a command line; the wrappers take none."""

from __future__ import annotations

import ast
import os

import pytest

from components.params import CONVERT, DEPLOY, EVALUATE, TEXT, TRAIN
from tests.conftest import REPO_ROOT

DECLARED = {**CONVERT, **TEXT, **TRAIN, **DEPLOY, **EVALUATE}
ALIASES = {"baseline_model": "baseline"}  # the DAG's name for evaluate's baseline
# names shared with a parameter that mean something else there
OTHER_MEANINGS = {
    ("components/artifacts/examples.py", "augment"): "the reader's switch: off for evaluation, whatever training's",
    ("pipeline/deployment.py", "max_replicas"): "a batch prediction job's replicas, not an endpoint's",
}


def literal(node: ast.expr):
    """The value of a literal default (a number, a string, a boolean, an empty list or tuple); None otherwise."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)) and not node.elts:
        return ()
    return None


def defaults_in(tree: ast.AST) -> list[tuple[str, ast.expr]]:
    """(name, default) of every function parameter and annotated field with a default."""
    pairs = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            positional = node.args.posonlyargs + node.args.args
            with_default = positional[len(positional) - len(node.args.defaults) :]
            pairs += [(arg.arg, default) for arg, default in zip(with_default, node.args.defaults, strict=True)]
            pairs += [
                (arg.arg, default)
                for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)
                if default is not None
            ]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            pairs.append((node.target.id, node.value))
    return pairs


def second_declarations(root: str) -> list[str]:
    """``file:line name = literal`` for each parameter or field named as a declared parameter whose default is that
    parameter's declared default, written as a literal (outside components/params.py)."""
    found = []
    for top in ("components", "pipeline"):
        for folder, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(n for n in names if n.endswith(".py")):
                path = os.path.join(folder, name)
                where = os.path.relpath(path, root).replace(os.sep, "/")
                if where == "components/params.py":
                    continue
                with open(path, encoding="utf-8") as handle:
                    tree = ast.parse(handle.read())
                for key, default in defaults_in(tree):
                    param = DECLARED.get(ALIASES.get(key, key))
                    value = literal(default)
                    if param is None or value is None or (where, key) in OTHER_MEANINGS:
                        continue
                    declared = tuple(param.default) if isinstance(param.default, (list, tuple)) else param.default
                    if value == declared and type(value) is type(declared):
                        found.append(f"{where}:{default.lineno} {key} = {value!r}")
    return found


def test_each_parameter_default_is_declared_once():
    assert not second_declarations(REPO_ROOT), "take these from components.params:\n" + "\n".join(
        second_declarations(REPO_ROOT)
    )


def test_the_kfp_wrappers_take_no_defaults_of_their_own():
    """The DAG passes every input of a step: a wrapper's default could only disagree with the declaration."""
    import inspect

    from components.convert import component as convert
    from components.deploy import component as deploy
    from components.evaluate import component as evaluate
    from components.register import component as register
    from components.train import component as train

    placeholders = {"project", "location"}  # Vertex AI fills these in, as in GCPC's own steps
    functions = [
        convert.convert,
        convert.fingerprint,
        train.train,
        evaluate.evaluate,
        deploy.deploy,
        register.find_baseline,
        register.register,
        register.find_baseline_in_folder,
        register.register_in_folder,
    ]
    with_defaults = [
        f"{function.__name__}({name})"
        for function in functions
        for name, p in inspect.signature(function).parameters.items()
        if p.default is not inspect.Parameter.empty and name not in placeholders
    ]
    assert not with_defaults


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("def train(epochs: int = 0):\n    pass\n", True),
        ("class Config:\n    learning_rate: float = 0.0\n", True),
        ("def dag(baseline_model: str = ''):\n    pass\n", True),
        ("def f(classes=()):\n    pass\n", True),
        ("def f(epochs: int = 21, seed: int = SEED):\n    pass\n", False),  # another value; a name
    ],
)
def test_the_scan_catches_a_second_literal(tmp_path, source, caught):
    (tmp_path / "components").mkdir()
    (tmp_path / "components" / "probe.py").write_text(source)
    assert bool(second_declarations(str(tmp_path))) is caught


# where a declared parameter goes by another name, or is not taken, and why
NOT_TAKEN = {
    ("the DAG", "baseline"): "the DAG's baseline_model (ALIASES)",
    **{
        ("the DAG", name): "the DAG's deploy step takes the declared default; pipeline deploy takes another"
        for name in ("machine_type", "min_replicas", "max_replicas")
    },
    ("ConvertConfig", "modality"): "the conversion's dispatcher picks the config by it (components.convert.dispatch)",
    ("CheckDataConfig", "data_thresholds"): "parsed into CheckDataConfig.thresholds (NAME=VALUE items)",
}


def test_the_dag_the_kfp_wrappers_and_the_configs_take_each_parameter_by_its_declared_name():
    """The parameter names are written in components/params.py and nowhere else decides them: the DAG's signature
    (the compiled pipeline.yaml's inputs), each step's KFP wrapper and each step's config take every one of their
    step's parameters by that name (the exceptions, each with its reason, in NOT_TAKEN)."""
    import dataclasses
    import inspect

    import yaml

    from components.check_data.component import check_data
    from components.check_data.core import CheckDataConfig
    from components.convert.component import convert
    from components.convert.core import ConvertConfig
    from components.convert.text import TextConvertConfig
    from components.deploy.component import deploy
    from components.evaluate.component import evaluate
    from components.evaluate.core import EvaluateConfig
    from components.params import CHECK_DATA, TUNE
    from components.train.component import train
    from components.train.config import TrainConfig

    with open(os.path.join(REPO_ROOT, "pipeline.yaml"), encoding="utf-8") as handle:
        dag = set(yaml.safe_load(handle)["root"]["inputDefinitions"]["parameters"])

    def fields(config) -> set[str]:
        return {field.name for field in dataclasses.fields(config)}

    takers = {
        "the DAG": (dag, {**DECLARED, **TUNE, **CHECK_DATA}),
        "train": (set(inspect.signature(train).parameters), TRAIN),
        "convert": (set(inspect.signature(convert).parameters), {**CONVERT, **TEXT}),
        "evaluate": (set(inspect.signature(evaluate).parameters), EVALUATE),
        "check_data": (set(inspect.signature(check_data).parameters), CHECK_DATA),
        "deploy": (set(inspect.signature(deploy).parameters), DEPLOY),
        "TrainConfig": (fields(TrainConfig), TRAIN),
        "ConvertConfig": (fields(ConvertConfig), CONVERT),
        "TextConvertConfig": (fields(TextConvertConfig), TEXT),
        "EvaluateConfig": (fields(EvaluateConfig), EVALUATE),
        "CheckDataConfig": (fields(CheckDataConfig), CHECK_DATA),
    }
    missing = [
        f"{taker} does not take {name}"
        for taker, (taken, declared) in takers.items()
        for name in sorted(declared)
        if name not in taken and (taker, name) not in NOT_TAKEN
    ]
    assert not missing, "take them by the name components/params.py declares:\n" + "\n".join(missing)
    assert all(name not in takers[taker][0] for taker, name in NOT_TAKEN), "an exception no longer needed"
