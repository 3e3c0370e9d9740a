"""A CPU smoke whose verdict changes at a known release of a small pure-Python package, for the version
bisect: six added ``six.assertNotRegex`` in 1.14.0 (six's CHANGES: "Issue #288, pull request #289: Add
`six.assertNotRegex`."). Releases before it fail with class ``missing-api``; 1.14.0 and later pass."""

from __future__ import annotations

import unittest

from _smokelib import Context, Fail, main, version_of

SMOKES = {
    "six-assert-not-regex": {
        "func": "assert_not_regex",
        "description": "six.assertNotRegex exists and behaves (added in six 1.14.0): the version bisect's target",
        "needs": {"packages": ["six"]},
        "timeout_s": 60,
    },
}


def assert_not_regex(ctx: Context) -> None:
    import six

    ctx.metric("six", version_of("six") or six.__version__)
    check = getattr(six, "assertNotRegex", None)
    if check is None:
        raise Fail(f"six {six.__version__} has no assertNotRegex", "missing-api")
    case = unittest.TestCase()
    check(case, "pinmatrix", r"\d")  # no digit: must pass
    try:
        check(case, "pinmatrix 2", r"\d")
    except AssertionError:
        pass
    else:
        raise Fail("six.assertNotRegex accepted a text that matches", "wrong-result")
    ctx.summary = f"six {six.__version__}: assertNotRegex present and correct"


if __name__ == "__main__":
    main(SMOKES, globals())
