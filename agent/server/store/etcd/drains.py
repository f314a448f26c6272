"""Drain leases in etcd: at most ``maxUnavailable`` nodes of a pool drain at once, across replicas.

A lease is the key ``<prefix>leases/<pool>/<node>`` attached to an etcd lease with the drain
TTL: when a node dies, etcd deletes the key and the slot is free, with no replica around. A
grant is one transaction guarded by "no key under ``leases/<pool>/`` changed since I counted"
(a compare over the whole prefix), so two replicas granting the last slot at the same moment
cannot both succeed: the loser counts again. A renewal (the holder asking again) is a
keep-alive of its etcd lease.
"""

import json
import math
import time
from typing import Dict, List, Optional, Tuple

from agent.server.rollout.drains import DrainAnswer
from agent.server.store.etcd.client import KV, EtcdClient, cmp_unchanged_since, op_delete, op_put

MAX_RACES = 20  # a grant that loses this many races in a row answers "wait" (Retry-After 1)


def _lease_prefix(prefix: str, pool: str = "") -> str:
    return f"{prefix}leases/{pool}/" if pool else f"{prefix}leases/"


def _decode(kv: KV) -> Tuple[str, str, Dict]:
    _, pool, node = kv.key.decode().rsplit("/", 2)
    return pool, node, json.loads(kv.value or b"{}")


def holders(client: EtcdClient, prefix: str, pool: str = "") -> List[Dict]:
    """Every live lease (of one pool, or all), oldest grant first."""
    kvs, _ = client.range(_lease_prefix(prefix, pool), prefix=True)
    out = []
    for kv in kvs:
        p, node, value = _decode(kv)
        out.append({"node": node, "pool": p, "config": value.get("config", ""),
                    "granted": value.get("granted", 0.0), "expires": value.get("expires", 0.0),
                    "lease": kv.lease})
    return sorted(out, key=lambda h: (h["granted"], h["node"]))


def request_drain(client: EtcdClient, prefix: str, node: str, pool: str, config: str, limit: int,
                  ttl: float, now: Optional[float] = None) -> DrainAnswer:
    ttl_s = max(1, int(math.ceil(ttl)))
    for _ in range(MAX_RACES):
        now_ = time.time() if now is None else now
        kvs, revision = client.range(_lease_prefix(prefix), prefix=True)
        held = [(kv,) + _decode(kv) for kv in kvs]
        mine = [h for h in held if h[2] == node]
        if mine and mine[0][1] == pool:
            return _renew(client, mine[0], node, pool, config, limit, ttl_s, now_, held)
        in_pool = sorted((h for h in held if h[1] == pool), key=lambda h: h[3].get("granted", 0.0))
        if len(in_pool) >= limit:
            soonest = min((h[3].get("expires", now_ + ttl_s) for h in in_pool), default=now_ + ttl_s) - now_
            return DrainAnswer(False, node, pool, limit, retry_after=int(max(1, min(30, math.ceil(soonest)))),
                               holders=[h[2] for h in in_pool])
        lease = client.grant(ttl_s)
        value = json.dumps({"config": config, "granted": now_, "expires": now_ + ttl_s})
        ops = [op_put(f"{_lease_prefix(prefix, pool)}{node}", value, lease)]
        ops += [op_delete(h[0].key) for h in mine]  # moved pools: the old lease goes
        ok, _ = client.txn([cmp_unchanged_since(_lease_prefix(prefix), revision)], ops)
        if ok:
            return DrainAnswer(True, node, pool, limit, now_ + ttl_s, holders=[h[2] for h in in_pool] + [node])
        client.revoke(lease)  # lost a race with another replica: count again
    return DrainAnswer(False, node, pool, limit, retry_after=1, holders=[])


def _renew(client: EtcdClient, mine: tuple, node: str, pool: str, config: str, limit: int, ttl_s: int,
           now: float, held: list) -> DrainAnswer:
    kv, _, _, value = mine
    client.keepalive(kv.lease)
    value = dict(value, config=config, expires=now + ttl_s)
    client.put(kv.key, json.dumps(value), lease=kv.lease)
    in_pool = [h[2] for h in sorted((h for h in held if h[1] == pool), key=lambda h: h[3].get("granted", 0.0))]
    return DrainAnswer(True, node, pool, limit, now + ttl_s, holders=in_pool, renewed=True)


def release(client: EtcdClient, prefix: str, node: str, current_config: Optional[str] = None) -> Optional[str]:
    """End the node's lease (uncordon); with ``current_config``, only if that is the leased config
    (a Done report on the config it drained for). Returns the pool it held a lease in, or None."""
    for h in holders(client, prefix):
        if h["node"] != node:
            continue
        if current_config is not None and h["config"] and current_config and h["config"] != current_config:
            return None
        client.delete(f"{_lease_prefix(prefix, h['pool'])}{node}")
        client.revoke(h["lease"])
        return h["pool"]
    return None
