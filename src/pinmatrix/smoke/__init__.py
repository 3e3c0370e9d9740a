"""Smoke kernels: the catalogue (``smoke/`` at the repository root), the runner that starts each smoke in
its own process, log classification, and known-issue handling."""
