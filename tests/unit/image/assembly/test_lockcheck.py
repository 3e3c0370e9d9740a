"""The builder's lock check (pinmatrix.image.assembly.lockcheck), rule by rule on small locks made here: each refusal is
one line that names the cell and the lock file, and a lock that keeps every rule passes."""

from __future__ import annotations

import pytest

from conftest import make_cell
from pinmatrix.image.assembly.lockcheck import LockMismatch, checked_lock

SHA = "ab" * 32
CELL = make_cell("tiny", ("tiny==1.0", "other>=1.0"), pins={"tiny": "1.0"})
WHERE = f"cell {CELL.id} ({CELL.name}): locks/x.txt"
HEADER = f"# pinmatrix lock for cell {CELL.id}\n# python 3.11 on x86_64-manylinux_2_28; do not edit\n"
GOOD = HEADER + f"tiny==1.0 \\\n    --hash=sha256:{SHA}\nother==2.0 \\\n    --hash=sha256:{SHA}\n"


def _refused(lock: str, cell=CELL) -> str:  # noqa: ANN001
    with pytest.raises(LockMismatch) as err:
        checked_lock(cell, lock, "locks/x.txt")
    return str(err.value)


def test_a_lock_that_keeps_every_rule_passes() -> None:
    lock = checked_lock(CELL, GOOD, "locks/x.txt")
    assert [(e.name, e.version) for e in lock.entries] == [("tiny", "1.0"), ("other", "2.0")]


def test_an_unreadable_lock_is_named_by_its_file() -> None:
    assert _refused(HEADER + "=== not a requirement\n") == "locks/x.txt: cannot read requirement '=== not a requirement'"


@pytest.mark.parametrize("target", ["python 3.12 on x86_64-manylinux_2_28", "python 3.11 on aarch64-manylinux_2_28"])
def test_a_lock_for_another_python_or_platform_is_refused(target: str) -> None:
    python, platform = target.removeprefix("python ").split(" on ")
    lock = GOOD.replace("python 3.11 on x86_64-manylinux_2_28", target)
    assert _refused(lock) == (f"{WHERE}: the lock is for python {python} on {platform}, the cell is python 3.11 on "
                              "x86_64-manylinux_2_28")


def test_a_lock_with_no_packages_is_refused() -> None:
    assert _refused(HEADER) == f"{WHERE}: the lock lists no packages"


def test_a_pinned_package_missing_from_the_lock_is_refused_even_after_a_line_that_is_no_requirement() -> None:
    cell = make_cell("tiny", ("--not a requirement", "tiny==1.0", "other>=1.0"), pins={"tiny": "1.0"})
    lock = f"tiny==1.0 --hash=sha256:{SHA}\n"
    assert _refused(lock, cell) == (f"cell {cell.id} ({cell.name}): locks/x.txt: other is pinned by the cell "
                                    "(other>=1.0) but missing from the lock")


def test_the_first_pinned_package_is_checked_too() -> None:
    lock = GOOD.replace("tiny==1.0", "tiny==1.1")
    assert _refused(lock) == f"{WHERE}: tiny is 1.1 in the lock, the cell pins tiny==1.0"


def test_a_prerelease_the_cells_range_admits_passes() -> None:
    """uv locks a pre-release when it is the only match; a range such as other>=1.0 contains it."""
    lock = checked_lock(CELL, GOOD.replace("other==2.0", "other==2.0rc1"), "locks/x.txt")
    assert lock.by_name()["other"].version == "2.0rc1"


def test_an_entry_not_pinned_to_one_version_is_refused_with_its_line() -> None:
    text = f"other >=1.0 --hash=sha256:{SHA}"
    lock = HEADER + f"tiny==1.0 --hash=sha256:{SHA}\n{text}\n"
    cell = make_cell("tiny", ("tiny==1.0",), pins={"tiny": "1.0"})
    lock = lock.replace(CELL.id, cell.id)
    assert _refused(lock, cell) == (f"cell {cell.id} ({cell.name}): locks/x.txt: other is not pinned to one version "
                                    f"({text[:60]!r})")
