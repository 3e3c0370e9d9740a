"""Locking cells with uv (``resolve``), with one settings object (``settings``). A lock read back as data is
``project/lockfile``."""
