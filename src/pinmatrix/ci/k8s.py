"""Kubernetes: one Job per cell x GPU node pool, scheduled with NVIDIA GPU feature discovery labels, that
runs the cell's smokes in the cell's image (by digest) and writes raw results to a volume;
``pinmatrix ci collect`` turns those into result records (``pinmatrix results --import`` JSON).

The smoke modules and the pod runner travel in one ConfigMap (the catalogue is plain Python, ~70 KB);
the Job's container is the cell image itself with the runner started by the image's Python.
Node pools (``--pools``) are the file ``ci slurm`` reads too (pinmatrix.ci.pools).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinmatrix.cell import Cell
from pinmatrix.ci.dispatch import Bound, Dispatch, DispatchJob, bind, read_regular
from pinmatrix.ci.pools import NodePool, load_pools, pool_fits, pools_for
from pinmatrix.errors import PinmatrixError
from pinmatrix.hashing import sha256_bytes
from pinmatrix.names import check_name
from pinmatrix.project.catalogue import load_catalogue
from pinmatrix.project.smoke_bundle import shipped_file, smoke_bundle
from pinmatrix.results.store import HostFingerprint, SmokeRecord
from pinmatrix.smoke.classify import classify
from pinmatrix.smoke.known import apply_known_issues
from pinmatrix.smoke.runner import _read_result, cell_smoke_env, plan_smokes

SMOKE_MOUNT = "/opt/pinmatrix-smoke"
RESULTS_MOUNT = "/results"
IMAGE_PYTHON = "/opt/venv/bin/python"  # the cell image's environment (pinmatrix.smoke.container)
RUNNER_NAME = "pinmatrix_pod_runner.py"
__all__ = ["NodePool", "collect", "gfd_labels", "k8s_manifests", "load_pools", "pool_fits", "smoke_specs",
           "validate"]
CONFIGMAP_LIMIT = 1024 * 1024  # Kubernetes rejects ConfigMaps over 1 MiB
MAX_RUN_JSON = 16 << 20  # a pod's run.json
MAX_POD_LOG = 16 << 20  # the tail of a smoke's log read for its verdict
_POD_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_DRIVER = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")
GFD_COMPUTE = ("nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor")


def gfd_labels(pool: NodePool) -> dict[str, str]:
    """The pool's nodeSelector: its GPU feature discovery labels plus its own extra labels."""
    parts = pool.driver.split(".")
    out = {GFD_PRODUCT: pool.gpu_product}
    for key, value in zip(GFD_DRIVER, parts):
        out[key] = value
    major, minor = pool.capability.split(".")
    out[GFD_COMPUTE[0]], out[GFD_COMPUTE[1]] = major, minor
    out.update(pool.node_selector)
    return out


def _dns(text: str, limit: int = 63) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:limit].rstrip("-")


def smoke_configmap(smoke_dir: Path, namespace: str) -> dict[str, Any]:
    files = {name: path.read_text() for name, path in smoke_bundle(smoke_dir) if name.endswith(".py") and "/" not in name}
    files[RUNNER_NAME] = shipped_file("pod_runner.py").read_text()
    size = sum(len(v.encode()) for v in files.values())
    if size > CONFIGMAP_LIMIT:
        raise PinmatrixError(f"{smoke_dir}: the smoke catalogue is {size} bytes, over a ConfigMap's 1 MiB")
    digest = sha256_bytes(json.dumps(files, sort_keys=True).encode())[:10]
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": f"pinmatrix-smoke-{digest}", "namespace": namespace,
                     "labels": {"app.kubernetes.io/name": "pinmatrix", "app.kubernetes.io/component": "smoke"}},
        "data": files,
    }


@dataclass
class Emitted:
    documents: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # one line per cell x pool not emitted, with the reason
    # the dispatch record's jobs, keyed by the Job's results folder under the volume (``<run id>/<cell>-<pool>``)
    dispatched: dict[str, DispatchJob] = field(default_factory=dict)

    @property
    def jobs(self) -> list[dict[str, Any]]:
        return [d for d in self.documents if d["kind"] == "Job"]


def smoke_specs(cell: Cell, smoke_dir: Path) -> tuple[list[str], int]:
    """The pod runner's smoke specs (module:name:timeout) and the most GPUs any of them needs."""

    smokes = plan_smokes(cell, load_catalogue(smoke_dir), None)
    gpus = max([int(s.needs.get("gpus", 1)) for s in smokes if s.gpu] or [0])
    return [f"{s.module.name}:{s.name}:{s.timeout_s}" for s in smokes], gpus


def k8s_manifests(cells: Sequence[Cell], pools: Sequence[NodePool], images: dict[str, str], *, smoke_dir: Path,
                  namespace: str = "default", results_claim: str = "pinmatrix-results", run_id: str = "run",
                  deadline_s: int = 6 * 3600) -> Emitted:
    """``images`` maps cell id -> image reference by digest (name@sha256:...); cells without one are skipped.
    ``run_id`` is a name (names.py): it becomes a results folder and a Job name, never a path."""
    try:
        check_name(run_id, "--run-id")
    except ValueError as err:
        raise PinmatrixError(f"ci k8s: {err}") from None
    out = Emitted()
    cm = smoke_configmap(smoke_dir, namespace)
    for cell in cells:
        image = images.get(cell.id)
        if not image or "@sha256:" not in image:
            out.skipped.append(f"{cell.id} {cell.name}: no image by digest in the registry (build and push it first)")
            continue
        targets = pools_for(cell, pools, out.skipped)
        specs, gpus_needed = smoke_specs(cell, smoke_dir)
        for target in targets:
            gpus = min(target.gpus, max(1, gpus_needed)) if target else 0
            out.documents.append(_job(cell, target, gpus, image, specs, cm["metadata"]["name"], namespace,
                                      results_claim, run_id, deadline_s))
            out.dispatched[f"{run_id}/{cell.id}-{target.name if target else 'cpu'}"] = DispatchJob(
                cell_id=cell.id, image_digest=image.split("@", 1)[1], smokes=tuple(s.split(":")[1] for s in specs))
    if out.jobs:
        out.documents.insert(0, cm)
    return out


def _job(cell: Cell, pool: NodePool | None, gpus: int, image: str, specs: list[str], configmap: str, namespace: str,
         claim: str, run_id: str, deadline_s: int) -> dict[str, Any]:
    pool_name = pool.name if pool else "cpu"
    out_dir = f"{RESULTS_MOUNT}/{run_id}/{cell.id}-{pool_name}"
    digest = image.split("@", 1)[1]
    labels = {"app.kubernetes.io/name": "pinmatrix", "app.kubernetes.io/component": "smoke",
              "pinmatrix.io/cell": cell.id, "pinmatrix.io/stack": _dns(cell.stack), "pinmatrix.io/pool": pool_name,
              "pinmatrix.io/run": _dns(run_id)}
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(cell_smoke_env(cell).items())]
    env.append({"name": "PINMATRIX_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    container: dict[str, Any] = {
        "name": "smoke",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [IMAGE_PYTHON, f"{SMOKE_MOUNT}/{RUNNER_NAME}", "--out", out_dir, "--smoke-dir", SMOKE_MOUNT,
                    "--cell-id", cell.id, "--image", image, "--digest", digest, *specs],
        "env": env,
        "volumeMounts": [{"name": "smoke", "mountPath": SMOKE_MOUNT, "readOnly": True},
                         {"name": "results", "mountPath": RESULTS_MOUNT}],
        "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "64Gi"}},
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [{"name": "smoke", "configMap": {"name": configmap}},
                    {"name": "results", "persistentVolumeClaim": {"claimName": claim}}],
    }
    if pool is not None:
        container["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
        pod["nodeSelector"] = gfd_labels(pool)
        pod["tolerations"] = [dict(t) for t in pool.tolerations]
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": _dns(f"pinmatrix-{cell.id}-{pool_name}-{run_id}"), "namespace": namespace,
                     "labels": labels,
                     "annotations": {"pinmatrix.io/cell-name": cell.name, "pinmatrix.io/results": out_dir}},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline_s,
            "ttlSecondsAfterFinished": 7 * 24 * 3600,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def validate(documents: Iterable[dict[str, Any]], kube_version: str = "1.37.0") -> list[str]:
    """Validate against the Kubernetes JSON schemas shipped by the ``kubernetes-validate`` package
    (strict: unknown fields are errors). Returns one line per problem."""
    try:
        import kubernetes_validate  # noqa: PLC0415 - a large schema package, loaded only to validate manifests
    except ImportError:
        raise PinmatrixError("validating manifests needs the kubernetes-validate package (pip install "
                             "'pinmatrix[k8s]')") from None
    problems = []
    for doc in documents:
        name = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as err:
            path = ".".join(str(p) for p in err.path)
            problems.append(f"{name}: {path}: {err.message}")
        except kubernetes_validate.SchemaNotFoundError as err:
            problems.append(f"{name}: no schema: {err}")
    return problems


# ------------------------------------------------------------------------------------------- collect


def _host_from(probe: dict[str, Any]) -> HostFingerprint:
    gpus = probe.get("gpus") or []
    if not gpus:
        return HostFingerprint.make(hostname=probe.get("hostname") or "unknown")
    names = sorted({g["name"] for g in gpus})
    caps = sorted({g["capability"] for g in gpus if g.get("capability")})
    return HostFingerprint.make(hostname=probe.get("hostname") or "unknown", gpu_name=" + ".join(names),
                                gpu_count=len(gpus), driver=gpus[0].get("driver"), capability=",".join(caps) or None,
                                cuda_driver_api=probe.get("cuda_driver_api"))


def collect_dispatched(run_dirs: Sequence[Path], cells: dict[str, Cell], record: Dispatch) -> Bound:
    """The records of the Jobs of dispatch ``record`` (each pod folder ``<run id>/<cell>-<pool>`` bound to the
    Job that was to write there), the dropped ones said one line per folder, and every (cell, smoke) a Job was
    given without a kept record, as not run (a Job that wrote nothing too)."""
    out = Bound([], None, [])
    lines: list[str] = []
    seen: set[str] = set()
    for run_dir in run_dirs:
        key = f"{run_dir.parent.name}/{run_dir.name}"
        found = collect(run_dir, cells)
        job = record.jobs.get(key)
        if job is None:
            lines.append(f"{run_dir}: no Job of dispatch {record.id} writes here: dropped {len(found)} record(s)")
            continue
        seen.add(key)
        bound = bind(key, job, found)
        out.kept += bound.kept
        out.not_run += bound.not_run
        lines += [bound.dropped] if bound.dropped else []
    out.not_run += [(j.cell_id, s) for k, j in sorted(record.jobs.items()) if k not in seen for s in j.smokes]
    out.dropped = "; ".join(lines) or None
    return out


def _pod_file(run_dir: Path, name: object) -> Path | None:
    """A file run.json names in the pod's folder: a plain name (no folder, no '..') of a regular file there (not a
    link, not a FIFO); None otherwise, read as absent."""
    if not isinstance(name, str) or not _POD_FILE.fullmatch(name) or ".." in name:
        return None
    path = run_dir / name
    try:
        return path if stat.S_ISREG(os.lstat(path).st_mode) else None
    except OSError:
        return None


def collect(run_dir: Path, cells: dict[str, Cell], *, run_id: str | None = None) -> list[SmokeRecord]:
    """Records from one pod's output directory (its run.json, logs and result files), classified and with
    known issues applied exactly as ``pinmatrix smoke`` does."""

    if not (run_dir / "run.json").exists() and not (run_dir / "run.json").is_symlink():
        raise PinmatrixError(f"{run_dir}: no readable run.json")
    try:
        run = json.loads(read_regular(run_dir / "run.json", MAX_RUN_JSON))
    except (ValueError, UnicodeDecodeError) as err:
        raise PinmatrixError(f"{run_dir}: no readable run.json: {err}") from None
    if run.get("schema") != "pinmatrix-pod-run/1":
        raise PinmatrixError(f"{run_dir / 'run.json'}: not written by the pinmatrix pod runner")
    cell = cells.get(run["cell_id"])
    if cell is None:
        raise PinmatrixError(f"{run_dir / 'run.json'}: cell {run['cell_id']} is not in the matrix")
    host = _host_from(run.get("host") or {})
    rid = run_id or f"k8s-{run_dir.name}-{run['started_at'][:19].replace(':', '').replace('-', '')}"
    records = []
    for entry in run.get("smokes", []):
        log_path, result_path = _pod_file(run_dir, entry["log"]), _pod_file(run_dir, entry["result"])
        log_text = read_regular(log_path, MAX_POD_LOG, tail=True).decode("utf-8", "replace") if log_path else ""
        result = _read_result(result_path or run_dir / ".absent", log_path or run_dir / ".absent")
        outcome = classify(result=result, returncode=entry.get("returncode"), timed_out=bool(entry.get("timed_out")),
                           log_text=log_text, timeout_s=float(entry.get("timeout_s") or 0))
        verdict = apply_known_issues(entry["smoke"], outcome.status, outcome.failure_class, outcome.reason,
                                     cell.known_issues)
        metrics = dict((result or {}).get("metrics") or {})
        metrics.update(outcome.metrics)
        metrics = {k: v if isinstance(v, (int, float, str)) else json.dumps(v) for k, v in metrics.items()}
        records.append(SmokeRecord(
            cell_id=cell.id, stack=cell.stack, host=host, smoke=entry["smoke"], run_id=rid, status=verdict.status,
            failure_class=verdict.failure_class, reason=verdict.reason, metrics=metrics,
            log_path=str(log_path or run_dir / str(entry["log"])),
            started_at=entry["started_at"], finished_at=entry.get("finished_at") or entry["started_at"],
            duration_s=float(entry.get("seconds") or 0.0), known_issue=verdict.known_issue,
            image_digest=run.get("image_digest"), environment=dict((result or {}).get("environment") or {}),
        ))
    return records
