"""Shared by tests/unit/release/test_promote.py and tests/integration/test_promote_registry.py."""

from __future__ import annotations

from pinmatrix.results.store import HostFingerprint

CPU = HostFingerprint.make(hostname="ci")
