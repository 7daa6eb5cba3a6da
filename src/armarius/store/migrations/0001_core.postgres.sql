-- Core: workspaces, principals, memberships, agent tokens, the audit chain.
-- Identity tables are global; every table with a workspace_id column is workspace content,
-- guarded by row-level security with FORCE. {app_role} is the server's login role, which
-- owns nothing and gets only the grants below.

CREATE TABLE workspaces (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    created_at  text NOT NULL
);

CREATE TABLE principals (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           text NOT NULL UNIQUE,
    kind           text NOT NULL CHECK (kind IN ('human', 'agent')),
    password_hash  text,
    created_at     text NOT NULL,
    CHECK (kind = 'human' OR password_hash IS NULL)
);

CREATE TABLE memberships (
    workspace_ref  bigint NOT NULL REFERENCES workspaces (id),
    principal_id   bigint NOT NULL REFERENCES principals (id),
    role           text NOT NULL CHECK (role IN ('reader', 'editor', 'admin')),
    created_at     text NOT NULL,
    PRIMARY KEY (workspace_ref, principal_id)
);

CREATE TABLE agent_tokens (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    principal_id   bigint NOT NULL REFERENCES principals (id),
    workspace_ref  bigint NOT NULL REFERENCES workspaces (id),
    label          text NOT NULL,
    digest         text NOT NULL UNIQUE,
    created_at     text NOT NULL,
    last_used_at   text,
    revoked_at     text
);

CREATE TABLE audit_events (
    workspace_id  bigint NOT NULL,
    seq           bigint NOT NULL,
    at            text NOT NULL,
    actor         text NOT NULL,
    action        text NOT NULL,
    subject       text NOT NULL,
    details       text NOT NULL,
    prev_hash     text NOT NULL,
    hash          text NOT NULL,
    PRIMARY KEY (workspace_id, seq)
);

CREATE TABLE audit_heads (
    workspace_id  bigint PRIMARY KEY,
    seq           bigint NOT NULL,
    hash          text NOT NULL
);

-- The workspace of the current transaction; 0 (the system chain) when none is set.
CREATE FUNCTION armarius_workspace() RETURNS bigint
    LANGUAGE sql STABLE
    AS $$ SELECT coalesce(nullif(current_setting('armarius.workspace_id', true), '')::bigint, 0) $$;

ALTER TABLE audit_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_events FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON audit_events
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());

ALTER TABLE audit_heads ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_heads FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON audit_heads
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());

GRANT USAGE ON SCHEMA public TO {app_role};
GRANT EXECUTE ON FUNCTION armarius_workspace() TO {app_role};
GRANT SELECT, INSERT, UPDATE ON workspaces, principals, memberships, agent_tokens TO {app_role};
GRANT DELETE ON memberships TO {app_role};
-- The audit log is append-only for the server: no UPDATE or DELETE on events.
GRANT SELECT, INSERT ON audit_events TO {app_role};
GRANT SELECT, INSERT, UPDATE ON audit_heads TO {app_role};
GRANT SELECT ON schema_migrations TO {app_role};
