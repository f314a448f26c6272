"""The Kubernetes API engine: objects and node state in the cluster's own API (stateless replicas)."""
