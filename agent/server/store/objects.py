"""Checks of the state directory's objects, as the API admits them (pure).

The checks themselves are ``agent.core.objectchecks`` (``node-agent validate`` applies the same
rules offline); here is which check each state directory folder gets. ``agent.server.store.stateformat``
leaves an object with problems out (the last good state keeps serving).
"""

from agent.core.objectchecks import (  # noqa: F401 - the server's names for the core's checks
    API_GROUP,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    KERNEL_TYPES,
    _check_named,
    check_api_version,
    check_cluster,
    check_machine_config,
    check_os_config,
    check_pool,
)

_CHECKS = {
    "machineconfigpools": check_pool,
    "machineconfigs": check_machine_config,
    "machineosconfigs": check_os_config,
    "machineosbuilds": _check_named,
}
