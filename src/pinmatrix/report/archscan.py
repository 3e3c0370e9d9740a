"""The arch scan in the report: `pinmatrix report --arch-scan FILE` reads ``pinmatrix arch-scan``'s JSON
(``pinmatrix-arch-scan/1``) and the report shows, per stack, one row per cell and one column per package with
the package's verdict for the cell's GPU; report.json carries the same table under ``arch_scan``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from markupsafe import escape

from pinmatrix.errors import PinmatrixError

SCHEMA = "pinmatrix-arch-scan/1"
STACK_PACKAGES = ("torch", "triton", "xformers", "flashinfer-python", "vllm")
ICONS = {"native": "🟢", "ptx-jit": "🟡", "partial": "🟠", "cannot-run": "🔴", "missing": "⚫",
         "no-device-code": "⚪"}


def load_arch_scans(paths: list[Path]) -> list[dict[str, Any]]:
    """The documents at ``paths``; one clear error naming the file otherwise."""
    docs = []
    for path in paths:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PinmatrixError(f"{path}: no such arch-scan file (write one with `pinmatrix arch-scan --out DIR`)") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise PinmatrixError(f"{path}: not an arch-scan JSON file: {err}") from None
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("cells"), list):
            raise PinmatrixError(f"{path}: not a {SCHEMA} document")
        docs.append(doc)
    return docs


def _verdict(p: dict[str, Any]) -> str:
    groups = sum(b.get("groups", 0) for b in p.get("binaries", []))
    bad = sum(b.get("counts", {}).get("cannot-run", 0) for b in p.get("binaries", []))
    jit = sum(b.get("counts", {}).get("ptx-jit", 0) for b in p.get("binaries", []))
    v = str(p.get("verdict", ""))
    if v in ("partial", "cannot-run") and bad:
        return f"{v} {bad}/{groups}"
    if v == "partial":
        dead = sum(b.get("verdict") == "cannot-run" for b in p.get("binaries", []))
        return f"{v} {dead}/{len(p.get('binaries', []))} binaries"
    if v == "ptx-jit" and jit:
        return f"{v} {jit}/{groups}"
    return v


def arch_scan_tables(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per stack: {stack, gpu, packages, rows: [{id, name, arch_flags, verdicts: {package: text}, findings}]}.
    A later document's cell replaces an earlier one's with the same id."""
    cells: dict[str, dict[str, Any]] = {}
    for doc in docs:
        for cell in doc["cells"]:
            cells[str(cell.get("id"))] = cell
    by_stack: dict[str, list[dict[str, Any]]] = {}
    for cell in cells.values():
        by_stack.setdefault(str(cell.get("stack")), []).append(cell)
    tables = []
    for stack, members in sorted(by_stack.items()):
        packages: list[str] = []
        for cell in members:
            for p in cell.get("packages", []):
                if (p["name"] in STACK_PACKAGES or p.get("verdict") not in ("no-device-code", None)) \
                        and p["name"] not in packages:
                    packages.append(p["name"])
        packages.sort(key=lambda n: (n not in STACK_PACKAGES, STACK_PACKAGES.index(n) if n in STACK_PACKAGES else 0, n))
        rows = []
        for cell in sorted(members, key=lambda c: str(c.get("name"))):
            verdicts = {p["name"]: _verdict(p) for p in cell.get("packages", [])}
            findings = [f"{k['known_issue']}: {k['status']}" for k in cell.get("known_issues", [])]
            findings += [f"arch {c['flag']}: honoured by no binary" for c in cell.get("arch_flag_checks", [])
                         if not c.get("ok")]
            rows.append({"id": cell.get("id"), "name": cell.get("name"), "arch_flags": cell.get("arch_flags", []),
                         "verdicts": {n: verdicts.get(n, "-") for n in packages}, "findings": findings})
        gpus = sorted({str(c.get("gpu")) for c in members})
        tables.append({"stack": stack, "gpu": ", ".join(gpus), "packages": packages, "rows": rows})
    return tables


def _icon(text: str) -> str:
    return ICONS.get(text.split(" ", 1)[0], "")


def _dot(text: str) -> str:
    """The verdict's colour as a CSS dot (the page's .av classes): it needs no emoji font."""
    verdict = text.split(" ", 1)[0]
    return f'<span class="av av-{escape(verdict)}" aria-hidden="true"></span>' if verdict in ICONS else ""


def arch_scan_markdown(tables: list[dict[str, Any]]) -> list[str]:
    lines = ["## Arch scan: what each cell's CUDA binaries run on its GPU", ""]
    for t in tables:
        lines += [f"### {t['stack']} (GPU {t['gpu']})", ""]
        header = ["cell", "arch", *t["packages"], "findings"]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for r in t["rows"]:
            cells = [f"{_icon(v)} {v}".strip() for v in r["verdicts"].values()]
            lines.append("| " + " | ".join([f"`{r['id']}`", " ".join(r["arch_flags"]) or "-", *cells,
                                            "; ".join(r["findings"]) or "-"]).replace("\n", " ") + " |")
        lines.append("")
    return lines


def arch_scan_html(tables: list[dict[str, Any]]) -> str:
    parts = ['<section class="arch-scan" id="arch-scan"><h2>Arch scan: what each cell\'s CUDA binaries run on '
             "its GPU</h2>"]
    for t in tables:
        parts.append(f"<h3>{escape(t['stack'])} (GPU {escape(t['gpu'])})</h3><table><thead><tr><th>cell</th>"
                     "<th>arch</th>" + "".join(f"<th>{escape(p)}</th>" for p in t["packages"])
                     + "<th>findings</th></tr></thead><tbody>")
        for r in t["rows"]:
            tds = "".join(f"<td>{_dot(v)}{escape(v)}</td>" for v in r["verdicts"].values())
            parts.append(f"<tr><td title=\"{escape(r['name'])}\"><code>{escape(r['id'])}</code></td>"
                         f"<td>{escape(' '.join(r['arch_flags']) or '-')}</td>{tds}"
                         f"<td>{escape('; '.join(r['findings']) or '-')}</td></tr>")
        parts.append("</tbody></table>")
    parts.append("</section>")
    return "".join(parts)
