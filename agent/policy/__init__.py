"""Pure policy: rules that decide what a node may do (boot image skew rules so far; the
disruption policy, diff and registries belong here too as they move)."""
