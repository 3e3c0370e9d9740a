"""The Debian base image on both engines (a private dockerd and podman): it runs, and both hold the same bytes."""

from __future__ import annotations

import pytest

from conftest import TEST_BASE
from pinmatrix.engine import OCIEngine
from pinmatrix.errors import EngineError
from pinmatrix.image.containerfile.base_image import ensure_base_image


@pytest.mark.slow
def test_base_image_runs_and_is_identical_on_both_engines(request, build_cache) -> None:  # noqa: ANN001
    from conftest import engine_for

    ids = {}
    for name in ("docker", "podman"):
        engine: OCIEngine = engine_for(name, request)
        ref = ensure_base_image(TEST_BASE, engine, build_cache)
        info = engine.inspect(ref)
        assert info is not None and info.labels["io.pinmatrix.base.suite"] == "bookworm"
        ids[name] = info.id
        proc = engine.run(ref, ["python3", "-c", "import sys; print(sys.version_info[:2])"])
        assert proc.stdout.decode().strip() == "(3, 11)"
        assert engine.run(ref, ["patch", "--version"]).returncode == 0
        failed = engine.run(ref, ["sh", "-c", "exit 3"], check=False)
        assert failed.returncode == 3
        with pytest.raises(EngineError, match=f"engine {name}: .* failed \\(exit"):
            engine.run(ref, ["sh", "-c", "echo boom >&2; exit 4"])
        engine.tag(ref, "localhost/pinmatrix-test/alias:1")
        assert engine.exists("localhost/pinmatrix-test/alias:1")
        engine.remove("localhost/pinmatrix-test/alias:1")
        assert not engine.exists("localhost/pinmatrix-test/alias:1")
        assert engine.exists(ref)
    # the base is loaded from the same archive with a fixed config: one id on every engine
    assert ids["docker"] == ids["podman"]
