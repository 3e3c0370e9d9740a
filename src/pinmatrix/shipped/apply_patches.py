#!/usr/bin/env python3
"""Apply a cell's patches inside its image (copied in by pinmatrix; runs with the image's /opt/venv python).

plan.json lists the patches in order. For each one the sha256 is checked again (a mismatch is refused),
then by kind:
  installed-tree  GNU patch -p1 --forward from the site-packages root of /opt/venv
  source          the locked sdist of the package is downloaded with its hash, patched, built into a wheel
                  with the cell's TORCH_CUDA_ARCH_LIST / FLASHINFER_CUDA_ARCH_LIST and installed over it
A patch whose status is already-upstream is skipped with a note; one that turns out to be applied already
(it reverses cleanly) is skipped with a note too. A patch that does not apply names the file and hunk and
fails the build. Every outcome is one line starting with "pinmatrix: patch ".
"""

import hashlib
import json
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

PIP = ["/opt/venv/bin/python", "/opt/pinmatrix-pip.whl/pip"]


def say(message):
    print("pinmatrix: patch " + message, flush=True)


def gnu_patch(directory, patch_file, strip, *extra):
    argv = ["patch", "-p%d" % strip, "--batch", "--forward", "-d", directory, "-i", patch_file, *extra]
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def failed_hunks(output):
    current, failures = "?", []
    for line in output.splitlines():
        m = re.match(r"^(?:checking|patching) file (.+)$", line)
        if m:
            current = m.group(1).strip("'")
            continue
        m = re.match(r"^(Hunk #\d+ FAILED at \d+.*?)\.?$", line)
        if m:
            failures.append("%s: %s" % (current, m.group(1)))
        elif "can't find file to patch" in line or "No file to patch" in line:
            failures.append("%s: file to patch not found" % current)
    return failures


def apply_tree(p, directory):
    """Dry-run, then apply. Returns a note for skips; raises SystemExit(1) when it does not apply."""
    strip = int(p.get("strip", 1))
    dry = gnu_patch(directory, p["path"], strip, "--dry-run")
    if dry.returncode == 0:
        real = gnu_patch(directory, p["path"], strip)
        if real.returncode != 0:
            fail(p, real.stdout)
        files = len(re.findall(r"^patching file ", real.stdout, re.M))
        say("%s applied to %s %s (%d file%s)" % (p["id"], p["package"], p["version"], files, "" if files == 1 else "s"))
        return
    reverse = subprocess.run(
        ["patch", "-p%d" % strip, "--batch", "--reverse", "--dry-run", "-d", directory, "-i", p["path"]],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    if reverse.returncode == 0:
        say("%s skipped: already contained in %s %s (it reverses cleanly)" % (p["id"], p["package"], p["version"]))
        return
    fail(p, dry.stdout)


def fail(p, output):
    hunks = failed_hunks(output) or [line for line in output.splitlines() if line.strip()][-1:] or ["no output"]
    say("%s does not apply to %s %s: %s" % (p["id"], p["package"], p["version"], "; ".join(hunks)))
    sys.stdout.write(output)
    raise SystemExit(1)


def apply_source(p, plan):
    work = tempfile.mkdtemp(prefix="pinmatrix-src-")
    req = os.path.join(work, "requirement.txt")
    with open(req, "w") as handle:
        handle.write(p["requirement"] + "\n")
    subprocess.run(
        [*PIP, "download", "--no-deps", "--no-binary", ":all:", "--require-hashes", "--no-cache-dir",
         "--disable-pip-version-check", "-d", os.path.join(work, "sdist"), "-r", req],
        check=True,
    )
    (archive,) = os.listdir(os.path.join(work, "sdist"))
    src = os.path.join(work, "src")
    path = os.path.join(work, "sdist", archive)
    if archive.endswith(".zip"):
        zipfile.ZipFile(path).extractall(src)
    else:
        with tarfile.open(path) as tar:
            tar.extractall(src, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(src)
    (top,) = os.listdir(src)
    apply_tree(p, os.path.join(src, top))
    wheels = os.path.join(work, "wheels")
    subprocess.run(
        [*PIP, "wheel", "--no-deps", "--no-cache-dir", "--disable-pip-version-check", "-w", wheels,
         os.path.join(src, top)],
        check=True,
    )
    (wheel,) = os.listdir(wheels)
    subprocess.run(
        [*PIP, "install", "--no-deps", "--force-reinstall", "--no-compile", "--no-cache-dir",
         "--disable-pip-version-check", os.path.join(wheels, wheel)],
        check=True,
    )
    say("%s: built %s from the patched sdist (TORCH_CUDA_ARCH_LIST=%s) and installed it" % (
        p["id"], wheel, os.environ.get("TORCH_CUDA_ARCH_LIST", "")))


def main():
    plan_path = sys.argv[1]
    with open(plan_path) as handle:
        plan = json.load(handle)
    base = os.path.dirname(os.path.abspath(plan_path))
    site = plan.get("site_packages") or sysconfig.get_paths()["purelib"]
    for p in plan["patches"]:
        if p["status"] == "already-upstream":
            say("%s skipped: contained upstream in %s %s%s" % (
                p["id"], p["package"], p["version"], (" (" + p["note"] + ")") if p.get("note") else ""))
            continue
        p["path"] = os.path.join(base, p["file"])
        with open(p["path"], "rb") as handle:
            actual = hashlib.sha256(handle.read()).hexdigest()
        if actual != p["sha256"]:
            say("%s refused: sha256 %s differs from the matrix's %s" % (p["id"], actual, p["sha256"]))
            raise SystemExit(1)
        if p["kind"] == "source":
            apply_source(p, plan)
        else:
            apply_tree(p, site)


if __name__ == "__main__":
    main()
