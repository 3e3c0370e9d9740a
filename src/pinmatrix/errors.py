"""``PinmatrixError``, the base of every expected failure, and the error types several steps share. A step's own
errors subclass it where they are raised; the CLI catches them once."""

from __future__ import annotations


class PinmatrixError(Exception):
    """An expected, user-facing failure. ``str(err)`` is one line that names the file, key or cell."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message.replace("\n", " "))


class MatrixError(PinmatrixError):
    """matrix.toml is malformed or inconsistent. Carries every problem found, one line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(problems[0] if problems else "matrix error")

    def lines(self) -> list[str]:
        return list(self.problems)


class LockError(PinmatrixError):
    """uv could not resolve a cell."""


class EngineError(PinmatrixError):
    """A container engine is missing, not running, or a command of it failed."""


class PatchError(PinmatrixError):
    """A patch is missing, has the wrong sha256, or does not apply."""
