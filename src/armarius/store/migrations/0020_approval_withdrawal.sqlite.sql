-- A human may reject a proposal after approving it, as long as the approval was not used: a live
-- approval is then 'withdrawn' (its token is dead at once, its sealed copy goes), next to 'issued',
-- 'consumed', 'expired' and 'superseded'.
--
-- SQLite cannot change a CHECK constraint in place: the table is rebuilt as in 0007 (create, copy,
-- drop, rename). The migration connection runs without foreign key enforcement, so dropping the old
-- table does not touch the drafts that reference it; they refer to the new one by name.

CREATE TABLE approvals_v20 (
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
    outcome        TEXT NOT NULL CHECK (outcome IN ('issued', 'consumed', 'expired', 'superseded', 'withdrawn')),
    used_at        TEXT,
    operation_id   TEXT,
    sealed_token   TEXT,
    collected_at   TEXT
);

INSERT INTO approvals_v20 (id, workspace_id, kind, token_digest, fingerprint, slug, proposal_id, approver_id,
                           approved_by, issued_at, expires_at, outcome, used_at, operation_id, sealed_token,
                           collected_at)
SELECT id, workspace_id, kind, token_digest, fingerprint, slug, proposal_id, approver_id, approved_by, issued_at,
       expires_at, outcome, used_at, operation_id, sealed_token, collected_at
FROM approvals;

DROP TABLE approvals;
ALTER TABLE approvals_v20 RENAME TO approvals;

CREATE INDEX approvals_of_proposal ON approvals (workspace_id, proposal_id, id);
-- Live approvals by expiry: the sweep that marks them expired reads only these.
CREATE INDEX approvals_due ON approvals (workspace_id, expires_at) WHERE outcome = 'issued';
