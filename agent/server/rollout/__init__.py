"""The server's rollout logic: render pool configs, the MCO-1940 gate, progress and conditions,
drain leases, skew policy, node identity. Independent of how state is stored or served (``make
lint`` checks it imports nothing from store, cluster, http or cli)."""
