-- Enrichment: the ids a session was opened with, resolved into facts with provenance.
--
-- session_inputs holds each revision of a session's inputs; session_facts the facts one enrichment
-- revision established (capture id + JSON pointer to the original value). Both are records: the
-- server adds them, never changes them; a completed revision is never rewritten (new inputs make
-- a new revision). An evidence record made by enrichment names its revision: it costs the agent's
-- budget nothing.

CREATE TABLE session_inputs (
    workspace_id  INTEGER NOT NULL REFERENCES workspaces (id),
    session_id    INTEGER NOT NULL REFERENCES sessions (id),
    revision      INTEGER NOT NULL CHECK (revision >= 1),
    inputs        TEXT NOT NULL,
    actor         TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (workspace_id, session_id, revision)
);

CREATE TABLE session_facts (
    workspace_id  INTEGER NOT NULL REFERENCES workspaces (id),
    session_id    INTEGER NOT NULL REFERENCES sessions (id),
    revision      INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('entity', 'relationship', 'project_description',
                                                 'project_context_coverage')),
    subject       TEXT NOT NULL,
    predicate     TEXT NOT NULL,
    object        TEXT NOT NULL,
    capture_id    TEXT,
    pointer       TEXT,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (workspace_id, session_id, revision, seq),
    FOREIGN KEY (workspace_id, session_id, revision) REFERENCES session_inputs (workspace_id, session_id, revision),
    FOREIGN KEY (workspace_id, capture_id) REFERENCES captures (workspace_id, capture_id)
);

ALTER TABLE evidence_records ADD COLUMN enrichment_revision INTEGER;

-- Which revision of its inputs a session has, and which one enrichment completed: a session whose
-- inputs are ahead is enriched before it answers its next query.
ALTER TABLE sessions ADD COLUMN inputs_revision INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN enriched_revision INTEGER NOT NULL DEFAULT 0;
