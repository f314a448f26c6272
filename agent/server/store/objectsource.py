"""The object source contract: where the server's state objects (MachineConfigs, pools, the
MachineConfiguration, MachineOSConfigs/Builds) come from.

Three engines provide one, each in its own subpackage: the state directory
(``statedir.watcher.StateWatcher``), etcd (``etcd.state.EtcdStateSource``, a published state
directory) and the Kubernetes API (``kube.state.KubeStateSource``, list + watch). All of them
hand out the same ``State`` (``stateformat``), every object admitted by the same rule
(``stateformat.admit``), so the rendering and the checks never depend on the engine.
"""

from typing import Optional, Protocol, runtime_checkable  # runtime_checkable: the tests check each engine

from agent.server.store.stateformat import State


@runtime_checkable
class ObjectSource(Protocol):
    """What the service (``cluster.service.Cluster``) asks of its state objects."""

    @property
    def store_error(self) -> str:
        """Why the newest objects could not be read ("" when they could); the last ones read
        keep serving meanwhile."""

    def current(self, check_now: bool = False, settled: Optional[str] = None) -> State:
        """The state to serve now. ``check_now``: look for changes at once; ``settled``: the
        signature another worker already serves (take it without waiting for it to settle)."""

    def close(self) -> None:
        """Stop following changes."""
