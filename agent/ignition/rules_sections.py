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
        timeouts = value_of(ign, "timeouts", "dict") or {}
        for key in ("httpResponseHeaders", "httpTotal"):
            t = value_of(timeouts, key, "int")
            if t is not None and t < 0:
                self.r.error(f"$.ignition.timeouts.{key}", "timeout must not be negative", "timeout-negative", t)
        proxy = value_of(ign, "proxy", "dict") or {}
        for key in ("httpProxy", "httpsProxy"):
            url = value_of(proxy, key, "str")
            if url:
                scheme = url.split(":", 1)[0].lower() if ":" in url else ""
                if scheme not in ("http", "https"):
                    self.r.error(f"$.ignition.proxy.{key}", "proxies must be http(s)", "proxy-scheme", url)
    # passwd
    def passwd(self, passwd: dict) -> None:
        for section, what in (("users", "user"), ("groups", "group")):
            seen: Dict[str, int] = {}
            for i, entry in entries_of(passwd, section):
                p = f"$.passwd.{section}.{i}"
                name = value_of(entry, "name", "str")
                if not name:
                    self.r.error(p + ".name", f"{what} name is required", "name-required")
                else:
                    self.dup(seen, name, i, p + ".name")
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
                keys: Dict[str, int] = {}
                for j, key in enumerate(value_of(entry, "sshAuthorizedKeys", "list") or []):
                    if isinstance(key, str):
                        if key in keys:
                            self.r.warn(f"{p}.sshAuthorizedKeys.{j}", "duplicate ssh key (same as entry "
                                        f"{keys[key]})", "duplicate")
                        keys.setdefault(key, j)

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
