"""The base of every cell image, as layers in the OCI layout:

- ``mmdebstrap``: a Debian root filesystem that is a pure function of its declared inputs (suite, packages,
  variant, architecture, mirror, SOURCE_DATE_EPOCH). The mirror is resolved first (the host's apt sources
  unless the matrix names one) and is part of the cache key; host state (``/etc/hostname``,
  ``/etc/resolv.conf``, ``/etc/machine-id``) and device nodes are left out of the layer. ``variant =
  "extract"`` only unpacks packages (no maintainer script runs), which is how a foreign architecture (arm64 on
  x86_64) is made without emulation.
- ``image``: an image pinned by digest (``name@sha256:...``), copied into the layout by skopeo for the cell's
  architecture; its layers are used as they are.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from pinmatrix import interrupt
from pinmatrix.atomic import atomic_path, atomic_write_text, locked
from pinmatrix.cell import BaseSpec
from pinmatrix.errors import PinmatrixError
from pinmatrix.hashing import sha256_bytes
from pinmatrix.oci.compression import DEFAULT_COMPRESSION, LayerCompression
from pinmatrix.oci.config import oci_arch
from pinmatrix.oci.layer import LayerDescriptor, LayerWriter, open_layer, open_plain_tar, recompress
from pinmatrix.oci.layout import OCILayout
from pinmatrix.oci.manifest import layer_descriptors
from pinmatrix.project.debian_suites import DEBIAN_ARCHIVE_SUITES, python_of, suite_of

DEFAULT_SOURCE_DATE_EPOCH = 1_735_689_600
# The Python each Debian suite ships as python3: a cell's Python must be its base's.
REQUIRED_PACKAGES: tuple[str, ...] = ("python3",)
# An extract base runs no maintainer script, so it holds only what packages ship: these ship what any program
# needs to start (trixie's base-files: the usr-merge links /bin, /lib -> usr/..., so the ELF interpreter
# /lib/ld-linux-aarch64.so.1 resolves; dash: /usr/bin/sh; the C++ runtime torch and vLLM link).
EXTRACT_PACKAGES: tuple[str, ...] = ("base-files", "dash", "libgcc-s1", "libstdc++6")
# What maintainer scripts would have made, written as data into an extract base where the packages left it out:
# the accounts (vLLM's import asks for the user's name) and update-ca-certificates' bundle.
EXTRACT_PASSWD = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
EXTRACT_GROUP = b"root:x:0:\nnogroup:x:65534:\n"
CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"
CA_SOURCES = "usr/share/ca-certificates/"
EXTRACT_FORMAT = 2  # bump when what an extract base gets beyond its packages changes
# dpkg never runs in an extract base, so its status file stays empty and the image's SBOM would name no Debian
# package: write one from the unpacked .debs' own control fields (host dpkg-deb reads any architecture's), each
# "install ok unpacked", which is what they are. mmdebstrap runs no customize hook for this variant.
EXTRACT_STATUS_HOOK = (
    "--extract-hook=export LC_ALL=C; for deb in \"$1\"/var/cache/apt/archives/*.deb; do "
    "dpkg-deb --field \"$deb\" Package Source Version Architecture || exit 1; "
    "printf 'Status: install ok unpacked\\n\\n'; done > \"$1/var/lib/dpkg/status\"")
PATH_EXCLUDES: tuple[str, ...] = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*",
                                  "/usr/share/locale/*", "/usr/share/lintian/*")
# Host state mmdebstrap copies in, and what the container runtime provides at run time instead.
HOST_STATE = frozenset({"etc/hostname", "etc/resolv.conf", "etc/machine-id", "var/lib/dbus/machine-id"})
ROOTFS_FORMAT = 2  # bump when the way a rootfs becomes a layer changes


class BaseImageError(PinmatrixError):
    """The base root filesystem could not be made, fetched or checked."""


@dataclass(frozen=True)
class RootfsInputs:
    """Everything that determines the Debian base layer (the mirror included, once resolved)."""

    suite: str
    packages: tuple[str, ...]
    source_date_epoch: int
    arch: str  # Debian architecture: amd64, arm64
    mirror: str
    variant: str = "minbase"
    excludes: tuple[str, ...] = PATH_EXCLUDES
    format: int = ROOTFS_FORMAT

    def key(self) -> str:
        data: dict[str, object] = asdict(self)
        data["layer"] = DEFAULT_COMPRESSION.key  # debian_base makes it so (debian_base_as: the cell's choice from it)
        if self.variant == "extract":
            data["extract_format"] = EXTRACT_FORMAT
        return sha256_bytes(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())[:20]


@dataclass(frozen=True)
class BaseLayers:
    """The base as the assembler uses it: its layers, the Env of its config, and what to call it."""

    layers: tuple[LayerDescriptor, ...]
    env: tuple[str, ...]
    name: str  # for the org.opencontainers.image.base.name label
    key: str  # part of every cell image's inputs
    python: str | None  # the X.Y of /usr/bin/python3 in it, when known


def debian_arch(platform: str) -> str:
    arch, _ = oci_arch(platform)
    return arch


def host_debian_mirror(sources_dir: Path = Path("/etc/apt/sources.list.d"),
                       sources_list: Path = Path("/etc/apt/sources.list")) -> str:
    """The Debian archive URL the host's apt sources name (deb822 ``.sources`` first, then sources.list): the first
    source of a Debian suite (``DEBIAN_ARCHIVE_SUITES``; not security, updates or backports), so an Ubuntu host's
    archive, which serves no Debian suite, is never taken for one."""
    candidates: list[tuple[str, list[str]]] = []
    for path in sorted(sources_dir.glob("*.sources")) if sources_dir.is_dir() else []:
        for stanza in path.read_text(errors="replace").split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if ":" in line and not line.startswith(("#", " ")):
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
                for uri in fields.get("uris", "").split():
                    candidates.append((uri, fields.get("suites", "").split()))
    if sources_list.is_file():
        for line in sources_list.read_text(errors="replace").splitlines():
            parts = line.split("#", 1)[0].split()
            if len(parts) >= 3 and parts[0] == "deb":
                rest = [p for p in parts[1:] if not p.startswith("[")]
                if len(rest) >= 2:
                    candidates.append((rest[0], [rest[1]]))
    for uri, suites in candidates:
        if any(s in DEBIAN_ARCHIVE_SUITES for s in suites) and "security" not in uri:
            return uri.rstrip("/")
    raise BaseImageError(f"no Debian mirror in the host's apt sources ({sources_dir}/*.sources, {sources_list}; "
                         "a source counts when it names a Debian suite, such as trixie or stable): "
                         "set base.mirror in matrix.toml")


def rootfs_inputs(spec: BaseSpec, platform: str) -> RootfsInputs:
    return RootfsInputs(
        suite=suite_of(spec.suite),
        packages=tuple(sorted(set(REQUIRED_PACKAGES) | set(spec.packages)
                              | (set(EXTRACT_PACKAGES) if spec.variant == "extract" else set()))),
        source_date_epoch=spec.source_date_epoch if spec.source_date_epoch is not None else DEFAULT_SOURCE_DATE_EPOCH,
        arch=debian_arch(platform),
        mirror=(spec.mirror or host_debian_mirror()).rstrip("/"),
        variant=spec.variant,
    )


def _host_arch() -> str:
    proc = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=False)
    return proc.stdout.strip()


UNSHARE_HINT = ("; as an ordinary user mmdebstrap makes the base in a user namespace (--mode=unshare), which needs "
                "a subordinate id range for this user in /etc/subuid and /etc/subgid and newuidmap (package uidmap); "
                "or build as root, or pin base.image by digest")


def mmdebstrap_mode() -> str:
    """``root`` as root, else ``unshare``: an ordinary user makes the base in a user namespace. Both give the same
    bytes (the same trixie tar as root and as uid 65534, by sha256: docs/images.md), so the mode is no input of
    the base's key."""
    return "root" if os.geteuid() == 0 else "unshare"


@contextmanager
def _scratch(mode: str, ours: Path) -> Iterator[Path]:
    """mmdebstrap's TMPDIR, so that an interrupted run leaves none of its scratch behind. As root: ``ours``, the
    caller's private folder. In a user namespace its root is a subordinate id, which cannot enter a private (0700)
    folder of the user's: a folder of its own in the user's TMPDIR that it can enter, removed afterwards."""
    if mode == "root":
        yield ours
        return
    tmpdir = Path(tempfile.mkdtemp(prefix="pinmatrix-mmdebstrap-"))
    try:
        tmpdir.chmod(0o755)
        yield tmpdir
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _mmdebstrap(inputs: RootfsInputs, out: Path, log: Path) -> None:
    if shutil.which("mmdebstrap") is None:
        raise BaseImageError(f"the Debian base {inputs.suite} ({inputs.arch}, mirror {inputs.mirror}, key {inputs.key()}) "
                             "is not in the cache and mmdebstrap is not installed: apt-get install mmdebstrap, "
                             "or pin base.image by digest")
    if inputs.variant != "extract" and inputs.arch != _host_arch():
        raise BaseImageError(f"base variant {inputs.variant} for {inputs.arch} runs {inputs.arch} maintainer scripts, "
                             f"which this {_host_arch()} host cannot without emulation: set the stack's "
                             "base.variant = \"extract\" or pin base.image")
    mode = mmdebstrap_mode()
    argv = ["mmdebstrap", f"--variant={inputs.variant}", f"--mode={mode}", "--format=tar",
            f"--architectures={inputs.arch}", f"--include={','.join(inputs.packages)}",
            *[f"--dpkgopt=path-exclude={p}" for p in inputs.excludes],
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            "--customize-hook=rm -f \"$1/etc/hostname\" \"$1/etc/resolv.conf\"",
            *([EXTRACT_STATUS_HOOK] if inputs.variant == "extract" else []),
            "--", inputs.suite, str(out), inputs.mirror]
    with _scratch(mode, out.parent) as tmpdir, open(log, "a", encoding="utf-8") as handle:
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(inputs.source_date_epoch), "TMPDIR": str(tmpdir)}
        proc = interrupt.run(argv, env=env, stdout=handle, stderr=subprocess.STDOUT)  # Ctrl-C stops its group
    if proc.returncode != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:] or ["no output"]
        raise BaseImageError(f"mmdebstrap {inputs.suite} ({inputs.arch}) failed (exit {proc.returncode}): {tail[0]}"
                             + (UNSHARE_HINT if mode == "unshare" else ""))


# apt's download folders: owned by _apt where apt ran as an ordinary user (mmdebstrap --mode=unshare), by root in
# --mode=root; written as root's, so the mode leaves no trace in the base's bytes.
APT_SCRATCH = frozenset({"var/cache/apt/archives/partial", "var/lib/apt/lists/partial"})


def _rootfs_layer(tar_path: Path, layout: OCILayout, epoch: int, *,
                  extract: bool = False) -> tuple[LayerDescriptor, str | None]:
    """The Debian tree as a layer (host state and device nodes left out); also the python3 X.Y it holds.
    ``extract``: the tree was only unpacked, so what maintainer scripts make is added as data (``extract_data``)."""
    writer = LayerWriter(layout.blobs, epoch=epoch)
    python: str | None = None
    names: set[str] = set()
    certs: dict[str, bytes] = {}
    try:
        with open_plain_tar(tar_path) as src:
            for member in src:
                name = member.name.removeprefix("./").rstrip("/")
                if name in HOST_STATE or (name.startswith("dev/") and not member.isdir()):
                    continue
                if name == "usr/bin/python3" and member.issym():
                    python = member.linkname.removeprefix("python")
                if name in APT_SCRATCH:
                    member.uid = member.gid = 0
                names.add(name)
                stream = src.extractfile(member) if member.isreg() else None
                if extract and stream is not None and name.startswith(CA_SOURCES) and name.endswith(".crt") \
                        and member.size <= 1 << 20:
                    certs[name] = stream.read(1 << 20)
                    writer.add_member(member, io.BytesIO(certs[name]))
                    continue
                writer.add_member(member, stream)
            if extract:
                for name, data in extract_data(names, certs):
                    writer.add_bytes(name, data)
    except BaseException:
        writer.abort()
        raise
    return writer.close(), python


def extract_data(names: set[str], certs: dict[str, bytes]) -> list[tuple[str, bytes]]:
    """The files an extract base lacks because no maintainer script ran: ``/etc/passwd`` and ``/etc/group``
    (root and nobody), and the CA bundle update-ca-certificates would write (every certificate under
    /usr/share/ca-certificates, in its sorted order). Files the packages did ship are left as they are."""
    out: list[tuple[str, bytes]] = []
    if "etc/passwd" not in names:
        out.append(("etc/passwd", EXTRACT_PASSWD))
    if "etc/group" not in names:
        out.append(("etc/group", EXTRACT_GROUP))
    if CA_BUNDLE not in names and certs:
        bundle = b"".join(data if data.endswith(b"\n") else data + b"\n" for _, data in sorted(certs.items()))
        out.append((CA_BUNDLE, bundle))
    return out


def debian_base(spec: BaseSpec, platform: str, layout: OCILayout, cache_dir: Path, log: Path, *,
                dry: bool = False) -> BaseLayers:
    """The base layer, made now unless cached; ``dry``: only what it would be (no layers when not cached)."""
    inputs = rootfs_inputs(spec, platform)
    name = f"debian:{inputs.suite} ({inputs.arch}, {inputs.key()})"
    if dry:
        record = cache_dir / "rootfs" / f"{inputs.key()}.json"
        if record.is_file():
            data = json.loads(record.read_text())
            return BaseLayers((LayerDescriptor.from_json(data["layer"]),), (), name, inputs.key(), data.get("python"))
        return BaseLayers((), (), name, inputs.key(), python_of(inputs.suite))
    record = cache_dir / "rootfs" / f"{inputs.key()}.json"
    with locked(cache_dir / "rootfs" / f"{inputs.key()}.lock"):
        kept = cache_dir / "rootfs" / f"{inputs.key()}.layer"
        if record.is_file():
            data = json.loads(record.read_text())
            layer = LayerDescriptor.from_json(data["layer"])
            if _in_layout(layer, kept, layout):
                return BaseLayers((layer,), (), f"debian:{inputs.suite} ({inputs.arch}, {inputs.key()})",
                                  inputs.key(), data.get("python"))
        with interrupt.scratch_folder("pinmatrix-rootfs-", cache_dir) as tmp:  # removed on Ctrl-C too
            tar_path = tmp / "rootfs.tar"
            _mmdebstrap(inputs, tar_path, log)
            layer, python = _rootfs_layer(tar_path, layout, inputs.source_date_epoch,
                                          extract=inputs.variant == "extract")
        _link_or_copy(layout.blob_path(layer.digest), kept)  # another layout on this machine reuses it
        atomic_write_text(record, json.dumps({"inputs": asdict(inputs), "layer": layer.to_json(), "python": python},
                                             indent=1, sort_keys=True))
    return BaseLayers((layer,), (), f"debian:{inputs.suite} ({inputs.arch}, {inputs.key()})", inputs.key(), python)


def debian_base_record(spec: BaseSpec, platform: str, cache_dir: Path) -> tuple[str, Path]:
    """The key of a Debian base's inputs and the record ``debian_base`` keeps of the layer it made for them."""
    key = rootfs_inputs(spec, platform).key()
    return key, cache_dir / "rootfs" / f"{key}.json"


def adopt_debian_base(spec: BaseSpec, platform: str, layout: OCILayout, cache_dir: Path, layer: LayerDescriptor,
                      python: str | None) -> None:
    """Record a base layer made on another machine for the same inputs (a build cache's: its blob in ``layout``,
    checked against its digest) as ``debian_base`` records the one it makes, so it is used instead of made."""
    inputs = rootfs_inputs(spec, platform)
    key, record = debian_base_record(spec, platform, cache_dir)
    with locked(cache_dir / "rootfs" / f"{key}.lock"):
        _link_or_copy(layout.blob_path(layer.digest), cache_dir / "rootfs" / f"{key}.layer")
        atomic_write_text(record, json.dumps({"inputs": asdict(inputs), "layer": layer.to_json(), "python": python},
                                             indent=1, sort_keys=True))


def debian_base_as(base: BaseLayers, compression: LayerCompression, layout: OCILayout, cache_dir: Path, *,
                   dry: bool = False) -> BaseLayers:
    """A Debian base's layer compressed as the cell's layers are (``debian_base`` makes it as the default gzip):
    the same tar, so the same diff_id, a blob of its own, made once from the gzip one and kept in the cache like
    it. A puller then inflates one format: podman took 6 s for the 190 MB gzip base, about as long as for a 400
    MB zstd layer. The key is the base's and the compression's: part of every cell image's inputs."""
    if compression == DEFAULT_COMPRESSION:
        return base
    key = sha256_bytes(f"{base.key}\0{compression.key}".encode())[:20]
    record = cache_dir / "rootfs" / f"{key}.json"
    kept = cache_dir / "rootfs" / f"{key}.layer"
    if dry or not base.layers:
        layers = (LayerDescriptor.from_json(json.loads(record.read_text())),) if record.is_file() else ()
        return replace(base, layers=layers, key=key)
    with locked(cache_dir / "rootfs" / f"{key}.lock"):
        if record.is_file():
            layer = LayerDescriptor.from_json(json.loads(record.read_text()))
            if _in_layout(layer, kept, layout):
                return replace(base, layers=(layer,), key=key)
        source = base.layers[0]
        layer = recompress(layout.blob_path(source.digest), source.media_type, layout.blobs, compression,
                           entries=source.entries)
        if layer.diff_id != source.diff_id:  # the tar read back is not the one the gzip layer was made of
            raise BaseImageError(f"the base {base.name} as {compression.format}: its tar is {layer.diff_id}, not the "
                                 f"gzip layer's {source.diff_id}")
        _link_or_copy(layout.blob_path(layer.digest), kept)
        atomic_write_text(record, json.dumps(layer.to_json(), indent=1, sort_keys=True))
    return replace(base, layers=(layer,), key=key)


def _in_layout(layer: LayerDescriptor, kept: Path, layout: OCILayout) -> bool:
    """Whether a cached base layer's blob is in ``layout``, linked (or copied) there from the cache's kept copy
    when the layout lacks it."""
    if not layout.has_blob(layer.digest) and kept.is_file():
        _link_or_copy(kept, layout.blob_path(layer.digest))
    return layout.has_blob(layer.digest)


def _link_or_copy(source: Path, target: Path) -> None:
    with atomic_path(target) as tmp:
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)


def pinned_base(spec: BaseSpec, platform: str, layout: OCILayout, *, authfile: Path | None = None,
                tls_verify: bool = True) -> BaseLayers:
    """Copy ``spec.image`` (pinned by digest) into the layout with skopeo and use its layers as they are."""
    image = spec.image or ""
    if "@sha256:" not in image:
        raise BaseImageError(f"base.image must be pinned by digest (name@sha256:...), got {image!r}")
    digest = image.rsplit("@", 1)[1]
    ref = f"pinmatrix-base/{digest.replace(':', '-')}/{debian_arch(platform)}"
    stored = layout.image(ref)
    if stored is None or layout.missing_blobs(stored):
        if shutil.which("skopeo") is None:
            raise BaseImageError("skopeo is not installed (apt-get install skopeo): it fetches pinned base images")
        arch, variant = oci_arch(platform)
        argv = ["skopeo", "copy", "--quiet", "--override-os=linux", f"--override-arch={arch}",
                f"--src-tls-verify={'true' if tls_verify else 'false'}"]
        if variant:
            argv.append(f"--override-variant={variant}")
        if authfile is not None:
            argv.append(f"--authfile={authfile}")
        with tempfile.TemporaryDirectory(prefix="pinmatrix-base-") as tmp:
            argv += ["--", f"docker://{image}", f"oci:{tmp}:base"]
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["no output"]
                raise BaseImageError(f"base image {image}: skopeo could not fetch it: {tail[0]}")
            fetched = OCILayout(Path(tmp))
            found = fetched.image("base")
            if found is None:
                raise BaseImageError(f"base image {image}: skopeo wrote no image")
            for blob in fetched.blobs_of(found):
                target = layout.blob_path(blob)
                if not target.exists():
                    shutil.copyfile(fetched.blob_path(blob), target)
            layout.put_image(ref, found.manifest)
        stored = layout.image(ref)
        assert stored is not None
    config = layout.config(stored)
    layers = tuple(LayerDescriptor(digest=d["digest"], size=int(d["size"]), diff_id=diff, media_type=d["mediaType"])
                   for d, diff in zip(layer_descriptors(stored.manifest), config["rootfs"]["diff_ids"], strict=True))
    python = _python_in_layers(layout, layers)
    return BaseLayers(layers, tuple((config.get("config") or {}).get("Env") or ()), image, f"image:{stored.digest}",
                      python)


def _python_in_layers(layout: OCILayout, layers: tuple[LayerDescriptor, ...]) -> str | None:
    """The X.Y that ``/usr/bin/python3`` points to in the top-most layer that has it."""
    found: str | None = None
    for layer in layers:
        try:
            with open_layer(layout.blob_path(layer.digest), layer.media_type) as tar:
                for member in tar:
                    if member.name.removeprefix("./").removeprefix("/") == "usr/bin/python3" and member.issym():
                        found = member.linkname.rsplit("/", 1)[-1].removeprefix("python")
        except tarfile.TarError as err:
            raise BaseImageError(f"base layer {layer.digest} cannot be read: {err}") from None
    return found
