"""What a preflight found: each item ``ok``, ``missing`` (with the command that fixes it) or ``unknown`` (what could
not be read, and why), an API's answer or the finding it leaves, and the report of them all."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from components.cli import UsageError, one_line

OK, MISSING, UNKNOWN = "ok", "missing", "unknown"


@dataclass(frozen=True)
class Finding:
    """One item checked: ``state`` ok, missing or unknown; ``what`` was checked; ``detail``: what was found;
    ``fix``: the command that fixes it (missing), or how to find out (unknown)."""

    state: str
    what: str
    detail: str = ""
    fix: str = ""

    def line(self) -> str:
        label = {OK: "ok     ", MISSING: "MISSING", UNKNOWN: "unknown"}[self.state]
        text = f"{label} {self.what}" + (f": {self.detail}" if self.detail else "")
        if self.fix:
            text += f"; fix: {self.fix}" if self.state == MISSING else f"; {self.fix}"
        return text


def answered(call: Callable[[], dict], what: str, on_missing: Callable[[Exception], Finding] | None = None):
    """(the answer, None) or (None, a finding): a 404 is ``on_missing``'s (when given), a disabled API or a refusal
    is unknown, with the reason."""
    from google.api_core import exceptions

    try:
        return call(), None
    except exceptions.NotFound as err:
        if on_missing is not None:
            return None, on_missing(err)
        return None, Finding(UNKNOWN, what, f"not found ({one_line(err)})")
    except exceptions.GoogleAPICallError as err:
        if getattr(err, "reason", "") == "SERVICE_DISABLED":
            service = (getattr(err, "metadata", None) or {}).get("service", "its API")
            return None, Finding(
                UNKNOWN, what, f"{service} is disabled, so this could not be read", f"gcloud services enable {service}"
            )
        return None, Finding(UNKNOWN, what, f"could not be read: {type(err).__name__} {one_line(err)}")
    except exceptions.RetryError as err:
        return None, Finding(UNKNOWN, what, f"no answer: {one_line(err)}")


def report(findings: list[Finding], everything: bool) -> str:
    """The findings, a line each (``everything``: the ones that passed too), and a line of their count."""
    shown = [f for f in findings if everything or f.state != OK]
    counts = {state: sum(f.state == state for f in findings) for state in (OK, MISSING, UNKNOWN)}
    head = f"preflight: {counts[OK]} passed, {counts[MISSING]} missing, {counts[UNKNOWN]} unknown"
    return "\n".join([head, *(f"  {f.line()}" for f in shown)])


def refuse_missing(findings: list[Finding]) -> None:
    """One line for each missing item, then exit 2 (``UsageError``): nothing is created."""
    missing = [f for f in findings if f.state == MISSING]
    if len(missing) == 1:
        raise UsageError(f"preflight: {missing[0].line()} (--no-preflight goes on without it)")
    if missing:
        error = UsageError(
            f"the preflight found {len(missing)} missing: fix each, or pass --no-preflight to go on without it\n"
            + "\n".join(f"  {f.line()}" for f in missing)
        )
        error.whole_message = True
        raise error


# what reading roles from the project's and the bucket's allow policies cannot see
NOT_SEEN = "roles granted through a group, a folder or the organization are not seen; --no-preflight skips the check"


def roles_of(bindings: Iterable[dict], member: str) -> set[str]:
    return {binding["role"] for binding in bindings if member in binding.get("members", [])}
