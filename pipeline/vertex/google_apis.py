"""Google Cloud's REST APIs beside Vertex AI that the preflight asks (Service Usage, Resource Manager, IAM, Artifact
Registry, Compute Engine, Cloud Quotas), with the credentials and the retry policy of every Vertex AI call. A local
endpoint (``--api-endpoint http://...``: the tests' fake server) answers them all, each under ``/<service>/``."""

from __future__ import annotations

from typing import Any

from components.vertex_client import VertexSettings, backoff, credentials_for

HOSTS = {
    "serviceusage": "https://serviceusage.googleapis.com",
    "cloudresourcemanager": "https://cloudresourcemanager.googleapis.com",
    "iam": "https://iam.googleapis.com",
    "artifactregistry": "https://artifactregistry.googleapis.com",
    "compute": "https://compute.googleapis.com",
    "cloudquotas": "https://cloudquotas.googleapis.com",
}
# the APIs that bill a call to a quota project: user credentials without one name the project the call is about
QUOTA_PROJECT = ("serviceusage", "cloudquotas")
TIMEOUT_SECONDS = 30.0


class GoogleApis:
    """One authorized session for every call; ``get``/``post`` return the JSON answer, or raise
    ``google.api_core.exceptions`` as the client libraries do (``NotFound``, ``Forbidden`` with its ``reason``:
    ``SERVICE_DISABLED`` ...). 429 and 503 are retried as Vertex AI's calls are."""

    def __init__(self, settings: VertexSettings, credentials=None):
        from google.auth.transport.requests import AuthorizedSession

        self.settings = settings
        self.session = AuthorizedSession(credentials if credentials is not None else credentials_for(settings))
        self.local = settings.api_endpoint.startswith("http://")

    def url(self, service: str, path: str) -> str:
        base = f"{self.settings.api_endpoint.rstrip('/')}/{service}" if self.local else HOSTS[service]
        return base + path

    def get(self, service: str, path: str, params: Any = None) -> dict:
        return self.request("GET", service, path, params=params)

    def post(self, service: str, path: str, body: dict | None = None) -> dict:
        return self.request("POST", service, path, body=body or {})

    def request(self, method: str, service: str, path: str, params: Any = None, body: dict | None = None) -> dict:
        from google.api_core import exceptions, retry

        headers = {}
        if service in QUOTA_PROJECT and not self.settings.anonymous:
            headers["x-goog-user-project"] = self.settings.project

        def once() -> dict:
            try:
                response = self.session.request(
                    method, self.url(service, path), params=params, json=body, headers=headers, timeout=TIMEOUT_SECONDS
                )
            except OSError as err:  # no answer at all (requests' errors are OSErrors): retried as a 503 is
                raise exceptions.ServiceUnavailable(f"no answer from {self.url(service, path)}: {err}") from None
            if response.status_code >= 400:
                raise exceptions.from_http_response(response)
            return response.json() if response.content else {}

        retryable = retry.if_exception_type(exceptions.TooManyRequests, exceptions.ServiceUnavailable)
        return backoff(self.settings, retryable)(once)()
