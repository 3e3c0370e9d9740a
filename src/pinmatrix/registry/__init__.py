"""OCI registries: the distribution API client, authentication, catalog reads, the local registry."""
