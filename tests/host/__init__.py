"""Real host tools: a D-Bus daemon (python-dbusmock), rpmbuild, systemd-analyze, SELinux tools."""
