"""A CPU smoke with a threshold, for exercising ``pinmatrix bisect`` where there is no GPU.

``cpu-threshold`` fills a buffer of ``n`` items and checks it against a fixed capacity: it fails (class
``over-capacity``) once ``n`` reaches ``capacity``. Two bands stand in for what real kernels do past a
limit: from ``crash_from`` (below ``crash_to``) the probe crashes the interpreter with a segmentation fault
through ctypes, and from ``hang_from`` it hangs. A bisect must record both probes (class ``crash`` and
``timeout``) and still find the first failing ``n``.
"""

from __future__ import annotations

import ctypes
import time

from _smokelib import Context, Fail, main

SMOKES = {
    "cpu-threshold": {
        "func": "threshold",
        "description": "fills n items into a buffer of fixed capacity: fails from n = capacity, segfaults in "
        "[crash_from, crash_to), hangs from hang_from (a bisect target without a GPU)",
        "params": {"n": {"type": "int", "range": [0, 1000], "default": 10}},
        "fixed": {"capacity": 613, "crash_from": 700, "crash_to": 800, "hang_from": 900},
        "quantities": {"items n": ["n"]},
        "limits": {"capacity": "capacity"},
        "timeout_s": 60,
    },
}


def threshold(ctx: Context) -> None:
    p = ctx.params
    n, capacity = int(p["n"]), int(p["capacity"])
    ctx.metric("n", n)
    if n >= int(p["hang_from"]):
        print(f"n={n}: waiting for a lock that is never released", flush=True)
        while True:
            time.sleep(3600)
    if int(p["crash_from"]) <= n < int(p["crash_to"]):
        print(f"n={n}: reading through a null pointer", flush=True)
        ctypes.string_at(0)  # SIGSEGV: the interpreter dies; faulthandler writes the stack to the log
    buffer = (ctypes.c_int32 * capacity)()
    if n >= capacity:
        raise Fail(f"{n} items do not fit in a buffer of {capacity}", "over-capacity")
    for i in range(n):
        buffer[i] = i
    if sum(buffer) != n * (n - 1) // 2:
        raise Fail("buffer contents wrong", "wrong-result")
    ctx.summary = f"{n} items fit in a buffer of {capacity}"


if __name__ == "__main__":
    main(SMOKES, globals())
