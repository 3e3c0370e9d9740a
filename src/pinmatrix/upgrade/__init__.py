"""The next upgrade, before it hurts: which pinned axes have newer releases (``outdated``), and which coherent
candidate cells move coupled pins together, read from the packages' own metadata (``propose``)."""
