"""Ignition spec 3.x -> spec 2.2.0, for nodes whose Ignition only reads spec 2 (pure).

The MCO's machine config server serves spec 2.2.0 to a client that sends no Ignition
``Accept`` header or asks for a spec-2 version (openshift/machine-config-operator
pkg/server/api.go:266-313, detectSpecVersionFromAcceptHeader; the conversion is
pkg/controller/common ConvertRawExtIgnitionToV2, built on coreos/ign-converter). This is our
own converter: it never drops a field silently. What spec 2.2 cannot say (disks, RAID,
filesystems, LUKS, kernel arguments, proxies, HTTP headers, sha256 hashes, several appends to
one file, ``shouldExist: false``) raises ``NotExpressible`` naming every JSON path, and the
server answers 500 as the MCS does for a failed conversion.

Kernel arguments must be moved into the MachineConfig before calling this
(``agent.server.cluster.content`` does, as upstream MigrateKernelArgsIfNecessary does).

The reverse direction (2.2 -> 3.x, reading old MachineConfigs) lives in
``agent.ignition.translate2``.
"""

import copy
from typing import Any, Dict, List, Optional

from agent.errors import ConfigError, Problem

TARGET = "2.2.0"
ROOT_FILESYSTEM = "root"  # spec 2 names the filesystem of every node; "root" is the real root
# URL schemes spec 2.2 fetches (gs: came with 3.1, arn: with 3.4).
SCHEMES_22 = ("http", "https", "tftp", "s3", "data", "oem")
_USER_FIELDS = ("name", "passwordHash", "sshAuthorizedKeys", "uid", "gecos", "homeDir", "noCreateHome",
                "primaryGroup", "groups", "noUserGroup", "noLogInit", "shell", "system")
_GROUP_FIELDS = ("name", "gid", "passwordHash", "system")


class NotExpressible(ConfigError):
    """The 3.x config uses something spec 2.2 cannot express; ``problems`` name each path."""


def _empty(value: Any) -> bool:
    return value is None or value == [] or value == {} or value == ""


class _Down:
    def __init__(self) -> None:
        self.problems: List[Problem] = []

    def refuse(self, path: str, why: str) -> None:
        self.problems.append(Problem(path, f"{why}: spec {TARGET} cannot express it", rule="spec-2.2"))

    def only(self, obj: Dict[str, Any], path: str, allowed: tuple) -> None:
        for key in sorted(obj):
            if key not in allowed and not _empty(obj[key]):
                self.refuse(f"{path}.{key}", f"{key} has no spec {TARGET} equivalent")

    # -- resources ---------------------------------------------------------------------------

    def resource(self, res: Any, path: str, compression: bool = False) -> Optional[Dict[str, Any]]:
        """A 3.x resource (source, compression, verification, httpHeaders) as spec 2.2 has it."""
        if not isinstance(res, dict):
            return None
        self.only(res, path, ("source", "compression", "verification") if compression else ("source", "verification"))
        out: Dict[str, Any] = {}
        source = res.get("source")
        if source is not None:
            scheme = str(source).split(":", 1)[0].lower() if ":" in str(source) else ""
            if scheme and scheme not in SCHEMES_22:
                self.refuse(f"{path}.source", f"URL scheme {scheme}: is newer than spec 2.2")
            out["source"] = source
        if compression and not _empty(res.get("compression")):
            out["compression"] = res["compression"]
        hash_ = (res.get("verification") or {}).get("hash")
        if hash_:
            if not str(hash_).startswith("sha512-"):
                self.refuse(f"{path}.verification.hash", "only sha512 hashes exist in spec 2.2")
            out["verification"] = {"hash": hash_}
        return out

    # -- sections ------------------------------------------------------------------------------

    def ignition(self, ign: Dict[str, Any]) -> Dict[str, Any]:
        self.only(ign, "$.ignition", ("version", "config", "timeouts", "security"))
        out: Dict[str, Any] = {"version": TARGET}
        cfg = ign.get("config") or {}
        conf: Dict[str, Any] = {}
        merge = [self.resource(r, f"$.ignition.config.merge.{i}") for i, r in enumerate(cfg.get("merge") or [])]
        if merge:
            conf["append"] = [r for r in merge if r is not None]  # spec 2 called merging "append"
        if cfg.get("replace") and (cfg["replace"] or {}).get("source"):
            conf["replace"] = self.resource(cfg["replace"], "$.ignition.config.replace")
        if conf:
            out["config"] = conf
        timeouts = {k: v for k, v in (ign.get("timeouts") or {}).items() if v is not None}
        if timeouts:
            out["timeouts"] = timeouts
        cas = ((ign.get("security") or {}).get("tls") or {}).get("certificateAuthorities") or []
        converted = [self.resource(r, f"$.ignition.security.tls.certificateAuthorities.{i}")
                     for i, r in enumerate(cas)]
        if converted:
            out["security"] = {"tls": {"certificateAuthorities": [c for c in converted if c is not None]}}
        return out

    def node(self, node: Dict[str, Any], path: str) -> Dict[str, Any]:
        out: Dict[str, Any] = {"filesystem": ROOT_FILESYSTEM, "path": node.get("path")}
        for key in ("user", "group"):
            ref = node.get(key)
            if isinstance(ref, dict) and not _empty({k: v for k, v in ref.items() if v is not None}):
                out[key] = {k: v for k, v in ref.items() if k in ("id", "name") and v is not None}
        return out

    def file(self, f: Dict[str, Any], path: str) -> Dict[str, Any]:
        self.only(f, path, ("path", "overwrite", "user", "group", "mode", "contents", "append"))
        out = self.node(f, path)
        # Spec 3 files default to overwrite: false; spec 2 files to true: say it explicitly.
        out["overwrite"] = bool(f.get("overwrite"))
        if f.get("mode") is not None:
            out["mode"] = f["mode"]
        appends = f.get("append") or []
        contents = f.get("contents") or {}
        if appends:
            if len(appends) > 1 or contents.get("source") is not None:
                self.refuse(f"{path}.append", "spec 2.2 appends exactly one resource to a file and cannot also "
                                              "set its contents")
            out["append"] = True
            out["contents"] = self.resource(appends[0], f"{path}.append.0", compression=True) or {}
            return out
        converted = self.resource(contents, f"{path}.contents", compression=True) or {}
        if converted.get("source") is None:
            converted["source"] = "data:,"  # spec 3: no contents means an empty file
        out["contents"] = converted
        return out

    def directory(self, d: Dict[str, Any], path: str) -> Dict[str, Any]:
        self.only(d, path, ("path", "overwrite", "user", "group", "mode"))
        out = self.node(d, path)
        if d.get("overwrite") is not None:
            out["overwrite"] = bool(d["overwrite"])
        if d.get("mode") is not None:
            out["mode"] = d["mode"]
        return out

    def link(self, ln: Dict[str, Any], path: str) -> Dict[str, Any]:
        self.only(ln, path, ("path", "overwrite", "user", "group", "target", "hard"))
        out = self.node(ln, path)
        if not ln.get("target"):
            self.refuse(f"{path}.target", "a link without a target (spec 3.4 leaves an existing link alone)")
        out["target"] = ln.get("target")
        if ln.get("hard") is not None:
            out["hard"] = bool(ln["hard"])
        if ln.get("overwrite") is not None:
            out["overwrite"] = bool(ln["overwrite"])
        return out

    def storage(self, st: Dict[str, Any]) -> Dict[str, Any]:
        for key in ("disks", "raid", "filesystems", "luks"):
            if not _empty(st.get(key)):
                self.refuse(f"$.storage.{key}", f"storage.{key} (only files, directories and links are converted)")
        self.only(st, "$.storage", ("files", "directories", "links", "disks", "raid", "filesystems", "luks"))
        out: Dict[str, Any] = {}
        for key, conv in (("files", self.file), ("directories", self.directory), ("links", self.link)):
            items = [conv(x, f"$.storage.{key}.{i}") for i, x in enumerate(st.get(key) or []) if isinstance(x, dict)]
            if items:
                out[key] = items
        return out

    def systemd(self, sd: Dict[str, Any]) -> Dict[str, Any]:
        self.only(sd, "$.systemd", ("units",))
        units = []
        for i, u in enumerate(sd.get("units") or []):
            if not isinstance(u, dict):
                continue
            path = f"$.systemd.units.{i}"
            self.only(u, path, ("name", "enabled", "mask", "contents", "dropins"))
            unit = {k: u[k] for k in ("name", "enabled", "mask", "contents") if u.get(k) is not None}
            dropins = []
            for j, d in enumerate(u.get("dropins") or []):
                self.only(d, f"{path}.dropins.{j}", ("name", "contents"))
                dropins.append({k: d[k] for k in ("name", "contents") if d.get(k) is not None})
            if dropins:
                unit["dropins"] = dropins
            units.append(unit)
        return {"units": units} if units else {}

    def passwd(self, pw: Dict[str, Any]) -> Dict[str, Any]:
        self.only(pw, "$.passwd", ("users", "groups"))
        out: Dict[str, Any] = {}
        for key, fields in (("users", _USER_FIELDS), ("groups", _GROUP_FIELDS)):
            items = []
            for i, x in enumerate(pw.get(key) or []):
                if not isinstance(x, dict):
                    continue
                path = f"$.passwd.{key}.{i}"
                if x.get("shouldExist") is False:
                    self.refuse(f"{path}.shouldExist", "removing a user or group (shouldExist: false)")
                self.only({k: v for k, v in x.items() if k != "shouldExist"}, path, fields)
                items.append({k: copy.deepcopy(x[k]) for k in fields if x.get(k) is not None})
            if items:
                out[key] = items
        return out


def to_spec22(doc: Dict[str, Any]) -> Dict[str, Any]:
    """The spec 3.x config ``doc`` as spec 2.2.0; NotExpressible names what cannot be said."""
    if not isinstance(doc, dict):
        raise NotExpressible("an Ignition config must be a JSON object")
    version = str((doc.get("ignition") or {}).get("version") or "")
    if not version.startswith("3."):
        raise NotExpressible(f"expected an Ignition spec 3.x config, got version {version or 'none'}")
    down = _Down()
    out: Dict[str, Any] = {"ignition": down.ignition(doc.get("ignition") or {})}
    for key, conv in (("storage", down.storage), ("systemd", down.systemd), ("passwd", down.passwd)):
        section = doc.get(key)
        if isinstance(section, dict):
            converted = conv(section)
            if converted:
                out[key] = converted
    ka = doc.get("kernelArguments") or {}
    if isinstance(ka, dict) and (ka.get("shouldExist") or ka.get("shouldNotExist")):
        down.refuse("$.kernelArguments", "kernel arguments (move them into the MachineConfig first)")
    for key in sorted(doc):
        if key not in ("ignition", "storage", "systemd", "passwd", "kernelArguments") and not _empty(doc[key]):
            down.refuse(f"$.{key}", f"{key} has no spec {TARGET} equivalent")
    if down.problems:
        lines = "; ".join(f"{p.path}: {p.message}" for p in down.problems)
        raise NotExpressible(f"cannot convert to Ignition spec {TARGET}: {lines}", problems=down.problems)
    return out
