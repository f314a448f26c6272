"""Semantic rules of the ``systemd`` section, and its conflicts with ``storage``."""

from typing import Dict

from agent.ignition.findings import entries_of, value_of
from agent.ignition.rules_base import RuleBase
from agent.ignition.values import install_section_options, unit_contents_error

UNIT_SUFFIXES = (".service", ".socket", ".device", ".mount", ".automount", ".swap", ".target",
                 ".path", ".timer", ".snapshot", ".slice", ".scope")


class SystemdRules(RuleBase):
    def systemd(self, systemd: dict) -> None:
        """config/v3_*/types/unit.go: Unit.Validate, Dropin.Validate, validateUnitContent."""
        seen: Dict[str, int] = {}
        for i, unit in entries_of(systemd, "units"):
            p = f"$.systemd.units.{i}"
            name = value_of(unit, "name", "str") or ""
            if go_path_ext(name) not in UNIT_SUFFIXES:
                self.r.error(p + ".name", "invalid systemd unit extension (use .service, .socket, .target, "
                             ".timer, .mount, .path, ...)", "unit-suffix", name)
            self.dup(seen, name, i, p + ".name")
            contents = value_of(unit, "contents", "str")
            if contents:
                err = unit_contents_error(contents)
                if err:
                    self.r.error(p + ".contents", f"invalid unit content: {err}", "unit-contents")
                elif value_of(unit, "enabled", "bool") and not install_section_options(contents):
                    # config/shared/validations/unit.go ValidateInstallSection
                    self.r.warn(p + ".contents", f"unit {name!r} is enabled, but has no install section so "
                                "enable does nothing", "unit-no-install")
            if value_of(unit, "mask", "bool") and value_of(unit, "enabled", "bool"):
                self.r.warn(p, "unit is both masked and enabled; masking wins and it will not start",
                            "unit-mask-enabled")
            dropins: Dict[str, int] = {}
            for j, dropin in entries_of(unit, "dropins"):
                dp = f"{p}.dropins.{j}"
                dname = value_of(dropin, "name", "str") or ""
                if go_path_ext(dname) != ".conf":
                    self.r.error(dp + ".name", "invalid systemd drop-in extension (must end in .conf)",
                                 "dropin-suffix", dname)
                self.dup(dropins, dname, j, dp + ".name")
                dcontents = value_of(dropin, "contents", "str")
                if dcontents:
                    err = unit_contents_error(dcontents)
                    if err:
                        self.r.error(dp + ".contents", f"invalid unit content: {err}", "unit-contents")

    def systemd_conflicts(self, storage: dict, systemd: dict) -> None:
        owned = set()
        for _, unit in entries_of(systemd, "units"):
            name = value_of(unit, "name", "str")
            if not name:
                continue
            # config/v3_*/types/config.go Config.Validate: units and drop-ins with contents own
            # their path; a file, directory or link there is an error
            if value_of(unit, "contents", "str"):
                owned.add(f"/etc/systemd/system/{name}")
            for _, dropin in entries_of(unit, "dropins"):
                dname = value_of(dropin, "name", "str")
                if dname and value_of(dropin, "contents", "str"):
                    owned.add(f"/etc/systemd/system/{name}.d/{dname}")
        if not owned:
            return
        for section in ("files", "directories", "links"):
            for i, node in entries_of(storage, section):
                path = value_of(node, "path", "str")
                if path in owned:
                    self.r.error(f"$.storage.{section}.{i}.path", "path conflicts with systemd unit or dropin",
                                 "path-conflicts-systemd", path)


def go_path_ext(name: str) -> str:
    """Go's path.Ext: the suffix from the last '.' of the last element, or ""."""
    dot = name.rfind(".")
    return name[dot:] if dot >= 0 and "/" not in name[dot:] else ""
