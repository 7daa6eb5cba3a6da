-- Research sessions: a budgeted investigation whose every answer lands as evidence.
--
-- sessions holds the current state; session_checkpoints records every state a session moves to
-- (a blocking checkpoint holds the resume_state a human resume restores); evidence_records ties
-- each answer (a capture) to its session, request and actor. Checkpoints and evidence records are
-- records: the server may add them, never change or remove them. Budget is counted by
-- reservations: one is taken before a query runs and is consumed together with the evidence
-- record, held while the session is blocked by a failed source, or released.

CREATE TABLE sessions (
    id                INTEGER PRIMARY KEY,
    workspace_id      INTEGER NOT NULL REFERENCES workspaces (id),
    owner_id          INTEGER NOT NULL REFERENCES principals (id),
    owner             TEXT NOT NULL,
    subject           TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('open', 'blocked', 'closed')),
    reason            TEXT CHECK (reason IN ('research_unavailable', 'invalid_requests')),
    resume_state      TEXT,
    retry_not_before  TEXT,
    budget            INTEGER NOT NULL CHECK (budget >= 1),
    used              INTEGER NOT NULL DEFAULT 0 CHECK (used >= 0),
    invalid_streak    INTEGER NOT NULL DEFAULT 0 CHECK (invalid_streak >= 0),
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    CHECK ((status = 'blocked') = (reason IS NOT NULL)),
    CHECK (used <= budget)
);
CREATE INDEX sessions_of_owner ON sessions (workspace_id, owner_id, id);
CREATE INDEX sessions_by_status ON sessions (workspace_id, status, id);

CREATE TABLE session_checkpoints (
    workspace_id  INTEGER NOT NULL REFERENCES workspaces (id),
    session_id    INTEGER NOT NULL REFERENCES sessions (id),
    seq           INTEGER NOT NULL,
    event         TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('open', 'blocked', 'closed')),
    reason        TEXT,
    resume_state  TEXT,
    actor         TEXT NOT NULL,
    details       TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (workspace_id, session_id, seq)
);

CREATE TABLE session_reservations (
    id            INTEGER PRIMARY KEY,
    workspace_id  INTEGER NOT NULL REFERENCES workspaces (id),
    session_id    INTEGER NOT NULL REFERENCES sessions (id),
    state         TEXT NOT NULL CHECK (state IN ('reserved', 'held', 'consumed', 'released')),
    actor         TEXT NOT NULL,
    holder        TEXT NOT NULL,
    lease_until   TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    settled_at    TEXT
);
CREATE INDEX session_reservations_active ON session_reservations (workspace_id, session_id)
    WHERE state IN ('reserved', 'held');

CREATE TABLE evidence_records (
    workspace_id  INTEGER NOT NULL REFERENCES workspaces (id),
    session_id    INTEGER NOT NULL REFERENCES sessions (id),
    seq           INTEGER NOT NULL,
    capture_id    TEXT NOT NULL,
    request_kind  TEXT NOT NULL,
    request       TEXT NOT NULL,
    principal_id  INTEGER NOT NULL REFERENCES principals (id),
    actor         TEXT NOT NULL,
    repeat_of     INTEGER,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (workspace_id, session_id, seq),
    FOREIGN KEY (workspace_id, capture_id) REFERENCES captures (workspace_id, capture_id)
);
CREATE INDEX evidence_records_capture ON evidence_records (workspace_id, session_id, capture_id);
