"""``armarius audit verify``: every chain in the tables, against the workspaces and the anchors.

Six kinds of finding, each reported on its own: broken links, bad MACs and malformed events (per
chain, from :func:`armarius.audit.chain.walk_chain`; rows stored under a workspace id that is not
a whole number are malformed events too), chains whose workspace does not exist, anchors (heads
recorded outside the database) that are no longer on their chain, and anchors that cannot be read
(a line of an anchor file that is not one `armarius audit anchor` writes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from armarius.audit.anchors import Anchor
from armarius.audit.chain import (
    ANCHOR_NOT_FOUND,
    ANCHOR_UNREADABLE,
    BROKEN_LINK,
    SYSTEM_CHAIN,
    UNKNOWN_WORKSPACE,
    ChainBreak,
    ChainWalk,
    chain_ids,
    misfiled_events,
    stored_hashes,
    walk_chain,
)
from armarius.store import Database


@dataclass(frozen=True)
class AuditReport:
    chains: int
    events_checked: int
    #: Events written before the log was authenticated, each before its chain's seal.
    legacy_events: int
    anchors_checked: int
    problems: tuple[ChainBreak, ...]

    @property
    def intact(self) -> bool:
        return not self.problems

    def of_kind(self, kind: str) -> list[ChainBreak]:
        return [problem for problem in self.problems if problem.kind == kind]


def verify_log(
    database: Database, *, known_workspaces: Collection[int] | None = None, anchors: Sequence[Anchor] = (),
    unreadable_anchors: Sequence[str] = (),
) -> AuditReport:
    """Walk every chain in the tables, every known workspace's and every anchored one.

    With ``known_workspaces``, a chain of any other workspace (the system chain aside) is a
    finding, and so is an empty system chain while workspaces exist: creating a workspace writes
    to the system chain, so only a wipe empties it. ``unreadable_anchors``: what was wrong with the
    anchor lines that could not be read (:func:`armarius.audit.anchors.read_anchor_file`), each a finding.
    """
    anchored: dict[int, dict[int, list[Anchor]]] = defaultdict(lambda: defaultdict(list))
    for anchor in anchors:
        anchored[anchor.chain][anchor.seq].append(anchor)
    present = set(chain_ids(database))
    known = set(known_workspaces or ())
    problems = [ChainBreak(None, 0, problem, ANCHOR_UNREADABLE) for problem in unreadable_anchors]
    problems += misfiled_events(database)
    events = legacy = 0
    chains = sorted(present | known | set(anchored) | {SYSTEM_CHAIN})
    for chain in chains:
        walk = walk_chain(database, chain, wanted=anchored.get(chain, {}).keys())
        events, legacy = events + walk.checked, legacy + walk.legacy
        problems += walk.problems
        if known_workspaces is not None and chain not in known and chain != SYSTEM_CHAIN and chain in present:
            problems.append(ChainBreak(chain, 0, f"chain {chain} belongs to no workspace ({walk.last_seq} events "
                                                 "verified): it was written outside Armarius", UNKNOWN_WORKSPACE))
        if chain == SYSTEM_CHAIN and known and walk.last_seq == 0 and not walk.problems:
            problems.append(ChainBreak(chain, 1, f"the system chain is empty although {len(known)} workspaces "
                                                 "exist: its events were removed (the log was wiped)", BROKEN_LINK))
        if chain in anchored:
            problems += _anchor_problems(database, walk, anchored[chain])
    return AuditReport(len(chains), events, legacy, len(anchors), tuple(problems))


def verify_workspace(database: Database, workspace_id: int) -> AuditReport:
    """One workspace's chain, walked as :func:`verify_log` walks each chain (anchors, which live in files an
    operator keeps, and the other chains aside)."""
    walk = walk_chain(database, workspace_id)
    return AuditReport(1, walk.checked, walk.legacy, 0, tuple(walk.problems))


def _anchor_problems(database: Database, walk: ChainWalk, anchored: dict[int, list[Anchor]]) -> list[ChainBreak]:
    # Events past a broken link were not walked: look their hashes up directly.
    unseen = [seq for seq in anchored if seq not in walk.seen]
    found = {**walk.seen, **stored_hashes(database, walk.chain, unseen)} if unseen else walk.seen
    problems = []
    for seq, group in sorted(anchored.items()):
        for anchor in group:
            recorded = f"the head {anchor} recorded at {anchor.anchored_at or 'an unknown time'} ({anchor.source})"
            if seq not in found:
                problem = (f"{recorded} is gone: event {seq} no longer exists; events were removed (the chain "
                           "was truncated, or the log was wiped)")
            elif found[seq] != anchor.hash:
                problem = f"{recorded} no longer matches event {seq}: the chain was rewritten"
            else:
                continue
            problems.append(ChainBreak(walk.chain, seq, problem, ANCHOR_NOT_FOUND))
    return problems

