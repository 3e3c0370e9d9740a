"""The forge client against a fake forge on 127.0.0.2: merged, open and closed-unmerged pull requests and a closed
issue read into their model; a lying, a huge, a slow and a trickling answer each refused in one line naming the
reference; a redirect to another host refused before it is followed; the token sent to the forge alone; an offline
run answering from the cache with its age, and saying unknown without one."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fake_forge import FakeForge, pull, serve_forge

from pinmatrix.upgrade.forge import (
    ForgeCache,
    ForgeClient,
    ForgeError,
    UnreachableForge,
    UpstreamRef,
    forge_state,
    parse_ref,
    token_allowed,
)
from pinmatrix.upgrade.upstream import forge_words

NOW = datetime(2026, 12, 4, tzinfo=UTC)
REF = UpstreamRef("o", "pkg", "pull", 7)
PATH = "/repos/o/pkg/pulls/7"


@pytest.fixture
def forge() -> Iterator[tuple[FakeForge, str]]:
    fake = FakeForge()
    with serve_forge(fake) as url:
        yield fake, url


def test_references_are_read_from_forge_urls_only() -> None:
    assert parse_ref("https://github.com/facebookresearch/xformers/pull/1346") == UpstreamRef(
        "facebookresearch", "xformers", "pull", 1346)
    assert parse_ref("https://github.com/flashinfer-ai/flashinfer/issues/3170") == UpstreamRef(
        "flashinfer-ai", "flashinfer", "issues", 3170)
    for bad in ("https://github.com/o/../pull/1", "http://github.com/o/r/pull/1", "https://example.org/o/r/pull/1",
                "https://github.com/o/r/pull/1/../../x", "https://github.com/o/r/pull/0", "xformers PR #1346",
                "https://github.com/o/r/pull/1?x=1", "https://github.com/o%2F/r/pull/1"):
        assert parse_ref(bad) is None, bad


@pytest.mark.parametrize(("payload", "words", "merged"), [
    (pull(7, state="closed", merged=True, merged_at="2026-03-10T12:00:00Z", closed_at="2026-03-10T12:00:00Z"),
     "merged 2026-03-10", True),
    (pull(7), "open", False),
    (pull(7, state="closed", closed_at="2026-04-01T08:00:00Z"), "closed unmerged 2026-04-01", False),
])
def test_pull_request_states_are_read_and_cached_with_their_date(
        forge: tuple[FakeForge, str], tmp_path: Path, payload: dict[str, object], words: str, merged: bool) -> None:
    fake, url = forge
    fake.answer(PATH, payload)
    client, cache = ForgeClient(url, timeout=5), ForgeCache(tmp_path / "forge")
    state = forge_state(client, cache, REF, NOW, offline=False)
    assert state.answer is not None and state.answer.merged is merged and not state.from_cache
    assert forge_words(state, NOW) == words
    cached = cache.get(client.url(REF))
    assert cached is not None and cached.fetched_at == NOW and cached.answer == state.answer
    names = [p.name for p in (tmp_path / "forge").iterdir()]
    assert len(names) == 1 and re.fullmatch(r"[0-9a-f]{32}\.json", names[0])  # a hash, never the reference
    assert fake.seen[0][0] == PATH and "Authorization" not in fake.seen[0][1]


def test_an_issue_closed_as_completed(forge: tuple[FakeForge, str], tmp_path: Path) -> None:
    fake, url = forge
    fake.answer("/repos/o/pkg/issues/6", {"state": "closed", "state_reason": "completed", "title": "bug",
                                          "closed_at": "2026-05-02T00:00:00Z", "html_url": "u", "pull_request": None})
    state = forge_state(ForgeClient(url, timeout=5), ForgeCache(tmp_path), UpstreamRef("o", "pkg", "issues", 6), NOW,
                        offline=False)
    assert forge_words(state, NOW) == "closed as completed 2026-05-02"


@pytest.mark.parametrize(("payload", "line"), [
    (pull(7, merged="yes"), "o/pkg PR #7: the forge's answer is refused: merged: Input should be a valid boolean"),
    (pull(7, merged_at=1773144000), "o/pkg PR #7: the forge's answer is refused: merged_at: Input should be a valid "
                                    "datetime"),
    (pull(7, state="merged"), "o/pkg PR #7: the forge's answer is refused: state: Input should be 'open' or 'closed'"),
    (pull(7, title=["a list"]), "o/pkg PR #7: the forge's answer is refused: title: Input should be a valid string"),
    (b"[1, 2]", "o/pkg PR #7: the forge's answer is refused: (top): Input should be an object"),
    (b"<html>rate limited</html>", "o/pkg PR #7: the forge's answer is refused: (top): Invalid JSON: expected value at "
                                   "line 1 column 1"),
])
def test_a_lying_answer_is_refused_in_one_line_naming_the_pr(
        forge: tuple[FakeForge, str], tmp_path: Path, payload: dict[str, object] | bytes, line: str) -> None:
    fake, url = forge
    fake.answer(PATH, payload)
    with pytest.raises(ForgeError) as err:
        ForgeClient(url, token="s3cret", timeout=5).get(REF)
    assert str(err.value) == line and "s3cret" not in str(err.value)
    state = forge_state(ForgeClient(url, timeout=5), ForgeCache(tmp_path), REF, NOW, offline=False)
    assert state.answer is None and forge_words(state, NOW) == line.removeprefix("o/pkg PR #7: ") + "; unknown"


def test_a_huge_answer_is_refused_past_its_bound(forge: tuple[FakeForge, str]) -> None:
    fake, url = forge
    fake.answer(PATH, pull(7, body="x" * 5000))  # a valid answer, only too large
    assert ForgeClient(url, timeout=5, limit=10_000).get(REF).state == "open"
    with pytest.raises(ForgeError, match=r"^o/pkg PR #7: the forge's answer is larger than 4000 bytes; refused$"):
        ForgeClient(url, timeout=5, limit=4000).get(REF)


def test_a_slow_answer_and_a_trickling_one_are_a_timeout(forge: tuple[FakeForge, str]) -> None:
    fake, url = forge
    fake.answer(PATH, pull(7), delay=3.0)
    start = time.monotonic()
    with pytest.raises(UnreachableForge, match=r"^o/pkg PR #7: no answer within 0.4 s$"):
        ForgeClient(url, timeout=0.4).get(REF)
    fake.answer(PATH, pull(7), trickle=0.05)  # each byte in time, the whole far too late (~15 s)
    with pytest.raises(UnreachableForge, match=r"^o/pkg PR #7: no answer within 0.4 s$"):
        ForgeClient(url, timeout=0.4).get(REF)
    assert time.monotonic() - start < 3.0


def test_a_redirect_to_another_host_is_refused_before_it_is_followed(forge: tuple[FakeForge, str]) -> None:
    fake, url = forge
    other = FakeForge()
    other.answer(PATH, pull(7))
    with serve_forge(other, host="127.0.0.3") as elsewhere:
        fake.answer(PATH, b"", status=302, location=f"{elsewhere}{PATH}")
        with pytest.raises(ForgeError, match=r"^o/pkg PR #7: the forge redirected to another host \(127\.0\.0\.3:"):
            ForgeClient(url, token="s3cret", timeout=5).get(REF)
    assert other.seen == []
    fake.answer("/moved", pull(7, state="closed", merged=True, merged_at="2026-03-10T12:00:00Z"))
    fake.answer(PATH, b"", status=301, location="/moved")  # the same host: followed
    assert ForgeClient(url, timeout=5).get(REF).merged is True


def test_the_token_goes_to_the_forge_alone(forge: tuple[FakeForge, str], tmp_path: Path) -> None:
    fake, url = forge
    fake.answer(PATH, pull(7))
    forge_state(ForgeClient(url, token="s3cret", timeout=5), ForgeCache(tmp_path), REF, NOW, offline=False)
    assert fake.seen[-1][1].get("Authorization") == "Bearer s3cret"
    assert all("s3cret" not in p.read_text() for p in tmp_path.iterdir())  # never cached
    fake.answer("/moved", pull(7))
    fake.answer(PATH, b"", status=301, location="/moved")  # not even to its own redirect
    ForgeClient(url, token="s3cret", timeout=5).get(REF)
    assert fake.seen[-1][0] == "/moved" and "Authorization" not in fake.seen[-1][1]
    assert token_allowed("https://api.github.com") and token_allowed(url)
    assert not token_allowed("http://forge.example.org") and not token_allowed("http://10.0.0.1:8080")


def test_offline_answers_from_the_cache_and_states_its_age(forge: tuple[FakeForge, str], tmp_path: Path) -> None:
    fake, url = forge
    fake.answer(PATH, pull(7, state="closed", merged=True, merged_at="2026-03-10T12:00:00Z"))
    client, cache = ForgeClient(url, timeout=5), ForgeCache(tmp_path / "forge")
    forge_state(client, cache, REF, NOW, offline=False)
    seen = len(fake.seen)
    later = NOW + timedelta(days=3)
    state = forge_state(client, cache, REF, later, offline=True)
    assert len(fake.seen) == seen and state.from_cache and state.fetched_at == NOW
    assert forge_words(state, later) == "offline; cached answer from 2026-12-04 00:00Z (3 days old): merged 2026-03-10"


def test_an_unreachable_forge_falls_back_to_the_cache_else_unknown(tmp_path: Path) -> None:
    fake = FakeForge()
    fake.answer(PATH, pull(7))
    cache = ForgeCache(tmp_path / "forge")
    with serve_forge(fake) as url:
        forge_state(ForgeClient(url, timeout=5), cache, REF, NOW, offline=False)
    down = ForgeClient(url, timeout=2)  # the same URL, nothing listening now
    state = forge_state(down, cache, REF, NOW + timedelta(hours=5), offline=False)
    assert forge_words(state, NOW + timedelta(hours=5)).startswith("forge not reachable (")
    assert forge_words(state, NOW + timedelta(hours=5)).endswith("; cached answer from 2026-12-04 00:00Z (5 h old): open")
    empty = forge_state(down, ForgeCache(tmp_path / "none"), REF, NOW, offline=False)
    assert empty.answer is None and forge_words(empty, NOW).endswith("; unknown")


def test_offline_without_a_cached_answer_is_unknown(tmp_path: Path) -> None:
    state = forge_state(ForgeClient("http://127.0.0.2:9"), ForgeCache(tmp_path), REF, NOW, offline=True)
    assert (state.answer, state.from_cache, forge_words(state, NOW)) == (None, False, "offline; unknown")


def test_a_damaged_or_foreign_cache_entry_is_no_answer(tmp_path: Path) -> None:
    cache = ForgeCache(tmp_path)
    client = ForgeClient("http://127.0.0.2:9")
    key = client.url(REF)
    cache._file(key).write_text('{"key": "%s", "fetched_at": "2026-12-01T00:00:00Z", "answer": {"state": 1}}' % key)
    assert cache.get(key) is None
    cache._file(key).write_text('{"key": "http://elsewhere/x", "fetched_at": "2026-12-01T00:00:00Z", "answer": '
                                '{"state": "open", "title": "t", "html_url": "u"}}')
    assert cache.get(key) is None


def test_a_forge_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ForgeError, match=r"^forge URL 'file:///etc': must be an http\(s\) URL$"):
        ForgeClient("file:///etc")
