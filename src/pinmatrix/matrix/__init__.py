"""matrix.toml read, checked and expanded into cells: schema, name grammar, compatibility, rules."""
