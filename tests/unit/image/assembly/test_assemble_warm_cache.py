"""Issue 46's warm-cache fixed costs: a fresh machine with a warm build cache plans on the Debian base's signed entry
and fetches the base's blob (most of its bytes) beside the other layers, not alone before them; a base whose blob
then does not come is made here and the cell planned again; it takes the lock's wheel choices from the cache's
document (image/cached_choices.py) and asks the index nothing. The cache is an in-memory stand-in of
image/build_cache.BuildCache (lookup, complete, fetch, store and the documents), filled by a first machine's build;
and it takes the signed verdict of the runnable check on the same layers (image/runnable_verdict.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from test_assemble import Project, index, project  # noqa: F401  (fixtures)

from pinmatrix.image import runnable_verdict
from pinmatrix.image.assembly import assemble as assemble_module
from pinmatrix.image.assembly.assemble import Assembler
from pinmatrix.image.build_cache import Found
from pinmatrix.oci.layer import LayerDescriptor
from pinmatrix.oci.layout import OCILayout


class MemoryCache:
    """Entries by key, with their blobs; the base's blob waits (up to 5 s) until another layer's fetch has begun."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[LayerDescriptor, bytes, dict[str, str]]] = {}
        self.others_begun = threading.Event()
        self.base_alone: bool | None = None
        self.refuse_base = False
        self.documents: dict[str, dict[str, Any]] = {}

    def fetch_document(self, key: str, what: str) -> dict[str, Any] | None:
        return self.documents.get(key)

    def store_document(self, key: str, what: str, doc: dict[str, Any]) -> None:
        self.documents.setdefault(key, doc)

    def store(self, key: str, layer: LayerDescriptor, what: str, layout: OCILayout,
              meta: dict[str, str] | None = None, extras: Sequence[Path] = ()) -> None:
        self.entries.setdefault(key, (layer, layout.blob_path(layer.digest).read_bytes(), dict(meta or {})))

    def lookup(self, key: str, what: str) -> Found | None:
        entry = self.entries.get(key)
        return Found(key, entry[0], entry[2], {}) if entry else None

    def complete(self, found: Found, what: str, layout: OCILayout, extras_dir: Path | None = None) -> bool:
        if what.startswith("base "):
            self.base_alone = not self.others_begun.wait(5)
            if self.refuse_base:
                return False
        else:
            self.others_begun.set()
        assert layout.put_blob(self.entries[found.key][1]) == found.layer.digest
        return True

    def fetch(self, key: str, what: str, layout: OCILayout, extras_dir: Path | None = None, *,
              progress: Any = None) -> tuple[LayerDescriptor, dict[str, str]] | None:
        found = self.lookup(key, what)
        return (found.layer, found.meta) if found and self.complete(found, what, layout, extras_dir) else None


def _machines(first: Project, name: str, cache: MemoryCache | None = None) -> tuple[Assembler, MemoryCache]:
    """A first machine's build into a warm cache, and a fresh machine (its own cache folder and layout) reading it."""
    cache = cache or MemoryCache()
    first.assembler.remote = cache
    first.assemble()
    fresh = Assembler(dataclasses.replace(first.settings, cache_dir=first.tmp / name / "cache",
                                          layout_dir=first.tmp / name / "oci"))
    fresh.remote = cache
    return fresh, cache


def test_a_fresh_machine_fetches_the_bases_blob_beside_the_other_layers(project: Project) -> None:  # noqa: F811
    first = project.assemble()
    fresh, cache = _machines(project, "fresh")
    made_before = project.base_calls.count(False)
    steps: list[str] = []
    image = project.assemble(assembler=fresh, steps=steps)
    assert cache.base_alone is False, "the base's blob was fetched before any other layer"
    assert image.digest == first.digest  # the same image, planned on the entry
    assert project.base_calls.count(False) == made_before  # no base made (no mmdebstrap) on the fresh machine
    assert not any(s.startswith("plan again") for s in steps)
    base = image.layers[0].descriptor
    assert base is not None and fresh.layout.intact_blob(base.digest, base.size)


def test_a_base_whose_blob_does_not_come_is_made_here_and_the_cell_planned_again(project: Project) -> None:  # noqa: F811
    first = project.assemble()
    fresh, cache = _machines(project, "refused")
    cache.refuse_base = True
    (base_key,) = [k for k, (_, _, meta) in cache.entries.items() if "python" in meta]
    layer, _, meta = cache.entries[base_key]
    other = b"another machine's base"  # its blob never comes here: it must not be stored from here either
    cache.entries[base_key] = (dataclasses.replace(layer, digest=f"sha256:{hashlib.sha256(other).hexdigest()}",
                                                   size=len(other)), other, meta)
    made_before = project.base_calls.count(False)
    steps: list[str] = []
    image = project.assemble(assembler=fresh, steps=steps)
    assert any(s.startswith("plan again") for s in steps), (steps, cache.base_alone, project.base_calls)
    assert project.base_calls.count(False) == made_before + 1  # made here
    assert image.digest == first.digest  # the stand-in base is made the same on every machine


def test_a_fresh_machine_takes_the_locks_wheel_choices_from_the_cache_and_asks_the_index_nothing(
        project: Project, index: tuple[str, dict[str, bytes]]) -> None:  # noqa: F811
    first = project.assemble()
    fresh, cache = _machines(project, "no-index")
    (doc,) = cache.documents.values()
    assert sorted(doc["choices"]) == ["alpha", "beta"]
    index[1].clear()  # the index answers nothing now
    assert project.assemble(assembler=fresh).digest == first.digest


def test_a_choices_document_that_names_another_wheel_is_not_used_and_the_index_is_asked(
        project: Project, index: tuple[str, dict[str, bytes]]) -> None:  # noqa: F811
    first = project.assemble()
    fresh, cache = _machines(project, "bad-choice")
    (doc,) = cache.documents.values()
    doc["choices"]["beta"]["sha256"] = "0" * 64  # signed, but not one of the lock line's hashes
    assert project.assemble(assembler=fresh).digest == first.digest  # chosen by the index, as without a cache
    assert "build cache: the wheel choices of cell" in project.log.read_text()
    assert "beta: sha256 000000000000 is none of the lock line's hashes" in project.log.read_text()


def _counting_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    checked: list[int] = []
    real = assemble_module.check_layers

    def check_layers(layers, arch, env, rules=None, scans=None):  # noqa: ANN001, ANN202
        layers = list(layers)
        checked.append(len(layers))
        return real(layers, arch, env, rules, scans)

    monkeypatch.setattr(assemble_module, "check_layers", check_layers)
    return checked


def test_a_fresh_machine_takes_the_signed_runnable_verdict_on_the_same_layers_and_walks_no_tree(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    checked = _counting_checks(monkeypatch)
    project.assembler.remote = cache = MemoryCache()
    cache.others_begun.set()  # the base's blob is not what these tests time
    first = project.assemble()
    fresh, _ = _machines(project, "verdict", cache)
    verdicts = [d for d in cache.documents.values() if "notes" in d]
    assert len(verdicts) == 1 and checked == [5]  # checked once, on the first machine (base, venv, 2 wheels, smoke)
    assert project.assemble(assembler=fresh).digest == first.digest
    assert checked == [5], "the fresh machine walked the image's tree again"


def test_a_verdict_of_another_checker_or_not_a_verdict_is_not_taken(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    checked = _counting_checks(monkeypatch)
    project.assembler.remote = cache = MemoryCache()
    cache.others_begun.set()  # the base's blob is not what these tests time
    project.assemble()
    fresh, _ = _machines(project, "another-checker", cache)
    monkeypatch.setattr(runnable_verdict, "checker_identity", lambda: "another checker")
    project.assemble(assembler=fresh)
    assert len(checked) == 2  # the key named another checker: checked here
    for key, doc in cache.documents.items():
        if "notes" in doc:
            cache.documents[key] = {"format": 1, "notes": "not a list"}
    again = Assembler(dataclasses.replace(project.settings, cache_dir=project.tmp / "bad" / "cache",
                                          layout_dir=project.tmp / "bad" / "oci"))
    again.remote = cache
    project.assemble(assembler=again)
    assert len(checked) == 3


def test_a_foreign_cells_builder_base_still_coming_is_waited_for_and_its_failure_plans_again(project: Project) -> None:  # noqa: F811
    """The builder root's base of a cross-compiled cell (aot_plan.CrossInputs.base_layers) comes like the cell's
    own: the cell waits for it too, and a blob that did not come makes the cell plan again."""
    from concurrent.futures import Future

    from pinmatrix.image.assembly.aot_plan import AotPlan, CrossInputs
    from pinmatrix.image.assembly.rootfs import BaseLayers

    layer = LayerDescriptor("sha256:" + "b" * 64, 1, "sha256:" + "b" * 64, "application/vnd.oci.image.layer.v1.tar")
    builder = BaseLayers((layer,), (), "debian:builder", "builder-key", "3.11")
    own = BaseLayers((), (), "debian:own", "own-key", "3.11")
    coming: Future[bool] = Future()
    project.assembler._bases_coming["builder-key"] = (builder, coming)
    cross = CrossInputs(None, base_key="builder-key", base_layers=builder.layers)
    ctx: dict[str, object] = {"base": own, "aot": AotPlan(None, ("norm",), "9.0a", cross=cross)}
    assert project.assembler._base_settled({"base": own, "aot": None})  # another cell's base: not waited for
    answers: list[bool] = []
    waiter = threading.Thread(target=lambda: answers.append(project.assembler._base_settled(ctx)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and answers == []  # waiting for the builder base's blob
    coming.set_result(False)
    waiter.join(5)
    assert answers == [False]


def test_a_fresh_machine_fetches_the_largest_blobs_first(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Every entry is looked up first, then the blobs come largest first: in the plan's order (by name) a cell's
    largest layers (torch, triton) came last, and the fetch ended on them alone, one stream where eight could run."""
    project.assembler.remote = cache = MemoryCache()
    cache.others_begun.set()  # the base's blob is not what this test orders
    first = project.assemble()
    fresh, _ = _machines(project, "largest-first", cache)
    came: list[tuple[str, int]] = []
    real = cache.complete

    def complete(found: Found, what: str, layout: OCILayout, extras_dir: Path | None = None) -> bool:
        came.append((what, found.layer.size))
        return real(found, what, layout, extras_dir)

    cache.complete = complete  # type: ignore[method-assign]
    monkeypatch.setattr(assemble_module, "PREFETCH", 1)  # one at a time: the order they start is the order they come
    image = project.assemble(assembler=fresh)
    assert image.digest == first.digest
    fetched = [(what, size) for what, size in came if not what.startswith("base ")]
    planned = [p.name for p in image.layers[1:]]
    assert sorted(what for what, _ in fetched) == sorted(planned)
    assert [size for _, size in fetched] == sorted((size for _, size in fetched), reverse=True), fetched
    assert [what for what, _ in fetched] != planned, "the plan's order is by size already: this test shows nothing"
