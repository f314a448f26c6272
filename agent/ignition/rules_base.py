"""The base of the semantic rules: shared helpers (duplicates, resources) every section uses."""

from typing import Dict, Optional

from agent.ignition import spec
from agent.ignition.findings import Report, entries_of, value_of
from agent.ignition.values import hash_error, url_error


class RuleBase:
    def __init__(self, declared: spec.Version, r: Report):
        self.v = declared
        self.r = r

    def required_source(self, res: dict, path: str) -> None:
        if not value_of(res, "source", "str"):
            self.r.error(path + ".source", "source is required", "source-required")

    def resource(self, res: dict, path: str) -> None:
        compression = value_of(res, "compression", "str")
        if compression not in (None, "", "gzip"):
            self.r.error(path + ".compression", "invalid compression method (only \"gzip\" or none)",
                         "compression-invalid", compression)
        source = value_of(res, "source", "str")
        verification = value_of(res, "verification", "dict") or {}
        hash_value = value_of(verification, "hash", "str")
        if verification.get("hash") is not None and res.get("source") is None:
            self.r.error(path + ".verification.hash", "source must be specified if verification is specified",
                         "verification-nil-source")
        if hash_value is not None:
            err = hash_error(hash_value, self.v)
            if err:
                self.r.error(path + ".verification.hash", err[0], err[1], hash_value)
        if source is not None:
            err = url_error(source, self.v)
            if err:
                self.r.error(path + ".source", err[0], err[1], source if len(source) < 120 else source[:117] + "...")
        headers = entries_of(res, "httpHeaders")
        if headers:
            scheme = source.split(":", 1)[0].lower() if source and ":" in source else ""
            if not source:
                self.r.error(path + ".httpHeaders", "unable to parse url: HTTP headers need a source",
                             "httpheaders-source")
            elif scheme not in ("http", "https"):
                self.r.error(path + ".httpHeaders", "cannot use HTTP headers with this source scheme",
                             "httpheaders-scheme", scheme)
            names: Dict[str, int] = {}
            for i, h in headers:
                name = value_of(h, "name", "str")
                hp = f"{path}.httpHeaders.{i}"
                if not name:
                    self.r.error(hp + ".name", "HTTP header name can't be empty", "httpheader-name")
                    continue
                self.dup(names, name, i, hp + ".name")

    def dup(self, seen: Dict[str, int], key: Optional[str], index: int, path: str, what: str = "") -> None:
        if key is None:
            return
        if key in seen:
            self.r.error(path, f"duplicate entry defined (same as entry {seen[key]}{what})", "duplicate", key)
        else:
            seen[key] = index

    # storage

    def unique_strings(self, values: Optional[list], path: str) -> None:
        """The generic duplicate check on a list of strings (config/validate/validate.go
        ValidateDups: a string is its own key), an error at the repeated entry."""
        seen: Dict[str, int] = {}
        for i, value in enumerate(values or []):
            if isinstance(value, str):
                self.dup(seen, value, i, f"{path}.{i}")
