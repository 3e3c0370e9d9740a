"""Shared by tests in several folders."""

from __future__ import annotations

from datetime import datetime, timezone

H = {name: f"{i:064x}" for i, name in enumerate(["certifi", "idna", "requests", "urllib3", "six"], start=1)}

LOCK = f"""# pinmatrix lock for cell 0123456789ab: demo
certifi==2025.1.31 \\
    --hash=sha256:{H['certifi']}
    # via requests
idna==3.10 \\
    --hash=sha256:{H['idna']} \\
    --hash=sha256:{'f' * 64}
    # via
    #   -r requirements.in
    #   requests
requests==2.32.3 \\
    --hash=sha256:{H['requests']}
    # via -r requirements.in
Six==1.17.0 \\
    --hash=sha256:{H['six']}
    # via -r requirements.in
urllib3==2.3.0 \\
    --hash=sha256:{H['urllib3']}
    # via requests
"""

MOMENT = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
