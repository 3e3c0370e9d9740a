"""The matrix as cells: matrix.toml (read by ``project/matrix_toml``) validated, expanded under the
compatibility rules into cells, and chosen from (stack, ``-k``, id or name); what cells need beyond the default
index or at run time."""
