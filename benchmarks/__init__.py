"""Benchmarks, run by `nox -s benchmarks` (`python -m benchmarks [NAME ...]`). Each module in BENCHMARKS
exposes ``run() -> dict[str, float | int | str]`` and states its target; figures are printed and written
to .pinmatrix/benchmarks/<name>.json."""
