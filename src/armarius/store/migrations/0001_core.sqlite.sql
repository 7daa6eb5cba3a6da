-- Core: workspaces, principals, memberships, agent tokens, the audit chain.
-- Identity tables are global; every table with a workspace_id column is workspace content.

CREATE TABLE workspaces (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL
);

CREATE TABLE principals (
    id             INTEGER PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    kind           TEXT NOT NULL CHECK (kind IN ('human', 'agent')),
    password_hash  TEXT,
    created_at     TEXT NOT NULL,
    CHECK (kind = 'human' OR password_hash IS NULL)
);

CREATE TABLE memberships (
    workspace_ref  INTEGER NOT NULL REFERENCES workspaces (id),
    principal_id   INTEGER NOT NULL REFERENCES principals (id),
    role           TEXT NOT NULL CHECK (role IN ('reader', 'editor', 'admin')),
    created_at     TEXT NOT NULL,
    PRIMARY KEY (workspace_ref, principal_id)
);

CREATE TABLE agent_tokens (
    id             INTEGER PRIMARY KEY,
    principal_id   INTEGER NOT NULL REFERENCES principals (id),
    workspace_ref  INTEGER NOT NULL REFERENCES workspaces (id),
    label          TEXT NOT NULL,
    digest         TEXT NOT NULL UNIQUE,
    created_at     TEXT NOT NULL,
    last_used_at   TEXT,
    revoked_at     TEXT
);

-- One chain per workspace; workspace_id 0 is the system chain (workspaces, principals).
CREATE TABLE audit_events (
    workspace_id  INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    at            TEXT NOT NULL,
    actor         TEXT NOT NULL,
    action        TEXT NOT NULL,
    subject       TEXT NOT NULL,
    details       TEXT NOT NULL,
    prev_hash     TEXT NOT NULL,
    hash          TEXT NOT NULL,
    PRIMARY KEY (workspace_id, seq)
);

CREATE TABLE audit_heads (
    workspace_id  INTEGER PRIMARY KEY,
    seq           INTEGER NOT NULL,
    hash          TEXT NOT NULL
);
