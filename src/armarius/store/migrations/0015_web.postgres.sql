-- The web review pages: server-side login sessions of human principals, and recent failed logins
-- for rate limiting. Both are global tables, like agent_tokens (no row-level security): a session
-- is found by its secret before any workspace is known, and it names its current workspace
-- through workspace_ref.
--
-- web_sessions: the cookie holds a random secret, the store only its SHA-256 (secret_digest).
-- csrf_secret is the token every form and every cookie-authenticated API write must carry.
-- expires_at is the absolute end (web.session_max_hours after created_at); an idle session ends
-- web.session_idle_minutes after last_seen_at; ended_at is set by logout (or a withdrawn
-- membership). flash holds the messages the next page shows (JSON), never a secret.
--
-- login_attempts: one row per password attempt in the rate-limit window, keyed by the SHA-256 of
-- the name as typed (never the name) and the client address; a successful login removes its key's
-- rows, refused marks the one attempt per lockout that was audited as throttled.

CREATE TABLE web_sessions (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    secret_digest  text NOT NULL UNIQUE,
    principal_id   bigint NOT NULL REFERENCES principals (id),
    workspace_ref  bigint NOT NULL REFERENCES workspaces (id),
    csrf_secret    text NOT NULL,
    flash          text,
    created_at     text NOT NULL,
    last_seen_at   text NOT NULL,
    expires_at     text NOT NULL,
    ended_at       text
);
CREATE INDEX web_sessions_expiry ON web_sessions (expires_at);

CREATE TABLE login_attempts (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name_key  text NOT NULL,
    client    text NOT NULL,
    at        text NOT NULL,
    refused   boolean NOT NULL DEFAULT false
);
CREATE INDEX login_attempts_of_key ON login_attempts (name_key, client, at);
CREATE INDEX login_attempts_of_client ON login_attempts (client, at);
CREATE INDEX login_attempts_by_time ON login_attempts (at);

-- Sessions and attempts are working state, not records: the server prunes what expired.
GRANT SELECT, INSERT, UPDATE, DELETE ON web_sessions, login_attempts TO {app_role};
