"""The data flows convert -> check data -> train -> evaluate -> export -> register -> deploy, and the code the same
way: a step reads what an earlier step wrote through the shared modules below the steps (``components.artifacts``,
``components.schema``, ``components.storage``, ...), never by importing another step's code.

Over the whole tree, the arrows point down: the command line and the DAG (``pipeline``) -> the steps
(``components``) -> what they share; nothing in ``components`` imports ``pipeline``, and no modules import each
other in a circle, whether at the top of a file or inside a function."""

from __future__ import annotations

import ast
import os

from tests.conftest import REPO_ROOT

COMPONENTS = os.path.join(REPO_ROOT, "components")
STEPS = ("convert", "check_data", "train", "evaluate", "export", "register", "deploy")


def imported_modules(path: str, root: str = REPO_ROOT, packages: tuple[str, ...] = ("components",)) -> set[str]:
    """The modules (and packages) of ``packages`` that the file at ``path`` (under ``root``) imports, anywhere in
    it, with relative imports made absolute."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), filename=path)
    package = os.path.relpath(os.path.dirname(path), root).replace(os.sep, ".")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from components import train`
    return {name for name in found if name.split(".")[0] in packages}


def owner(module: str) -> str | None:
    """The step a module belongs to (``components.train.core`` -> ``train``), None for the shared modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STEPS else None


def python_files(top: str = COMPONENTS) -> list[str]:
    return [os.path.join(folder, name) for folder, _, names in os.walk(top) for name in names if name.endswith(".py")]


def module_of(path: str, root: str = REPO_ROOT) -> str:
    """``components/train/core.py`` -> ``components.train.core``; a package's ``__init__.py`` -> the package."""
    module = os.path.relpath(path, root)[: -len(".py")].replace(os.sep, ".")
    return module.removesuffix(".__init__")


def import_graph(root: str = REPO_ROOT, packages: tuple[str, ...] = ("components", "pipeline")) -> dict:
    """Each module of ``packages`` under ``root`` -> the modules of the tree it imports (an imported name that is
    not a module, ``from components.cli import UsageError``, counts as its module)."""
    files = {module_of(path, root): path for top in packages for path in python_files(os.path.join(root, top))}
    graph = {}
    for module, path in files.items():
        targets = set()
        for name in imported_modules(path, root, packages):
            while name not in files and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in files and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def circles(graph: dict) -> list[list[str]]:
    """The groups of modules that import each other, directly or round a loop (strongly connected components of
    more than one module)."""
    order, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in order:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], order[target])
        if low[module] == order[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return found


def test_no_step_imports_another_step_and_no_shared_module_imports_a_step():
    files = python_files()
    assert len(files) > 20 and any(path.endswith(os.path.join("train", "core.py")) for path in files)
    crossings = []
    for path in files:
        module = os.path.relpath(path, REPO_ROOT)[: -len(".py")].replace(os.sep, ".")
        for imported in imported_modules(path):
            step = owner(imported)
            if step is not None and step != owner(module):
                crossings.append(f"{module} imports {imported}")
    assert not crossings, "move what they share below the steps (components/artifacts):\n" + "\n".join(crossings)


def test_the_pipeline_takes_from_a_step_only_its_component_or_its_config():
    """A step's other modules are its own to change: the DAG, run-local and the command line reach a step through
    its KFP component (``component``, ``tuning_component``) or its parameters (``config``), and what a command shares
    with a step lives below the steps (``components.vertex_resources`` for ``pipeline register`` and ``deploy``)."""
    graph = import_graph()
    assert "components.train.component" in graph["pipeline.dag"]  # (the graph sees the pipeline's imports)
    reached = [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        if module.startswith("pipeline")
        for target in sorted(targets)
        if owner(target) and target.rsplit(".", 1)[-1] not in ("component", "tuning_component", "config")
    ]
    assert not reached, "import the step's component or config, or move what both use below the steps:\n" + "\n".join(
        reached
    )


def test_the_import_reader_sees_every_form_of_import(tmp_path):
    """The check above can fail: each way of writing an import of another step is seen."""
    folder = tmp_path / "components" / "evaluate"
    folder.mkdir(parents=True)
    source = folder / "probe.py"
    source.write_text(
        "import components.train.core\n"
        "from components.export import text\n"
        "from components import register\n"
        "def late():\n"
        "    from ..deploy.core import deploy\n"
    )
    owners = {owner(name) for name in imported_modules(str(source), root=str(tmp_path))}
    assert owners >= {"train", "export", "register", "deploy"}


def test_nothing_in_components_imports_pipeline_and_no_modules_import_each_other_in_a_circle():
    graph = import_graph()
    assert "pipeline.__main__" in graph and "components.register.vertex" in graph
    assert "components.vertex_client" in graph["pipeline.vertex.jobs"]  # (the graph sees imports)
    upward = [
        f"{module} imports {target}"
        for module, targets in graph.items()
        if module.startswith("components")
        for target in targets
        if target.startswith("pipeline")
    ]
    assert not upward, "move what both use into components:\n" + "\n".join(upward)
    assert not circles(graph), "modules that import each other: " + "; ".join(" <-> ".join(c) for c in circles(graph))


def test_the_circle_finder_sees_a_loop_and_an_import_back_up(tmp_path):
    """The check above can fail: a loop of three modules, one through an import inside a function, and an import
    of pipeline from a step."""
    (tmp_path / "components" / "export").mkdir(parents=True)
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "components" / "export" / "image.py").write_text("from components.export.common import x\n")
    (tmp_path / "components" / "export" / "common.py").write_text("from . import text\n")
    (tmp_path / "components" / "export" / "text.py").write_text(
        "def late():\n    from components.export.image import y\n    from pipeline.local import z\n"
    )
    (tmp_path / "pipeline" / "local.py").write_text("import components.export.text\n")
    graph = import_graph(str(tmp_path))
    assert graph["components.export.text"] == {"components.export.image", "pipeline.local"}
    assert circles(graph) == [
        ["components.export.common", "components.export.image", "components.export.text", "pipeline.local"]
    ]


def test_local_files_are_read_written_and_copied_without_beam(tmp_path):
    """Beam's filesystems are for ``gs://``: a step that reads and writes only local files (train, evaluate,
    export and register under run-local) does not import Beam, 1 to 2 s of every such process. The files are still
    written whole, read back, and an export copied into a folder registry file by file."""
    import subprocess
    import sys

    script = f"""
import json, os, sys
from components import storage
from components.artifacts.registry import copy_tree
folder = {str(tmp_path)!r}
storage.write_json(os.path.join(folder, "export", "saved_model", "export.json"), {{"accuracy": 0.5}})
storage.write_atomically(os.path.join(folder, "export", "saved_model", "variables", "v.data"), b"\\x00weights")
assert storage.read_json(os.path.join(folder, "export", "saved_model", "export.json")) == {{"accuracy": 0.5}}
assert storage.exists(os.path.join(folder, "export")) and not storage.exists(os.path.join(folder, "nothing"))
with storage.open_read(os.path.join(folder, "export", "saved_model", "variables", "v.data")) as handle:
    assert handle.read() == b"\\x00weights"
print(copy_tree(os.path.join(folder, "export"), os.path.join(folder, "registry", "1")))
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] == "apache_beam")))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    copied, beam = result.stdout.strip().splitlines()
    assert (int(copied), beam) == (2, "[]")
    assert (tmp_path / "registry" / "1" / "saved_model" / "variables" / "v.data").read_bytes() == b"\x00weights"
    leftovers = [name for _, _, names in os.walk(tmp_path) for name in names if ".tmp-" in name]
    assert not leftovers


def test_only_the_conversion_imports_beam():
    """Beam is the conversion's engine alone: every other step, and the file and listing layers the light image's
    steps use, reach no module that imports it, even through an import inside a function (1 to 2 s of every such
    process, and the light image has no Beam)."""
    files = {
        module_of(path, REPO_ROOT): path
        for top in ("components", "pipeline")
        for path in python_files(os.path.join(REPO_ROOT, top))
    }
    beam = {
        module
        for module, path in files.items()
        if any(name.startswith("apache_beam") for name in imported_modules(path, REPO_ROOT, ("apache_beam",)))
    }
    assert beam and all(module.startswith("components.convert.") for module in beam), beam
    graph = import_graph()

    def reached(module: str) -> set[str]:
        found, wanted = set(), [module]
        while wanted:
            for target in graph.get(wanted.pop(), ()):
                if target not in found:
                    found.add(target)
                    wanted.append(target)
        return found

    free = [
        "components.storage",
        "components.convert.listing",
        "components.convert.fingerprint",
        "components.check_data.core",
        "components.train.core",
        "components.evaluate.core",
        "components.export.core",
        "components.register.vertex",
        "components.vertex_resources",
    ]
    assert {module: sorted(reached(module) & beam) for module in free} == {module: [] for module in free}


def test_keras_and_tensorflow_start_without_the_modules_no_step_uses_through_them():
    """Keras imports scikit-learn, matplotlib and OpenCV at its own import when they are installed, and TensorFlow
    and Keras on TensorFlow import JAX (2 to 4 s of every TensorFlow step's start): a step's process, which imports
    ``components`` first, loads none of them with Keras or TensorFlow, and imports each as ever when it asks for it;
    Keras on JAX still imports JAX as its backend."""
    import json
    import subprocess
    import sys

    script = """
import json, sys
import components.train.core, tensorflow, keras
loaded = sorted({name.split(".")[0] for name in sys.modules} & {"sklearn", "matplotlib", "cv2", "jax"})
from sklearn.metrics import confusion_matrix
import jax.numpy
print(json.dumps([loaded, confusion_matrix([0, 1], [0, 1]).tolist(), float(jax.numpy.ones(3).sum())]))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [[], [[1, 0], [0, 1]], 3.0]
    on_jax = "import components, keras, tensorflow; print(keras.backend.backend(), float(keras.ops.ones(2).sum()))"
    result = subprocess.run(
        [sys.executable, "-c", on_jax],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KERAS_BACKEND": "jax"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["jax", "2.0"]
