"""pinmatrix: reproducible GPU software stacks, one locked and smoke-tested image per matrix cell."""

__version__ = "0.1.0"
