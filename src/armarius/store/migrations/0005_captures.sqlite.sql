-- Research captures: content-addressed, append-only copies of every answer.

CREATE TABLE captures (
    workspace_id  INTEGER NOT NULL REFERENCES workspaces (id),
    capture_id    TEXT NOT NULL,
    content       TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (workspace_id, capture_id)
);
