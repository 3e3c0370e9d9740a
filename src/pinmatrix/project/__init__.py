"""The project's input files, one strict model each (matrix.toml, compat.toml, the lock, known-good.toml,
the data tables pinmatrix ships), each error located as ``FILE:LINE: key: message``; and the smoke catalogue."""
