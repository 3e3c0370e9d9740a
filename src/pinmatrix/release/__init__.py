"""Release: promotion by digest, signed evidence, SBOM, verification, verified pulls."""
