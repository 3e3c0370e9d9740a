"""One room reads and writes the image format: src/pinmatrix/oci/ (the layout's index.json and blobs, manifests,
configs, layer tars). An AST walk over the package finds any other module that

- opens a tar (``tarfile.open``, ``TarFile.open``, ``tarfile.TarFile(...)``, under any alias),
- names ``index.json`` (a string constant, or the tail of one),
- or reads a JSON document's ``manifests`` or ``layers`` (a subscript, ``.get``, ``.pop`` or ``.setdefault`` with
  that constant key),

each of which is a second reader (or writer) of the image format. What they need is asked of oci/: OCILayout
(read_document, entries, find, put_manifest), oci.manifest (layer_descriptors, child_descriptors), oci.layer
(open_layer, open_layer_stream, open_plain_tar).

Two folders are left out, on purpose:
- src/pinmatrix/registry/, the registry client: it speaks the distribution protocol, whose answers are manifests
  and indexes fetched by digest (it walks their descriptors to copy, list and delete blobs);
- src/pinmatrix/shipped/: standard-library files copied into images, bundles and pods, which run where pinmatrix
  is not installed (unbundle.py writes a layout on a host that has only Python) and so cannot import oci/."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "src" / "pinmatrix"
ROOM = "oci"
EXEMPT = (ROOM, "registry", "shipped")
DOCUMENT_KEYS = frozenset({"manifests", "layers"})
KEY_READERS = frozenset({"get", "pop", "setdefault"})
TAR_OPENERS = frozenset({"open", "taropen", "gzopen", "bz2open", "xzopen"})


def _tarfile_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(names bound to the tarfile module, names bound to tarfile.TarFile or tarfile.open) in a module."""
    modules: set[str] = set()
    members: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "tarfile"}
        elif isinstance(node, ast.ImportFrom) and node.module == "tarfile":
            members |= {a.asname or a.name for a in node.names if a.name in ("TarFile", "open")}
    return modules, members


def _is_tarfile_class(node: ast.expr, modules: set[str], members: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in members
    return isinstance(node, ast.Attribute) and node.attr == "TarFile" and isinstance(node.value, ast.Name) \
        and node.value.id in modules


def _tar_opening(call: ast.Call, modules: set[str], members: set[str]) -> str | None:
    func = call.func
    if isinstance(func, ast.Name) and func.id in members:
        return f"{func.id}(...) from tarfile"
    if _is_tarfile_class(func, modules, members):
        return "tarfile.TarFile(...)"
    if isinstance(func, ast.Attribute) and func.attr in TAR_OPENERS:
        if isinstance(func.value, ast.Name) and func.value.id in modules:
            return f"tarfile.{func.attr}"
        if _is_tarfile_class(func.value, modules, members):
            return f"TarFile.{func.attr}"
    return None


def _names_index(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) \
        and (node.value == "index.json" or node.value.endswith("/index.json"))


def _document_key(node: ast.AST) -> str | None:
    """The manifests/layers key a subscript or a dict method call reads, if it is one."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in DOCUMENT_KEYS:
        return f'["{node.slice.value}"]'
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in KEY_READERS \
            and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in DOCUMENT_KEYS:
        return f'.{node.func.attr}("{node.args[0].value}")'
    return None


def readers_in(path: Path) -> list[tuple[int, str]]:
    """(line, what) of each place the module at ``path`` reads the image format itself."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules, members = _tarfile_names(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        opening = _tar_opening(node, modules, members) if isinstance(node, ast.Call) else None
        if opening:
            found.append((node.lineno, f"opens a tar: {opening}"))  # type: ignore[attr-defined]
        if _names_index(node):
            found.append((node.lineno, "names index.json"))  # type: ignore[attr-defined]
        key = _document_key(node)
        if key:
            found.append((node.lineno, f"reads a document's {key}"))  # type: ignore[attr-defined]
    return sorted(found)


def second_readers(package: Path) -> list[str]:
    """``FILE:LINE: what`` for every place outside the image-format room (and the exempt folders) that reads or
    writes the image format itself."""
    out: list[str] = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.parts[0] in EXEMPT:
            continue
        out += [f"{rel}:{line}: {what}" for line, what in readers_in(path)]
    return out


def test_the_checker_flags_a_planted_second_reader(tmp_path: Path) -> None:
    package = tmp_path / "pinmatrix"
    planted = '''
import json
import tarfile as tf
from tarfile import TarFile, open as topen
from pathlib import Path


def images(layout: Path) -> list[str]:
    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads((layout / f"blobs/{index['manifests'][0]['digest']}").read_text())
    with tf.open(layout / "layer.tar") as tar, TarFile.open("x") as other, topen("y") as third:
        pass
    writer = tf.TarFile("z", "w")
    return [d["digest"] for d in manifest.get("layers", [])] + manifest.pop("manifests") + [f"{layout}/index.json"]
'''
    clean = '''
from pinmatrix.oci.manifest import layer_descriptors


def sizes(doc: dict) -> list[int]:
    record = {"layers": [1], "manifests": []}  # writing a record of one's own is no reading
    return [d["size"] for d in layer_descriptors(doc)] + [len(record), doc.get("config", {}).get("size", 0)]
'''
    for folder in ("build", "oci", "registry", "shipped"):
        (package / folder).mkdir(parents=True)
        (package / folder / "planted.py").write_text(planted)
    (package / "build" / "clean.py").write_text(clean)
    assert second_readers(package) == [
        "build/planted.py:9: names index.json",
        "build/planted.py:10: reads a document's [\"manifests\"]",
        "build/planted.py:11: opens a tar: TarFile.open",
        "build/planted.py:11: opens a tar: tarfile.open",
        "build/planted.py:11: opens a tar: topen(...) from tarfile",
        "build/planted.py:13: opens a tar: tarfile.TarFile(...)",
        "build/planted.py:14: names index.json",
        "build/planted.py:14: reads a document's .get(\"layers\")",
        "build/planted.py:14: reads a document's .pop(\"manifests\")",
    ]


def test_only_the_image_format_room_reads_index_json_manifests_and_layer_tars() -> None:
    """Outside src/pinmatrix/oci/ (and the registry client and the shipped files, see the module's docstring)
    no module opens a tar, names index.json or reads a manifest's layers or an index's manifests."""
    assert (PACKAGE / ROOM / "layout.py").is_file()  # the room is where this test looks for it
    assert second_readers(PACKAGE) == []
