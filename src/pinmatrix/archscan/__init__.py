"""GPU-free architecture analysis: which SASS and PTX targets a cell's CUDA binaries carry, and whether each
runs on the cell's GPU natively, through the driver's PTX JIT, or not at all.

- ``binary``: read one binary's targets, exactly with cuobjdump, else with a fatbin header parser that
  cannot see the a/f suffixes; grouped per fatbin (one compiled unit, the kernels the runtime picks from).
- ``verdict``: those targets against a GPU capability, by the rules in ``data/arch_rules.toml``.
- ``tools``: cuobjdump (and, for tests, a CUDA compiler) from PyPI wheels, installed into a cache.
- ``wheels`` / ``fetch`` / ``scan``: a cell's locked wheels fetched for the cell's platform and scanned.

``binary`` and ``verdict`` use the standard library only: the arch-coverage smoke imports them in a cell's
own Python.
"""
