"""The state directory engine: state objects from a YAML directory on disk, noticed by polling."""
