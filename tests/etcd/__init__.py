"""A real three-member etcd cluster on loopback (and replicas behind HAProxy)."""
