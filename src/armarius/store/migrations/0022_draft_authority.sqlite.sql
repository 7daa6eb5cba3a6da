-- Two things an approval and an operation now remember.
--
-- An approval is 'revoked' when its approver lost the right to approve in the workspace (another
-- role, or no membership) while it was unused: next to 'issued', 'consumed', 'expired',
-- 'superseded' and 'withdrawn'. SQLite cannot change a CHECK constraint in place: the table is
-- rebuilt as in 0007 and 0020 (create, copy, drop, rename). The migration connection runs without
-- foreign key enforcement, so dropping the old table does not touch the drafts that reference it;
-- they refer to the new one by name.
--
-- An operation belongs to the principal that made it (principal_id): only that principal's retry
-- replays it. An existing operation was made by the call that wrote its draft, whose created_by
-- names the principal ('<kind>:<name>'; names are unique and never change); an operation no draft
-- names stays without one and is replayed for nobody.

CREATE TABLE approvals_v22 (
    id             INTEGER PRIMARY KEY,
    workspace_id   INTEGER NOT NULL REFERENCES workspaces (id),
    kind           TEXT NOT NULL,
    token_digest   TEXT NOT NULL UNIQUE,
    fingerprint    TEXT NOT NULL,
    slug           TEXT,
    proposal_id    INTEGER REFERENCES draft_proposals (id),
    approver_id    INTEGER NOT NULL REFERENCES principals (id),
    approved_by    TEXT NOT NULL,
    issued_at      TEXT NOT NULL,
    expires_at     TEXT NOT NULL,
    outcome        TEXT NOT NULL CHECK (outcome IN ('issued', 'consumed', 'expired', 'superseded', 'withdrawn',
                                                    'revoked')),
    used_at        TEXT,
    operation_id   TEXT,
    sealed_token   TEXT,
    collected_at   TEXT
);

INSERT INTO approvals_v22 (id, workspace_id, kind, token_digest, fingerprint, slug, proposal_id, approver_id,
                           approved_by, issued_at, expires_at, outcome, used_at, operation_id, sealed_token,
                           collected_at)
SELECT id, workspace_id, kind, token_digest, fingerprint, slug, proposal_id, approver_id, approved_by, issued_at,
       expires_at, outcome, used_at, operation_id, sealed_token, collected_at
FROM approvals;

DROP TABLE approvals;
ALTER TABLE approvals_v22 RENAME TO approvals;

CREATE INDEX approvals_of_proposal ON approvals (workspace_id, proposal_id, id);
-- Live approvals by expiry: the sweep that marks them expired (or revoked) reads only these.
CREATE INDEX approvals_due ON approvals (workspace_id, expires_at) WHERE outcome = 'issued';

ALTER TABLE operations ADD COLUMN principal_id INTEGER REFERENCES principals (id);

UPDATE operations SET principal_id = (
    SELECT min(p.id) FROM drafts d JOIN principals p ON d.created_by = p.kind || ':' || p.name
    WHERE d.workspace_id = operations.workspace_id AND d.operation_id = operations.operation_id);
