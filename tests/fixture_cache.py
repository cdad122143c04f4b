"""The session fixtures that convert or train, made once for a run of several processes: under ``make test``'s
pytest-xdist workers, once for all of them; under ``make mutants``, once for the whole run and reused by each
mutant's tests, unless the mutant is in code that making them ran.

mutmut runs every mutant's tests in a fresh process, so without this each mutant of the data checks converts the
demo images again, and each mutant of the blessing trains a model again (20 s to 3 minutes a mutant on 2 cores, for
a function that takes milliseconds). A fixture is made once under mutmut's ``stats`` mode, which runs the original
code and records every mutated function it reaches; a mutant of one of those functions gets the fixture made again,
with the mutant in it, as without the cache. ``tests/mutation.py`` points ``MUTATION_FIXTURE_CACHE`` at an empty
folder for each run; outside ``make mutants`` (no such folder, or no mutant under test) nothing is cached.

In mutmut's own stats run, which maps each test to the functions it reaches, each test that uses a fixture counts
as reaching what setting it up reached (mutmut alone counts that for the first test to use it), so that a mutant of
the code a fixture runs runs every test that reads what the fixture made, or runs the graph it traced.

A cached fixture's files stay at one path, since the values fixtures return name their folders (and the converted
statistics name the source); a test that changed them (a file added, resized or touched) has them made again for the
next mutant.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import shutil
from collections.abc import Callable, Iterator
from typing import Any

CACHE_ENV = "MUTATION_FIXTURE_CACHE"

# the fixtures this process made with the mutant under test in them: those made after them are made so too
_made_fresh: set[str] = set()
# the mutated functions each fixture's making reached, its dependencies' included (in mutmut's stats run too)
_reached: dict[str, set[str]] = {}


@contextlib.contextmanager
def mutmut_reach() -> Iterator[set[str]]:
    """The mutated functions that the code run inside reaches (mangled, as mutmut's stats name them), with mutmut's
    ``stats`` mode: the original of each, the mutant under test left out."""
    from mutmut.state import state  # mutmut 3.8's record of trampoline hits (the lock pins it)

    hits = state()._stats
    before, mutant = set(hits), os.environ.get("MUTANT_UNDER_TEST", "")
    hits.clear()
    os.environ["MUTANT_UNDER_TEST"] = "stats"
    reached: set[str] = set()
    try:
        yield reached
    finally:
        os.environ["MUTANT_UNDER_TEST"] = mutant
        reached.update(hits)
        hits.clear()
        hits.update(before | (reached if mutant == "stats" else set()))  # (in mutmut's stats run: its test's too)


@contextlib.contextmanager
def fixture_reach(name: str, reach: Callable[[], contextlib.AbstractContextManager[set[str]]] = mutmut_reach):
    """In mutmut's stats run: what setting up the fixture ``name`` inside reaches, kept for ``count_reach``. Any
    fixture, not only the cached ones: a module's serving graph is traced once, in its setup, and the tests that
    then run the traced graph never call the Python functions it was traced from, so mutmut alone maps a mutant of
    the serving decoder to the first of them."""
    with reach() as reached:
        yield
    _reached[name] = _reached.get(name, set()) | reached


def count_reach(fixtures, hits: set[str] | None = None) -> None:
    """In mutmut's stats run, which maps each test to the mutated functions it reaches (``hits``: mutmut's record for
    the running test): counts for the running test what setting up its ``fixtures`` reached. mutmut itself
    counts it for the first test that uses one only, since a module's or a session's fixture is set up once: a
    mutant of export's conversion, which the ``exported`` fixture runs, would run one of the tests that read the
    exported files."""
    if hits is None:
        from mutmut.state import state

        hits = state()._stats
    for name in fixtures:
        hits.update(_reached.get(name, set()))


def mangled(mutant: str) -> str:
    """The function a mutant is of, as mutmut's stats name it: ``module.x_f__mutmut_3`` is of ``module.x_f``."""
    return mutant.rpartition("__mutmut_")[0]


def listing(folder: str) -> list[tuple[str, int, int]]:
    """Every file under ``folder``: (relative path, size, modification time in ns)."""
    found = []
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            status = os.stat(path)
            found.append((os.path.relpath(path, folder), status.st_size, status.st_mtime_ns))
    return sorted(found)


def with_earlier(reached: set[str], after: tuple[str, ...]) -> set[str]:
    """What making a fixture reached, with what making the fixtures ``after`` (made before it, from which it is made)
    reached."""
    return reached.union(*(_reached.get(earlier, set()) for earlier in after))


def made_once(
    name: str,
    make: Callable[[str], Any],
    fresh_folder: Callable[[], str],
    after: tuple[str, ...] = (),
    reach: Callable[[], contextlib.AbstractContextManager[set[str]]] = mutmut_reach,
    shared: str = "",
) -> Any:
    """The session fixture ``name``: ``make(folder)`` builds it in an empty ``folder`` and returns its value (paths in
    it name ``folder``). Under ``make mutants``, made once in the run's cache and reused, unless the mutant under test
    is in a function that making it (or a fixture in ``after``, made before it) reached. Under ``make test``'s
    workers (pytest-xdist), made once in the run's ``shared`` folder by the first worker to need it, and read there by
    the others (each would otherwise convert and train it again: a minute of 2 cores each). Otherwise made in
    ``fresh_folder()``, as pytest makes any fixture."""
    cache, mutant = os.environ.get(CACHE_ENV), os.environ.get("MUTANT_UNDER_TEST", "")
    if mutant == "stats":  # mutmut's stats run: made as always, what it reaches kept for the tests that use it
        with reach() as reached:
            value = make(fresh_folder())
        _reached[name] = with_earlier(reached, after)
        return value
    mutating = bool(cache) and "__mutmut_" in mutant
    store = cache if mutating else ("" if mutant else shared)
    if not store or _made_fresh & set(after):
        _made_fresh.add(name)
        return make(fresh_folder())
    kept = kept_or_made(store, name, make, after, reach() if mutating else contextlib.nullcontext(set()), mutating)
    if kept is not None:
        _reached[name] = kept["reached"]
    if kept is None or mangled(mutant) in kept["reached"]:
        _made_fresh.add(name)
        return make(fresh_folder())
    return kept["value"]


def kept_or_made(
    store: str, name: str, make, after: tuple[str, ...], reach: contextlib.AbstractContextManager, remake: bool
) -> dict | None:
    """The fixture ``name`` as kept in ``store`` ({value, reached, files}), made there first if it is not; where a test
    changed its files since, made there again (``remake``: one process at a time uses it) or None (workers side by
    side read it: the worker makes its own)."""
    entry = os.path.join(store, name)
    folder, record = os.path.join(entry, "files"), os.path.join(entry, "record.pickle")
    os.makedirs(store, exist_ok=True)
    with open(os.path.join(store, f"{name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (workers side by side: one makes it, the others wait)
        kept = None
        if os.path.exists(record):
            with open(record, "rb") as handle:
                kept = pickle.load(handle)
        changed = kept is not None and kept["files"] != listing(folder)
        if changed and not remake:
            return None
        if kept is None or changed:
            shutil.rmtree(entry, ignore_errors=True)
            os.makedirs(folder)
            with reach as reached:
                value = make(folder)
            kept = {"value": value, "reached": with_earlier(reached, after), "files": listing(folder)}
            with open(record + ".part", "wb") as handle:
                pickle.dump(kept, handle)
            os.replace(record + ".part", record)
    return kept
