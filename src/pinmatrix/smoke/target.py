"""What a smoke run needs of the thing it smokes: a matrix cell (``cell.Cell``) or the synthetic host cell
(``smoke.runner.HostCell``, whatever is installed here) both satisfy ``SmokeTarget``; mypy --strict checks it
where either is passed as one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class SmokeTarget(Protocol):
    """The fields the runner, the runtimes and the results read."""

    @property
    def id(self) -> str: ...
    @property
    def stack(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def smokes(self) -> Sequence[str] | None: ...  # None: the whole catalogue (the host cell)
    @property
    def known_issues(self) -> Sequence[Any]: ...
    @property
    def patches(self) -> Sequence[Any]: ...
    @property
    def requirements(self) -> Sequence[str]: ...
    @property
    def pins(self) -> Mapping[str, str]: ...
    @property
    def gpu_required(self) -> bool: ...

    def variables(self) -> dict[str, str]: ...
