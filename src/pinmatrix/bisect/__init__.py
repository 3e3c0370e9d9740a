"""``pinmatrix bisect``: find where a smoke's verdict changes, by itself.

- along a numeric parameter a smoke declares (the smallest failing M of a kernel), each probe the smoke run
  at one value in its own process (``param``);
- along an ordered axis of a stack (a package's releases, env variants, arch flag lists), each probe a cell
  locked, installed (a uv venv, or an image) and smoked only when the search needs it (``version``).

Every probe is recorded in the results store with its parameter values, so a rerun reuses it and an
interrupted bisect resumes where it stopped. It is recorded as a probe (``results.store.PROBE_RUN_PREFIX``):
shown in the bisect's own report, never a cell's result in status, promotion, JUnit or ``--fail-on``.
"""
