"""What a cell's SBOM holds beyond its lock, and that CycloneDX's own schema accepts it: the Debian packages of the
image's base (the dpkg status file, bounded and parsed as data, as ``pkg:deb/debian/NAME@VERSION?arch=ARCH``),
the dependency graph from each wheel's Requires-Dist resolved against the lock for the cell's target (markers,
extras, specifiers; the lock's via notes where a wheel is not at hand), and ``metadata.tools``. Read from a
registry, and `pinmatrix promote` attaching it: tests/integration/test_sbom_base_packages.py."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
from helpers import components_of
from packageurl import PackageURL
from promotion import CPU_CELL, _matrix_for, record  # noqa: F401 - the fixture
from sbom_inputs import STATUS, cached_wheel, validate_bom

from pinmatrix.release import debian
from pinmatrix.release.debian import DebianError, DebianPackage, base_layers, parse_status
from pinmatrix.release.requires import cached_requires, requires_graph, target_environment, wheel_requires
from pinmatrix.release.sbom import cell_bom

# ------------------------------------------------------------------------------------------ dpkg status


def test_the_installed_packages_of_a_dpkg_status_file() -> None:
    packages = parse_status(STATUS, "status")
    assert [p.name for p in packages] == ["base-files", "libc6", "libgcc-s1", "perl-base"]  # tzdata: config-files
    by_name = {p.name: p for p in packages}
    assert by_name["libc6"].purl().to_string() == "pkg:deb/debian/libc6@2.41-12?arch=amd64"
    assert by_name["base-files"].purl().to_string() == "pkg:deb/debian/base-files@1:13.8?arch=amd64"
    assert (by_name["libc6"].source, by_name["libc6"].source_version) == ("glibc", None)
    assert (by_name["libgcc-s1"].source, by_name["libgcc-s1"].source_version) == ("gcc-14", None)
    assert (by_name["perl-base"].source, by_name["perl-base"].source_version) == ("perl", "5.40.1-6")


def test_an_extract_bases_unpacked_packages_count_and_half_installed_ones_do_not() -> None:
    text = ("Package: dash\nVersion: 0.5.12-12\nArchitecture: arm64\nStatus: install ok unpacked\n\n"
            "Package: dpkg\nVersion: 1.22.22\nArchitecture: arm64\nStatus: install ok half-installed\n\n"
            "Package: libc6\nSource: glibc\nVersion: 2.41-12\nArchitecture: arm64\nStatus: install ok half-configured\n")
    assert [(p.name, p.architecture) for p in parse_status(text, "status")] == [("dash", "arm64")]


def test_the_hosts_own_dpkg_database_parses() -> None:
    status = Path("/var/lib/dpkg/status")
    if not status.is_file():
        pytest.skip("not a Debian host")
    packages = parse_status(status.read_text(errors="replace"), str(status))
    assert len(packages) > 100
    assert {"dpkg", "base-files"} <= {p.name for p in packages}
    for pkg in packages:  # every purl reads back as the package ('+' in g++ is percent-encoded in it)
        back = PackageURL.from_string(pkg.purl().to_string())
        assert (back.type, back.namespace, back.name, back.version, back.qualifiers) == \
            ("deb", "debian", pkg.name, pkg.version, {"arch": pkg.architecture})
    # an SBOM with all of them (epochs, '+', multi-arch) is valid CycloneDX 1.6
    from sbom_data import LOCK, MOMENT

    bom = cell_bom(CPU_CELL, LOCK, moment=MOMENT, debian=packages)
    validate_bom(bom)
    assert len([c for c in bom["components"] if c["purl"].startswith("pkg:deb/")]) == len(packages)


@pytest.mark.parametrize(("text", "message"), [
    ("Package: ../../etc\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1.0\n",
     "status: entry 1 ('../../etc'): name '../../etc' is not a Debian package name"),
    ("Package: bash\nStatus: install ok installed\nArchitecture: amd64\nVersion: 5.2 $(id)\n",
     "status: entry 1 ('bash'): version '5.2 $(id)' is not a Debian version"),
    ("Package: bash\nStatus: install ok installed\nArchitecture: AMD64\nVersion: 5.2\n",
     "status: entry 1 ('bash'): architecture 'AMD64' is not a Debian architecture"),
    ("Package: bash\nStatus: install ok installed\nVersion: 5.2\n",
     "status: entry 1 ('bash'): architecture '' is not a Debian architecture"),
])
def test_a_malformed_entry_is_one_line_naming_it(text: str, message: str) -> None:
    with pytest.raises(DebianError) as err:
        parse_status(text, "status")
    assert str(err.value) == message


def test_the_status_file_is_bounded(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(debian, "MAX_PACKAGES", 3)
    with pytest.raises(DebianError, match="more than 3 entries"):
        parse_status(STATUS, "status")
    monkeypatch.setattr(debian, "MAX_STATUS", 100)
    with pytest.raises(DebianError, match="more than 100 bytes"):
        parse_status(STATUS, "status")


def test_base_layers_are_those_the_history_names() -> None:
    layers = [{"digest": f"sha256:{i:064x}"} for i in range(3)]
    config = {"history": [{"created_by": "pinmatrix: base debian:trixie (amd64, k)"}, {"empty_layer": True},
                          {"created_by": "pinmatrix: base debian:trixie (amd64, k)"}, {"created_by": "pinmatrix: torch"}]}
    assert base_layers(config, layers) == layers[:2]
    assert base_layers({"history": config["history"][:2]}, layers) == []  # the history does not cover every layer
    assert base_layers({}, layers) == []


# ------------------------------------------------------------------------------------------ Requires-Dist


REQUESTS = ["charset_normalizer<4,>=2", "idna<4,>=2.5", "urllib3<3,>=1.21.1", "certifi>=2017.4.17",
            'PySocks!=1.5.7,>=1.5.6; extra == "socks"', 'win-inet-pton; sys_platform == "win32" and extra == "socks"']
VERSIONS = {"requests": "2.32.3", "idna": "3.10", "urllib3": "2.3.0", "certifi": "2025.1.31", "pysocks": "1.7.1",
            "win-inet-pton": "1.1.0", "six": "1.17.0", "torch": "2.11.0", "nvidia-nccl-cu13": "2.28.9",
            "triton": "3.6.0"}
TORCH = ['nvidia-nccl-cu13==2.28.9; platform_system == "Linux" and platform_machine == "x86_64"',
         'triton==3.5.0; platform_system == "Linux"',  # not the locked 3.6.0: no edge
         "torch", 'six; python_version < "3.9"']


def test_requires_dist_resolved_against_the_lock_for_the_cells_target() -> None:
    env = target_environment(CPU_CELL)
    assert (env["python_version"], env["platform_machine"], env["sys_platform"]) == ("3.12", "x86_64", "linux")
    edges = requires_graph(VERSIONS, {"requests": REQUESTS, "torch": TORCH}, env)
    assert edges == {"requests": {"idna", "urllib3", "certifi"}, "torch": {"nvidia-nccl-cu13"}}
    # an extra the cell asks for turns on the requirements under it (win32's stays off: not the target)
    asked = requires_graph(VERSIONS, {"requests": REQUESTS}, env, top=["requests[socks]==2.32.3"])
    assert asked["requests"] == {"idna", "urllib3", "certifi", "pysocks"}
    # ... and an extra asked for by a requirer, too
    chained = requires_graph(VERSIONS, {"requests": REQUESTS, "six": ["requests[socks]"]}, env)
    assert chained["requests"] == {"idna", "urllib3", "certifi", "pysocks"}
    # aarch64: the x86_64-only requirement is not an edge
    arm = target_environment(dataclasses.replace(CPU_CELL, platform="aarch64-manylinux_2_28"))
    assert requires_graph(VERSIONS, {"torch": TORCH}, arm)["torch"] == set()


def test_requires_dist_comes_from_cached_wheels_that_hash_to_the_lock(tmp_path: Path) -> None:
    cache = tmp_path / "wheels"
    good = cached_wheel(cache, "requests", "2.32.3", REQUESTS)
    tampered = cached_wheel(cache, "six", "1.17.0", ["idna"])
    victim = next((cache / tampered[:2] / tampered).iterdir())
    victim.write_bytes(victim.read_bytes() + b"\0")  # no longer the bytes the lock names
    big = cached_wheel(cache, "idna", "3.10", ["six"], metadata_pad=5 << 20)
    found = cached_requires({"requests": ["0" * 64, good], "six": [tampered], "idna": [big], "certifi": ["f" * 64]},
                            cache)
    assert found == {"requests": REQUESTS, "idna": []}  # an oversized METADATA gives no requirement
    assert wheel_requires(tmp_path / "absent.whl") == []


# ------------------------------------------------------------------------------------------ the document


def _lock(hashes: dict[str, str]) -> str:
    lines = ["# pinmatrix lock"]
    via = {"certifi": "requests", "idna": "requests", "urllib3": "requests"}
    for name in sorted(hashes):
        lines += [f"{name}=={VERSIONS[name]} \\", f"    --hash=sha256:{hashes[name]}",
                  f"    # via {via.get(name, '-r requirements.in')}"]
    return "\n".join(lines) + "\n"


def test_the_sbom_has_the_debian_packages_the_requires_dist_graph_and_its_tools() -> None:
    from sbom_data import MOMENT

    hashes = {n: hashlib.sha256(n.encode()).hexdigest() for n in ("requests", "idna", "urllib3", "certifi", "six")}
    lock = _lock(hashes)
    packages = parse_status(STATUS, "status")
    # requests' wheel at hand (its Requires-Dist); six's too, and it requires idna, which no via note says
    bom = cell_bom(CPU_CELL, lock, moment=MOMENT, debian=packages,
                   requires={"requests": ["idna<4,>=2.5", "certifi>=2017.4.17"], "six": ["idna"]})
    validate_bom(bom)
    comps = components_of(bom)
    assert "pkg:deb/debian/libc6@2.41-12?arch=amd64" in comps
    assert comps["pkg:deb/debian/base-files@1:13.8?arch=amd64"]["version"] == "1:13.8"
    assert {p["name"]: p["value"] for p in comps["pkg:deb/debian/libc6@2.41-12?arch=amd64"]["properties"]} == \
        {"pinmatrix:deb.source": "glibc"}
    deps = {d["ref"]: sorted(d.get("dependsOn", [])) for d in bom["dependencies"]}
    # Requires-Dist wins over the via notes where the wheel is at hand: requests -> urllib3 is not in its METADATA
    assert deps["pkg:pypi/requests@2.32.3"] == ["pkg:pypi/certifi@2025.1.31", "pkg:pypi/idna@3.10"]
    assert deps["pkg:pypi/six@1.17.0"] == ["pkg:pypi/idna@3.10"]
    root = deps[f"cell:{CPU_CELL.id}"]
    assert "pkg:deb/debian/libc6@2.41-12?arch=amd64" in root and "pkg:pypi/six@1.17.0" in root  # six: a pin
    assert "pkg:pypi/urllib3@2.3.0" in root  # nothing at hand requires it: the cell does, so the graph reaches it
    assert "pkg:pypi/idna@3.10" not in root
    tools = {t["name"]: t["version"] for t in bom["metadata"]["tools"]["components"]}
    assert set(tools) == {"pinmatrix", "cyclonedx-python-lib"} and tools["pinmatrix"] != "unknown"
    props = {p["name"]: p["value"] for p in bom["metadata"]["component"]["properties"]}
    assert props["pinmatrix:dependencies.requires-dist"] == "2 of 5" and props["pinmatrix:debian.packages"] == "4"
    # without the wheels: the lock's via notes, as before
    plain = {d["ref"]: sorted(d.get("dependsOn", [])) for d in cell_bom(CPU_CELL, lock, moment=MOMENT)["dependencies"]}
    assert plain["pkg:pypi/requests@2.32.3"] == ["pkg:pypi/certifi@2025.1.31", "pkg:pypi/idna@3.10",
                                                 "pkg:pypi/urllib3@2.3.0"]


def test_the_schema_check_fails_on_an_invalid_sbom() -> None:
    from sbom_data import LOCK, MOMENT

    bom = cell_bom(CPU_CELL, LOCK, moment=MOMENT, debian=parse_status(STATUS, "status"))
    validate_bom(bom)
    for broken in ({**bom, "specVersion": "1.6", "components": [{"name": "x"}]},  # no type
                   {**bom, "dependencies": [{"dependsOn": []}]},  # no ref
                   {**bom, "serialNumber": "not-a-urn"}):
        with pytest.raises(AssertionError):
            validate_bom(broken)


# ------------------------------------------------------------------------------------------ end to end


def test_a_debian_package_is_a_strict_model() -> None:
    with pytest.raises(ValueError):
        DebianPackage.model_validate({"name": "bash", "version": "5.2", "architecture": "amd64", "extra": 1})
