"""What the sandbox and chroot runtimes share: the order in which the environments of the host, the image, a CDI
spec and the runner stack up, the driver's folder on the paths, and the launcher's setup-error line."""

from __future__ import annotations

from pathlib import Path

from pinmatrix.oci.unpack import ImageRoot
from pinmatrix.smoke.chroot_host import DriverFiles
from pinmatrix.smoke.image_root import DRIVER_DIR, ImageRootSmokes, image_environment


def _image(tmp_path: Path, env: list[str]) -> ImageRoot:
    return ImageRoot("sha256:" + "b" * 64, tmp_path, {"config": {"Env": env}})


def test_the_image_wins_over_the_host_a_cdi_spec_over_both_and_the_runner_over_all(tmp_path: Path) -> None:
    image = _image(tmp_path, ["CUDA_HOME=/usr/local/cuda", "PINMATRIX_SMOKE_RESULT=/image", "PYTHONPATH=/img"])
    passed = {"CUDA_HOME": "/host/cuda", "PINMATRIX_SMOKE_RESULT": "/pinmatrix-out/r.json", "LANG": "C"}
    env = image_environment(passed, image, home="/home/pm", cache=None, driver=DriverFiles(),
                            over=(("LANG", "C.UTF-8"), ("CUDA_HOME", "/cdi")))
    assert env["CUDA_HOME"] == "/cdi" and env["LANG"] == "C.UTF-8"
    assert env["PINMATRIX_SMOKE_RESULT"] == "/pinmatrix-out/r.json"
    assert env["HOME"] == "/home/pm" and env["PYTHONUNBUFFERED"] == "1"
    assert env["PYTHONPATH"] == "/opt/pinmatrix-shipped:/img"
    assert "LD_LIBRARY_PATH" not in env and DRIVER_DIR not in env["PATH"]
    assert image_environment({}, image, home="/root", cache=None, driver=DriverFiles())["CUDA_HOME"] == "/usr/local/cuda"


def test_the_driver_folder_goes_first_on_the_library_path_and_last_on_path(tmp_path: Path) -> None:
    image = _image(tmp_path, ["LD_LIBRARY_PATH=/opt/lib", "HOME=/srv"])
    driver = DriverFiles({tmp_path / "libcuda.so.1": ("libcuda.so.1",)}, (tmp_path / "nvidia-smi",))
    env = image_environment({}, image, home="/home/pm", cache=None, driver=driver)
    assert env["LD_LIBRARY_PATH"] == f"{DRIVER_DIR}/lib:/opt/lib"
    assert env["PATH"].endswith(f":{DRIVER_DIR}/bin") and env["HOME"] == "/srv"


def test_the_setup_error_line_is_read_only_when_the_launcher_wrote_one(tmp_path: Path) -> None:
    assert ImageRootSmokes.setup_error(tmp_path) == ""
    ImageRootSmokes.error_file(tmp_path).write_text("")
    assert ImageRootSmokes.setup_error(tmp_path) == ""
    ImageRootSmokes.error_file(tmp_path).write_text("mount /proc: Operation not permitted\n")
    assert ImageRootSmokes.setup_error(tmp_path) == "mount /proc: Operation not permitted"
