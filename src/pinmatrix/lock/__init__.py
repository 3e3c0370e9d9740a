"""Locking cells with uv, and reading a lock back as data."""
