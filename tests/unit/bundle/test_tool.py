"""`pinmatrix bundle tool`: pinmatrix's runtime dependencies come from requirements/dev.lock: the closure of the
wheels' Requires-Dist for the host's Python and platform (markers and extras evaluated there), each at the lock's
version and checked against the lock's hashes; a dependency the lock lacks, or a wheel whose hash is not the
lock's, is refused in one line. The whole round trip (build, unbundle, install with --no-index, run) is
tests/integration/test_bundle_tool.py."""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from fake_index import wheel_bytes

from pinmatrix.bundle.pack import BundleError
from pinmatrix.bundle.tool import TOOL_LOCK, marker_environment, platform_name, requires_of, resolve, tool_lock_text
from pinmatrix.index.wheel_index import Target, WheelError, WheelFile
from pinmatrix.project.lockfile import LockEntry, parse_lock

TARGET = Target(python="3.12", platform="x86_64-manylinux_2_28")
REQUIRES = {
    "alpha": ["beta>=1"],
    "beta": [],
    "delta": ["eps", "zeta; extra == 'x'", "omega; extra == 'y'"],
    "eps": ["alpha"],  # a cycle: fetched once
    "zeta": ["arm-only; platform_machine == 'aarch64'"],
    "omega": [],
    "unused": [],  # in the lock (a test extra, say), needed by nothing
}
TOP = ["alpha>=1", "gamma; python_version < '3.10'", "delta[x]", "pytest; extra == 'test'"]


def quiet(_: str) -> None:
    pass


class FakeFetcher:
    """Wheels written into ``folder``; ``lie`` replaces a wheel's bytes (or its declared sha256) after the lock."""

    def __init__(self, folder: Path, lie: Callable[[str, bytes], bytes] | None = None,
                 other_sha: set[str] | None = None) -> None:
        self.folder, self.lie, self.other_sha = folder, lie, other_sha or set()
        self.fetched: list[str] = []

    def choose(self, entry: LockEntry, target: Target, indexes: tuple[()]) -> WheelFile:
        assert target == TARGET and indexes == ()
        data = wheel_bytes(entry.name, entry.version, REQUIRES.get(entry.name, []))
        sha = hashlib.sha256(data).hexdigest()
        if entry.name in self.other_sha:
            sha = hashlib.sha256(b"another build of " + data).hexdigest()
        return WheelFile(entry.name, entry.version, f"{entry.name}-{entry.version}-py3-none-any.whl", "u", sha)

    def fetch(self, wheel: WheelFile, progress: Callable[[str], None] | None = None) -> Path:
        data = wheel_bytes(wheel.name, wheel.version, REQUIRES.get(wheel.name, []))
        if self.lie is not None:
            data = self.lie(wheel.name, data)
        path = self.folder / wheel.filename
        path.write_bytes(data)
        self.fetched.append(wheel.name)
        return path


def lock_for(names: list[str], *, wrong_hash: str | None = None) -> str:
    lines = []
    for name in names:
        sha = hashlib.sha256(wheel_bytes(name, "1.0", REQUIRES.get(name, []))).hexdigest()
        if name == wrong_hash:
            sha = "0" * 64
        lines.append(f"{name}==1.0 \\\n    --hash=sha256:{'f' * 64} \\\n    --hash=sha256:{sha}\n    # via pinmatrix")
    return "\n".join(lines) + "\n"


ALL = ["alpha", "beta", "delta", "eps", "omega", "unused", "zeta"]


def test_the_closure_for_the_host_comes_from_the_lock(tmp_path: Path) -> None:
    fetcher = FakeFetcher(tmp_path)
    chosen = resolve(TOP, parse_lock(lock_for(ALL)), TARGET, fetcher, quiet)
    # gamma: a marker false on 3.12; pytest: an extra not asked for; omega: delta's extra y not asked for;
    # arm-only: aarch64 only; unused: in the lock, needed by nothing
    assert [e.name for e, _, _ in chosen] == ["alpha", "delta", "beta", "eps", "zeta"]
    assert all(e.version == "1.0" and w.version == "1.0" for e, w, _ in chosen)
    assert sorted(fetcher.fetched) == sorted(set(fetcher.fetched)), "each wheel fetched once"


def test_the_other_platform_takes_its_own_markers(tmp_path: Path) -> None:
    arm = Target(python="3.12", platform="aarch64-manylinux_2_28")
    assert marker_environment(arm)["platform_machine"] == "aarch64"
    fetcher = FakeFetcher(tmp_path)
    with pytest.raises(BundleError, match=r"^arm-only: a runtime dependency of pinmatrix that requirements/dev.lock"):
        resolve(TOP, parse_lock(lock_for(ALL)), arm, _Any(fetcher), quiet)


class _Any:
    """A fetcher for any target (the fake checks it serves TARGET only)."""

    def __init__(self, inner: FakeFetcher) -> None:
        self.inner = inner

    def choose(self, entry: LockEntry, target: Target, indexes: tuple[()]) -> WheelFile:
        return self.inner.choose(entry, TARGET, indexes)

    def fetch(self, wheel: WheelFile, progress: Callable[[str], None] | None = None) -> Path:
        return self.inner.fetch(wheel, progress)


def test_a_dependency_the_lock_does_not_pin_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BundleError) as err:
        resolve(TOP, parse_lock(lock_for([n for n in ALL if n != "eps"])), TARGET, FakeFetcher(tmp_path), quiet)
    assert str(err.value) == f"eps: a runtime dependency of pinmatrix that {TOOL_LOCK} does not pin (run " \
                             "`./dev lock-deps`)"


def test_a_wheel_whose_hash_is_not_the_locks_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(BundleError) as err:
        resolve(TOP, parse_lock(lock_for(ALL)), TARGET, FakeFetcher(tmp_path, other_sha={"beta"}), quiet)
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith("beta==1.0: wheel beta-1.0-py3-none-any.whl (sha256 ")
    assert line.endswith(f"is not one of {TOOL_LOCK}'s hashes for it: refused")


def test_a_lock_line_with_another_hash_refuses_the_wheel(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=r"^zeta==1.0: wheel zeta-1.0-py3-none-any.whl \(sha256 [0-9a-f]{64}\) is "
                                          r"not one of requirements/dev.lock's hashes for it: refused$"):
        resolve(TOP, parse_lock(lock_for(ALL, wrong_hash="zeta")), TARGET, FakeFetcher(tmp_path), quiet)


def test_a_fetched_file_whose_bytes_differ_is_refused(tmp_path: Path) -> None:
    fetcher = FakeFetcher(tmp_path, lie=lambda name, data: data + b"x" if name == "delta" else data)
    with pytest.raises(BundleError, match=r"^delta-1.0-py3-none-any.whl: sha256 [0-9a-f]{64} is not the lock's "
                                          r"[0-9a-f]{64}: refused$"):
        resolve(TOP, parse_lock(lock_for(ALL)), TARGET, fetcher, quiet)


def test_a_fetch_error_is_one_bundle_line(tmp_path: Path) -> None:
    class Failing(FakeFetcher):
        def fetch(self, wheel: WheelFile, progress: Callable[[str], None] | None = None) -> Path:
            raise WheelError(f"{wheel.filename}: download failed: refused")

    with pytest.raises(BundleError, match=r"^alpha-1.0-py3-none-any.whl: download failed"):
        resolve(TOP, parse_lock(lock_for(ALL)), TARGET, Failing(tmp_path), quiet)


def test_the_bundles_lock_names_pinmatrix_and_the_lock_lines(tmp_path: Path) -> None:
    chosen = resolve(TOP, parse_lock(lock_for(ALL)), TARGET, FakeFetcher(tmp_path), quiet)
    own = tmp_path / "pinmatrix-0.1.0-py3-none-any.whl"
    text = tool_lock_text(own, "a" * 64, chosen, str(TOOL_LOCK))
    lock = parse_lock(text)
    assert [e.name for e in lock.entries] == ["pinmatrix", "alpha", "delta", "beta", "eps", "zeta"]
    assert lock.by_name()["pinmatrix"].hashes == ("sha256:" + "a" * 64,)
    assert lock.by_name()["beta"].text == parse_lock(lock_for(ALL)).by_name()["beta"].text


def test_requires_of_reads_the_wheels_metadata(tmp_path: Path) -> None:
    path = tmp_path / "delta-1.0-py3-none-any.whl"
    path.write_bytes(wheel_bytes("delta", "1.0", REQUIRES["delta"]))
    assert requires_of(path, "3.12") == REQUIRES["delta"]
    path.write_bytes(b"not a zip")
    with pytest.raises(BundleError, match=r"^delta-1.0-py3-none-any.whl: cannot read its METADATA"):
        requires_of(path, "3.12")


def test_a_wheel_for_other_pythons_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pinmatrix-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pinmatrix-0.1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: pinmatrix\n"
                    "Version: 0.1.0\nRequires-Python: >=3.11\nRequires-Dist: alpha\n")
    assert requires_of(path, "3.11") == ["alpha"]
    with pytest.raises(BundleError) as err:
        requires_of(path, "3.10")
    assert str(err.value) == ("pinmatrix-0.1.0-py3-none-any.whl: Requires-Python '>=3.11' excludes CPython 3.10 "
                              "(--python-version)")


@pytest.mark.parametrize(("given", "expected"), [
    ("manylinux_2_28_x86_64", "x86_64-manylinux_2_28"), ("manylinux_2_34_aarch64", "aarch64-manylinux_2_34"),
    ("x86_64-manylinux_2_28", "x86_64-manylinux_2_28"), ("win_amd64", "win_amd64")])
def test_platform_in_pips_form_or_uvs(given: str, expected: str) -> None:
    assert platform_name(given) == expected
