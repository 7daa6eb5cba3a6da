-- Memory: entries, every revision in full, tags, [[links]], and the full-text index.

CREATE TABLE entries (
    id                    INTEGER PRIMARY KEY,
    workspace_id          INTEGER NOT NULL REFERENCES workspaces (id),
    slug                  TEXT NOT NULL,
    slug_key              TEXT NOT NULL,
    title                 TEXT NOT NULL,
    body                  TEXT NOT NULL,
    tags                  TEXT NOT NULL,
    revision              INTEGER NOT NULL,
    curated_revision      INTEGER,
    curated_by            TEXT,
    curated_at            TEXT,
    review_base_revision  INTEGER,
    needs_review          INTEGER NOT NULL DEFAULT 0,
    created_at            TEXT NOT NULL,
    updated_at            TEXT NOT NULL,
    updated_by            TEXT NOT NULL,
    UNIQUE (workspace_id, slug)
);
CREATE INDEX entries_slug_key ON entries (workspace_id, slug_key);
CREATE INDEX entries_needs_review ON entries (workspace_id, slug) WHERE needs_review = 1;

CREATE TABLE entry_revisions (
    workspace_id      INTEGER NOT NULL,
    entry_id          INTEGER NOT NULL REFERENCES entries (id),
    revision          INTEGER NOT NULL,
    title             TEXT NOT NULL,
    body              TEXT NOT NULL,
    tags              TEXT NOT NULL,
    reason            TEXT,
    operation_id      TEXT NOT NULL,
    author            TEXT NOT NULL,
    created_at        TEXT NOT NULL,
    overrode_curated  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (entry_id, revision)
);

CREATE TABLE entry_tags (
    workspace_id  INTEGER NOT NULL,
    entry_id      INTEGER NOT NULL REFERENCES entries (id),
    tag           TEXT NOT NULL,
    PRIMARY KEY (entry_id, tag)
);
CREATE INDEX entry_tags_tag ON entry_tags (workspace_id, tag);

CREATE TABLE entry_links (
    workspace_id  INTEGER NOT NULL,
    source_id     INTEGER NOT NULL REFERENCES entries (id),
    target_slug   TEXT NOT NULL,
    PRIMARY KEY (source_id, target_slug)
);
CREATE INDEX entry_links_target ON entry_links (workspace_id, target_slug);

-- External-content FTS5 index over slug, title and body, kept in step by triggers (same transaction).
CREATE VIRTUAL TABLE entries_fts USING fts5 (
    slug, title, body, content = 'entries', content_rowid = 'id', tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries BEGIN
    INSERT INTO entries_fts (rowid, slug, title, body) VALUES (new.id, new.slug, new.title, new.body);
END;

CREATE TRIGGER entries_fts_update AFTER UPDATE OF slug, title, body ON entries BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, slug, title, body) VALUES ('delete', old.id, old.slug, old.title, old.body);
    INSERT INTO entries_fts (rowid, slug, title, body) VALUES (new.id, new.slug, new.title, new.body);
END;

CREATE TRIGGER entries_fts_delete AFTER DELETE ON entries BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, slug, title, body) VALUES ('delete', old.id, old.slug, old.title, old.body);
END;
