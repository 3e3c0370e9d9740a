"""image/cached_choices.py: a lock's wheel choices from a signed build cache document are used only when each one
is a wheel of its lock line (one of its hashes, its name and version, a tag the target supports, an http(s) URL);
anything else is refused with the line it names."""

from __future__ import annotations

from typing import Any

import pytest

from pinmatrix.image.cached_choices import choices_key, from_document, to_document
from pinmatrix.index.wheel_index import Target, WheelFile
from pinmatrix.project.lockfile import LockEntry

SHA, OTHER = "a" * 64, "b" * 64
ENTRY = LockEntry("six", "1.17.0", f"six==1.17.0 --hash=sha256:{SHA} --hash=sha256:{OTHER}", ())
TARGET = Target(python="3.11", platform="x86_64-manylinux_2_28")
WHEEL = WheelFile("six", "1.17.0", "six-1.17.0-py2.py3-none-any.whl", "https://files.example/six.whl", SHA, 11)


def _doc(**over: Any) -> dict[str, Any]:
    doc = to_document({"six": WHEEL})
    doc["choices"]["six"].update(over)
    return doc


def test_a_document_round_trips_to_the_same_choice() -> None:
    assert from_document(_doc(), [ENTRY], TARGET) == {"six": WHEEL}


@pytest.mark.parametrize(("over", "said"), [
    ({"sha256": "c" * 64}, "six: sha256 cccccccccccc is none of the lock line's hashes"),
    ({"filename": "../six-1.17.0-py3-none-any.whl"}, "is not a wheel file name"),
    ({"filename": "six-1.17.0.tar.gz"}, "is not a wheel file name"),
    ({"filename": "evil-1.17.0-py3-none-any.whl"}, "is not six 1.17.0"),
    ({"filename": "six-1.16.0-py3-none-any.whl"}, "is not six 1.17.0"),
    ({"filename": "six-1.17.0-cp311-cp311-win_amd64.whl"}, "has no tag for six's target"),
    ({"url": "file:///etc/passwd"}, "six: its URL is not http(s)"),
    ({"extra": 1}, "not a wheel choices document"),
])
def test_a_choice_that_is_not_the_lock_lines_wheel_is_refused(over: dict[str, Any], said: str) -> None:
    with pytest.raises(ValueError) as err:
        from_document(_doc(**over), [ENTRY], TARGET)
    assert said in str(err.value)


def test_a_document_missing_a_line_or_of_another_format_is_refused() -> None:
    other = LockEntry("idna", "3.7", f"idna==3.7 --hash=sha256:{OTHER}", ())
    with pytest.raises(ValueError, match="idna: no choice"):
        from_document(_doc(), [ENTRY, other], TARGET)
    with pytest.raises(ValueError, match="format 2"):
        from_document({**_doc(), "format": 2}, [ENTRY], TARGET)


def test_the_key_changes_with_the_lock_line_the_target_and_the_indexes() -> None:
    key = choices_key([ENTRY], TARGET, ["https://a/simple"])
    another_hash = LockEntry("six", "1.17.0", ENTRY.text.replace(OTHER, "d" * 64), ())
    assert len({key, choices_key([another_hash], TARGET, ["https://a/simple"]),
                choices_key([ENTRY], Target(python="3.12", platform=TARGET.platform), ["https://a/simple"]),
                choices_key([ENTRY], Target(python="3.11", platform="aarch64-manylinux_2_28"), ["https://a/simple"]),
                choices_key([ENTRY], TARGET, ["https://b/simple"])}) == 5
