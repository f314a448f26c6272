"""The etcd engine: node state and state objects in a shared etcd (replicas)."""
