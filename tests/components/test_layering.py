"""The data flows convert -> train -> evaluate -> export -> register -> deploy, and the code the same way: a step
reads what an earlier step wrote through the shared modules below the steps (``components.artifacts``,
``components.schema``, ``components.storage``, ...), never by importing another step's code."""

from __future__ import annotations

import ast
import os

from tests.conftest import REPO_ROOT

COMPONENTS = os.path.join(REPO_ROOT, "components")
STEPS = ("convert", "train", "evaluate", "export", "register", "deploy")


def imported_modules(path: str, root: str = REPO_ROOT) -> set[str]:
    """The ``components`` modules (and packages) that the file at ``path`` (under ``root``) imports, anywhere in it,
    with relative imports made absolute."""
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
    return {name for name in found if name == "components" or name.startswith("components.")}


def owner(module: str) -> str | None:
    """The step a module belongs to (``components.train.core`` -> ``train``), None for the shared modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STEPS else None


def python_files() -> list[str]:
    return [os.path.join(folder, name) for folder, _, names in os.walk(COMPONENTS) for name in names
            if name.endswith(".py")]  # fmt: skip


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
