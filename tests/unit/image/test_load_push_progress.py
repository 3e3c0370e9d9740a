"""image/load_push's progress on a fake clock: the archive streamed to `podman load` said about once a second
(bytes of the image's, share, rate, time left) then once done; skopeo's push, whose bytes cannot be watched, said
with the image's bytes (from its manifest) before and the time and rate over them after; nothing said of a copy
that failed. The engine and skopeo are stand-ins: `sh -c 'cat >/dev/null'` reads the archive."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from oci_layout import write_layout

from pinmatrix.image import load_push
from pinmatrix.image.load_push import PublishError, load_into_engine, push
from pinmatrix.oci.layout import OCILayout, StoredImage
from pinmatrix.oci.manifest import image_bytes
from pinmatrix.transfer import human_bytes


class Clock:
    """Each read is ``step`` seconds after the one before."""

    def __init__(self, step: float = 0.0) -> None:
        self.now, self.step = 100.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _image(tmp_path: Path) -> tuple[OCILayout, StoredImage]:
    content = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(40000))  # 2.4 MiB, ~1.3 gzipped
    write_layout(tmp_path / "oci", labels={}, content=content, tag="localhost/pm/demo:abc")
    layout = OCILayout(tmp_path / "oci")
    stored = layout.image("localhost/pm/demo:abc")
    assert stored is not None
    return layout, stored


class CatEngine:
    """podman as far as load_into_engine sees it: an empty store, a `load` that reads the archive, a tag."""

    name = "podman"

    def __init__(self, image_id: str) -> None:
        self.env, self.image_id, self.tagged = dict(os.environ), image_id, False

    def inspect(self, ref: str) -> Any:
        return type("Info", (), {"id": self.image_id})() if self.tagged else None

    def _argv(self, args: list[str]) -> list[str]:
        return ["sh", "-c", "cat > /dev/null"]

    def tag(self, image_id: str, ref: str) -> None:
        self.tagged = True


def test_a_streamed_load_says_its_bytes_about_once_a_second_then_done(tmp_path: Path) -> None:
    layout, stored = _image(tmp_path)
    said: list[str] = []
    engine = CatEngine(stored.config_digest)
    assert load_into_engine(layout, stored, engine, reuse_layers=False, say=said.append,  # type: ignore[arg-type]
                            clock=Clock(0.25)) == stored.config_digest
    total = human_bytes(image_bytes(stored.manifest))
    what = "load localhost/pm/demo:abc into podman"
    *during, done = said
    assert during and all(re.fullmatch(rf"{what}: [\d.]+ (B|KiB|MiB) of {total} \(\d+%\), [\d.]+ (KiB|MiB)/s, "
                                       r"\d+:\d\d left", line) for line in during), said
    assert re.fullmatch(rf"{what}: done, [\d.]+ MiB in \d+:\d\d, [\d.]+ (KiB|MiB)/s", done), done


def test_a_push_says_the_image_bytes_before_and_time_and_rate_after(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    layout, stored = _image(tmp_path)
    clock = Clock()
    seen: list[list[str]] = []

    def skopeo(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        clock.now += 4  # the copy takes four seconds
        digest_file = next(a.split("=", 1)[1] for a in argv if a.startswith("--digestfile="))
        Path(digest_file).write_text(stored.digest if "good" in argv[-1] else "")
        return subprocess.CompletedProcess(argv, 0 if "good" in argv[-1] else 1, "", "level=fatal msg=\"denied\"")

    monkeypatch.setattr(load_push.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(load_push.subprocess, "run", skopeo)
    said: list[str] = []
    total = image_bytes(stored.manifest)
    assert push(layout, stored, "127.0.0.1:5000/pm/good:abc", tls_verify=False, say=said.append,
                clock=clock) == stored.digest
    assert said == [f"push 127.0.0.1:5000/pm/good:abc: {human_bytes(total)} (skopeo; no progress until it ends)",
                    f"push 127.0.0.1:5000/pm/good:abc: done, {human_bytes(total)} in 0:04, "
                    f"{human_bytes(total / 4)}/s"]
    said.clear()
    with pytest.raises(PublishError, match="denied"):
        push(layout, stored, "127.0.0.1:5000/pm/bad:abc", tls_verify=False, say=said.append, clock=clock)
    assert len(said) == 1 and "done" not in said[0]  # a copy that failed is not said to be done
