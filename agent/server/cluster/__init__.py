"""The server's service: a Cluster ties a state source, a node store and the rollout logic
together, and answers what the HTTP layer asks (the config to serve, a report, a lease)."""
