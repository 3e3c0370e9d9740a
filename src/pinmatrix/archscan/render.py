"""The arch scan as Markdown, from its JSON document (``pinmatrix-arch-scan/1``): per stack, cells with the
same verdicts are one column, packages are rows; then the findings (known issues, arch flags) and, once per
distinct wheel, each binary's exact targets and verdict."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

ICONS = {"native": "🟢", "ptx-jit": "🟡", "partial": "🟠", "cannot-run": "🔴", "missing": "⚫",
         "no-device-code": "⚪", "no-gpu": "⚪", "other-gpus": "🔵"}


def _table_cell(text: object) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _short(p: dict[str, Any]) -> str:
    v = p["verdict"]
    if v in ("partial", "cannot-run", "ptx-jit"):
        groups = sum(b["groups"] for b in p["binaries"])
        bad = sum(b["counts"].get("cannot-run", 0) for b in p["binaries"])
        jit = sum(b["counts"].get("ptx-jit", 0) for b in p["binaries"])
        if bad:
            detail = f" {bad}/{groups} groups cannot run"
        elif v != "ptx-jit":  # whole binaries that cannot run
            dead = sum(b["verdict"] == "cannot-run" for b in p["binaries"])
            detail = f" {dead}/{len(p['binaries'])} binaries cannot run" + (f", {jit}/{groups} groups JIT" if jit else "")
        else:
            detail = f" {jit}/{groups} groups JIT"
        return f"{ICONS[v]} {v}{detail}{_other_part(p)}"
    if v == "other-gpus":
        return f"{ICONS[v]} other GPUs only ({len(p['binaries'])} binaries)"
    return f"{ICONS.get(v, '')} {v}{_other_part(p)}"


def _other_part(p: dict[str, Any]) -> str:
    """', 3/7 binaries only for other GPUs': said beside the verdict they are left out of."""
    other = sum(b["verdict"] == "other-gpus" for b in p["binaries"])
    return f", {other}/{len(p['binaries'])} binaries only for other GPUs" if other else ""


def _interesting(packages: list[dict[str, Any]], stack_packages: tuple[str, ...]) -> list[str]:
    return [p["name"] for p in packages if p["name"] in stack_packages or p["verdict"] != "no-device-code"]


def render_scan_markdown(doc: dict[str, Any], *, stack_packages: tuple[str, ...] = (
        "torch", "triton", "xformers", "flashinfer-python", "vllm")) -> str:
    lines = ["# pinmatrix arch-scan", ""]
    lines.append(f"Generated {doc['generated_at']} with {doc['tool']}; rules: `{doc['rules']}`.")
    if doc.get("command"):
        lines.append(f"Command: `{doc['command']}`")
    lines += ["", "Verdicts for the cell's GPU, per kernel group (one fatbin: the kernels the runtime picks "
              "code from): 🟢 native, 🟡 PTX JIT, 🟠 partial (some kernel groups of this GPU's generation, "
              "or some binaries, cannot run), 🔴 cannot run, 🔵 other GPUs only (every kernel group is for another GPU "
              "generation: libraries never load it here), ⚫ not fetched, ⚪ no device code. Groups and binaries built only for "
              "other GPU generations are listed, not counted in a package's verdict. Binaries of one folder with the same "
              "targets and verdict are one row.", ""]
    by_stack: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for cell in doc["cells"]:
        by_stack[cell["stack"]].append(cell)
    for stack, cells in by_stack.items():
        lines += _stack_section(stack, cells, stack_packages)
    return "\n".join(lines).rstrip() + "\n"


def _stack_section(stack: str, cells: list[dict[str, Any]], stack_packages: tuple[str, ...]) -> list[str]:
    gpus = sorted({c["gpu"] or "-" for c in cells})
    lines = [f"## {stack} (GPU {', '.join(gpus)})", ""]
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for c in cells:
        key = (tuple((p["name"], p["version"], _short(p)) for p in c["packages"]), tuple(c["arch_flags"]),
               tuple((k["known_issue"], k["status"]) for k in c["known_issues"]))
        groups[key].append(c)
    ordered = list(groups.values())
    names: list[str] = []
    for members in ordered:
        names += [n for n in _interesting(members[0]["packages"], stack_packages) if n not in names]
    if not names:
        lines += ["No package of these cells holds CUDA device code.", ""]
    else:
        header = ["package"] + [f"G{i + 1}" for i in range(len(ordered))]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for name in names:
            row = [f"`{name}`"]
            for members in ordered:
                p = next((p for p in members[0]["packages"] if p["name"] == name), None)
                row.append(_table_cell(f"{p['version']}: {_short(p)}" if p else "-"))
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    for i, members in enumerate(ordered):
        first = members[0]
        ids = ", ".join(f"`{c['id']}`" for c in members)
        lines.append(f"**G{i + 1}** ({len(members)} cells, arch {' '.join(first['arch_flags']) or '-'}, "
                     f"{first['platform']}, python {first['python']}, pins: {first['source']}): {ids}")
        lines.append("")
        for check in first["arch_flag_checks"]:
            icon = "✅" if check["ok"] else "❗"
            lines.append(f"- {icon} arch flag `{check['flag']}`: {_table_cell(check['message'])}")
        for k in first["known_issues"]:
            lines.append(f"- known issue `{k['known_issue']}`: **{k['status']}**: {_table_cell(k['message'])}")
            for ev in k["evidence"][:6]:
                lines.append(f"  - {_table_cell(ev)}")
        for note in first["notes"]:
            lines.append(f"- {_table_cell(note)}")
        for p in first["packages"]:
            for note in p["notes"]:
                lines.append(f"- `{p['name']}`: {_table_cell(note)}")
            if p["verdict"] == "missing":
                lines.append(f"- `{p['name']}` {p['version']} not read: {_table_cell(p['summary'])}")
        lines.append("")
    seen: set[str] = set()
    details: list[str] = []
    for members in ordered:
        for p in members[0]["packages"]:
            if not p["binaries"] or p["wheel"] in seen:
                continue
            seen.add(p["wheel"])
            details.append(f"**{p['name']} {p['version']}** (`{p['wheel']}`) on {members[0]['gpu']}: "
                           f"{ICONS.get(p['verdict'], '')} {p['verdict']}")
            details.append("")
            details.append("| binary | SASS | PTX | verdict |")
            details.append("|---|---|---|---|")
            for label, b in fold_rows(p["binaries"]):
                exact = "" if b["exact"] else " (suffixes not visible: fatbin header parser)"
                details.append(f"| {label} | {' '.join(b['sass']) or '-'} | {' '.join(b['ptx']) or '-'} | "
                               f"{ICONS.get(b['verdict'], '')} {_table_cell(_binary_words(b))}{exact} |")
            details.append("")
    if details:
        lines += ["<details><summary>Binaries, exact targets and verdicts</summary>", "", *details, "</details>", ""]
    return lines


def fold_rows(binaries: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """One row per folder and (targets, verdict): flashinfer-cubin's 10,560 cubins are a few rows, each naming its
    folder and how many files it stands for; a binary alone in its kind keeps its own path."""
    rows: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for b in binaries:
        folder = b["path"].rsplit("/", 1)[0] if "/" in b["path"] else ""
        # single-group binaries (cubins, one-unit libraries) fold; a multi-group library is its own row
        key = (folder, tuple(b["sass"]), tuple(b["ptx"]), b["verdict"], b["exact"]) if b["groups"] == 1 else (b["path"],)
        rows.setdefault(key, []).append(b)
    out: list[tuple[str, dict[str, Any]]] = []
    for key, members in rows.items():
        if len(members) == 1:
            out.append((f"`{_table_cell(members[0]['path'])}`", members[0]))
        else:
            out.append((f"`{_table_cell(key[0] or '.')}/` ({len(members)} files)", members[0]))
    return out


def _binary_words(b: dict[str, Any]) -> str:
    parts = [b["verdict"]]
    counts, n = b["counts"], b["groups"]
    if counts.get("cannot-run"):
        only = "; ".join(f"{k}" for k in sorted(b["cannot"], key=lambda k: -b["cannot"][k])[:3])
        parts.append(f"{counts['cannot-run']}/{n} groups cannot run (only {only})")
    if counts.get("ptx-jit"):
        parts.append(f"{counts['ptx-jit']}/{n} via PTX JIT")
    if counts.get("native"):
        parts.append(f"{counts['native']}/{n} native via {' '.join(t for t in b['used'] if t.startswith('sm_'))}")
    if counts.get("other-gpus"):
        parts.append(f"{counts['other-gpus']}/{n} only for other GPUs")
    return ": ".join([parts[0], ", ".join(parts[1:])]) if len(parts) > 1 else parts[0]
