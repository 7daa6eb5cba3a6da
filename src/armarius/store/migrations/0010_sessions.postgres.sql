-- Research sessions: a budgeted investigation whose every answer lands as evidence.
--
-- sessions holds the current state; session_checkpoints records every state a session moves to
-- (a blocking checkpoint holds the resume_state a human resume restores); evidence_records ties
-- each answer (a capture) to its session, request and actor. Checkpoints and evidence records are
-- records: the server may add them, never change or remove them. Budget is counted by
-- reservations: one is taken before a query runs and is consumed together with the evidence
-- record, held while the session is blocked by a failed source, or released.

CREATE TABLE sessions (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id      bigint NOT NULL REFERENCES workspaces (id),
    owner_id          bigint NOT NULL REFERENCES principals (id),
    owner             text NOT NULL,
    subject           text NOT NULL,
    status            text NOT NULL CHECK (status IN ('open', 'blocked', 'closed')),
    reason            text CHECK (reason IN ('research_unavailable', 'invalid_requests')),
    resume_state      text,
    retry_not_before  text,
    budget            integer NOT NULL CHECK (budget >= 1),
    used              integer NOT NULL DEFAULT 0 CHECK (used >= 0),
    invalid_streak    integer NOT NULL DEFAULT 0 CHECK (invalid_streak >= 0),
    created_at        text NOT NULL,
    updated_at        text NOT NULL,
    CHECK ((status = 'blocked') = (reason IS NOT NULL)),
    CHECK (used <= budget)
);
CREATE INDEX sessions_of_owner ON sessions (workspace_id, owner_id, id);
CREATE INDEX sessions_by_status ON sessions (workspace_id, status, id);

CREATE TABLE session_checkpoints (
    workspace_id  bigint NOT NULL REFERENCES workspaces (id),
    session_id    bigint NOT NULL REFERENCES sessions (id),
    seq           integer NOT NULL,
    event         text NOT NULL,
    status        text NOT NULL CHECK (status IN ('open', 'blocked', 'closed')),
    reason        text,
    resume_state  text,
    actor         text NOT NULL,
    details       text NOT NULL,
    created_at    text NOT NULL,
    PRIMARY KEY (workspace_id, session_id, seq)
);

CREATE TABLE session_reservations (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id  bigint NOT NULL REFERENCES workspaces (id),
    session_id    bigint NOT NULL REFERENCES sessions (id),
    state         text NOT NULL CHECK (state IN ('reserved', 'held', 'consumed', 'released')),
    actor         text NOT NULL,
    holder        text NOT NULL,
    lease_until   text NOT NULL,
    created_at    text NOT NULL,
    settled_at    text
);
CREATE INDEX session_reservations_active ON session_reservations (workspace_id, session_id)
    WHERE state IN ('reserved', 'held');

CREATE TABLE evidence_records (
    workspace_id  bigint NOT NULL REFERENCES workspaces (id),
    session_id    bigint NOT NULL REFERENCES sessions (id),
    seq           integer NOT NULL,
    capture_id    text NOT NULL,
    request_kind  text NOT NULL,
    request       text NOT NULL,
    principal_id  bigint NOT NULL REFERENCES principals (id),
    actor         text NOT NULL,
    repeat_of     integer,
    created_at    text NOT NULL,
    PRIMARY KEY (workspace_id, session_id, seq),
    FOREIGN KEY (workspace_id, capture_id) REFERENCES captures (workspace_id, capture_id)
);
CREATE INDEX evidence_records_capture ON evidence_records (workspace_id, session_id, capture_id);

ALTER TABLE sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE sessions FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON sessions
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
ALTER TABLE session_checkpoints ENABLE ROW LEVEL SECURITY;
ALTER TABLE session_checkpoints FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON session_checkpoints
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
ALTER TABLE session_reservations ENABLE ROW LEVEL SECURITY;
ALTER TABLE session_reservations FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON session_reservations
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
ALTER TABLE evidence_records ENABLE ROW LEVEL SECURITY;
ALTER TABLE evidence_records FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON evidence_records
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());

GRANT SELECT, INSERT, UPDATE ON sessions, session_reservations TO {app_role};
-- Records: appended, never changed or removed by the server.
GRANT SELECT, INSERT ON session_checkpoints, evidence_records TO {app_role};
