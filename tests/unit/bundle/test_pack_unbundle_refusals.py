"""The host unpacker (``pinmatrix/shipped/unbundle.py``) called in process, as mutation testing needs: its
``--help``, its usage errors and summaries, and each manifest and lock refusal as the exact line a host sees."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from test_pack import Project, make_wheels_bundle, project  # noqa: F401

from pinmatrix.shipped import unbundle as host

HELP = """\
usage: unbundle.py [-h] [--out OUT] [--have HAVE] [--check] [--json] [--quiet] [--manifest-sha256 HEX] bundle

Check and unpack a pinmatrix bundle (wheels or an OCI image) with the standard library only.

positional arguments:
  bundle                the folder holding manifest.json and the parts

options:
  -h, --help            show this help message and exit
  --out OUT             where the wheels (a folder) or the image (an OCI layout) go
  --have HAVE           image bundles: an OCI layout holding the blobs the bundle left out
  --check               verify everything, write nothing
  --json                print the summary as JSON on stdout
  --quiet, -q           no progress on stderr
  --manifest-sha256 HEX
                        refuse unless manifest.json hashes to HEX (the sha256 `pinmatrix bundle` printed)

Examples:
  python3 -I unbundle.py bundle/ --out wheels/            # then: pinmatrix smoke --wheels wheels/
  python3 -I unbundle.py bundle/ --check                  # verify every part and file, write nothing
  python3 -I unbundle.py int64/ --out oci/ --have oci/    # an image whose shared blobs oci/ has
"""


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = host.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _refusal(data: Any) -> str:
    with pytest.raises(host.Refused) as refused:
        host.check_manifest(data)
    return str(refused.value)


def test_help_names_every_option_and_example(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    with pytest.raises(SystemExit) as exit_:
        host.main(["--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == HELP


def test_usage_errors_are_their_own_lines(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    for argv, line in ((["b", "--check", "--manifest-sha256", "AB"], "--manifest-sha256: expected 64 lowercase hex "
                        "digits"), (["b"], "give --out DEST, or --check")):
        with pytest.raises(SystemExit) as exit_:
            host.main(argv)
        assert exit_.value.code == 2
        assert capsys.readouterr().err.splitlines()[-1] == f"unbundle.py: error: {line}"


def test_a_refusal_and_an_os_error_are_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    odd = tmp_path / "a\nb"
    odd.mkdir()
    assert _main(capsys, str(odd), "--check") == (
        2, "", f"unbundle: refused: {odd / 'manifest.json'}: missing (is {odd} a pinmatrix bundle?)\n".replace(
            "\nb", " b"))

    def fails(*_args: Any, **_kwargs: Any) -> Any:
        raise OSError(13, "Permission denied", "/x\ny")
    monkeypatch.setattr(host, "unpack", fails)
    assert _main(capsys, "b", "--check") == (2, "", "unbundle: error: /x y: Permission denied\n")

    def bare(*_args: Any, **_kwargs: Any) -> Any:
        raise OSError("no\nspace")
    monkeypatch.setattr(host, "unpack", bare)
    assert _main(capsys, "b", "--check") == (2, "", "unbundle: error: : no space\n")


def test_the_json_summary_is_indented_and_sorted(project: Project, tmp_path: Path,  # noqa: F811
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    make_wheels_bundle(project, tmp_path / "b")
    code, out, err = _main(capsys, str(tmp_path / "b"), "--check", "--json", "-q")
    summary = json.loads(out)
    assert (code, err) == (0, "")
    assert out == json.dumps(summary, indent=2, sort_keys=True) + "\n"
    assert list(summary) == sorted(summary) and summary["dest"] is None


@pytest.fixture
def wheels(project: Project, tmp_path: Path) -> dict[str, Any]:  # noqa: F811
    make_wheels_bundle(project, tmp_path / "b", part_size=4096)
    data: dict[str, Any] = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert len(data["parts"]) >= 3
    return data


def _image() -> dict[str, Any]:
    blob = {"digest": "sha256:" + "a" * 64, "media_type": "application/vnd.oci.image.manifest.v1+json", "size": 10,
            "offset": 0}
    return {"format": "pinmatrix-bundle", "format_version": 1, "kind": "image", "pinmatrix_version": "1.0",
            "parts": [{"name": "part-001-of-001.bin", "size": 10, "sha256": "b" * 64}], "part_size": 10,
            "total_size": 10, "image": {"digest": blob["digest"], "media_type": blob["media_type"], "size": 10},
            "blobs": [blob]}


def test_a_valid_manifest_is_kept_field_by_field(wheels: dict[str, Any]) -> None:
    checked = host.check_manifest(copy.deepcopy(wheels))
    for key in ("format_version", "kind", "pinmatrix_version", "cell_id", "lock_sha256", "python", "part_size"):
        assert checked[key] == wheels[key]
    assert checked["wheels"] == wheels["wheels"] and checked["parts"] == wheels["parts"]
    wheels.update(cell_python="3.12", platform="x86_64-manylinux_2_28",
                  left_out=[{"name": "nvidia-x", "version": "1.0", "why": "host"}])
    checked = host.check_manifest(copy.deepcopy(wheels))
    assert (checked["cell_python"], checked["platform"]) == ("3.12", "x86_64-manylinux_2_28")
    assert checked["left_out"] == [{"name": "nvidia-x", "version": "1.0", "why": "host"}]
    image = host.check_manifest(_image())
    assert image["image"]["ref"] is None and image["blobs"][0]["offset"] == 0


@pytest.mark.parametrize(("key", "value", "line"), [
    ("format_version", 1001, "format_version: expected an integer from 0 to 1000, got 1001"),
    ("format_version", 1000, "format_version 1000 is not 1 (use the unbundle.py that came with the bundle)"),
    ("pinmatrix_version", "-1", "pinmatrix_version: '-1' is not allowed here (expected "
                                + host.VERSION.pattern + ")"),
    ("cell_id", "xyz", "cell_id: 'xyz' is not allowed here (expected " + host.CELL_ID.pattern + ")"),
    ("lock_sha256", "A" * 64, "lock_sha256: '" + "A" * 64 + "' is not allowed here (expected "
                              + host.HEX64.pattern + ")"),
    ("python", "2.7", "python: '2.7' is not allowed here (expected " + host.PYTHON.pattern + ")"),
    ("cell_python", "3.x", "cell_python: '3.x' is not allowed here (expected " + host.PYTHON.pattern + ")"),
    ("platform", "win", "platform: 'win' is not allowed here (expected "
                        r"^(x86_64|aarch64)-manylinux_2_[0-9]{1,3}$)"),
    ("parts", "x", "parts: expected a list of at most 20000 entries"),
    ("wheels", "x", "wheels: expected a list of at most 20000 entries"),
    ("left_out", "x", "left_out: expected a list of at most 20000 entries"),
    ("left_out", [{"name": "-x", "version": "1", "why": "w"}], "left_out[0].name: '-x' is not allowed here "
                                                              "(expected " + host.SAFE_NAME.pattern + ")"),
    ("left_out", [{"name": "x", "version": "-1", "why": "w"}], "left_out[0].version: '-1' is not allowed here "
                                                              "(expected " + host.VERSION.pattern + ")"),
    ("left_out", [{"name": "x", "version": "1", "why": 3}], "left_out[0].why: expected a string, got 3"),
    ("surprise", 1, "(top).surprise: unknown key"),
])
def test_each_top_level_field_is_refused_by_name(wheels: dict[str, Any], key: str, value: Any, line: str) -> None:
    wheels[key] = value
    prefix = "" if line.startswith("(top)") or line.startswith("format_version ") else "(top)."
    assert _refusal(wheels) == f"manifest.json: {prefix}{line}"


def test_not_an_object_and_a_missing_key(wheels: dict[str, Any]) -> None:
    assert _refusal([1]) == "manifest.json: (top): expected an object, got [1]"
    del wheels["total_size"]
    assert _refusal(wheels) == "manifest.json: (top).total_size: required key is missing"


@pytest.mark.parametrize("change", [{"wheels": None}, {"lock_sha256": None}, {"image": {}}, {"blobs": []}])
def test_a_wheels_bundle_has_wheels_and_a_lock_only(wheels: dict[str, Any], change: dict[str, Any]) -> None:
    if "image" in change:
        change = {"image": _image()["image"]}
    wheels.update(change)
    assert _refusal(wheels) == "manifest.json: a wheels bundle has wheels and lock_sha256, and no image or blobs"


@pytest.mark.parametrize("change", [{"image": None}, {"blobs": None}, {"wheels": []}])
def test_an_image_bundle_has_image_and_blobs_only(change: dict[str, Any]) -> None:
    data = _image()
    data.update(change)
    assert _refusal(data) == "manifest.json: an image bundle has image and blobs, and no wheels"


def test_the_stream_offsets_and_sizes(wheels: dict[str, Any]) -> None:
    first = wheels["wheels"][0]
    twice = copy.deepcopy(wheels)
    twice["wheels"][1]["filename"] = first["filename"]
    twice["wheels"][1]["name"], twice["wheels"][1]["version"] = first["name"], first["version"]
    assert _refusal(twice) == f"manifest.json: {first['filename']} is listed twice"
    second = wheels["wheels"][1]
    moved = copy.deepcopy(wheels)
    moved["wheels"][1]["offset"] += 1
    assert _refusal(moved) == (f"manifest.json: {second['filename']}: offset {second['offset'] + 1}, expected "
                               f"{second['offset']}")
    total, parts = wheels["total_size"], sum(p["size"] for p in wheels["parts"])
    for key, add in (("total_size", 1), ("part_size", 0)):
        bad = copy.deepcopy(wheels)
        bad[key] += add
        if key == "part_size":
            bad["parts"][-1]["size"] += 1
            parts += 1
        assert _refusal(bad) == (f"manifest.json: total_size {bad['total_size']}, the files add up to {total} and "
                                 f"the parts to {parts}")
    image = _image()
    image["blobs"][0]["offset"] = 1
    assert _refusal(image) == f"manifest.json: sha256:{'a' * 64}: offset 1, expected 0"


def test_each_part_is_named_in_order_and_fills_part_size(wheels: dict[str, Any]) -> None:
    count, size = len(wheels["parts"]), wheels["part_size"]
    renamed = copy.deepcopy(wheels)
    renamed["parts"][1]["name"] = f"part-003-of-{count:03d}.bin"
    assert _refusal(renamed) == (f"manifest.json: parts[1].name: 'part-003-of-{count:03d}.bin', expected "
                                 f"part-002-of-{count:03d}.bin")
    short = copy.deepcopy(wheels)  # an inner part one byte short, the next one byte longer: the sums still agree
    short["parts"][count - 2]["size"] -= 1
    short["parts"][count - 1]["size"] += 1
    name = short["parts"][count - 2]["name"]
    assert _refusal(short) == (f"manifest.json: parts[{count - 2}] ({name}): size {size - 1} does not fit part_size "
                               f"{size}")
    last = wheels["parts"][-1]["size"]
    big = copy.deepcopy(wheels)
    big["part_size"] = last - 1 if last > 1 else 0
    assert _refusal(big).startswith("manifest.json: parts[0] (")
    one = copy.deepcopy(wheels)  # a last part of one byte fits
    moved = one["parts"][-1]["size"] - 1
    one["parts"][-1]["size"] = 1
    one["parts"][0]["size"] += moved
    one["part_size"] += moved
    for p in one["parts"][:-1]:
        p["size"] = one["part_size"]
    one["total_size"] = sum(p["size"] for p in one["parts"])
    one["wheels"][-1]["size"] += one["total_size"] - wheels["total_size"]
    host.check_manifest(one)
    empty = _image()
    empty.update(total_size=0, parts=[{"name": "part-001-of-001.bin", "size": 0, "sha256": "b" * 64}])
    empty["blobs"][0]["size"] = empty["image"]["size"] = 0
    assert _refusal(empty) == "manifest.json: parts[0] (part-001-of-001.bin): size 0 does not fit part_size 10"


@pytest.mark.parametrize(("field", "value", "line"), [
    ("name", "-x", "name: '-x' is not allowed here (expected " + host.SAFE_NAME.pattern + ")"),
    ("version", "-1", "version: '-1' is not allowed here (expected " + host.VERSION.pattern + ")"),
    ("sha256", "A" * 64, "sha256: '" + "A" * 64 + "' is not allowed here (expected " + host.HEX64.pattern + ")"),
    ("filename", "alpha-1.0-py3-none-any.zip", "filename: 'alpha-1.0-py3-none-any.zip' is not a wheel file name"),
    ("filename", "alpha-1.0-py3-none.whl", "filename: 'alpha-1.0-py3-none.whl' is not a wheel of alpha 1.0"),
    ("filename", "alpha-1.0-1-2-py3-none-any.whl", "filename: 'alpha-1.0-1-2-py3-none-any.whl' is not a wheel of "
                                                   "alpha 1.0"),
    ("filename", "beta-1.0-py3-none-any.whl", "filename: 'beta-1.0-py3-none-any.whl' is not a wheel of alpha 1.0"),
    ("filename", "alpha-1.1-py3-none-any.whl", "filename: 'alpha-1.1-py3-none-any.whl' is not a wheel of alpha 1.0"),
    ("filename", "a/b.whl", "filename: 'a/b.whl' is not a safe file name"),
    ("filename", "a\\b.whl", "filename: 'a\\\\b.whl' is not a safe file name"),
    ("filename", "a\0b.whl", "filename: 'a\\x00b.whl' is not a safe file name"),
    ("filename", "a..b.whl", "filename: 'a..b.whl' is not a safe file name"),
])
def test_each_wheel_field_is_refused_by_name(wheels: dict[str, Any], field: str, value: Any, line: str) -> None:
    assert (wheels["wheels"][0]["name"], wheels["wheels"][0]["version"]) == ("alpha", "1.0")
    wheels["wheels"][0][field] = value
    assert _refusal(wheels) == f"manifest.json: (top).wheels[0].{line}"


def test_a_six_piece_wheel_name_is_one(wheels: dict[str, Any]) -> None:
    wheels["wheels"][0]["filename"] = "alpha-1.0-1build-py3-none-any.whl"
    assert host.check_manifest(wheels)["wheels"][0]["filename"] == "alpha-1.0-1build-py3-none-any.whl"


def test_read_manifest_bounds_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "manifest.json"
    text = json.dumps(_image())
    path.write_text(text + " " * (host.MAX_MANIFEST_BYTES - len(text)))
    assert host.read_manifest(tmp_path)["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    path.write_text(text + " " * (host.MAX_MANIFEST_BYTES + 1 - len(text)))
    with pytest.raises(host.Refused) as refused:
        host.read_manifest(tmp_path)
    assert str(refused.value) == (f"{path}: {host.MAX_MANIFEST_BYTES + 1} bytes, larger than "
                                  f"{host.MAX_MANIFEST_BYTES} bytes: more than a manifest may have")
    for raw, line in (('{"a": 1, "a": 2}', "manifest.json: key 'a' appears twice"),
                      ('{"a": NaN}', "manifest.json: NaN is not a JSON number pinmatrix writes")):
        path.write_text(raw)
        with pytest.raises(host.Refused) as refused:
            host.read_manifest(tmp_path)
        assert str(refused.value) == line
    path.write_bytes(b"\xff")
    with pytest.raises(host.Refused) as refused:
        host.read_manifest(tmp_path)
    assert str(refused.value).startswith(f"{path}: not JSON: 'utf-8' codec")
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(host.Refused) as refused:
        host.read_manifest(tmp_path)
    assert str(refused.value) == f"{path}: a symbolic link: refused as a manifest"


def _lock_bundle(project: Project, tmp_path: Path, lock: str | None = None) -> tuple[Path, dict[str, Any]]:  # noqa: F811
    make_wheels_bundle(project, tmp_path / "b", lock=lock)
    return tmp_path / "b", host.read_manifest(tmp_path / "b")


def test_the_lock_is_bounded_and_must_be_the_manifests(project: Project, tmp_path: Path) -> None:  # noqa: F811
    bundle, manifest = _lock_bundle(project, tmp_path)
    lock = bundle / "lock.txt"
    host.check_lock(bundle, manifest)
    raw = lock.read_bytes()
    lock.write_bytes(raw + b"#")
    with pytest.raises(host.Refused) as refused:
        host.check_lock(bundle, manifest)
    assert str(refused.value) == (f"{lock}: sha256 {hashlib.sha256(raw + b'#').hexdigest()} is not the manifest's "
                                  f"lock_sha256 {manifest['lock_sha256']}")
    for size, line in ((host.MAX_LOCK_BYTES, None), (host.MAX_LOCK_BYTES + 1, "more")):
        padded = raw + b"\n" * (size - len(raw))
        lock.write_bytes(padded)
        fake = {**manifest, "lock_sha256": hashlib.sha256(padded).hexdigest()}
        if line is None:
            host.check_lock(bundle, fake)
        else:
            with pytest.raises(host.Refused) as refused:
                host.check_lock(bundle, fake)
            assert str(refused.value) == (f"{lock}: {size} bytes, larger than {host.MAX_LOCK_BYTES} bytes: more than "
                                          "the lock may have")
    lock.unlink()
    with pytest.raises(host.Refused) as refused:
        host.check_lock(bundle, manifest)
    assert str(refused.value) == f"{lock}: missing: the wheels cannot be checked against the cell's lock"


def test_a_wheel_not_in_the_lock_is_named(project: Project, tmp_path: Path) -> None:  # noqa: F811
    bundle, manifest = _lock_bundle(project, tmp_path)
    lock = bundle / "lock.txt"
    first = manifest["wheels"][0]
    for text in (lock.read_text().replace(first["sha256"], "0" * 64),
                 lock.read_text().replace(f"=={first['version']}", "==9.9", 1),
                 "\n".join(line for line in lock.read_text().splitlines() if not line.startswith(first["name"])),
                 "\xff" + lock.read_text().replace(first["sha256"], "0" * 64)):
        raw = text.encode("latin-1" if text.startswith("\xff") else "utf-8")
        lock.write_bytes(raw)
        fake = {**manifest, "lock_sha256": hashlib.sha256(raw).hexdigest()}
        with pytest.raises(host.Refused) as refused:
            host.check_lock(bundle, fake)
        assert str(refused.value) == (f"manifest.json: {first['filename']}: not in lock.txt at {first['version']} "
                                      f"with sha256 {first['sha256']}")
