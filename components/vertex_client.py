"""The Vertex AI client the steps and the command line share: settings, credentials, and calls with retries.

Every call goes through the real ``google-cloud-aiplatform`` client. Settings come from, in this order of precedence:
command-line flags, then environment variables (``TPU_PIPELINE_PROJECT`` ...; ``GOOGLE_CLOUD_PROJECT``,
``GOOGLE_CLOUD_REGION`` and ``GOOGLE_CLOUD_LOCATION`` also count), then a YAML config file (``--config``, or
``TPU_PIPELINE_CONFIG``; see ``pipeline/vertex.example.yaml``), then the defaults; the project last of all from the
user's credentials (``gcloud config set project``, a service-account key's project). A missing or wrong value is a
one-line error that names it; a command says in one line where its project and region came from.

Calls answered 429 (quota) or 503 (unavailable) are retried with exponential backoff up to ``--retry-timeout``
seconds; 403 names the permission that is missing; 409 says which name is taken.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from components.cli import UsageError, one_line

log = logging.getLogger(__name__)

ENV_PREFIX = "TPU_PIPELINE_"
# setting -> environment variables, first found wins
ENVIRONMENT = {
    "project": (f"{ENV_PREFIX}PROJECT", "GOOGLE_CLOUD_PROJECT"),
    "region": (f"{ENV_PREFIX}REGION", "GOOGLE_CLOUD_REGION", "GOOGLE_CLOUD_LOCATION"),
    "pipeline_root": (f"{ENV_PREFIX}PIPELINE_ROOT",),
    "service_account": (f"{ENV_PREFIX}SERVICE_ACCOUNT",),
    "network": (f"{ENV_PREFIX}NETWORK",),
    "api_endpoint": (f"{ENV_PREFIX}API_ENDPOINT",),
    "template": (f"{ENV_PREFIX}TEMPLATE",),
    "anonymous": (f"{ENV_PREFIX}ANONYMOUS",),  # 1 / true: send no credentials (a local endpoint)
}
CONFIG_ENV = f"{ENV_PREFIX}CONFIG"
LABEL_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE_PATTERN = re.compile(r"^[a-z0-9_-]{0,63}$")
REGION_PATTERN = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")


class VertexError(RuntimeError):
    """Vertex AI refused or failed a call: one line on stderr, exit code 1."""


@dataclass
class VertexSettings:
    """Where and how to run the pipeline on Vertex AI (see the module docstring for where each value comes from)."""

    project: str = ""
    region: str = ""
    pipeline_root: str = ""
    service_account: str = ""
    network: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    enable_caching: bool | None = None  # None: Vertex AI's default (each step's own setting, on)
    parameters: dict[str, Any] = field(default_factory=dict)
    template: str = "pipeline.yaml"
    display_name: str = ""
    api_endpoint: str = ""  # e.g. a private endpoint, or http://127.0.0.1:PORT in the tests
    anonymous: bool = False  # send no credentials (local endpoints and tests)
    retry_timeout: float = 120.0
    retry_initial: float = 1.0
    # where each setting given came from: "--project", "TPU_PIPELINE_REGION", "config file vertex.yaml", ... (not a
    # setting itself)
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)


SETTING_NAMES = tuple(f.name for f in fields(VertexSettings) if f.name != "sources")
# where the project came from when nothing named it: the credentials (gcloud's, or a key file's own project)
CREDENTIALS_SOURCE = "your Google Cloud credentials (gcloud config set project, or the key file's project)"


def load_settings(
    flags: Mapping[str, Any], environ: Mapping[str, str] | None = None, config_path: str | None = None
) -> VertexSettings:
    """Flags (values that are not None) over environment variables over the config file over the defaults."""
    environ = os.environ if environ is None else environ
    config_path = config_path or environ.get(CONFIG_ENV, "")
    values: dict[str, Any] = dict(read_config(config_path)) if config_path else {}
    sources = {name: f"config file {config_path}" for name in values}
    for name, variables in ENVIRONMENT.items():
        variable = next((v for v in variables if environ.get(v)), None)
        if variable is not None:
            found = environ[variable]
            values[name] = found.strip().lower() in ("1", "true", "yes") if name == "anonymous" else found
            sources[name] = variable
    for name, value in flags.items():
        if value is None:
            continue
        if name in ("labels", "parameters"):  # merged key by key: a flag overrides one label, not all of them
            values[name] = {**values.get(name, {}), **value}
        else:
            values[name] = value
        sources[name] = "--" + name.replace("_", "-")
    return VertexSettings(**values, sources=sources)


def project_from_credentials(settings: VertexSettings) -> str:
    """The project that Application Default Credentials name (gcloud's configured project, a service-account key's
    own), "" when they name none or there are none (local endpoints: never looked for)."""
    from google.auth.exceptions import DefaultCredentialsError

    if settings.anonymous:
        return ""
    try:
        _, project = application_default()
    except DefaultCredentialsError:
        return ""
    return project or ""


def application_default():
    """``google.auth.default()`` for Vertex AI's scope: (credentials, the project they name or None). Its warnings
    on the way to failing are left to the callers' one-line errors (``-v`` shows them)."""
    import google.auth

    if not log.isEnabledFor(logging.DEBUG):
        logging.getLogger("google.auth").setLevel(logging.ERROR)
    return google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])


def read_config(path: str) -> dict[str, Any]:
    """A YAML mapping of settings; unknown keys and wrong types are one-line errors naming the key and the file."""
    import yaml

    if not os.path.isfile(path):
        raise UsageError(f"config file {path} does not exist: pass --config FILE (see pipeline/vertex.example.yaml)")
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
    except yaml.YAMLError as err:
        raise UsageError(f"config file {path} is not valid YAML: {one_line(err)}") from None
    if not isinstance(data, dict):
        raise UsageError(f"config file {path} must be a mapping of settings, e.g. project: my-project")
    unknown = sorted(set(data) - set(SETTING_NAMES))
    if unknown:
        raise UsageError(f"config file {path}: unknown setting {unknown[0]!r}; known: {', '.join(SETTING_NAMES)}")
    for name in ("labels", "parameters"):
        if name in data and not isinstance(data[name], dict):
            raise UsageError(f"config file {path}: {name} must be a mapping of name: value")
    if "enable_caching" in data and not isinstance(data["enable_caching"], bool):
        raise UsageError(f"config file {path}: enable_caching must be true or false")
    return {name: ("" if value is None else value) for name, value in data.items()}


def check_settings(settings: VertexSettings, need_root: bool = True) -> None:
    """One-line errors for what is missing or malformed, saying how to provide it. A project that nothing named is
    taken from the credentials (filled in)."""

    def how(name: str, example: str) -> str:
        flag = name.replace("_", "-")
        variables = " or ".join(ENVIRONMENT[name])
        return f"pass --{flag} {example}, set {variables}, or put {name}: in the config file (--config)"

    if not settings.project:
        settings.project = project_from_credentials(settings)
        settings.sources["project"] = CREDENTIALS_SOURCE
    if not settings.project:
        raise UsageError(
            f"no Google Cloud project: {how('project', 'my-project')}, or run `gcloud config set project my-project`"
        )
    if not settings.region:
        raise UsageError(f"no region: {how('region', 'europe-west4')}")
    if not REGION_PATTERN.match(settings.region):
        raise UsageError(f"region {settings.region!r} is not a Google Cloud region such as europe-west4 or us-central1")
    if need_root and not settings.pipeline_root:
        raise UsageError(f"no pipeline root: {how('pipeline_root', 'gs://BUCKET/pipeline-root')}")
    if need_root and not settings.pipeline_root.startswith("gs://"):
        raise UsageError(f"pipeline root {settings.pipeline_root!r} must be a Cloud Storage path gs://BUCKET/...")
    for key, value in settings.labels.items():
        if not LABEL_PATTERN.match(key) or not LABEL_VALUE_PATTERN.match(str(value)):
            raise UsageError(
                f"label {key}={value} is not a valid Google Cloud label: lowercase letters, digits, - and _, "
                "at most 63 characters, the key starting with a letter"
            )
    if settings.retry_timeout <= 0:
        raise UsageError(f"--retry-timeout {settings.retry_timeout} must be positive")


def where_from(settings: VertexSettings) -> str:
    """The line a command logs on connecting: its project and region, and where each came from."""
    return (
        f"project {settings.project} (from {settings.sources.get('project', 'the caller')}), region "
        f"{settings.region} (from {settings.sources.get('region', 'the caller')})"
    )


def credentials_for(settings: VertexSettings):
    """Application Default Credentials, or anonymous ones for a local endpoint; a one-line error when none."""
    if settings.anonymous:
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials()
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, _ = application_default()
    except DefaultCredentialsError:
        raise UsageError(
            "no Google Cloud credentials: run `gcloud auth application-default login`, or set "
            "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run where a service account is attached"
        ) from None
    return credentials


class _OneLineExceptions(logging.Filter):
    """The client logs some failures it then works around (e.g. checking the pipeline root's bucket) with a full
    traceback; keep them to one line (``-v`` shows the traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and not log.isEnabledFor(logging.DEBUG):
            record.msg = f"{record.getMessage()}: {one_line(record.exc_info[1])}"
            record.args, record.exc_info, record.exc_text = (), None, None
        return True


def connect(settings: VertexSettings):
    """``aiplatform.init`` with the settings; returns the credentials used."""
    from google.cloud import aiplatform

    for name in ("google.cloud.aiplatform.pipeline_jobs", "google.cloud.aiplatform.pipeline_job_schedules"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _OneLineExceptions) for f in logger.filters):
            logger.addFilter(_OneLineExceptions())

    credentials = credentials_for(settings)
    log.info(where_from(settings))
    check_reachable(settings)
    aiplatform.init(
        project=settings.project,
        location=settings.region,
        credentials=credentials,
        api_endpoint=settings.api_endpoint or None,
        api_transport="rest" if settings.api_endpoint else None,
    )
    return credentials


def endpoint_of(settings: VertexSettings) -> tuple[str, int]:
    """(host, port) of the Vertex AI API the calls go to."""
    from urllib.parse import urlsplit

    endpoint = settings.api_endpoint or f"{settings.region}-aiplatform.googleapis.com"
    parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    try:
        port = parts.port
    except ValueError:
        raise UsageError(f"--api-endpoint {endpoint}: its port is not a number from 1 to 65535") from None
    return parts.hostname or endpoint, port or (80 if parts.scheme == "http" else 443)


def check_reachable(settings: VertexSettings) -> None:
    """Connects to the API's host and port, retrying within ``--retry-timeout`` as ``call`` retries (``backoff``):
    an endpoint that cannot be reached is one line naming it, instead of the client's own retries (minutes,
    whatever the timeout) and a traceback. Skipped behind an HTTPS proxy, which the client goes through and this
    check would not."""
    import socket

    from google.api_core import exceptions, retry

    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return
    host, port = endpoint_of(settings)

    def connect_once() -> None:
        with socket.create_connection((host, port), timeout=min(10.0, settings.retry_timeout)):
            return

    try:
        backoff(settings, retry.if_exception_type(OSError))(connect_once)()
    except exceptions.RetryError as err:
        cause = err.cause
        reason = (getattr(cause, "strerror", None) or one_line(cause)) if cause is not None else one_line(err)
        raise VertexError(
            f"cannot reach Vertex AI at {host}:{port} ({reason}) after trying for {settings.retry_timeout:g}s: "
            "check --api-endpoint and --region, the network, or set HTTPS_PROXY"
        ) from None


def backoff(settings: VertexSettings, predicate, on_error=None):
    """The one retry policy of every call to Vertex AI: exponential backoff from ``retry_initial`` seconds, doubling
    up to 30 s, for ``retry_timeout`` seconds in all (``google.api_core.retry``)."""
    from google.api_core import retry

    return retry.Retry(
        predicate=predicate,
        initial=settings.retry_initial,
        maximum=max(settings.retry_initial, 30.0),
        multiplier=2.0,
        timeout=settings.retry_timeout,
        on_error=on_error,
    )


def call(
    what: str, function: Callable[[], Any], settings: VertexSettings, done: Callable[[], Any] | None = None
) -> Any:
    """Runs one Vertex AI call: 429 / 503 retried with exponential backoff, the rest turned into one-line errors.

    ``done`` makes retrying a call that creates something safe: a 503 may come after the server created it, so
    before each retry ``done()`` looks for what the failed attempt may have made, and a result other than None is
    returned instead of creating it twice.
    """
    from google.api_core import exceptions, retry

    retryable = (exceptions.TooManyRequests, exceptions.ServiceUnavailable)
    attempts = []

    def attempt() -> Any:
        if attempts and done is not None:
            found = done()
            if found is not None:
                log.info("%s: the attempt answered %s had gone through; not repeating it", what, _status(attempts[-1]))
                return found
        return function()

    def on_error(err: Exception) -> None:
        attempts.append(err)
        log.warning("%s: Vertex AI answered %s; retrying (attempt %d)", what, _status(err), len(attempts) + 1)

    try:
        return backoff(settings, retry.if_exception_type(*retryable), on_error)(attempt)()
    except exceptions.RetryError as err:
        cause = err.cause if err.cause is not None else (attempts[-1] if attempts else err)
        raise VertexError(
            f"{what}: Vertex AI still answered {_status(cause)} after retrying for {settings.retry_timeout:g}s: "
            "try again later, or raise --retry-timeout"
        ) from None
    except exceptions.Forbidden as err:  # 403: Forbidden over REST, PermissionDenied over gRPC
        raise VertexError(f"{what}: permission denied: {_permission(err)}") from None
    except exceptions.Conflict as err:  # 409: AlreadyExists and Aborted over gRPC, Conflict over REST
        if _aborted(err):
            raise VertexError(
                f"{what}: Vertex AI aborted the call ({_message(err)}): another change to the same resource was under "
                "way; run the command again"
            ) from None
        raise VertexError(f"{what}: the name is taken ({_message(err)}): choose another name or job id") from None
    except exceptions.Unauthenticated as err:
        raise VertexError(
            f"{what}: not authenticated ({_message(err)}): run `gcloud auth application-default login`"
        ) from None
    except exceptions.NotFound as err:
        raise VertexError(f"{what}: not found ({_message(err)})") from None
    except exceptions.GoogleAPICallError as err:
        raise VertexError(f"{what}: Vertex AI answered {_status(err)}: {_message(err)}") from None


def follow_states(what: str, get: Callable[[], Any], settings: VertexSettings, ended, poll_seconds: float) -> Any:
    """Polls ``get()`` (through ``call``; ``what`` names it) until its resource's state is one of ``ended``, printing
    each state it takes with the seconds since the start; returns the resource as it ended."""
    import time

    state, started = "", time.monotonic()
    while True:
        resource = call(what, get, settings)
        if resource.state.name != state:
            state = resource.state.name
            print(f"  {time.monotonic() - started:6.0f}s  {state}")
        if state in ended:
            return resource
        time.sleep(poll_seconds)


def _aborted(err: Exception) -> bool:
    """ABORTED (a concurrency conflict), which google.api_core files under Conflict: the class over gRPC, the error
    body's status over REST."""
    from google.api_core import exceptions

    if isinstance(err, exceptions.Aborted):
        return True
    response = getattr(err, "response", None)
    try:
        return response is not None and response.json().get("error", {}).get("status") == "ABORTED"
    except (ValueError, AttributeError):
        return False


def _status(err: Exception) -> str:
    code = getattr(err, "code", None)
    return f"{int(code)} {type(err).__name__}" if code else type(err).__name__


def _message(err: Exception) -> str:
    """The server's message, without the REST client's ``POST http://...:`` prefix."""
    message = one_line(Exception(getattr(err, "message", "") or str(err)))
    return re.sub(r"^(GET|POST|PATCH|PUT|DELETE) \S+: ", "", message)


# whom the pipeline's steps and its training job run as when no --service-account is given
DEFAULT_RUN_AS = (
    "the project's Compute Engine default service account (PROJECT_NUMBER-compute@developer.gserviceaccount.com)"
)
ACT_AS = "iam.serviceAccounts.actAs"


def run_as(settings: VertexSettings) -> str:
    """The account a submitted run's steps, and its training job, run as."""
    return settings.service_account or DEFAULT_RUN_AS


def _permission(err: Exception) -> str:
    message = _message(err)
    match = re.search(r"[Pp]ermission ['\"`]?([a-zA-Z]+\.[a-zA-Z]+\.[a-zA-Z]+)['\"`]?", message)
    if match and match.group(1) == ACT_AS:  # the submitter may not run jobs as the run-as account
        return (
            f"the caller lacks {ACT_AS} ({message}); grant it the Service Account User role "
            "(roles/iam.serviceAccountUser) on the account the run acts as: --service-account, else "
            f"{DEFAULT_RUN_AS}"
        )
    if match:
        return (
            f"the caller lacks {match.group(1)} ({message}); grant it, e.g. with the Vertex AI User role "
            "(roles/aiplatform.user)"
        )
    return f"{message}; the caller needs the Vertex AI User role (roles/aiplatform.user)"


def name_vertex_resource(artifact, settings: VertexSettings, resource_name: str) -> None:
    """Makes ``artifact`` (a ``google.VertexModel`` or ``VertexEndpoint`` output) name ``resource_name``, its URI
    and ``resourceName`` as GCPC's steps write them."""
    artifact.uri = f"https://{settings.region}-aiplatform.googleapis.com/v1/{resource_name}"
    artifact.metadata["resourceName"] = resource_name


def vertex_settings_in_pipeline(project: str, location: str) -> VertexSettings:
    """Settings for a step running on Vertex AI Pipelines: its project and location (Vertex AI fills them in), the
    ``TPU_PIPELINE_*`` environment for the rest (an API endpoint, say)."""
    settings = load_settings({"project": project, "region": location})
    settings.sources.update(
        {name: "the pipeline run" for name, value in (("project", project), ("region", location)) if value}
    )
    return settings
