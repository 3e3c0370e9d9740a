"""One module per ``pinmatrix`` subcommand, each exposing ``register(subparsers)``."""
