"""Semantic rules of the ``ignition``, ``passwd`` and ``kernelArguments`` sections."""

from typing import Dict

from agent.ignition.cacheck import inline_ca_problem
from agent.ignition.findings import entries_of, value_of
from agent.ignition.rules_base import RuleBase


class SectionRules(RuleBase):
    # ignition section
    def ignition(self, ign: dict) -> None:
        cfg = value_of(ign, "config", "dict") or {}
        seen: Dict[str, int] = {}
        for i, res in entries_of(cfg, "merge"):
            p = f"$.ignition.config.merge.{i}"
            self.required_source(res, p)
            self.resource(res, p)
            self.dup(seen, value_of(res, "source", "str"), i, p + ".source")
        replace = value_of(cfg, "replace", "dict")
        if replace:
            self.resource(replace, "$.ignition.config.replace")
        tls = value_of(value_of(ign, "security", "dict"), "tls", "dict") or {}
        seen = {}
        for i, res in entries_of(tls, "certificateAuthorities"):
            p = f"$.ignition.security.tls.certificateAuthorities.{i}"
            self.required_source(res, p)
            self.resource(res, p)
            ca_problem = inline_ca_problem(value_of(res, "source", "str"), value_of(res, "compression", "str"))
            if ca_problem:
                self.r.error(p + ".source", ca_problem, "ca-not-pem")
            self.dup(seen, value_of(res, "source", "str"), i, p + ".source")
        # timeouts: Ignition does not check their sign (config/v3_*/types has no Timeouts rule)
        proxy = value_of(ign, "proxy", "dict") or {}
        for key in ("httpProxy", "httpsProxy"):
            url = value_of(proxy, key, "str")
            if url is not None:  # proxy.go validateProxyURL: "" has no scheme, so it is refused too
                scheme = url.split(":", 1)[0].lower() if ":" in url else ""
                if scheme not in ("http", "https"):
                    self.r.error(f"$.ignition.proxy.{key}", "proxies must be http(s)", "proxy-scheme", url)
        self.unique_strings(value_of(proxy, "noProxy", "list"), "$.ignition.proxy.noProxy")

    def passwd(self, passwd: dict) -> None:
        """Ignition checks no field of a user or group (config/v3_*/types has no PasswdUser or
        PasswdGroup rule): only the generic duplicate check by name (even ""), and duplicate
        strings in their lists. The warnings here are ours, for mistakes Ignition lets through."""
        for section in ("users", "groups"):
            seen: Dict[str, int] = {}
            for i, entry in entries_of(passwd, section):
                p = f"$.passwd.{section}.{i}"
                name = value_of(entry, "name", "str") or ""
                self.dup(seen, name, i, p + ".name")
                if not name:
                    self.r.warn(p + ".name", f"a {section[:-1]} without a name: Ignition accepts the config, "
                                "but creating or deleting it fails on the node", "name-missing")
                if entry.get("shouldExist") is False:
                    others = [k for k in entry if k not in ("name", "shouldExist") and entry[k] is not None]
                    if others:
                        self.r.warn(p, "shouldExist is false, so the other fields are ignored",
                                    "should-not-exist-with-others", sorted(others))
                for key in ("homeDir", "shell"):
                    value = value_of(entry, key, "str")
                    if value and not value.startswith("/"):
                        self.r.warn(f"{p}.{key}", f"{key} should be an absolute path", "path-absolute", value)
                for key in ("uid", "gid"):
                    n = value_of(entry, key, "int")
                    if n is not None and not 0 <= n <= 0xFFFFFFFE:
                        self.r.warn(f"{p}.{key}", f"{key} out of range (0..4294967294)", "id-range", n)
                self.unique_strings(value_of(entry, "sshAuthorizedKeys", "list"), p + ".sshAuthorizedKeys")
                self.unique_strings(value_of(entry, "groups", "list"), p + ".groups")

    def kernel_arguments(self, kargs: dict) -> None:
        seen: Dict[str, str] = {}
        for section in ("shouldExist", "shouldNotExist"):
            for i, arg in enumerate(value_of(kargs, section, "list") or []):
                if not isinstance(arg, str):
                    continue
                p = f"$.kernelArguments.{section}.{i}"
                if arg in seen:
                    self.r.error(p, f"duplicate entry defined (also at {seen[arg]})", "duplicate", arg)
                else:
                    seen[arg] = p
