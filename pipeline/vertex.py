"""Vertex AI Pipelines: submit the compiled ``pipeline.yaml``, follow it, and schedule it to retrain.

Every call goes through the real ``google-cloud-aiplatform`` client. Settings come from, in this order of precedence:
command-line flags, then environment variables (``TPU_PIPELINE_PROJECT`` ...; ``GOOGLE_CLOUD_PROJECT`` and
``GOOGLE_CLOUD_REGION`` also count), then a YAML config file (``--config``, or ``TPU_PIPELINE_CONFIG``; see
``pipeline/vertex.example.yaml``), then the defaults. A missing or wrong value is a one-line error that names it.

Calls answered 429 (quota) or 503 (unavailable) are retried with exponential backoff up to ``--retry-timeout``
seconds; 403 names the permission that is missing; 409 says which name is taken.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from components.cli import UsageError, one_line

log = logging.getLogger(__name__)

ENV_PREFIX = "TPU_PIPELINE_"
# setting -> environment variables, first found wins
ENVIRONMENT = {
    "project": (f"{ENV_PREFIX}PROJECT", "GOOGLE_CLOUD_PROJECT"),
    "region": (f"{ENV_PREFIX}REGION", "GOOGLE_CLOUD_REGION"),
    "pipeline_root": (f"{ENV_PREFIX}PIPELINE_ROOT",),
    "service_account": (f"{ENV_PREFIX}SERVICE_ACCOUNT",),
    "network": (f"{ENV_PREFIX}NETWORK",),
    "api_endpoint": (f"{ENV_PREFIX}API_ENDPOINT",),
    "template": (f"{ENV_PREFIX}TEMPLATE",),
    "anonymous": (f"{ENV_PREFIX}ANONYMOUS",),  # 1 / true: send no credentials (a local endpoint)
}
CONFIG_ENV = f"{ENV_PREFIX}CONFIG"
# the states --wait stops at: the run ended, or (PAUSED) it waits for someone to resume it in the console
TERMINAL_STATES = {"PIPELINE_STATE_SUCCEEDED", "PIPELINE_STATE_FAILED", "PIPELINE_STATE_CANCELLED",
                   "PIPELINE_STATE_PAUSED"}  # fmt: skip
LABEL_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE_PATTERN = re.compile(r"^[a-z0-9_-]{0,63}$")
REGION_PATTERN = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,\-?LW#]+$")


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


SETTING_NAMES = tuple(f.name for f in fields(VertexSettings))


def load_settings(
    flags: Mapping[str, Any], environ: Mapping[str, str] | None = None, config_path: str | None = None
) -> VertexSettings:
    """Flags (values that are not None) over environment variables over the config file over the defaults."""
    environ = os.environ if environ is None else environ
    config_path = config_path or environ.get(CONFIG_ENV, "")
    values: dict[str, Any] = dict(read_config(config_path)) if config_path else {}
    for name, variables in ENVIRONMENT.items():
        found = next((environ[v] for v in variables if environ.get(v)), None)
        if found is not None:
            values[name] = found.strip().lower() in ("1", "true", "yes") if name == "anonymous" else found
    for name, value in flags.items():
        if value is None:
            continue
        if name in ("labels", "parameters"):  # merged key by key: a flag overrides one label, not all of them
            values[name] = {**values.get(name, {}), **value}
        else:
            values[name] = value
    return VertexSettings(**values)


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


def parse_pairs(pairs: list[str] | None, flag: str) -> dict[str, str] | None:
    """``["k=v", ...]`` from repeated flags; None when the flag was not given."""
    if not pairs:
        return None
    result = {}
    for pair in pairs:
        name, separator, value = pair.partition("=")
        if not separator or not name:
            raise UsageError(f"{flag} {pair!r} is not NAME=VALUE")
        result[name.strip()] = value
    return result


def check_settings(settings: VertexSettings, need_root: bool = True) -> None:
    """One-line errors for what is missing or malformed, saying how to provide it."""

    def how(name: str, example: str) -> str:
        flag = name.replace("_", "-")
        variables = " or ".join(ENVIRONMENT[name])
        return f"pass --{flag} {example}, set {variables}, or put {name}: in the config file (--config)"

    if not settings.project:
        raise UsageError(f"no Google Cloud project: {how('project', 'my-project')}")
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


def pipeline_parameters(template: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Overrides typed by the template's own parameter types; unknown names and missing required ones are errors."""
    import yaml

    if not os.path.isfile(template):
        raise UsageError(f"pipeline template {template} does not exist: run python -m pipeline compile first")
    with open(template, encoding="utf-8") as handle:
        spec = yaml.safe_load(handle)
    declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    typed = {}
    for name, value in overrides.items():
        if name not in declared:
            raise UsageError(f"pipeline has no parameter {name!r}: use one of {', '.join(sorted(declared))}")
        typed[name] = _typed(name, value, declared[name]["parameterType"])
    for address in typed.get("notify_emails", []):  # the exit task would fail after the whole run otherwise
        if not isinstance(address, str) or not re.fullmatch(r"[^@\s,]+@[^@\s,]+\.[^@\s,]+", address):
            raise UsageError(
                f"--param notify_emails: {address!r} is not an email address: pass a JSON list of addresses, e.g. "
                "'[\"ml-team@example.com\"]'"
            )
    missing = sorted(n for n, d in declared.items() if not d.get("isOptional") and n not in typed)
    if missing:
        raise UsageError(f"pipeline parameter {missing[0]} is required: pass --param {missing[0]}=VALUE")
    return typed


def _typed(name: str, value: Any, kind: str) -> Any:
    if not isinstance(value, str):  # from the YAML config: already typed
        return value
    try:
        if kind == "NUMBER_INTEGER":
            return int(value)
        if kind == "NUMBER_DOUBLE":
            return float(value)
        if kind == "BOOLEAN":
            if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("true", "1", "yes")
        if kind in ("LIST", "STRUCT"):
            parsed = json.loads(value)
            if not isinstance(parsed, list if kind == "LIST" else dict):
                raise ValueError(value)
            return parsed
    except ValueError:
        example = {"NUMBER_INTEGER": "20", "NUMBER_DOUBLE": "0.002", "BOOLEAN": "true", "LIST": '["a","b"]',
                   "STRUCT": '{"k": 1}'}[kind]  # fmt: skip
        raise UsageError(f"--param {name}={value} is not a {kind.lower().replace('_', ' ')}, e.g. {example}") from None
    return value


def credentials_for(settings: VertexSettings):
    """Application Default Credentials, or anonymous ones for a local endpoint; a one-line error when none."""
    if settings.anonymous:
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials()
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    if not log.isEnabledFor(logging.DEBUG):  # its warnings on the way to failing are in the one-line error below
        logging.getLogger("google.auth").setLevel(logging.ERROR)
    try:
        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
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
    """Connects to the API's host and port, retrying within ``--retry-timeout``: an endpoint that cannot be reached
    is one line naming it, instead of the client's own retries (minutes, whatever the timeout) and a traceback.
    Skipped behind an HTTPS proxy, which the client goes through and this check would not."""
    import socket

    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return
    host, port = endpoint_of(settings)
    deadline, wait, reason = time.monotonic() + settings.retry_timeout, settings.retry_initial, ""
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(10.0, settings.retry_timeout)):
                return
        except OSError as err:
            reason = err.strerror or one_line(err)
        if time.monotonic() + wait > deadline:
            raise VertexError(
                f"cannot reach Vertex AI at {host}:{port} ({reason}) after trying for {settings.retry_timeout:g}s: "
                "check --api-endpoint and --region, the network, or set HTTPS_PROXY"
            )
        time.sleep(wait)
        wait = min(wait * 2, 30.0)


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

    policy = retry.Retry(
        predicate=retry.if_exception_type(*retryable),
        initial=settings.retry_initial,
        maximum=max(settings.retry_initial, 30.0),
        multiplier=2.0,
        timeout=settings.retry_timeout,
        on_error=on_error,
    )
    try:
        return policy(attempt)()
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


def console_link(settings: VertexSettings, job_name: str) -> str:
    job_id = job_name.rsplit("/", 1)[-1]
    return (
        f"https://console.cloud.google.com/vertex-ai/locations/{settings.region}/pipelines/runs/{job_id}"
        f"?project={settings.project}"
    )


def job_display_name(settings: VertexSettings) -> str:
    """The runs' display name: ``--display-name``, else the compiled pipeline's name."""
    return settings.display_name or _pipeline_name(settings.template)


def make_job(settings: VertexSettings, credentials, job_id: str | None = None):
    from google.cloud import aiplatform

    parameters = pipeline_parameters(settings.template, settings.parameters)
    return aiplatform.PipelineJob(
        display_name=job_display_name(settings),
        template_path=settings.template,
        job_id=job_id or None,
        pipeline_root=settings.pipeline_root,
        parameter_values=parameters,
        enable_caching=settings.enable_caching,
        labels=settings.labels or None,
        credentials=credentials,
        project=settings.project,
        location=settings.region,
    )


def _pipeline_name(template: str) -> str:
    import yaml

    with open(template, encoding="utf-8") as handle:
        return yaml.safe_load(handle).get("pipelineInfo", {}).get("name", "pipeline")


def check_experiment(name: str) -> None:
    """A Vertex AI Experiment's name (its metadata context id): lowercase letters, digits and hyphens."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,127}", name):
        raise UsageError(
            f"--experiment {name}: an experiment name is lowercase letters, digits and hyphens (at most 128, "
            "starting with a letter or digit), e.g. flowers-retraining"
        )


def check_tensorboard(tensorboard: str, settings: VertexSettings) -> None:
    """A Vertex AI TensorBoard's resource name, in the region the pipeline runs in (a training job reaches no other)."""
    found = re.fullmatch(r"projects/[^/]+/locations/([^/]+)/tensorboards/[0-9]+", tensorboard)
    if not found:
        raise UsageError(
            f"--tensorboard {tensorboard}: pass a Vertex AI TensorBoard's resource name, "
            "projects/PROJECT/locations/REGION/tensorboards/ID (gcloud ai tensorboards list)"
        )
    if found.group(1) != settings.region:
        raise UsageError(
            f"--tensorboard {tensorboard} is in {found.group(1)}, the pipeline runs in {settings.region}: use a "
            f"TensorBoard of {settings.region}"
        )
    if not settings.service_account:  # Vertex AI refuses a custom job with a TensorBoard and no service account
        raise UsageError(
            "--tensorboard needs --service-account: the training job writes its logs to the TensorBoard as that "
            "account (give it roles/aiplatform.user and roles/storage.admin on the pipeline root's bucket)"
        )


def tensorboard_parameters(settings: VertexSettings, tensorboard: str, job_id: str) -> dict[str, str]:
    """The DAG parameters that send the training job's logs to ``tensorboard``: the TensorBoard, and the job's
    base output directory (Vertex AI sets ``AIP_TENSORBOARD_LOG_DIR`` and ``AIP_CHECKPOINT_DIR`` under it), one per
    run under the pipeline root, so that runs never share their logs or their backups."""
    return {"tensorboard": tensorboard, "base_output_directory": f"{settings.pipeline_root.rstrip('/')}/{job_id}/train"}


def submit(
    settings: VertexSettings,
    job_id: str = "",
    wait: bool = False,
    poll_seconds: float = 30.0,
    experiment: str = "",
    tensorboard: str = "",
) -> dict:
    """Creates the PipelineJob; with ``wait``, follows its state to the end. Returns name, link and state.

    ``experiment``: the run joins that Vertex AI Experiment (created if needed), where its parameters and metrics
    (the evaluate step's) line up with the other runs'. ``tensorboard``: the training job's logs go to that Vertex
    AI TensorBoard."""
    from dataclasses import replace

    check_settings(settings)
    if experiment:
        check_experiment(experiment)
    if tensorboard:
        check_tensorboard(tensorboard, settings)
        # the run's own output directory needs the job's id before the job exists: fixed here, as the client would
        job_id = job_id or f"{_pipeline_name(settings.template)}-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}"
        settings = replace(settings, parameters={**settings.parameters,
                                                 **tensorboard_parameters(settings, tensorboard, job_id)})  # fmt: skip
    pipeline_parameters(settings.template, settings.parameters)  # the user's mistakes first, before any network
    credentials = connect(settings)
    found = join_experiment(settings, experiment, credentials) if experiment else None
    job = make_job(settings, credentials, job_id)  # the client names the job <pipeline>-<timestamp> when no id
    call(
        "submit the pipeline",
        lambda: job.submit(service_account=settings.service_account or None, network=settings.network or None),
        settings,
        done=lambda: _adopt_created_job(job),
    )
    result = {"name": job.resource_name, "link": console_link(settings, job.resource_name), "state": _state(job)}
    print(f"submitted {result['name']}\n  {result['link']}\n  its steps and its training job run as {run_as(settings)}")
    if found is not None:
        # the SDK's own steps of submit(experiment=...), apart so that each is retried and reported on its own:
        # the run's metadata context (which Vertex AI makes once the job runs) becomes a child of the experiment's
        call(f"add the run to experiment {experiment}",
             lambda: found._metadata_context.add_context_children([job._get_context()]), settings)  # fmt: skip
        result["experiment"] = found.dashboard_url
        print(f"  in experiment {experiment}: {found.dashboard_url}")
    if wait:
        result["state"] = follow(job, settings, poll_seconds)
    return result


def join_experiment(settings: VertexSettings, experiment: str, credentials):
    """The Vertex AI Experiment ``experiment``, created if it does not exist."""
    from google.cloud import aiplatform

    return call(
        f"find or create experiment {experiment}",
        lambda: aiplatform.Experiment.get_or_create(
            experiment, project=settings.project, location=settings.region, credentials=credentials
        ),
        settings,
    )


def _adopt_created_job(job):
    """After a failed create: the job with this id if the server made it after all (it becomes ``job``'s resource),
    else None. The id is fixed before the first attempt, so a retry can never make a second job."""
    from google.api_core import exceptions

    try:
        job._gca_resource = job.api_client.get_pipeline_job(name=f"{job._parent}/pipelineJobs/{job.job_id}")
    except exceptions.NotFound:
        return None
    return job


def follow(job, settings: VertexSettings, poll_seconds: float) -> str:
    """Polls the job until it ends, printing each state change; raises ``VertexError`` unless it succeeded."""
    state, started = "", time.monotonic()
    while True:
        resource = call("follow the pipeline job", lambda: job.api_client.get_pipeline_job(name=job.resource_name),
                        settings)  # fmt: skip
        new_state = resource.state.name
        if new_state != state:
            state = new_state
            print(f"  {time.monotonic() - started:6.0f}s  {state}")
        if state in TERMINAL_STATES:
            break
        time.sleep(poll_seconds)
    if state == "PIPELINE_STATE_PAUSED":
        raise VertexError(
            f"pipeline job {job.resource_name} is {state}: it waits for someone to resume it in the console "
            f"({console_link(settings, job.resource_name)}); --wait stops here"
        )
    if state != "PIPELINE_STATE_SUCCEEDED":
        detail = resource.error.message if resource.error and resource.error.message else "see the console link"
        raise VertexError(f"pipeline job {job.resource_name} ended {state}: {detail}")
    return state


def _state(job) -> str:
    try:
        return job.state.name
    except Exception:
        return "PIPELINE_STATE_UNSPECIFIED"


def check_cron(cron: str) -> None:
    """``[TZ=Area/City ]m h dom mon dow``: a one-line error otherwise."""
    parts = cron.split()
    if parts and re.match(r"^(CRON_)?TZ=", parts[0]):
        zone = parts[0].split("=", 1)[1]
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise UsageError(f"--cron {cron!r}: unknown time zone {zone!r}, e.g. TZ=Europe/Paris") from None
        parts = parts[1:]
    if len(parts) != 5 or not all(CRON_FIELD.match(part) for part in parts):
        raise UsageError(
            f"--cron {cron!r} is not a cron schedule: expected [TZ=Area/City] MINUTE HOUR DAY MONTH WEEKDAY, "
            'e.g. "TZ=Europe/Paris 0 3 * * 1"'
        )


def check_schedule_limits(cron: str, max_concurrent_runs: int | None, max_runs: int | None) -> None:
    """One-line errors for a wrong cron (when given) or run limit (None: not given)."""
    if cron:
        check_cron(cron)
    if max_concurrent_runs is not None and max_concurrent_runs < 1:
        raise UsageError(f"--max-concurrent-runs {max_concurrent_runs} must be at least 1")
    if max_runs is not None and max_runs < 1:
        raise UsageError(f"--max-runs {max_runs} must be at least 1 (leave it out for no limit)")


def create_schedule(
    settings: VertexSettings, cron: str, name: str, max_concurrent_runs: int = 1, max_runs: int | None = None
) -> dict:
    from google.cloud import aiplatform

    check_schedule_limits(cron, max_concurrent_runs, max_runs)
    check_settings(settings)
    pipeline_parameters(settings.template, settings.parameters)  # the user's mistakes first, before any network
    credentials = connect(settings)
    job = make_job(settings, credentials)
    display_name = name or f"{job_display_name(settings)}-retrain"  # the job is not created: it has no name to read
    schedule = aiplatform.PipelineJobSchedule(pipeline_job=job, display_name=display_name, credentials=credentials)
    existing = {s.resource_name for s in schedules_named(settings, display_name)}
    if existing:
        raise UsageError(
            f"a schedule named {display_name!r} exists ({', '.join(sorted(existing))}): change it with python -m "
            f"pipeline schedule update {display_name!r}, or pass another --name"
        )

    def created_after_all():  # a schedule has no id of ours: a new one of this name is the one a 503 hid
        new = [s for s in schedules_named(settings, display_name) if s.resource_name not in existing]
        if new:
            schedule._gca_resource = new[0]._gca_resource
            return schedule
        return None

    call(
        "create the schedule",
        lambda: schedule.create(
            cron=cron,
            max_concurrent_run_count=max_concurrent_runs,
            max_run_count=max_runs,
            service_account=settings.service_account or None,
            network=settings.network or None,
        ),
        settings,
        done=created_after_all,
    )
    print(f"scheduled {schedule.resource_name} ({display_name}): {cron}\n  its runs, steps and training jobs run as "
          f"{run_as(settings)}")  # fmt: skip
    return {"name": schedule.resource_name, "display_name": display_name, "cron": cron}


def schedules_named(settings: VertexSettings, display_name: str, what: str = "list the schedules") -> list:
    from google.cloud import aiplatform

    return call(
        what,
        lambda: aiplatform.PipelineJobSchedule.list(filter=f'display_name="{display_name}"'),
        settings,
    )


def update_schedule(
    settings: VertexSettings,
    schedule: str,
    cron: str = "",
    max_concurrent_runs: int | None = None,
    max_runs: int | None = None,
) -> dict:
    """Points an existing schedule at the pipeline as ``schedule create`` would build it now: the template (a
    recompiled ``pipeline.yaml``), parameters, pipeline root, labels, service account and network; and, when given,
    a new cron and run limits. A schedule otherwise keeps the pipeline spec it was created with."""
    from google.cloud import aiplatform
    from google.cloud.aiplatform.compat.types import schedule as gca_schedule
    from google.protobuf import field_mask_pb2

    check_schedule_limits(cron, max_concurrent_runs, max_runs)
    check_settings(settings)
    pipeline_parameters(settings.template, settings.parameters)  # the user's mistakes first, before any network
    credentials = connect(settings)
    resource = resolve_schedule(settings, schedule)
    current = call("find the schedule", lambda: aiplatform.PipelineJobSchedule.get(schedule_id=resource), settings)
    # the request create would send, from the settings as they are now
    built = aiplatform.PipelineJobSchedule(
        pipeline_job=make_job(settings, credentials), display_name=current.display_name, credentials=credentials
    )._gca_resource.create_pipeline_job_request
    # the identity and network the schedule runs with stay as they are unless given again
    running = current._gca_resource.create_pipeline_job_request.pipeline_job
    built.pipeline_job.service_account = settings.service_account or running.service_account
    built.pipeline_job.network = settings.network or running.network
    update = gca_schedule.Schedule(name=resource, create_pipeline_job_request=built)
    paths = ["create_pipeline_job_request"]
    for path, value in (("cron", cron), ("max_concurrent_run_count", max_concurrent_runs),
                        ("max_run_count", max_runs)):  # fmt: skip
        if value:
            setattr(update, path, value)
            paths.append(path)
    updated = call(
        "update the schedule",
        lambda: current.api_client.update_schedule(schedule=update, update_mask=field_mask_pb2.FieldMask(paths=paths)),
        settings,
    )
    print(f"updated {resource} ({updated.display_name}): {', '.join(paths)}; next runs use {settings.template}")
    return {"name": resource, "updated": paths, "cron": updated.cron}


def list_schedules(settings: VertexSettings, name: str = "") -> list[dict]:
    from google.cloud import aiplatform

    check_settings(settings, need_root=False)
    connect(settings)
    found = call(
        "list the schedules",
        lambda: aiplatform.PipelineJobSchedule.list(filter=f'display_name="{name}"' if name else None),
        settings,
    )
    rows = [
        {"name": s.resource_name, "display_name": s.display_name, "state": s.state.name, "cron": s.cron} for s in found
    ]
    for row in rows:
        print(f"{row['name']}  {row['display_name']}  {row['state']}  {row['cron']}")
    if not rows:
        print(f"no schedules in projects/{settings.project}/locations/{settings.region}")
    return rows


def change_schedule(settings: VertexSettings, action: str, schedule: str, catch_up: bool = False) -> str:
    """``pause``, ``resume`` or ``delete`` a schedule given by resource name, id or display name.

    ``catch_up`` (resume only): start the runs missed while paused. The aiplatform SDK's ``resume(catch_up=...)``
    never sends it, so the request goes through the API client directly."""
    from google.cloud import aiplatform

    check_settings(settings, need_root=False)
    connect(settings)
    resource = resolve_schedule(settings, schedule)
    handle = call("find the schedule", lambda: aiplatform.PipelineJobSchedule.get(schedule_id=resource), settings)
    if action == "resume" and catch_up:
        call("resume the schedule", lambda: handle.api_client.resume_schedule(name=resource, catch_up=True), settings)
    else:
        call(f"{action} the schedule", getattr(handle, action), settings)
    print(f"{action}d {resource}" if action != "resume" else f"resumed {resource}")
    return resource


def resolve_schedule(settings: VertexSettings, schedule: str) -> str:
    if schedule.startswith("projects/"):
        return schedule
    if schedule.isdigit():
        return f"projects/{settings.project}/locations/{settings.region}/schedules/{schedule}"
    found = schedules_named(settings, schedule, "find the schedule")
    if not found:
        raise UsageError(
            f"no schedule named {schedule!r} in projects/{settings.project}/locations/{settings.region}: "
            "see python -m pipeline schedule list"
        )
    if len(found) > 1:
        names = ", ".join(s.resource_name for s in found)
        raise UsageError(f"{len(found)} schedules are named {schedule!r}: pass one resource name ({names})")
    return found[0].resource_name
