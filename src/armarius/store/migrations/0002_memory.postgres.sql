-- Memory: entries, every revision in full, tags, [[links]], and the full-text index.
-- Revisions are append-only for the server role: it may insert them, never change them.

CREATE TABLE entries (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id          bigint NOT NULL REFERENCES workspaces (id),
    slug                  text NOT NULL,
    slug_key              text NOT NULL,
    title                 text NOT NULL,
    body                  text NOT NULL,
    tags                  text NOT NULL,
    revision              integer NOT NULL,
    curated_revision      integer,
    curated_by            text,
    curated_at            text,
    review_base_revision  integer,
    needs_review          boolean NOT NULL DEFAULT false,
    created_at            text NOT NULL,
    updated_at            text NOT NULL,
    updated_by            text NOT NULL,
    -- Punctuation that PostgreSQL's parser would join words with (paths, hosts, e-mails, hyphens)
    -- becomes a space, so words split as SQLite's FTS5 splits them.
    tsv                   tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('simple', translate(slug, '/-', '  ')), 'A')
        || setweight(to_tsvector('simple', translate(title, '/.-_@:+\', '        ')), 'A')
        || setweight(to_tsvector('simple', translate(body, '/.-_@:+\', '        ')), 'B')
    ) STORED,
    UNIQUE (workspace_id, slug)
);
CREATE INDEX entries_slug_key ON entries (workspace_id, slug_key);
CREATE INDEX entries_needs_review ON entries (workspace_id, slug) WHERE needs_review;
CREATE INDEX entries_tsv ON entries USING gin (tsv);

CREATE TABLE entry_revisions (
    workspace_id      bigint NOT NULL,
    entry_id          bigint NOT NULL REFERENCES entries (id),
    revision          integer NOT NULL,
    title             text NOT NULL,
    body              text NOT NULL,
    tags              text NOT NULL,
    reason            text,
    operation_id      text NOT NULL,
    author            text NOT NULL,
    created_at        text NOT NULL,
    overrode_curated  boolean NOT NULL DEFAULT false,
    PRIMARY KEY (entry_id, revision)
);

CREATE TABLE entry_tags (
    workspace_id  bigint NOT NULL,
    entry_id      bigint NOT NULL REFERENCES entries (id),
    tag           text NOT NULL,
    PRIMARY KEY (entry_id, tag)
);
CREATE INDEX entry_tags_tag ON entry_tags (workspace_id, tag);

CREATE TABLE entry_links (
    workspace_id  bigint NOT NULL,
    source_id     bigint NOT NULL REFERENCES entries (id),
    target_slug   text NOT NULL,
    PRIMARY KEY (source_id, target_slug)
);
CREATE INDEX entry_links_target ON entry_links (workspace_id, target_slug);

ALTER TABLE entries ENABLE ROW LEVEL SECURITY;
ALTER TABLE entries FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON entries
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
ALTER TABLE entry_revisions ENABLE ROW LEVEL SECURITY;
ALTER TABLE entry_revisions FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON entry_revisions
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
ALTER TABLE entry_tags ENABLE ROW LEVEL SECURITY;
ALTER TABLE entry_tags FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON entry_tags
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
ALTER TABLE entry_links ENABLE ROW LEVEL SECURITY;
ALTER TABLE entry_links FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON entry_links
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());

GRANT SELECT, INSERT, UPDATE ON entries TO {app_role};
GRANT SELECT, INSERT ON entry_revisions TO {app_role};
GRANT SELECT, INSERT, DELETE ON entry_tags, entry_links TO {app_role};
