"""Ignition 3.x configs: parse, validate, merge, convert between spec versions, load as NodeConfig.

Everything here is a pure function of data; fetching lives elsewhere.
"""
