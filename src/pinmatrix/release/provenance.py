"""The SLSA provenance (v1) of a promoted image: an in-toto v1 statement whose subject is the image's manifest digest
and whose predicate (https://slsa.dev/provenance/v1) says what it was built from, attached at promotion beside the
test results and the SBOM (``release.attest.publish``), signed the same way (a DSSE envelope with the project key).

- ``buildDefinition.buildType``: ``BUILD_TYPE``, a cell image assembled as data (``image/assembly``);
  ``externalParameters``: the cell (id, stack), the sha256 of the matrix.toml that promotion read and of the
  cell's lock (the one the image's ``io.pinmatrix.lock.sha256`` label names, ``attest.lock_for_sbom``);
  ``internalParameters``: the image's ``created`` annotation;
  ``resolvedDependencies``: the project's source at its commit (``git+<source>`` with ``gitCommit``, from the
  image's ``org.opencontainers.image.source``/``revision`` annotations, when it has them), each base layer by its
  digest (the layers the config's history says the base made: ``release.debian.base_layers``), and every file
  the lock accepts for each locked distribution (``pkg:pypi/NAME@VERSION`` with its sha256: the file installed
  is one of them).

Built as JSON, like the other statements (``release.attest``): the in-toto attestation bindings, which the tests
check it with (``in_toto_attestation``: the v1 Statement and the SLSA Provenance protobuf), are a test dependency
and not installed where pinmatrix runs.
- ``runDetails``: ``builder.id`` ``BUILDER_ID`` with pinmatrix's version, and the promotion run that made the
  statement (``metadata``: invocation id, started and finished): pinmatrix assembles images reproducibly from these
  inputs, so the run recorded is the one that checked the evidence and copied the image by digest.

What the registry says about the image (its manifest's annotations, its config's history) is read bounded and
checked (``ImageFacts``): a malformed annotation is refused with one line naming the image and the key, never
carried into a signed statement."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pinmatrix import __version__
from pinmatrix.cell import Cell
from pinmatrix.errors import PinmatrixError
from pinmatrix.hashing import sha256_bytes
from pinmatrix.image.annotations import CREATED, REVISION, SOURCE
from pinmatrix.imageref import ImageRef, RegistryError
from pinmatrix.oci.manifest import layer_descriptors
from pinmatrix.project.checkout import SourceURLError, source_url
from pinmatrix.registry.client import Registry
from pinmatrix.release.attest import STATEMENT_TYPE, utc_stamp
from pinmatrix.release.debian import base_layers
from pinmatrix.release.sbom import locked_packages, purl

SLSA_PROVENANCE_PREDICATE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://pinmatrix.dev/assembled-image/v1"
BUILDER_ID = "https://pinmatrix.dev/promote"
BASE_NAME_LABEL = "org.opencontainers.image.base.name"  # image/cellconfig.py
MAX_CONFIG = 4 << 20  # an image config: a few kB
_REVISION = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_CREATED = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class ProvenanceError(PinmatrixError):
    """What the registry says about the image cannot go into its provenance (the message names image and key)."""


class _History(BaseModel):
    model_config = ConfigDict(extra="ignore")
    created_by: str = Field(default="", max_length=4096)
    empty_layer: bool = False


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    labels: dict[str, str] | None = Field(default=None, alias="Labels")


class _Config(BaseModel):
    """What the provenance reads of an image config: its labels and its history, bounded."""

    model_config = ConfigDict(extra="ignore")
    config: _Body | None = None
    history: list[_History] = Field(default_factory=list, max_length=10_000)


@dataclass(frozen=True)
class BaseLayer:
    name: str  # the image's org.opencontainers.image.base.name label
    digest: str
    media_type: str


@dataclass(frozen=True)
class ImageFacts:
    """What the promoted image says of itself: its source, revision and created annotations, its base layers."""

    source: str | None = None
    revision: str | None = None
    created: str | None = None
    base_layers: tuple[BaseLayer, ...] = ()


def _annotation(image: ImageRef, annotations: dict[str, Any], key: str, valid: re.Pattern[str] | None) -> str | None:
    value = annotations.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or (valid is not None and not valid.match(value)):
        raise ProvenanceError(f"{image}: manifest annotation {key}: {str(value)[:80]!r} is not what pinmatrix writes")
    return value


def image_facts(registry: Registry, image: ImageRef) -> ImageFacts:
    """The facts of ``image`` (which must carry its digest) from its manifest and config, fetched by digest."""
    if not image.digest:
        raise RegistryError(f"{image}: a provenance subject needs a digest")
    manifest = registry.get_manifest(image.repository, image.digest)
    if manifest is None or "config" not in manifest.json:
        raise RegistryError(f"{image}: no such image to describe")
    doc = manifest.json
    found = doc.get("annotations") or {}
    if not isinstance(found, dict):
        raise ProvenanceError(f"{image}: the manifest's annotations are not a JSON object")
    source = _annotation(image, found, SOURCE, None)
    if source is not None:
        try:
            if source_url(source) != source:
                raise SourceURLError("it is not in the form pinmatrix writes")
        except SourceURLError as err:
            raise ProvenanceError(f"{image}: manifest annotation {SOURCE}: {source[:80]!r}: {err}") from None
    config_digest = (doc.get("config") or {}).get("digest")
    if not isinstance(config_digest, str) or not _DIGEST.match(config_digest):
        raise ProvenanceError(f"{image}: the manifest's config digest is not a sha256 digest")
    try:
        config = _Config.model_validate_json(registry.get_blob(image.repository, config_digest, max_bytes=MAX_CONFIG))
    except ValidationError as err:
        raise ProvenanceError(f"{image}: its config: {err.errors()[0]['msg']}") from None
    name = ((config.config.labels if config.config else None) or {}).get(BASE_NAME_LABEL, "base")[:200]
    history = [h.model_dump() for h in config.history]
    base = [BaseLayer(name if name.isprintable() else "base", str(layer["digest"]), str(layer.get("mediaType", ""))[:200])
            for layer in base_layers({"history": history}, layer_descriptors(doc))
            if isinstance(layer.get("digest"), str) and _DIGEST.match(layer["digest"])]
    return ImageFacts(source, _annotation(image, found, REVISION, _REVISION),
                      _annotation(image, found, CREATED, _CREATED), tuple(base))


def _dependencies(facts: ImageFacts, lock_text: str | None, lock_source: str) -> list[dict[str, Any]]:
    deps: list[dict[str, Any]] = []
    if facts.source is not None or facts.revision is not None:
        source: dict[str, Any] = {"name": "source"}
        if facts.source is not None:
            source["uri"] = f"git+{facts.source}"
        if facts.revision is not None:
            source["digest"] = {"gitCommit": facts.revision}
        deps.append(source)
    for layer in facts.base_layers:
        deps.append({"name": f"base:{layer.name}", "digest": {"sha256": layer.digest.split(":", 1)[1]},
                     "mediaType": layer.media_type})
    for pkg in locked_packages(lock_text, lock_source) if lock_text is not None else []:
        deps.extend({"uri": str(purl(pkg)), "digest": {"sha256": h}} for h in pkg.hashes)
    return deps


def provenance_statement(image: ImageRef, cell: Cell, facts: ImageFacts, *, matrix_sha256: str | None,
                         lock_text: str | None, started: datetime, finished: datetime,
                         lock_source: str = "lock") -> dict[str, Any]:
    """The SLSA provenance v1 statement for ``image`` (with its digest), the image of ``cell``."""
    if not image.digest:
        raise RegistryError(f"{image}: a provenance subject needs a digest")
    external: dict[str, Any] = {"cell": cell.id, "stack": cell.stack}
    if matrix_sha256 is not None:
        external["matrix"] = {"sha256": matrix_sha256}
    if lock_text is not None:
        external["lock"] = {"sha256": sha256_bytes(lock_text.encode())}
    build: dict[str, Any] = {"buildType": BUILD_TYPE, "externalParameters": external,
                             "resolvedDependencies": _dependencies(facts, lock_text, lock_source)}
    if facts.created is not None:
        build["internalParameters"] = {"created": facts.created}
    predicate = {
        "buildDefinition": build,
        "runDetails": {
            "builder": {"id": BUILDER_ID, "version": {"pinmatrix": __version__}},
            "metadata": {"invocationId": f"promote {cell.id} {utc_stamp(started)}", "startedOn": utc_stamp(started),
                         "finishedOn": utc_stamp(max(started, finished))},
        },
    }
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": image.name, "digest": {"sha256": image.digest.split(":", 1)[1]}}],
            "predicateType": SLSA_PROVENANCE_PREDICATE, "predicate": predicate}


def _object(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def provenance_summary(statement: dict[str, Any]) -> tuple[str, int]:
    """(builder id, number of resolved dependencies) of a provenance statement, as ``verify`` prints them."""
    predicate = _object(statement, "predicate")
    builder = _object(_object(predicate, "runDetails"), "builder")
    deps = _object(predicate, "buildDefinition").get("resolvedDependencies")
    return str(builder.get("id", ""))[:200], len(deps) if isinstance(deps, list) else 0
