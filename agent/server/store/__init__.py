"""Where the server's state lives: node state behind the NodeStore interface (SQLite, etcd) and
the state objects (MachineConfigs, pools, ...) read from a state directory or etcd."""
