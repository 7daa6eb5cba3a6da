-- Approvals become a lifecycle a human can restart. An approval is 'issued' (live), 'consumed'
-- (it created its draft), 'expired' (its lifetime passed unused) or 'superseded' (a human approved
-- the same proposal again while it was unused: the old token is dead). The sealed copy for the
-- proposing agent is kept until the token is consumed, expires or is superseded, so that the
-- hand-over can be repeated with the same collection key; collected_at records the first
-- hand-over. slug names the approved content (for the audit log of expiries).
--
-- SQLite cannot change a CHECK constraint in place: the table is rebuilt (create, copy, drop,
-- rename). The migration connection runs without foreign key enforcement, so dropping the old
-- table does not touch the drafts that reference it; they refer to the new one by name.

CREATE TABLE approvals_v7 (
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
    outcome        TEXT NOT NULL CHECK (outcome IN ('issued', 'consumed', 'expired', 'superseded')),
    used_at        TEXT,
    operation_id   TEXT,
    sealed_token   TEXT,
    collected_at   TEXT
);

-- Earlier versions deleted the sealed copy at the first hand-over; the audit log's
-- approval.collected event (canonical JSON, so its text is known exactly) says when that was.
INSERT INTO approvals_v7 (id, workspace_id, kind, token_digest, fingerprint, slug, proposal_id, approver_id,
                          approved_by, issued_at, expires_at, outcome, used_at, operation_id, sealed_token,
                          collected_at)
SELECT a.id, a.workspace_id, a.kind, a.token_digest, a.fingerprint,
       coalesce((SELECT p.slug FROM draft_proposals p WHERE p.id = a.proposal_id),
                (SELECT d.slug FROM drafts d WHERE d.approval_id = a.id)),
       a.proposal_id, a.approver_id, a.approved_by, a.issued_at, a.expires_at, a.outcome, a.used_at,
       a.operation_id, a.sealed_token,
       (SELECT min(e.at) FROM audit_events e
         WHERE e.workspace_id = a.workspace_id AND e.action = 'approval.collected'
           AND e.details = '{"approval":' || a.id || ',"proposal":' || a.proposal_id || '}')
FROM approvals a;

DROP TABLE approvals;
ALTER TABLE approvals_v7 RENAME TO approvals;

CREATE INDEX approvals_of_proposal ON approvals (workspace_id, proposal_id, id);
-- Live approvals by expiry: the sweep that marks them expired reads only these.
CREATE INDEX approvals_due ON approvals (workspace_id, expires_at) WHERE outcome = 'issued';
