"""The Containerfile path, for cells that must compile (a source patch): the build context rendered and built
by the engine, on a base image loaded into its store."""
