"""The dashboard's static files, shipped inside the package: no build step, no bundler.

The directory holds plain ES modules, one stylesheet, ``index.html`` and one vendored charting
library (uPlot, with its licence header). The ``api`` function serves them at ``/`` and
``/dashboard/<name>`` (``routes_dashboard``), and ``corral dashboard`` serves the same files
from its local signing proxy. Stdlib only, so the CLI can serve them without the AWS extra.

Only files directly in this directory with a known suffix are assets: a name with a path
separator, a dot file or this module can never be served.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from importlib import resources

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
INDEX = "index.html"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
# The page loads nothing from elsewhere, runs no inline script, and may not be framed: a
# stolen token in sessionStorage is only reachable by script from this origin.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


@dataclass(frozen=True, slots=True)
class Asset:
    name: str
    body: str
    content_type: str
    etag: str  # a strong validator: the browser revalidates, and gets 304 while unchanged

    def headers(self) -> dict[str, str]:
        """Response headers: always revalidate (the names carry no version), never sniff."""
        headers = {
            "Content-Type": self.content_type,
            "Cache-Control": "no-cache",
            "ETag": self.etag,
            "X-Content-Type-Options": "nosniff",
        }
        if self.name == INDEX:
            headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
            headers["Referrer-Policy"] = "no-referrer"
        return headers

    def not_modified(self, if_none_match: str | None) -> bool:
        tags = {t.strip().removeprefix("W/") for t in (if_none_match or "").split(",")}
        return self.etag in tags or "*" in tags


def _suffix(name: str) -> str:
    return name[name.rfind(".") :] if "." in name else ""


@functools.cache
def _all() -> dict[str, Asset]:
    found: dict[str, Asset] = {}
    for entry in resources.files(__package__).iterdir():
        content_type = CONTENT_TYPES.get(_suffix(entry.name))
        if content_type is None or not entry.is_file() or not _NAME.match(entry.name):
            continue
        body = entry.read_text(encoding="utf-8")
        digest = hashlib.sha256(body.encode()).hexdigest()[:20]
        found[entry.name] = Asset(entry.name, body, content_type, f'"{digest}"')
    return found


def names() -> list[str]:
    return sorted(_all())


def get(name: str) -> Asset | None:
    """The asset of that file name, or None (unknown names, paths, hidden files)."""
    if not _NAME.match(name):
        return None
    return _all().get(name)


def index() -> Asset:
    page = _all().get(INDEX)
    if page is None:  # a broken package: fail loudly rather than serve an empty page
        raise FileNotFoundError(f"{__package__}/{INDEX} is missing from the package")
    return page
