"""Libraries the RHEL 9 RPM bundles because RHEL 9 and EPEL 9 do not carry them.

Empty in a source checkout and a pip install (pip installs the real packages). The RHEL 9 RPM
puts pydbus 0.6.0's unchanged pure-Python sources in ``agent/_vendor/pydbus`` (Source1 of
packaging/node-agent.spec); ``agent.host.dbusmanager.import_pydbus`` uses them only when no
``pydbus`` is installed.
"""
