"""The opener every index answer goes through: http(s) only, its redirects too, each refusal one line of the
caller's own error class (IndexAnswerError for the bounded reader, WheelError for the wheel fetcher)."""

from __future__ import annotations

import ssl
import urllib.request

import pytest

from pinmatrix.errors import PinmatrixError
from pinmatrix.index.answers import IndexAnswerError, index_opener
from pinmatrix.index.wheel_index import WheelError


def _handlers(opener: urllib.request.OpenerDirector) -> list[urllib.request.BaseHandler]:
    return list(opener.handlers)


@pytest.mark.parametrize("error", [IndexAnswerError, WheelError])
def test_a_url_of_another_scheme_is_refused_in_the_callers_error(error: type[PinmatrixError]) -> None:
    url = "file:///etc/" + "p" * 200
    with pytest.raises(error) as err:
        index_opener(url, None, error)
    assert str(err.value) == f"{url[:120]!r}: an index URL must be http or https"


@pytest.mark.parametrize("error", [IndexAnswerError, WheelError])
def test_a_redirect_to_another_scheme_is_refused_in_the_callers_error(error: type[PinmatrixError]) -> None:
    opener = index_opener("http://127.0.0.1:9/simple/", None, error)
    (redirect,) = [h for h in _handlers(opener) if isinstance(h, urllib.request.HTTPRedirectHandler)]
    request = urllib.request.Request("http://127.0.0.1:9/simple/")
    with pytest.raises(error) as err:
        redirect.redirect_request(request, None, 302, "Found", {}, "ftp://127.0.0.1/x")
    assert str(err.value) == "http://127.0.0.1:9/simple/: redirected to 'ftp://127.0.0.1/x', which is not http(s)"
    assert redirect.redirect_request(request, None, 302, "Found", {}, "https://127.0.0.1/x") is not None


def test_only_an_https_url_is_trusted_through_the_given_context() -> None:
    context = ssl.create_default_context()
    https = [h for h in _handlers(index_opener("https://127.0.0.1/s/", context, IndexAnswerError))
             if isinstance(h, urllib.request.HTTPSHandler)]
    assert [h._context for h in https] == [context]
    plain = [h for h in _handlers(index_opener("http://127.0.0.1/s/", context, IndexAnswerError))
             if isinstance(h, urllib.request.HTTPSHandler)]
    assert all(h._context is not context for h in plain)
