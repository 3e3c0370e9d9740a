"""Answers from a package index, read as data from outside: every request has a timeout, every body a bound on
its bytes (read one past the bound, to say it is larger), redirects go to http(s) only, and a byte range is
asked for where only part of a file is wanted (a wheel's zip directory and METADATA member)."""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from pinmatrix.errors import PinmatrixError

DEFAULT_TIMEOUT = 30.0


class IndexAnswerError(PinmatrixError):
    """An index answered too slowly, too much, not at all, or something other than what was asked."""


class _HttpOnlyRedirect(urllib.request.HTTPRedirectHandler):
    """An index's redirects are followed to http(s) URLs only (urllib would follow one to ftp: too)."""

    def __init__(self, error: type[PinmatrixError]) -> None:
        super().__init__()
        self.error = error

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(newurl).scheme not in ("http", "https"):
            raise self.error(f"{req.full_url}: redirected to {newurl[:120]!r}, which is not http(s)")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def index_opener(url: str, context: ssl.SSLContext | None, error: type[PinmatrixError]) -> urllib.request.OpenerDirector:
    """The opener for one index URL: http(s) only, its redirects too (else ``error``, one line), an https URL
    trusted through ``context`` (the matrix's extra CAs included) when one is given."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise error(f"{url[:120]!r}: an index URL must be http or https")
    handlers: list[urllib.request.BaseHandler] = [_HttpOnlyRedirect(error)]
    if url.startswith("https:") and context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_range: str | None = None  # "bytes START-END/TOTAL" of a 206


@dataclass(frozen=True)
class BoundedHttp:
    """GET with a timeout and a byte bound; ``context`` is the TLS trust (the matrix's extra CAs included)."""

    timeout: float = DEFAULT_TIMEOUT
    context: ssl.SSLContext | None = None

    def get(self, url: str, *, limit: int, accept: str | None = None, byte_range: str | None = None,
            missing_ok: bool = False) -> Answer:
        """The body of ``url`` (at most ``limit`` bytes, else IndexAnswerError); a 404 with ``missing_ok`` is
        ``Answer(404, b"")``. ``byte_range``: "-N" (the last N bytes) or "A-B"."""
        opener = index_opener(url, self.context, IndexAnswerError)
        headers = {"Accept": accept} if accept else {}
        if byte_range:
            headers["Range"] = f"bytes={byte_range}"
        request = urllib.request.Request(url, headers=headers)
        try:
            with opener.open(request, timeout=self.timeout) as response:
                body = response.read(limit + 1)
                status, content_range = int(response.status), response.headers.get("Content-Range")
        except urllib.error.HTTPError as err:
            if err.code == 404 and missing_ok:
                return Answer(404, b"")
            raise IndexAnswerError(f"{_short(url)}: HTTP {err.code}") from None
        except (TimeoutError, socket.timeout):
            raise IndexAnswerError(f"{_short(url)}: no answer within {self.timeout:g} s") from None
        except (urllib.error.URLError, OSError) as err:
            raise IndexAnswerError(f"{_short(url)}: unreachable: {getattr(err, 'reason', err)}") from None
        if len(body) > limit:
            raise IndexAnswerError(f"{_short(url)}: the answer is larger than {limit} bytes")
        return Answer(status, body, content_range)


def _short(url: str) -> str:
    """The URL as an error names it: the path's last parts, not a whole signed query string."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"[:200]
