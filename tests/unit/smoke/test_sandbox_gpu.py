"""GPU wiring for the sandbox: a host's NVIDIA CDI spec applied (device nodes, mounts, env) as typed, bounded
data; else the nodes and driver files discovered; the driver's version named."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from pinmatrix.smoke.chroot_host import DriverFiles
from pinmatrix.smoke.sandbox_gpu import MAX_CDI_BYTES, cdi_specs, driver_version, gpu_wiring, read_cdi
from pinmatrix.smoke.sandbox_user import ImageRunRefused

SPEC = """cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia1
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
  - path: /dev/nvidia-uvm
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
  mounts:
  - hostPath: {lib}
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
    options: [ro, nosuid, nodev, bind]
  - hostPath: {smi}
    containerPath: /usr/bin/nvidia-smi
  - hostPath: {socket}
    containerPath: /run/nvidia-persistenced/socket
"""


def _host(tmp_path: Path) -> dict[str, Path]:
    lib = tmp_path / "drv" / "libcuda.so.580.159.04"
    lib.parent.mkdir()
    lib.write_text("libcuda")
    smi = tmp_path / "usr" / "bin" / "nvidia-smi"
    smi.parent.mkdir(parents=True)
    smi.write_text("#!/bin/sh\n")
    socket = tmp_path / "persistenced-socket"
    socket.write_text("")
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    return {"lib": lib, "smi": smi, "socket": socket, "cdi": cdi}


def test_a_cdi_spec_gives_its_nodes_mounts_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = _host(tmp_path)
    monkeypatch.setattr("pinmatrix.smoke.sandbox_gpu._BIN_FOLDERS", (str(host["smi"].parent),))
    text = SPEC.format(lib=host["lib"], smi=host["smi"], socket=host["socket"])
    (host["cdi"] / "nvidia.yaml").write_text(text)
    (host["cdi"] / "README").write_text("not a spec")
    wiring = gpu_wiring(dev=tmp_path / "no-dev", cdi_folders=(host["cdi"], tmp_path / "absent"))
    assert wiring.source == f"cdi {host['cdi'] / 'nvidia.yaml'}"
    assert [inside for _, inside in wiring.devices] == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0",
                                                        "/dev/nvidia1"]  # the top level and the "all" device
    assert wiring.driver.libraries == {host["lib"].resolve(): ("libcuda.so", "libcuda.so.1",
                                                               "libcuda.so.580.159.04")}
    assert wiring.driver.binaries == (host["smi"],) and wiring.driver.found
    assert wiring.mounts == ((str(host["socket"]), "/run/nvidia-persistenced/socket"),)
    assert wiring.env == (("NVIDIA_VISIBLE_DEVICES", "void"),)
    assert wiring.driver_version == "580.159.04"
    assert wiring.record() == {"gpu": wiring.source, "driver": "580.159.04"}
    (host["cdi"] / "nvidia.json").write_text(json.dumps({"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu",
                                                         "devices": [{"name": "0", "containerEdits": {
                                                             "deviceNodes": [{"path": "/dev/nvidia0"}]}}]}))
    assert [p.name for p in cdi_specs((host["cdi"],))] == ["nvidia.json", "nvidia.yaml"]
    first = gpu_wiring(dev=tmp_path / "no-dev", cdi_folders=(host["cdi"],))
    assert first.devices == (("/dev/nvidia0", "/dev/nvidia0"),)  # no "all" device: every one the spec names


@pytest.mark.parametrize(("text", "why"), [
    ("kind: nvidia.com/gpu\n", "cdiVersion: Field required"),
    ("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  deviceNodes:\n  - path: /etc/shadow\n",
     "device node '/etc/shadow' is not under /dev"),
    ("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  env: ['LD_PRELOAD']\n",
     "env entry 'LD_PRELOAD' is not NAME=VALUE"),
    ("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  mounts:\n  - hostPath: rel\n    containerPath: /x\n",
     "is not between absolute paths"),
    ("[unclosed", "not a CDI spec"),
])
def test_a_bad_spec_is_one_line_naming_the_file(tmp_path: Path, text: str, why: str) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(text)
    with pytest.raises(ImageRunRefused, match=f"^CDI spec {spec}: .*{why}"):
        gpu_wiring(dev=tmp_path, cdi_folders=(tmp_path,))


def test_a_spec_is_read_bounded(tmp_path: Path) -> None:
    spec = tmp_path / "big.json"
    spec.write_bytes(b" " * (MAX_CDI_BYTES + 1))
    with pytest.raises(ImageRunRefused, match=f"larger than {MAX_CDI_BYTES} bytes"):
        read_cdi(spec)


def test_without_a_spec_the_nodes_and_driver_are_discovered(tmp_path: Path) -> None:
    assert gpu_wiring(dev=tmp_path, cdi_folders=()).source == "none"
    if os.geteuid() == 0:
        os.mknod(tmp_path / "nvidia0", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    else:
        (tmp_path / "nvidia0").write_text("")
    (tmp_path / "nvidiactl").write_text("")
    (tmp_path / "sda").write_text("")
    lib = tmp_path / "libcuda.so.570.86.10"
    lib.write_text("")
    wiring = gpu_wiring(dev=tmp_path, cdi_folders=(tmp_path / "none",), driver=DriverFiles({lib: ("libcuda.so.1",)}))
    assert wiring.source == "discovered"
    assert wiring.devices == ((str(tmp_path / "nvidia0"), "/dev/nvidia0"), (str(tmp_path / "nvidiactl"),
                                                                            "/dev/nvidiactl"))
    assert wiring.driver_version == "570.86.10"


def test_the_driver_version_from_the_kernel_module_when_no_libcuda_names_it(tmp_path: Path) -> None:
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n")
    assert driver_version(DriverFiles(), version) == "580.159.04"
    assert driver_version(DriverFiles(), tmp_path / "absent") is None
