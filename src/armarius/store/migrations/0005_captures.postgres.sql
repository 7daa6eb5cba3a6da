-- Research captures: content-addressed, append-only copies of every answer.

CREATE TABLE captures (
    workspace_id  bigint NOT NULL REFERENCES workspaces (id),
    capture_id    text NOT NULL,
    content       text NOT NULL,
    created_at    text NOT NULL,
    PRIMARY KEY (workspace_id, capture_id)
);

ALTER TABLE captures ENABLE ROW LEVEL SECURITY;
ALTER TABLE captures FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON captures
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());

-- Append-only for the server: it may add captures, never change or remove them.
GRANT SELECT, INSERT ON captures TO {app_role};
