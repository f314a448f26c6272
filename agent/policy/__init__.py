"""Pure policy: rules that decide what a node may do (boot image skew rules, the node disruption
policy so far; the diff and registries belong here too as they move)."""
