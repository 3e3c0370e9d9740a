"""`pinmatrix pull`: which known-good cell a host gets (driver floor, arch coverage, newest first) and the
reasons printed for the cells passed over. A real pull with podman from a registry: tests/integration/
test_pull_unsigned.py and test_verified_pull.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from known_good_entries import entry, write_entries
from promotion import push_image  # noqa: F401 - the fixture

from pinmatrix.archflag import parse_flags
from pinmatrix.cli import main
from pinmatrix.project.known_good import read_known_good
from pinmatrix.release.candidates import choose
from pinmatrix.release.hostmatch import HostFacts, Requirements, arch_covers, host_meets
from pinmatrix.release.pull import judge
from pinmatrix.results.store import HostFingerprint

H200 = HostFingerprint.make(hostname="h", gpu_name="NVIDIA H200", gpu_count=1, driver="580.159.04", capability="9.0")
GB10_OLD = HostFingerprint.make(hostname="s", gpu_name="NVIDIA GB10", gpu_count=1, driver="580.142", capability="12.1")
GB10_NEW = HostFingerprint.make(hostname="s", gpu_name="NVIDIA GB10", gpu_count=1, driver="595.58.03", capability="12.1")
CPU = HostFingerprint.make(hostname="c")


ENTRIES = [
    entry("aaaaaaaaaaaa", "2026-11-01T00:00:00Z", min_driver="580.65.06", arch=("12.0f",), cap="12.0"),
    entry("bbbbbbbbbbbb", "2026-11-10T00:00:00Z", min_driver="590.44.01", arch=("12.1a",), cap="12.1"),
    entry("cccccccccccc", "2026-11-20T00:00:00Z", min_driver="580.65.06", arch=("9.0a",), cap="9.0"),
    entry("dddddddddddd", "2026-11-05T00:00:00Z", stack="demo", gpu=False),
]


def test_arch_rules() -> None:
    assert arch_covers(("9.0a",), None, "9.0")[0]
    assert not arch_covers(("9.0a",), None, "10.0")[0]
    assert arch_covers(("8.0",), None, "8.6")[0] and not arch_covers(("8.6",), None, "8.0")[0]
    assert arch_covers(("12.0f",), None, "12.1")[0]
    assert not arch_covers(("12.0f",), None, "10.0")[0]
    assert arch_covers(("8.0+PTX",), None, "12.1")[0]
    assert arch_covers(("8.0", "+PTX"), None, "9.0")[0]
    assert not arch_covers(("9.0a", "+PTX"), None, "10.0")[0]  # arch-specific PTX does not carry forward
    assert arch_covers((), "9.0", "9.0")[0] and arch_covers((), None, "7.5")[0]
    # the one arch-flag grammar (archflag.py): a lone +PTX attaches to the flag before it, not the highest one
    assert [a.label for a in parse_flags(["9.0a", "12.1a;12.0f"])] == ["9.0a", "12.1a", "12.0f"]
    assert [(a.label, a.ptx) for a in parse_flags(["9.0", "+PTX", "8.0"])] == [("9.0+PTX", True), ("8.0", False)]
    assert arch_covers(("9.0", "+PTX", "8.0"), None, "10.0")[0]
    assert arch_covers(("8.0", "+PTX", "9.0a"), None, "10.0")[0]  # 8.0+PTX JIT-compiles on 10.0
    for bad in (["ampere"], ["+PTX"], ["90a"]):
        with pytest.raises(ValueError):
            parse_flags(bad)


def test_host_requirements() -> None:
    req = Requirements(gpu_required=True, min_driver="590.44.01", compute_capability="12.1", arch_flags=("12.1a",))
    ok, why = host_meets(req, HostFacts(driver="580.142", capability="12.1", gpu_count=1))
    assert not ok and why == ["needs driver >= 590.44.01, the host has 580.142"]
    ok, why = host_meets(req, HostFacts(driver=None, capability=None))
    assert not ok and why == ["needs an NVIDIA GPU, this host has none"]
    ok, _ = host_meets(req, HostFacts(driver="595.58.03", capability="12.1", gpu_count=1))
    assert ok
    mixed = HostFacts(driver="595.58.03", capability="12.0,12.1", gpu_count=2)
    assert not host_meets(req, mixed)[0]  # the 12.1a build does not run on the 12.0 GPU


def test_newest_cell_the_host_meets() -> None:
    # GB10 on the old driver: the newest gb10 cell needs 590, so the older 12.0f one is chosen
    verdicts = judge(ENTRIES, GB10_OLD, stack="gb10")
    assert [v.entry["cell_id"][0] for v in verdicts] == ["c", "b", "a"]
    chosen = choose(verdicts)
    assert chosen is not None and chosen.entry["cell_id"] == "aaaaaaaaaaaa"
    assert verdicts[0].reasons == ["built for 9.0a, which does not cover capability 12.1"]
    assert verdicts[1].reasons == ["needs driver >= 590.44.01, the host has 580.142"]
    assert choose(judge(ENTRIES, GB10_NEW, stack="gb10")).entry["cell_id"] == "bbbbbbbbbbbb"
    assert choose(judge(ENTRIES, H200)).entry["cell_id"] == "cccccccccccc"
    assert choose(judge(ENTRIES, CPU)).entry["cell_id"] == "dddddddddddd"  # only the CPU-only cell fits
    assert choose(judge(ENTRIES, CPU, stack="gb10")) is None


def test_pull_print_explains_what_it_passed_over(tmp_path: Path, capsys, monkeypatch) -> None:
    """The choice and the reasons; the chosen entry is then verified before anything is printed, and with no
    trusted key nothing verifies (the signed path is tests/integration/test_verified_pull.py)."""
    monkeypatch.delenv("PINMATRIX_TRUSTED_KEYS", raising=False)
    monkeypatch.chdir(tmp_path)  # no project here, so no project key (.pinmatrix/keys/signing.pub) either
    remote = [dict(e, reference=e["reference"].replace("127.0.0.1:5000", "registry.example:5000")) for e in ENTRIES]
    kg = tmp_path / "known-good.toml"
    write_entries(kg, remote)
    assert len(read_known_good(kg)) == 4
    host = tmp_path / "host.json"
    host.write_text(json.dumps(GB10_OLD.to_dict()))
    rc = main(["pull", "--known-good", str(kg), "--stack", "gb10", "--print", "--host-json", str(host)])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert "passed over cccccccccccc gb10[cccccccccccc] (promoted 2026-11-20T00:00:00Z): built for 9.0a" in err
    assert "passed over bbbbbbbbbbbb" in err and "needs driver >= 590.44.01, the host has 580.142" in err
    assert err.strip().splitlines()[-1] == (
        f"pinmatrix: error: {kg}: cell aaaaaaaaaaaa: will not pull {remote[0]['reference']}: no trusted public key "
        "to verify with: pass --key FILE.pub or set PINMATRIX_TRUSTED_KEYS")

    host.write_text(json.dumps(CPU.to_dict()))
    rc = main(["pull", "--known-good", str(kg), "--stack", "gb10", "--print", "--host-json", str(host)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("pinmatrix: error: no known-good cell of stack gb10 runs on this host")
    rc = main(["pull", "--known-good", str(kg), "--stack", "nope", "--print"])
    assert rc == 2 and "no known-good cell for stack 'nope'" in capsys.readouterr().err
    rc = main(["pull", "--known-good", str(tmp_path / "missing.toml"), "--print"])
    assert rc == 2




def test_a_pull_says_the_image_bytes_then_its_time_and_rate(tmp_path: Path, capsys, monkeypatch) -> None:
    """The engine's pull cannot be watched: the image's bytes (its manifest's config and layers, asked by digest)
    are said as it starts, the time and rate once it ended, on a fake clock; --quiet says neither."""
    from pinmatrix.imageref import ImageRef
    from pinmatrix.registry.client import Manifest
    from pinmatrix.release.verify import Verification

    demo = ENTRIES[3]
    layer = "application/vnd.oci.image.layer.v1.tar+gzip"
    body = json.dumps({"schemaVersion": 2, "config": {"digest": "sha256:" + "c" * 64, "size": 1024},
                       "layers": [{"mediaType": layer, "digest": "sha256:" + "a" * 64, "size": (3 << 20) - 1024}]})
    asked: list[tuple[str, str]] = []
    now = [100.0]

    class Registry:
        def __init__(self, host: str) -> None:
            pass

        def credentials(self, repository: str) -> None:
            return None

        def get_manifest(self, repository: str, reference: str) -> Manifest:
            asked.append((repository, reference))
            return Manifest(body=body.encode(), media_type="application/vnd.oci.image.manifest.v1+json",
                            digest=reference)

    class Engine:
        name, env = "podman", {}  # type: ignore[var-annotated]

        def reads_zstd_layers(self) -> bool:
            return True

        def pull(self, ref: str, *, tls_verify: bool | None = None) -> None:
            now[0] += 6  # the pull takes six seconds

    def verify(entry, registry, keys, source):  # noqa: ANN001, ANN202
        return ImageRef.parse(entry["reference"]), Verification(
            reference=entry["reference"], ok=True, cell_id=entry["cell_id"], result="pass", keyids=["k" * 64],
            layer_media_types=[layer]), []

    monkeypatch.setattr("pinmatrix.commands.pull.Registry", Registry)
    monkeypatch.setattr("pinmatrix.commands.pull.verify_entry", verify)
    monkeypatch.setattr("pinmatrix.commands.pull.trusted_keys", lambda *args: [])
    monkeypatch.setattr("pinmatrix.commands.pull.choose_engine", lambda *args, **kwargs: Engine())
    monkeypatch.setattr("pinmatrix.commands.pull.CLOCK", lambda: now[0])
    kg, host = tmp_path / "known-good.toml", tmp_path / "host.json"
    write_entries(kg, [demo])
    host.write_text(json.dumps(CPU.to_dict()))
    argv = ["pull", "--known-good", str(kg), "--stack", "demo", "--host-json", str(host)]
    assert main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    ref = demo["reference"]
    assert asked == [("pinmatrix/known-good/demo", demo["digest"])]
    assert f"pull {ref}: 3.0 MiB (podman; no progress until it ends)" in err
    assert f"pull {ref}: done, 3.0 MiB in 0:06, 512.0 KiB/s" in err, err
    assert main([*argv, "--quiet"]) == 0
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("pull ")]
