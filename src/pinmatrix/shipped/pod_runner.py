"""Runs a cell's smokes inside the cell's image on a Kubernetes node (standard library only: the image has
the cell's Python, not pinmatrix). Shipped to the pod in the smoke ConfigMap next to the smoke modules.

For each smoke: ``python -X faulthandler -u <module> <name>`` in its own process group with a timeout
(SIGABRT first so faulthandler prints the stacks, then SIGKILL), output to ``<out>/<smoke>.log``, the smoke's
result file to ``<out>/<smoke>.result.json``. ``<out>/run.json`` (rewritten after every smoke) records the
host (nvidia-smi), return codes, timings and the image; ``pinmatrix ci collect`` turns it into results
(classification and known issues happen there, with the same code as ``pinmatrix smoke``).

usage: pod_runner.py --out DIR --smoke-dir DIR --cell-id ID [--image REF] [--digest D] SPEC...
       SPEC = module.py:smoke-name:timeout-seconds
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone

SCHEMA = "pinmatrix-pod-run/1"


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def probe_host() -> dict:
    host: dict = {"hostname": os.environ.get("PINMATRIX_NODE_NAME") or socket.gethostname(), "gpus": [],
            "cuda_driver_api": None}
    exe = shutil.which("nvidia-smi")
    if not exe:
        return host
    try:
        out = subprocess.run([exe, "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60, check=False)
        for line in out.stdout.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 3 and parts[0]:
                host["gpus"].append({"name": parts[0], "driver": parts[1],
                                     "capability": "" if "N/A" in parts[2] else parts[2]})
        banner = subprocess.run([exe], capture_output=True, text=True, timeout=60, check=False).stdout
        if "CUDA Version:" in banner:
            host["cuda_driver_api"] = banner.split("CUDA Version:", 1)[1].split()[0].strip("|").strip() or None
    except (OSError, subprocess.TimeoutExpired):
        pass
    return host


def stop_group(proc: subprocess.Popen, grace: float = 3.0) -> None:
    try:
        os.kill(proc.pid, signal.SIGABRT)
        proc.wait(timeout=grace)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def write_json(path: str, data: dict) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="pod_runner.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--smoke-dir", required=True)
    ap.add_argument("--cell-id", required=True)
    ap.add_argument("--image", default="")
    ap.add_argument("--digest", default="")
    ap.add_argument("specs", nargs="+")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    run = {"schema": SCHEMA, "cell_id": args.cell_id, "image": args.image, "image_digest": args.digest or None,
           "python": sys.executable, "host": probe_host(), "started_at": now(), "finished_at": None, "smokes": []}
    run_path = os.path.join(args.out, "run.json")
    write_json(run_path, run)
    for spec in args.specs:
        module, name, timeout = spec.rsplit(":", 2)
        log_name, result_name = f"{slug(name)}.log", f"{slug(name)}.result.json"
        log_path, result_path = os.path.join(args.out, log_name), os.path.join(args.out, result_name)
        if os.path.exists(result_path):
            os.unlink(result_path)
        argv_ = [sys.executable, "-X", "faulthandler", "-u", os.path.join(args.smoke_dir, module), name]
        env = dict(os.environ, PINMATRIX_SMOKE_RESULT=result_path, PYTHONUNBUFFERED="1")
        env.pop("PYTHONSAFEPATH", None)
        entry = {"smoke": name, "module": module, "timeout_s": float(timeout), "log": log_name,
                 "result": result_name, "started_at": now()}
        t0 = time.monotonic()
        timed_out = False
        with open(log_path, "wb") as log:
            log.write(f"$ {' '.join(argv_)}\n".encode())
            log.flush()
            proc = subprocess.Popen(argv_, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, cwd=args.out, start_new_session=True)
            try:
                proc.wait(timeout=float(timeout))
            except subprocess.TimeoutExpired:
                timed_out = True
                stop_group(proc)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        entry.update(returncode=proc.returncode, timed_out=timed_out, seconds=round(time.monotonic() - t0, 3),
                     finished_at=now())
        run["smokes"].append(entry)
        write_json(run_path, run)
        print(f"{name}: exit {proc.returncode}{' (timed out)' if timed_out else ''} in {entry['seconds']}s",
              flush=True)
    run["finished_at"] = now()
    write_json(run_path, run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
