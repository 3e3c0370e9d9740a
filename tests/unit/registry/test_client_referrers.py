"""The referrers index (the OCI 1.1 tag schema, for registries without the referrers API) against concurrent
writers: two signers promoting the same image at once both stay listed (the later write read the index before
the earlier one wrote: its write dropped the other's entry until read back and merged), an index that keeps losing
the write is one line after so many attempts, and a removal that another writer undid is done again."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from memregistry import MemoryRegistry, digest_of, serve_registry

from pinmatrix.imageref import RegistryError
from pinmatrix.registry import client as client_module
from pinmatrix.registry.client import OCI_MANIFEST, Manifest, Registry, referrers_tag


def _client(reg: MemoryRegistry) -> Registry:
    return Registry(reg.address, allowed_token_hosts=())


def _subject(reg: MemoryRegistry) -> Manifest:
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []}).encode()
    return Manifest(body, OCI_MANIFEST, reg.add_manifest("app", body, OCI_MANIFEST, "v1"))


def _listed(reg: MemoryRegistry, subject: Manifest) -> list[str]:
    body, _ = reg.manifests[reg.tags["app"][referrers_tag(subject.digest)]]
    return sorted(m["digest"] for m in json.loads(body)["manifests"])


def _meet_after_first_read(client: Registry, barrier: threading.Barrier) -> None:
    """``client``'s first read of the referrers tag returns only once the other writer has read it too."""
    real = client.get_manifest
    seen: list[str] = []

    def get_manifest(repository: str, reference: str, *args: Any, **kwargs: Any) -> Manifest | None:
        found = real(repository, reference, *args, **kwargs)
        if reference.startswith("sha256-") and not seen:
            seen.append(reference)
            barrier.wait(timeout=10)
        return found

    client.get_manifest = get_manifest  # type: ignore[method-assign]


def test_two_signers_at_once_both_stay_referenced() -> None:
    with serve_registry() as reg:
        subject = _subject(reg)
        barrier = threading.Barrier(2)
        pushed: dict[str, str] = {}
        errors: list[BaseException] = []

        def sign(name: str) -> None:
            client = _client(reg)
            _meet_after_first_read(client, barrier)
            try:
                pushed[name] = client.push_artifact("app", subject, artifact_type=f"application/x-{name}",
                                                    payload=name.encode(), payload_media_type="application/x-p")
            except BaseException as err:  # noqa: BLE001 - reported by the assertion below
                errors.append(err)

        threads = [threading.Thread(target=sign, args=(n,)) for n in ("alice", "bob")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == []
        assert _listed(reg, subject) == sorted(pushed.values())
        assert sorted(d["digest"] for d in _client(reg).referrers("app", subject.digest)) == sorted(pushed.values())


def test_an_index_that_keeps_losing_the_write_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with serve_registry() as reg:
        subject = _subject(reg)
        client = _client(reg)
        real_put = client.put_manifest
        writes: list[str] = []

        def put_and_lose(repository: str, reference: str, manifest: Manifest) -> Any:
            if reference.startswith("sha256-"):
                writes.append(reference)  # another writer's stale index lands right after ours, every time
                empty = b'{"schemaVersion":2,"manifests":[]}'
                return real_put(repository, reference, Manifest(empty, client_module.OCI_INDEX, digest_of(empty)))
            return real_put(repository, reference, manifest)

        monkeypatch.setattr(client, "put_manifest", put_and_lose)
        monkeypatch.setattr(client_module, "REFERRERS_ATTEMPTS", 3)
        with pytest.raises(RegistryError) as err:
            client.push_artifact("app", subject, artifact_type="application/x-a", payload=b"a",
                                 payload_media_type="application/x-p")
        assert len(writes) == 3
        assert str(err.value) == (f"{reg.address}/app:{referrers_tag(subject.digest)}: the referrers index lost this "
                                  "write 3 times (other writers at the same time); run the command again")


def test_a_removal_another_writer_undid_is_done_again() -> None:
    with serve_registry() as reg:
        subject = _subject(reg)
        client = _client(reg)
        kept = client.push_artifact("app", subject, artifact_type="application/x-a", payload=b"a",
                                    payload_media_type="application/x-p")
        gone = client.push_artifact("app", subject, artifact_type="application/x-b", payload=b"b",
                                    payload_media_type="application/x-p")
        stale = reg.manifests[reg.tags["app"][referrers_tag(subject.digest)]]
        real_put = client.put_manifest
        undone: list[bool] = []

        def put_then_undo(repository: str, reference: str, manifest: Manifest) -> Any:
            answer = real_put(repository, reference, manifest)
            if not undone:  # a writer that read the index before the removal writes it back once
                undone.append(True)
                reg.add_manifest("app", stale[0], stale[1], reference)
            return answer

        client.put_manifest = put_then_undo  # type: ignore[method-assign]
        assert client.remove_referrers("app", subject.digest, {gone}) == set()
        assert undone == [True]
        assert _listed(reg, subject) == [kept]
