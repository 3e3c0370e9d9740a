"""The build cache in a real registry (docker-registry): a fresh cache folder and layout fetch every layer another
machine stored under the same keys and build none; an entry that is unsigned, signed by a key not trusted, moved
under another key's tag, or whose blob is not the signed digest is refused (one line) and the layer built; a cache
that is down, or that refuses (asks for credentials this machine lacks, answers 403 or 500), is one line and a normal
build; a push to the cache's registry mounts the cache's blobs. The cells are
test_assemble.py's (a base written there, wheels from an index on 127.0.0.1)."""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from auth_registries import htpasswd_auth_yaml, start_docker_registry, write_htpasswd
from pep691 import serve_pages
from test_build_demo import demo_project
from unit.image.assembly.test_assemble import Project, _serve

from conftest import require_binaries
from pinmatrix.engine.services import Service
from pinmatrix.hashing import sha256_digest
from pinmatrix.image.assembly import rootfs
from pinmatrix.image.assembly.assemble import Assembler
from pinmatrix.image.build import CellBuilder, build_all
from pinmatrix.image.build_cache import ENTRY_TYPE, BuildCache, cache_tag
from pinmatrix.image.settings import BuildSettings
from pinmatrix.matrix.expand import select_cells
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.matrix_toml import load_matrix
from pinmatrix.registry.client import OCI_MANIFEST, Manifest, Registry
from pinmatrix.release.cache_signing import cache_trust
from pinmatrix.release.signing import generate_keypair, load_public_key, load_signer, sign_envelope

pytestmark = [pytest.mark.registry]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    pages: dict[str, bytes] = {}
    with serve_pages(pages) as url:
        p = Project(tmp_path / "p", url, monkeypatch)
        _serve(pages, p)
        yield p


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    private, public, _ = generate_keypair(tmp_path / "keys" / "signing")
    return private, public


def _cache(keys: tuple[Path, Path], address: str, repo: str, *, write: bool = True, read: bool = True,
           lines: list[str] | None = None) -> BuildCache:
    private, public = keys
    trust = cache_trust([load_public_key(public)], private if write else None)
    return BuildCache(trust, cache_from=f"{address}/{repo}" if read else None,
                      cache_to=f"{address}/{repo}" if write else None,
                      warn=(lines.append if lines is not None else lambda line: None))


@contextmanager
def _counting(assembler: Assembler) -> Iterator[list[str]]:
    """The names of the layers ``assembler`` builds (not found in its cache folder nor fetched)."""
    built: list[str] = []
    original = assembler._cached_or_build

    def counted(planned, build, epoch, on_step=None):  # noqa: ANN001, ANN202
        def build_counted(writer):  # noqa: ANN001, ANN202
            built.append(planned.name)
            return build(writer)
        return original(planned, build_counted, epoch, on_step)

    assembler._cached_or_build = counted  # type: ignore[method-assign]
    yield built


def _fresh(project: Project, name: str, cache: BuildCache | None) -> Assembler:
    """An assembler with a cache folder and a layout of its own: another machine."""
    settings = dataclasses.replace(project.settings, cache_dir=project.tmp / name / "cache",
                                   layout_dir=project.tmp / name / "oci")
    assembler = Assembler(settings)
    assembler.remote = cache
    return assembler


def _warm(project: Project, keys: tuple[Path, Path], address: str, repo: str) -> tuple[list[str], object]:
    """The first machine: builds the cell and stores every layer."""
    writer = _fresh(project, "first", _cache(keys, address, repo, read=False))
    with _counting(writer) as built:
        image = project.assemble(assembler=writer)
    assert built and writer.remote is not None
    return built, image


def test_a_fresh_machine_fetches_every_layer_from_a_warm_cache_and_builds_none(
        project: Project, keys: tuple[Path, Path], docker_registry: Service) -> None:
    built, first = _warm(project, keys, docker_registry.address, "cache/warm")
    cache = _cache(keys, docker_registry.address, "cache/warm", write=False)
    second = _fresh(project, "second", cache)
    with _counting(second) as rebuilt:
        image = project.assemble(assembler=second)
    assert rebuilt == []
    assert image.digest == first.digest  # type: ignore[attr-defined]
    assert all(p.fetched for p in image.layers[1:] if not p.name.startswith("wheels:"))
    scans = {p.name.split("-")[0] for p in (second.settings.cache_dir / "runnable").iterdir()}
    assert {p.descriptor.digest.split(":")[1] for p in image.layers if p.descriptor} <= scans  # not read again
    assert cache.report.hits >= len(set(built)) - 1 and cache.report.refused == [] and cache.report.down == []


def test_without_the_cache_the_same_fresh_machine_builds_every_layer(project: Project, keys: tuple[Path, Path],
                                                                     docker_registry: Service) -> None:
    _warm(project, keys, docker_registry.address, "cache/none")
    second = _fresh(project, "second", None)
    with _counting(second) as rebuilt:
        project.assemble(assembler=second)
    assert "venv" in rebuilt and any(n.startswith("wheel:") for n in rebuilt)


def _entry(registry: Registry, repo: str, key: str) -> tuple[dict[str, object], bytes]:
    manifest = registry.get_manifest(repo, cache_tag(key))
    assert manifest is not None
    doc = manifest.json
    return doc, registry.get_blob(repo, doc["layers"][0]["digest"])


def _put_entry(registry: Registry, repo: str, key: str, doc: dict[str, object], envelope: bytes) -> None:
    """The entry under ``key``'s tag with ``envelope`` in place of its own (as anyone who can push could)."""
    registry.push_blob(repo, envelope)
    layers = list(doc["layers"])  # type: ignore[call-overload]
    layers[0] = {**layers[0], "digest": sha256_digest(envelope), "size": len(envelope)}
    body = json.dumps({**doc, "layers": layers}).encode()
    registry.put_manifest(repo, cache_tag(key), Manifest(body, OCI_MANIFEST, sha256_digest(body)))


def _poisoned_run(project: Project, keys: tuple[Path, Path], address: str, repo: str,
                  forge) -> tuple[list[str], list[str], BuildCache, str]:  # noqa: ANN001
    """Warm the cache, forge the venv layer's entry with ``forge(envelope, payload, other_key) -> envelope``, then
    build on a fresh machine: (what it built, the lines it said, the cache, the venv key)."""
    _, first = _warm(project, keys, address, repo)
    registry = Registry(address)
    layers = {p.name: p.key for p in first.layers}  # type: ignore[attr-defined]
    doc, envelope = _entry(registry, repo, layers["venv"])
    payload = base64.b64decode(json.loads(envelope)["payload"])
    _put_entry(registry, repo, layers["venv"], doc, forge(envelope, payload, layers["smoke"]))
    lines: list[str] = []
    cache = _cache(keys, address, repo, write=False, lines=lines)
    second = _fresh(project, "second", cache)
    with _counting(second) as rebuilt:
        project.assemble(assembler=second)
    return rebuilt, lines, cache, layers["venv"]


def _unsigned(envelope: bytes, payload: bytes, other: str) -> bytes:
    doc = json.loads(envelope)
    return json.dumps({**doc, "signatures": []}).encode()


def _payload_with_another_digest(envelope: bytes, payload: bytes, other: str) -> bytes:
    entry = json.loads(payload)
    entry["layer"]["digest"] = "sha256:" + "0" * 64  # the right key, another digest; the signature left as it was
    return json.dumps({**json.loads(envelope), "payload": base64.b64encode(json.dumps(entry).encode()).decode()}).encode()


@pytest.mark.parametrize(("forge", "said"), [
    (_unsigned, "carries no signature"),
    (_payload_with_another_digest, "does not verify"),
])
def test_a_poisoned_entry_is_refused_in_one_line_and_its_layer_built(
        project: Project, keys: tuple[Path, Path], docker_registry: Service, forge, said: str) -> None:  # noqa: ANN001
    rebuilt, lines, cache, _ = _poisoned_run(project, keys, docker_registry.address, f"cache/{forge.__name__[1:]}",
                                             forge)
    assert rebuilt == ["venv"]
    assert len(lines) == 1 and "venv" in lines[0] and said in lines[0] and "\n" not in lines[0]
    assert len(cache.report.refused) == 1


def test_an_entry_signed_by_a_key_not_trusted_is_refused(project: Project, keys: tuple[Path, Path],
                                                         docker_registry: Service, tmp_path: Path) -> None:
    other, _, _ = generate_keypair(tmp_path / "other" / "signing")
    signer = load_signer(other)

    def foreign(envelope: bytes, payload: bytes, key: str) -> bytes:
        return json.dumps(sign_envelope(payload, signer, ENTRY_TYPE)).encode()

    rebuilt, lines, _, _ = _poisoned_run(project, keys, docker_registry.address, "cache/foreign", foreign)
    assert rebuilt == ["venv"] and "untrusted" in lines[0]


def test_a_signed_entry_moved_under_another_keys_tag_is_refused(project: Project, keys: tuple[Path, Path],
                                                                docker_registry: Service) -> None:
    signer = load_signer(keys[0])

    def moved(envelope: bytes, payload: bytes, other_key: str) -> bytes:
        entry = json.loads(payload)
        entry["key"] = other_key  # a genuine entry, of another layer (the smoke layer's), signed by the project
        return json.dumps(sign_envelope(json.dumps(entry).encode(), signer, ENTRY_TYPE)).encode()

    rebuilt, lines, _, venv_key = _poisoned_run(project, keys, docker_registry.address, "cache/moved", moved)
    assert rebuilt == ["venv"] and "not this one" in lines[0] and venv_key[:12] in lines[0]


def test_a_blob_that_is_not_the_signed_digest_is_refused(project: Project, keys: tuple[Path, Path],
                                                         docker_registry: Service,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    _, first = _warm(project, keys, docker_registry.address, "cache/blob")
    layer_blobs = {p.descriptor.digest for p in first.layers if p.descriptor}  # type: ignore[attr-defined]
    original = Registry.open_blob

    @contextmanager
    def other_bytes(self, repository, digest):  # noqa: ANN001, ANN202 - a registry that serves other layer bytes
        with original(self, repository, digest) as reader:
            if digest in layer_blobs:
                reader._raw = _Tampered(reader._raw)
            yield reader

    monkeypatch.setattr(Registry, "open_blob", other_bytes)
    lines: list[str] = []
    second = _fresh(project, "second", _cache(keys, docker_registry.address, "cache/blob", write=False, lines=lines))
    with _counting(second) as rebuilt:
        project.assemble(assembler=second)
    assert "venv" in rebuilt and lines and all("does not match its digest" in line for line in lines)
    assert not any(p.name.startswith(".fetch-") for p in second.layout.blobs.iterdir())


@pytest.mark.parametrize("declared", ["none", "more"])
def test_a_blob_longer_than_the_signed_size_is_refused_before_it_fills_the_disk(
        project: Project, keys: tuple[Path, Path], docker_registry: Service, monkeypatch: pytest.MonkeyPatch,
        declared: str) -> None:
    _, first = _warm(project, keys, docker_registry.address, f"cache/long-{declared}")
    sizes = {p.descriptor.digest: p.descriptor.size for p in first.layers if p.descriptor}  # type: ignore[attr-defined]
    original = Registry.open_blob
    served: list[int] = []

    @contextmanager
    def endless(self, repository, digest):  # noqa: ANN001, ANN202 - the layer's bytes, then 64 MiB more
        with original(self, repository, digest) as reader:
            if digest in sizes:
                reader._raw = _Longer(reader._raw, served)
                reader.length = None if declared == "none" else sizes[digest] + (64 << 20)
            yield reader

    monkeypatch.setattr(Registry, "open_blob", endless)
    lines: list[str] = []
    second = _fresh(project, "second", _cache(keys, docker_registry.address, f"cache/long-{declared}", write=False,
                                              lines=lines))
    with _counting(second) as rebuilt:
        project.assemble(assembler=second)
    assert "venv" in rebuilt and lines and all("the entry says" in line for line in lines), lines
    assert sum(served) <= sum(sizes.values()) + len(sizes) * (2 << 20)  # at most a chunk past each signed size
    assert not any(p.name.startswith(".fetch-") for p in second.layout.blobs.iterdir())


class _Longer:
    """A blob's bytes followed by 64 MiB that are not its; what was served is added to ``served``."""

    def __init__(self, raw, served: list[int]) -> None:  # noqa: ANN001
        self.raw, self.extra, self.served = raw, 64 << 20, served

    def read(self, size: int = -1) -> bytes:
        chunk = self.raw.read(size)
        if not chunk and self.extra > 0:
            chunk = b"\0" * min(self.extra, size if size > 0 else 1 << 20)
            self.extra -= len(chunk)
        self.served.append(len(chunk))
        return chunk

    def close(self) -> None:
        self.raw.close()


class _Tampered:
    def __init__(self, raw) -> None:  # noqa: ANN001
        self.raw, self.first = raw, True

    def read(self, size: int = -1) -> bytes:
        chunk = self.raw.read(size)
        if chunk and self.first:
            self.first = False
            return bytes([chunk[0] ^ 1]) + chunk[1:]
        return chunk

    def close(self) -> None:
        self.raw.close()


def test_a_cache_that_is_down_is_one_line_and_a_normal_build(project: Project, keys: tuple[Path, Path]) -> None:
    lines: list[str] = []
    cache = _cache(keys, "127.0.0.1:9", "cache/down", lines=lines)  # the discard port: nothing listens
    assembler = _fresh(project, "down", cache)
    with _counting(assembler) as built:
        image = project.assemble(assembler=assembler)
    assert image.digest and "venv" in built
    assert len(lines) == 2 and all("not used for the rest of this run" in line for line in lines), lines
    assert len(cache.report.down) == 2


def test_a_push_to_the_caches_registry_mounts_the_cached_blobs(project: Project, keys: tuple[Path, Path],
                                                               docker_registry: Service) -> None:
    _, first = _warm(project, keys, docker_registry.address, "cache/mount")
    registry = Registry(docker_registry.address)
    cache = _cache(keys, docker_registry.address, "cache/mount", write=False)
    layers = [p.descriptor for p in first.layers[1:] if p.descriptor is not None]  # type: ignore[attr-defined]
    assert cache.mount_into(registry, "pushed/cell", layers) == len({d.digest for d in layers})
    assert all(registry.has_blob("pushed/cell", d.digest) for d in layers)
    assert cache.mount_into(registry, "pushed/cell", layers) == 0  # there already: nothing mounted again


def test_a_fresh_machine_takes_the_caches_debian_base_and_runs_no_mmdebstrap(
        project: Project, keys: tuple[Path, Path], docker_registry: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    _, first = _warm(project, keys, docker_registry.address, "cache/base")
    base = first.layers[0].descriptor  # type: ignore[attr-defined]
    second = _fresh(project, "second", _cache(keys, docker_registry.address, "cache/base", write=False))
    project.assemble(assembler=second)
    cell, cache_dir = project.cell, second.settings.cache_dir
    key, record = rootfs.debian_base_record(cell.base, cell.platform, cache_dir)
    assert json.loads(record.read_text())["python"] == "3.11"

    def no_mmdebstrap(*args: object) -> None:
        raise AssertionError("mmdebstrap ran")

    monkeypatch.setattr(rootfs, "_mmdebstrap", no_mmdebstrap)
    made = rootfs.debian_base(cell.base, cell.platform, second.layout, cache_dir, project.tmp / "base.log")
    assert made.layers == (base,) and made.python == "3.11"
    assert (record.parent / f"{key}.layer").read_bytes() == second.layout.blob_path(base.digest).read_bytes()


def test_cache_to_stores_the_layers_a_machine_made_before_and_writes_over_an_entry_that_does_not_verify(
        project: Project, keys: tuple[Path, Path], docker_registry: Service) -> None:
    address, repo = docker_registry.address, "cache/later"
    made = _fresh(project, "made", None)
    first = project.assemble(assembler=made)  # no cache yet
    keys_by_name = {p.name: p.key for p in first.layers}
    registry = Registry(address)
    registry.push_blob(repo, b"{}")
    junk = b'{"payloadType": "x", "payload": "", "signatures": []}'
    _put_entry(registry, repo, keys_by_name["venv"], {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": "application/vnd.pinmatrix.build-cache.v1",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha256_digest(b"{}"), "size": 2},
        "layers": [{"mediaType": "application/vnd.dsse.envelope.v1+json", "digest": sha256_digest(junk),
                    "size": len(junk)}]}, junk)
    again = Assembler(made.settings)  # the same machine, now with --cache-to
    cache = _cache(keys, address, repo, read=False)
    again.remote = cache
    with _counting(again) as built:
        image = project.assemble(assembler=again)
    assert built == [] and image.cached
    assert cache.report.stored == len(first.layers)  # the base and every other layer, the poisoned venv's included
    fresh = _fresh(project, "fresh", _cache(keys, address, repo, write=False))
    with _counting(fresh) as rebuilt:
        assert project.assemble(assembler=fresh).digest == first.digest
    assert rebuilt == []


@pytest.mark.slow
@pytest.mark.network
def test_a_fresh_cache_folder_builds_the_demo_stack_from_a_warm_registry_cache_making_nothing(
        keys: tuple[Path, Path], docker_registry: Service, build_cache: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = demo_project(tmp_path)
    matrix = load_matrix(root / "matrix.toml")
    cells = select_cells(expand_matrix(matrix).cells, stack="demo")
    extra_ca = tuple(Path(p) for p in matrix.settings.ca_certificates if Path(p).exists())

    def build(cache_dir: Path, cache: BuildCache) -> tuple[list[str], list[str]]:
        settings = BuildSettings(root=root, cache_dir=cache_dir, logs_dir=cache_dir / "logs", ca_certificates=extra_ca,
                                 layout_dir=cache_dir / "oci", load=False)
        builder = CellBuilder(settings, None, None, jobs=2, cache=cache)
        with _counting(builder.assembler) as built:
            results = build_all(cells, None, settings, None, 2, builder=builder)
        assert all(r.ok for r in results), [r.reason for r in results]
        return built, [r.digest or "" for r in results]

    address = docker_registry.address
    _, warm = build(build_cache, _cache(keys, address, "cache/demo", read=False))
    monkeypatch.setattr(rootfs, "_mmdebstrap", lambda *a: pytest.fail("mmdebstrap ran on the fresh machine"))
    fresh = _cache(keys, address, "cache/demo", write=False)
    built, digests = build(tmp_path / "fresh", fresh)
    assert built == [] and digests == warm
    assert fresh.report.hits > len(cells) and fresh.report.misses == 0 and fresh.report.refused == []


class _Refusing(BaseHTTPRequestHandler):
    """A registry on 127.0.0.2 that answers every request with one status and an OCI error body (with 200: a body
    that is no manifest, no blob and no upload location: a registry that lies)."""

    status = 403

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def _answer(self) -> None:
        body = json.dumps({"errors": [{"code": "DENIED", "message": "requested access to the resource is denied"}]})
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body.encode())

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = _answer  # noqa: N815 - http.server's names


@contextmanager
def _refusing(status: int) -> Iterator[str]:
    handler = type("Refusing", (_Refusing,), {"status": status})
    server = ThreadingHTTPServer(("127.0.0.2", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.2:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def _asking_credentials(tmp_path: Path) -> Iterator[str]:
    """docker-registry with htpasswd auth; this machine has no credentials for it."""
    require_binaries("docker-registry")
    directory = tmp_path / "auth-registry"
    directory.mkdir()
    write_htpasswd(directory / "htpasswd", {"alice": "a password this machine does not have"})
    service = start_docker_registry(directory, htpasswd_auth_yaml(directory / "htpasswd"))
    try:
        yield service.address
    finally:
        service.stop()


@pytest.mark.parametrize("refusal", ["credentials", "403", "500", "200"])
def test_a_cache_that_refuses_is_one_line_and_a_normal_build(project: Project, keys: tuple[Path, Path],
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             refusal: str) -> None:
    for name in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "DOCKER_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    server = _asking_credentials(tmp_path) if refusal == "credentials" else _refusing(int(refusal))
    with server as address:
        lines: list[str] = []
        cache = _cache(keys, address, "cache/refusing", lines=lines)
        assembler = _fresh(project, "refused", cache)
        with _counting(assembler) as built:
            image = project.assemble(assembler=assembler)
    assert image.digest and "venv" in built and cache.report.hits == 0 and cache.report.stored == 0
    assert all(address in line and "\n" not in line for line in lines), lines
    down = [line for line in lines if "not used for the rest of this run" in line]
    if refusal == "200":  # each entry it lies about is refused in its line and built; the upload it fakes stops it
        assert len(down) == 1 and len(cache.report.down) == 1
        assert len(cache.report.refused) == len(lines) - 1 and all("built here instead" in line
                                                                   for line in lines if line not in down)
    else:
        assert len(lines) == 2 and len(down) == 2 and len(cache.report.down) == 2, lines
