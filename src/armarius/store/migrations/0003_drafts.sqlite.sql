-- Drafts written only with a human approval bound to their exact content.

CREATE TABLE draft_proposals (
    id                     INTEGER PRIMARY KEY,
    workspace_id           INTEGER NOT NULL REFERENCES workspaces (id),
    slug                   TEXT NOT NULL,
    title                  TEXT NOT NULL,
    text                   TEXT NOT NULL,
    fingerprint            TEXT NOT NULL,
    proposer_id            INTEGER NOT NULL REFERENCES principals (id),
    proposed_by            TEXT NOT NULL,
    collection_public_key  TEXT,
    status                 TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected')),
    decided_by             TEXT,
    decided_at             TEXT,
    decision_note          TEXT,
    created_at             TEXT NOT NULL
);
CREATE INDEX draft_proposals_status ON draft_proposals (workspace_id, status);

-- An approval token exists only as its SHA-256 digest; sealed_token is the token encrypted to the
-- proposing agent's collection key (only that agent can open it), cleared once collected.
CREATE TABLE approvals (
    id             INTEGER PRIMARY KEY,
    workspace_id   INTEGER NOT NULL REFERENCES workspaces (id),
    kind           TEXT NOT NULL,
    token_digest   TEXT NOT NULL UNIQUE,
    fingerprint    TEXT NOT NULL,
    proposal_id    INTEGER REFERENCES draft_proposals (id),
    approver_id    INTEGER NOT NULL REFERENCES principals (id),
    approved_by    TEXT NOT NULL,
    issued_at      TEXT NOT NULL,
    expires_at     TEXT NOT NULL,
    outcome        TEXT NOT NULL CHECK (outcome IN ('issued', 'consumed', 'expired')),
    used_at        TEXT,
    operation_id   TEXT,
    sealed_token   TEXT
);

CREATE TABLE drafts (
    id                 INTEGER PRIMARY KEY,
    workspace_id       INTEGER NOT NULL REFERENCES workspaces (id),
    slug               TEXT NOT NULL,
    title              TEXT NOT NULL,
    text               TEXT NOT NULL,
    fingerprint        TEXT NOT NULL,
    approval_id        INTEGER NOT NULL UNIQUE REFERENCES approvals (id),
    operation_id       TEXT NOT NULL,
    created_by         TEXT NOT NULL,
    created_at         TEXT NOT NULL,
    promoted_by        TEXT,
    promoted_at        TEXT,
    promoted_revision  INTEGER,
    UNIQUE (workspace_id, slug)
);

-- Idempotency: an operation id answers with its first result, for the same payload only.
CREATE TABLE operations (
    workspace_id  INTEGER NOT NULL,
    operation_id  TEXT NOT NULL,
    kind          TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    result        TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (workspace_id, operation_id)
);
