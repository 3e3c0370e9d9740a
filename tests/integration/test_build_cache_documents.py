"""The build cache's signed documents in a real registry (docker-registry): a lock's wheel choices stored by one
machine let a fresh one build the cell with the index gone; a document signed by a key not trusted, or a genuine
one moved under another key's tag, is refused in one line (the index is asked, as without a cache). The cells are
test_assemble.py's (a base written there, wheels from an index on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pep691 import serve_pages
from test_build_cache import _cache, _fresh
from unit.image.assembly.test_assemble import Project, _serve

from pinmatrix.engine.services import Service
from pinmatrix.image.build_cache import cache_tag
from pinmatrix.registry.client import Registry
from pinmatrix.release.signing import generate_keypair

pytestmark = [pytest.mark.registry]
DOC = {"format": 1, "choices": {}}


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Project, dict[str, bytes]]]:
    pages: dict[str, bytes] = {}
    with serve_pages(pages) as url:
        p = Project(tmp_path / "p", url, monkeypatch)
        _serve(pages, p)
        yield p, pages


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    private, public, _ = generate_keypair(tmp_path / "keys" / "signing")
    return private, public


def test_a_fresh_machine_builds_from_the_caches_wheel_choices_with_the_index_gone(
        served: tuple[Project, dict[str, bytes]], keys: tuple[Path, Path], docker_registry: Service) -> None:
    project, pages = served
    first = project.assemble(assembler=_fresh(project, "first", _cache(keys, docker_registry.address, "docs/warm",
                                                                        read=False)))
    pages.clear()  # the index answers nothing now
    lines: list[str] = []
    cache = _cache(keys, docker_registry.address, "docs/warm", write=False, lines=lines)
    assert project.assemble(assembler=_fresh(project, "fresh", cache)).digest == first.digest
    assert lines == [] and cache.report.misses == 0


def test_a_document_of_a_key_not_trusted_or_moved_under_another_key_is_refused_in_one_line(
        keys: tuple[Path, Path], docker_registry: Service, tmp_path: Path) -> None:
    other = generate_keypair(tmp_path / "other" / "signing")[:2]
    _cache(other, docker_registry.address, "docs/poisoned", read=False).store_document("a" * 64, "choices", DOC)
    lines: list[str] = []
    reader = _cache(keys, docker_registry.address, "docs/poisoned", write=False, lines=lines)
    assert reader.fetch_document("a" * 64, "choices") is None
    assert len(lines) == 1 and "untrusted" in lines[0] and "\n" not in lines[0]
    _cache(keys, docker_registry.address, "docs/moved", read=False).store_document("b" * 64, "choices", DOC)
    registry = Registry(docker_registry.address)
    genuine = registry.get_manifest("docs/moved", cache_tag("b" * 64))
    assert genuine is not None and reader.fetch_document("b" * 64, "choices") is None  # another repository
    moved = _cache(keys, docker_registry.address, "docs/moved", write=False, lines=lines)
    assert moved.fetch_document("b" * 64, "choices") == DOC
    registry.put_manifest("docs/moved", cache_tag("c" * 64), genuine)
    assert moved.fetch_document("c" * 64, "choices") is None
    assert "not this one" in lines[-1] and len(moved.report.refused) == 1
