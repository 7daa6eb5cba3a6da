-- Enrichment: the ids a session was opened with, resolved into facts with provenance.
--
-- session_inputs holds each revision of a session's inputs; session_facts the facts one enrichment
-- revision established (capture id + JSON pointer to the original value). Both are records: the
-- server adds them, never changes them; a completed revision is never rewritten (new inputs make
-- a new revision). An evidence record made by enrichment names its revision: it costs the agent's
-- budget nothing.

CREATE TABLE session_inputs (
    workspace_id  bigint NOT NULL REFERENCES workspaces (id),
    session_id    bigint NOT NULL REFERENCES sessions (id),
    revision      integer NOT NULL CHECK (revision >= 1),
    inputs        text NOT NULL,
    actor         text NOT NULL,
    created_at    text NOT NULL,
    PRIMARY KEY (workspace_id, session_id, revision)
);

CREATE TABLE session_facts (
    workspace_id  bigint NOT NULL REFERENCES workspaces (id),
    session_id    bigint NOT NULL REFERENCES sessions (id),
    revision      integer NOT NULL,
    seq           integer NOT NULL,
    kind          text NOT NULL CHECK (kind IN ('entity', 'relationship', 'project_description',
                                                 'project_context_coverage')),
    subject       text NOT NULL,
    predicate     text NOT NULL,
    object        text NOT NULL,
    capture_id    text,
    pointer       text,
    created_at    text NOT NULL,
    PRIMARY KEY (workspace_id, session_id, revision, seq),
    FOREIGN KEY (workspace_id, session_id, revision) REFERENCES session_inputs (workspace_id, session_id, revision),
    FOREIGN KEY (workspace_id, capture_id) REFERENCES captures (workspace_id, capture_id)
);

ALTER TABLE evidence_records ADD COLUMN enrichment_revision integer;

ALTER TABLE session_inputs ENABLE ROW LEVEL SECURITY;
ALTER TABLE session_inputs FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON session_inputs
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
ALTER TABLE session_facts ENABLE ROW LEVEL SECURITY;
ALTER TABLE session_facts FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON session_facts
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());

GRANT SELECT, INSERT ON session_inputs, session_facts TO {app_role};

-- Which revision of its inputs a session has, and which one enrichment completed: a session whose
-- inputs are ahead is enriched before it answers its next query.
ALTER TABLE sessions ADD COLUMN inputs_revision integer NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN enriched_revision integer NOT NULL DEFAULT 0;
