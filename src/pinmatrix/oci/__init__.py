"""The OCI image format, below every step: the layout on disk, layers and their compression, configs and
manifests, and unpacking a root from layers."""
