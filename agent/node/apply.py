"""The apply engine: make a node (a ``Root``) match a ``NodeConfig``, transactionally.

Order of a run:

1. ``recover``: an earlier run killed mid-apply is rolled back (or forward) first.
2. Every file content is resolved **before** anything changes: data: URLs decoded, http(s)
   sources fetched through the injected fetcher, gzip undone, ``verification.hash`` checked.
   A failed fetch changes nothing.
3. Known files are validated (the kubelet pull secret): invalid -> ConfigError, nothing written.
4. Pure planning (``agent.core.applyplan.operations``): desired operations, compared with the disk -> steps.
   An apply whose steps are empty changes nothing and says so.
5. The journal backs up what the steps replace; steps run (atomic writes, links, removals),
   then live systemd actions (live root only), then rpm-ostree staging (live root only).
   Any failure rolls everything back and raises ApplyError (exit 75).

On an offline root (``--root DIR``) systemd enablement is done with links, as
``systemctl --root`` does; daemon-reload and OS changes are reported in
``ApplyResult.not_performed``, the OS changes recorded in ``<state>/pending-os.json``.
"""

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from agent.core.applyplan import unitfiles
from agent.core.applyplan.operations import (
    DEFAULT_STATE_DIR,
    MANAGED_FILE,
    PENDING_OS_FILE,
    Facts,
    Step,
    desired_operations,
    diff_operations,
    observe_paths,
    os_operations,
)
from agent.core.nodeconfig import NodeConfig
from agent.core.pullsecret import PULL_SECRET_PATH, check_pull_secret
from agent.errors import ApplyError, HostError
from agent.host import files, units
from agent.host.accounts import read_accounts
from agent.host.root import PathEscapeError, Root
from agent.node.txjournal import Journal, JournalError
from agent.node.txjournal import recover as _recover
from agent.resource.contents import resolve_contents

log = logging.getLogger(__name__)
_STAGE = {"NODE_AGENT_STAGE": "apply"}


@dataclass
class ApplyResult:
    changed: List[str] = field(default_factory=list)  # one description per changed operation
    changed_where: List[str] = field(default_factory=list)  # their config entries' JSON paths
    unchanged: int = 0  # operations already satisfied
    not_performed: List[str] = field(default_factory=list)  # live/OS actions skipped (offline root)
    os_update_staged: bool = False  # kargs/rebase staged: the caller reboots once
    changed_paths: List[str] = field(default_factory=list)  # config paths written or removed
    live_actions: List[str] = field(default_factory=list)  # systemd actions performed
    recovered: Optional[str] = None  # what recovery did before this apply
    dry_run: bool = False

    def to_dict(self) -> Dict:
        return dict(self.__dict__)


def recover(root: Root, state_dir: str = DEFAULT_STATE_DIR, systemd=None, rpmostree=None) -> Optional[str]:
    """Finish or undo an interrupted apply: "rolled-forward", "rolled-back" or None (nothing to do)."""
    try:
        return _recover(root, state_dir, systemd=systemd, rpmostree=rpmostree)
    except JournalError as e:
        raise HostError(str(e))


def validate_known_files(cfg: NodeConfig, contents: Dict[str, bytes]) -> None:
    for i, f in enumerate(cfg.files):
        if f.get("path") == PULL_SECRET_PATH and f"$.storage.files.{i}.contents" in contents:
            check_pull_secret(contents[f"$.storage.files.{i}.contents"], f"$.storage.files.{i}.contents")


# ------------------------------------------------------------------------------------------
# facts


def _read_managed(root: Root, state_dir: str) -> frozenset:
    try:
        data = json.loads(root.read_text(f"{state_dir}/{MANAGED_FILE}"))
        return frozenset(p for p in data if isinstance(p, str))
    except (OSError, ValueError):
        return frozenset()


def gather_facts(root: Root, target: NodeConfig, previous: Optional[NodeConfig], state_dir: str,
                 booted=None) -> Facts:
    vendor: Dict = {}
    links: Dict = {}
    names = {u["name"] for u in target.units} | {u["name"] for u in (previous.units if previous else [])}
    pending = list(names)
    while pending:  # units named by Also= are looked up too
        name = pending.pop()
        if name in vendor:
            continue
        found = units.find_unit(root, name)
        if found:
            vendor[name] = found
            pending.extend(u for u in unitfiles.also_units(found[1]) if u not in vendor)
    for name in names:
        links[name] = tuple(units.existing_links_to(root, name))
    return Facts(accounts=read_accounts(root), live=root.is_live, vendor_units=vendor, unit_links=links,
                 managed=_read_managed(root, state_dir), booted=booted,
                 days_since_epoch=int(time.time() // 86400), state_dir=state_dir)


def _check_inside(root: Root, ops) -> None:
    """Refuse, before anything changes, any path (or link target) that resolves outside the root."""
    for o in ops:
        paths = [o.path] if o.path.startswith("/") else []
        paths += [o.target] if o.kind == "hardlink" else []
        paths += [p for p, _ in o.links]
        for p in paths:
            try:
                root.path(p, follow_last=False)
            except PathEscapeError as e:
                raise PathEscapeError(f"{o.where + ': ' if o.where else ''}{p}: {e}; refusing to apply, "
                                      "nothing was changed")


def _observe(root: Root, paths: List[str], ops) -> Dict:
    """Op paths as they are (a link is a link); mere parents through links (a link to a missing
    directory is a missing directory, created where the link points)."""
    own = {o.path for o in ops} | {o.target for o in ops if o.kind == "hardlink"}
    own |= {p for o in ops for p, _ in o.links} | {f"{unitfiles.SYSTEM_DIR}/{o.path}" for o in ops}
    return {p: files.observe(root.path(p, follow_last=p not in own)) for p in paths}


# ------------------------------------------------------------------------------------------
# the engine


def apply_config(root: Root, target: NodeConfig, previous: Optional[NodeConfig] = None, *, fetcher=None,
                 systemd=None, rpmostree=None, state_dir: str = DEFAULT_STATE_DIR,
                 dry_run: bool = False, booted: Optional[Tuple[str, Tuple[str, ...]]] = None,
                 contents: Optional[Dict[str, bytes]] = None) -> ApplyResult:
    """Make ``root`` match ``target`` (see the module docstring). Raises ConfigError, FetchError,
    PathEscapeError/HostError (nothing changed) or ApplyError (changed, then rolled back).

    ``contents``: ``resolve_contents(target, fetcher)`` when the caller already has it (a first
    boot previews the apply, then applies: each source is fetched and decompressed once)."""
    result = ApplyResult(dry_run=dry_run)
    if not dry_run:
        result.recovered = recover(root, state_dir, systemd=systemd, rpmostree=rpmostree)

    if contents is None:
        contents = resolve_contents(target, fetcher)
    validate_known_files(target, contents)

    # ``booted`` (image, kernel arguments) may come from the caller: a first boot knows what its
    # boot image runs even on another root; otherwise a live host asks rpm-ostree.
    if booted is None and root.is_live and (target.os_image_url or target.kernel_arguments
                         or target.ignition.get("kernelArguments")):
        from agent.host.rpmostree import RpmOstree, booted_os
        rpmostree = rpmostree or RpmOstree()
        booted = booted_os(root, rpmostree)
    facts = gather_facts(root, target, previous, state_dir, booted)
    ops = desired_operations(target, previous, contents, facts)
    with root.unchanged():  # nothing is written until the journal begins
        _check_inside(root, ops)
        observed = _observe(root, observe_paths(ops), ops)
    steps, changed, unchanged = diff_operations(ops, observed, facts)

    result.changed = [o.describe() for o in changed]
    result.changed_where = sorted({o.where for o in changed if o.where})
    result.unchanged = len(unchanged)
    result.changed_paths = sorted({s.path for s in steps if s.touches_path and s.op is not None
                                   and not s.op.internal and s.kind != "mkdir"})
    if not root.is_live:
        if any(s.op is not None and s.op.unit_file for s in steps) or any(
                s.path.startswith(unitfiles.SYSTEM_DIR + "/") for s in steps if s.kind == "remove"):
            result.not_performed.append("daemon-reload (offline root)")
        for o in os_operations(target, previous, booted):
            result.not_performed.append(f"{o.describe()} (offline root: recorded in {state_dir}/{PENDING_OS_FILE})")

    if dry_run or not steps:
        log.info("apply of %s: %d changed, %d unchanged%s", target.name or "config", len(result.changed),
                 result.unchanged, " (dry run)" if dry_run else "", extra=_STAGE)
        return result

    if any(s.kind == "live" for s in steps) and systemd is None:
        try:
            from agent.host.systemd import Systemd
        except ImportError:
            raise HostError("unit changes on the live system need systemd over D-Bus (agent.host.systemd)")
        systemd = Systemd()
    if any(s.kind == "os" for s in steps):
        from agent.host.rpmostree import RpmOstree
        rpmostree = rpmostree or RpmOstree()
        if not rpmostree.available():
            raise HostError("this config changes kernel arguments or the OS image, which needs rpm-ostree, "
                            "and rpm-ostree is not installed on this host; nothing was changed")

    journal = Journal(root, state_dir)
    touched = [(s.path, s.kind == "mkdir") for s in steps if s.touches_path]
    journal.begin(touched, target.name)
    current: Optional[Step] = None
    try:
        for batch in _batches(steps):
            current = batch[0]  # a failed batch is named by its first file; the error names the file
            if len(batch) > 1:
                _write_batch(root, batch)
            else:
                _run_step(root, current, journal, systemd, rpmostree, result)
        journal.commit()
    except BaseException as e:  # KeyboardInterrupt too: never leave a half-applied config
        problems = journal.rollback(systemd=systemd, rpmostree=rpmostree)
        what = _step_text(current)
        outcome = rollback_outcome(problems)
        log.error("apply of %s failed at %s: %s; %s", target.name or "config", what, e, outcome, extra=_STAGE)
        if not isinstance(e, Exception):
            raise
        failure = ApplyError(f"applying {target.name or 'the config'} failed at {what}: {e}; {outcome}")
        failure.undone = not problems
        raise failure from e
    log.info("apply of %s: %d changed, %d unchanged", target.name or "config", len(result.changed),
             result.unchanged, extra=_STAGE)
    return result


def rollback_outcome(problems: List[str]) -> str:
    """What the rollback after a failed apply left (pure): all undone, or exactly which changes
    stay on the node and what to do (it said "all changes were rolled back; could not undo: ...")."""
    if not problems:
        return "every change was rolled back"
    return (f"rolled back, except {len(problems)} change(s) it could not undo, left on the node: "
            + "; ".join(problems) + "; restore those by hand, then run again")


def _step_text(step: Optional[Step]) -> str:
    if step is None:
        return "start"
    if step.kind == "live":
        return f"systemd {step.action} {' '.join(step.units)}".strip()
    if step.kind == "os":
        return f"rpm-ostree {step.action}"
    return f"{step.kind} {step.path}" + (f" ({step.op.where})" if step.op is not None and step.op.where else "")


def _batches(steps: List[Step]) -> List[List[Step]]:
    """The steps in order, consecutive file writes grouped (``files.write_many``: one fsync per
    file and one per directory, not two per file); every other step alone."""
    out: List[List[Step]] = []
    for step in steps:
        if step.kind == "write" and out and out[-1][0].kind == "write":
            out[-1].append(step)
        else:
            out.append([step])
    return out


def _write_batch(root: Root, batch: List[Step]) -> None:
    files.write_many([(root.path(s.path, follow_last=False), s.data or b"",
                       s.mode if s.mode is not None else 0o644, s.uid, s.gid) for s in batch])


def _run_step(root: Root, step: Step, journal: Journal, systemd, rpmostree, result: ApplyResult) -> None:
    if step.kind == "live":
        journal.note_live(step.action, list(step.units))
        if step.action == "daemon-reload":
            systemd.daemon_reload()
        else:
            getattr(systemd, f"{step.action}_unit_files")(list(step.units))
        result.live_actions.append(f"{step.action} {' '.join(step.units)}".strip())
        return
    if step.kind == "os":
        journal.note_os(step.action)
        if step.action == "kargs":
            append, delete = step.args
            rpmostree.kargs(append, delete)
        elif step.action == "kernel-type":
            rpmostree.switch_kernel(step.args[0][0], step.args[1][0])
        elif step.action == "extensions":
            rpmostree.update_extensions(*step.args)
        else:
            rpmostree.rebase(step.target)
        result.os_update_staged = True
        return
    host = root.path(step.path, follow_last=step.kind == "mkdir")
    if step.kind == "write":
        files.atomic_write(host, step.data or b"", step.mode if step.mode is not None else 0o644, step.uid, step.gid)
    elif step.kind == "attrs":
        files.set_attrs(host, step.mode, step.uid, step.gid)
    elif step.kind == "mkdir":
        if not os.path.isdir(host):
            # Normally only the leaf is missing; through a link to a missing tree, more are.
            files.makedirs(os.path.dirname(host), 0o755, 0, 0, stop=root.top)
            os.mkdir(host, 0o700)
        files.set_attrs(host, step.mode if step.mode is not None else 0o755, max(step.uid, 0), max(step.gid, 0))
        files.fsync_dir(os.path.dirname(host))
    elif step.kind == "symlink":
        files.replace_symlink(host, step.target)
    elif step.kind == "hardlink":
        files.replace_hardlink(host, root.path(step.target, follow_last=False))
    elif step.kind == "remove":
        if not files.remove(host):
            log.warning("%s is a non-empty directory; left in place", step.path, extra=_STAGE)
    else:  # pragma: no cover
        raise ValueError(step.kind)
