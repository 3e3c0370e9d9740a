"""The package index: the wheels of a lock found and fetched (PEP 691), read member by member, and installed
into a layer without running their code; and where uv is."""
