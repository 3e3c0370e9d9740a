SMOKES = {
    "p-smoke": {"func": "f", "params": {"M": {"type": "int", "range": [1, 100], "default": 5}}},
    "q-smoke": {"func": "f", "params": {"K": {"type": "int", "range": [1, 100], "default": 5}}},
    "r-smoke": {"func": "f"},
}


def f(ctx: object) -> None:
    pass
