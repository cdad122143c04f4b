"""``make mutants``: mutation testing of the code whose wrong answer a user would not see, with the fast tests that
guard it. mutmut (pyproject.toml's ``[tool.mutmut]``: the files it mutates, the test files it runs) changes one
thing at a time (an operator, a constant, an argument) in the functions of ``GROUPS``, runs the tests that reach that
function, and counts the change killed when one fails. Prints each group's score and every surviving mutant (``mutmut
show NAME`` shows its diff); the last line is a JSON object. bench/RESULTS.md keeps the latest run's table.

    make mutants                          # every mutant of every group, tried again
    make mutants GROUPS=tokenizing         # one group (comma-separated names)
    make mutants ONLY=untried              # those a stopped run left untried, and those of code changed since
    make mutants ONLY=survivors            # only those not killed last time (after adding tests)

mutmut tries again every mutant it is named, so ``untried`` and ``survivors`` name the mutants themselves, from the
last run's results; ``untried`` also names every mutant of a function changed since (or new), whose results are of
the code before.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import glob
import json
import os
import shutil
import subprocess
import sys

from tests.fixture_cache import CACHE_ENV

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def functions(module: str, *names: str) -> list[str]:
    """mutmut's names of the mutants of ``module``'s functions ``names``."""
    return [f"{module}.x_{name}__mutmut_*" for name in names]


# what a user would get silently wrong, by the functions that decide it (mutmut names a mutant
# module.x_function__mutmut_N, or module.xǁClassǁmethod__mutmut_N)
GROUPS = {
    "decoding and imaging": ["components.decoding.*", "components.imaging.*", "components.orientation.*"],
    "split and listing": functions(
        "components.convert.listing",
        "list_image_folder",
        "list_manifest",
        "npz_file",
        "list_npz",
        "_npz_arrays",
        "list_source",
        "in_class_order",
        "is_hidden",
    )
    + functions("components.convert.core", "assign_split")
    + functions("components.convert.items", "content_digest")
    + functions("components.convert.common", "split_for_digest")
    + functions("components.convert.config", "check_split_options"),
    "tokenizing": ["components.tokenizing.*"],
    "blessing and metrics": functions("components.evaluate.blessing", "check_fraction", "bless")
    + functions(
        "components.evaluate.metrics", "classification_metrics", "ranking_metrics", "curve_metrics", "top_k_accuracy"
    )
    + functions("components.evaluate.baseline", "comparability"),
    "registry decisions": [
        "components.register.core.*",
        "components.artifacts.registry.*",
        *functions("components.register.vertex", "find_baseline", "register_version"),
    ],
    "resume keys": functions("pipeline.local.resume", "run_key", "decide")
    + functions("pipeline.local.identity", "run_identity"),
    "export's quantization set-up": functions("components.export.image", "unit_range_network", "tflite_models"),
    # a wrong threshold or distance lets broken data through to training, or blocks good data
    "data checks": [
        f"components.check_data.{module}.*"
        for module in ("core", "thresholds", "distributions", "leakage", "statistics")
    ],
}
# the test files that a group's mutants run, where not every test that reaches them: the decoders are reached by
# evaluate's, export's and the data checks' tests too, which train or convert first (20 to 40 s a mutant here, 20 hours
# for the group on 2 cores); their own tests, Pillow's and the serving graph's, take 1 to 10 s
GROUP_TESTS = {
    "decoding and imaging": ["tests/components/test_decoding.py", "tests/components/test_decoding_parity.py"],
}
# mutmut's exit codes of a mutant's test run: 1 a test failed (killed), 0 all passed (survived), 33 no test reaches
# it, 5 none of its group's test files does (GROUP_TESTS), -24 (SIGXCPU) past its CPU time; another negative code is
# a crash (killed)
KILLED, SURVIVED, NO_TESTS, NO_GROUP_TESTS, TIMEOUT = 1, 0, 33, 5, -24
STATUS = {
    SURVIVED: "survived",
    NO_TESTS: "no test reaches it",
    NO_GROUP_TESTS: "no test of its group's files reaches it",
    TIMEOUT: "timeout",
}


def results() -> dict[str, int | None]:
    """Every mutant's exit code so far, from mutmut's files under mutants/ (None: not run yet)."""
    codes: dict[str, int | None] = {}
    for path in glob.glob(os.path.join(REPO_ROOT, "mutants", "**", "*.py.meta"), recursive=True):
        with open(path) as handle:
            codes.update(json.load(handle)["exit_code_by_key"])
    return codes


def in_group(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


ONLY = ("all", "untried", "survivors")


def is_killed(code: int | None) -> bool:
    return code == KILLED or (code is not None and code < 0 and code != TIMEOUT)


def mutmut_config(root: str) -> dict:
    """pyproject.toml's ``[tool.mutmut]`` under ``root``."""
    import tomllib

    with open(os.path.join(root, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)["tool"]["mutmut"]


def to_try(
    groups: dict[str, list[str]], only: str, codes: dict[str, int | None], changed: set[str] = frozenset()
) -> list[str]:
    """What to name to mutmut: the groups' patterns (``all``: every mutant, tried again), or the mutants themselves
    that the last run left untried or did not kill. ``untried`` also names every mutant of the functions ``changed``
    since the last run (``changed_functions``): their results are of the code before; and a pattern no mutant known
    matches yet (a function moved to a file mutmut has not mutated)."""
    if only == "all":
        return [pattern for patterns in groups.values() for pattern in patterns]
    stale = {
        function
        for function in changed
        if any(in_group(f"{function}__mutmut_1", patterns) for patterns in groups.values())
    }
    wanted = (
        (lambda code: code is None) if only == "untried" else (lambda code: code is not None and not is_killed(code))
    )
    names = {
        name
        for name, code in codes.items()
        if wanted(code) and any(in_group(name, patterns) for patterns in groups.values())
    }
    if only == "untried":
        names = {name for name in names if name.rpartition("__mutmut_")[0] not in stale}
        names |= {f"{function}__mutmut_*" for function in stale}
        # a group's function of which mutmut has no mutant yet (moved to a file it has not mutated): all of it
        names |= {
            pattern
            for patterns in groups.values()
            for pattern in patterns
            if not any(fnmatch.fnmatchcase(name, pattern) for name in codes)
        }
    return sorted(names)


def functions_of(tree: ast.Module, suffix: str = "") -> dict[str, ast.FunctionDef]:
    """The functions of a module, and its classes' methods, by mutmut's mangled name less the module's: ``x_f`` and
    ``xǁClassǁmethod``; with ``suffix``, only those whose name ends so (mutmut's ``__mutmut_orig``), without it."""
    found = {}
    for node in tree.body:
        methods = [(f"xǁ{node.name}ǁ", item) for item in node.body] if isinstance(node, ast.ClassDef) else []
        for prefix, item in [("x_", node), *methods]:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name.endswith(suffix):
                found[item.name.removesuffix(suffix) if suffix else prefix + item.name] = item
    return found


def changed_functions(root: str = REPO_ROOT) -> set[str]:
    """The functions (mutmut's mangled names, ``module.x_f``) whose source differs from the original that mutmut's
    folder keeps from its last run, or that it does not hold at all (new since): their mutants' results are stale.
    A function mutmut holds as it is (one it does not mutate) is left out."""
    paths = mutmut_config(root)["only_mutate"]

    def source(node: ast.FunctionDef) -> list[str]:
        return [ast.dump(node.args), *map(ast.dump, node.body)]

    changed = set()
    for path in paths:
        kept = os.path.join(root, "mutants", path)
        if not os.path.exists(kept):
            continue
        with open(os.path.join(root, path)) as now, open(kept) as before:
            current, held = ast.parse(now.read()), ast.parse(before.read())
        original, unmutated = functions_of(held, "__mutmut_orig"), functions_of(held)
        module = path.removesuffix(".py").replace("/", ".")
        for name, node in functions_of(current).items():
            if (name in original and source(node) != source(original[name])) or name not in unmutated:
                changed.add(f"{module}.{name}")
    return changed


def report(codes: dict[str, int | None], groups: dict[str, list[str]]) -> dict:
    """Each group's score over the mutants tried (a stopped run leaves some untried: counted apart), and the names of
    those not killed."""
    summary = {}
    for group, patterns in groups.items():
        mine = {name: code for name, code in codes.items() if in_group(name, patterns)}
        tried = {name: code for name, code in mine.items() if code is not None}
        killed = {name for name, code in tried.items() if is_killed(code)}
        not_killed = {name: code for name, code in sorted(tried.items()) if name not in killed}
        score = len(killed) / len(tried) if tried else 0.0
        summary[group] = {
            "mutants": len(mine),
            "tried": len(tried),
            "killed": len(killed),
            "score": round(score, 4),
            "not_killed": list(not_killed),
        }
        untried = f", {len(mine) - len(tried)} not tried yet" if len(tried) < len(mine) else ""
        print(f"{group}: {len(killed)} of {len(tried)} killed ({score:.1%}){untried}")
        for name, code in not_killed.items():
            print(f"    {name}: {STATUS.get(code, f'exit {code}')}")
    tried = sum(entry["tried"] for entry in summary.values())
    killed = sum(entry["killed"] for entry in summary.values())
    print(f"all groups: {killed} of {tried} killed ({killed / max(tried, 1):.1%})")
    return {"groups": summary, "tried": tried, "killed": killed, "score": round(killed / max(tried, 1), 4)}


def mutmut_files() -> set[str]:
    """What mutmut's folder holds of its own: its copy of the sources and of the files pyproject.toml's
    ``[tool.mutmut]`` names, the tests, the files mutmut always copies, and its stats."""
    config = mutmut_config(REPO_ROOT)
    named = {path.strip("/").split("/")[0] for path in [*config["source_paths"], *config.get("also_copy", [])]}
    return named | {"tests", "pyproject.toml", "uv.lock", "mutmut-stats.json"}


MUTMUT_FILES = mutmut_files()


def remove_strays(folder: str) -> list[str]:
    """Removes from mutmut's folder, where each mutant's tests run, what a mutant wrote there (a relative path, a
    ``gs://`` path taken for a local one): a later mutant that reads the same path would find it and pass. Returns
    the names removed."""
    strays = sorted(set(os.listdir(folder)) - MUTMUT_FILES) if os.path.isdir(folder) else []
    for name in strays:
        path = os.path.join(folder, name)
        shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
    return strays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", default="", help="comma-separated group names (default: all)")
    parser.add_argument("--report-only", action="store_true", help="print the last run's results, run nothing")
    parser.add_argument("--only", choices=ONLY, default="all", help="which mutants of the groups to try (default all)")
    args = parser.parse_args()
    wanted = [name.strip() for name in args.groups.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in GROUPS]
    if unknown:
        print(f"error: no mutation group {', '.join(unknown)}: use one of {', '.join(GROUPS)}", file=sys.stderr)
        raise SystemExit(2)
    groups = {name: GROUPS[name] for name in wanted} if wanted else GROUPS
    if not args.report_only:
        names = to_try(groups, args.only, results(), changed_functions())
        if names:
            mutmut = os.path.join(os.path.dirname(sys.executable), "mutmut")
            restricted = {
                pattern: GROUP_TESTS[group] for group in groups if group in GROUP_TESTS for pattern in groups[group]
            }
            # what earlier runs left in mutmut's folder goes: a mutant's stray files, and the slow session fixtures,
            # made once for each run and reused by its mutants (tests/fixture_cache.py), so after any change
            remove_strays(os.path.join(REPO_ROOT, "mutants"))
            cache = os.path.join(REPO_ROOT, "mutants", "fixture-cache")
            environment = {**os.environ, "MUTATION_TEST_FILES": json.dumps(restricted), CACHE_ENV: cache}
            run = subprocess.run([mutmut, "run", *names], cwd=REPO_ROOT, env=environment)
            if run.returncode:
                raise SystemExit(run.returncode)
        else:
            print(f"no mutant of these groups is {args.only}: the last run's results follow")
    print(json.dumps(report(results(), groups)))


if __name__ == "__main__":
    main()
