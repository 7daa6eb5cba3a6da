-- Evidence units: local, editable evidence documents kept as canonical files (SPEC §5).
--
-- evidence_units holds each unit's state: its latest, reviewed and active revision, and the
-- fingerprint of the active revision's file. evidence_revisions holds every revision in full, with
-- the fingerprint of its rendered file, its provenance (the captures it came from) and its lineage:
-- records, which the server adds and never changes or removes. evidence_search holds the active
-- revision of each activated unit: what recall searches, through an external-content FTS5 index
-- with the entries' tokenizer, kept in step by triggers (same transaction). The index is given
-- search_body when the application wrote one (evidence.model.search_text: repetitions past the
-- 255th left out, and the words cut where PostgreSQL's vector would outgrow 1 MiB; both engines
-- index the same text), else the body; it reads its content through the view evidence_search_text.

CREATE TABLE evidence_units (
    id                  INTEGER PRIMARY KEY,
    workspace_id        INTEGER NOT NULL REFERENCES workspaces (id),
    name                TEXT NOT NULL,
    title               TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN ('edited', 'reviewed', 'active')),
    revision            INTEGER NOT NULL CHECK (revision >= 1),
    reviewed_revision   INTEGER,
    reviewed_by         TEXT,
    reviewed_at         TEXT,
    active_revision     INTEGER,
    active_fingerprint  TEXT,
    activated_by        TEXT,
    activated_at        TEXT,
    created_by          TEXT NOT NULL,
    created_at          TEXT NOT NULL,
    updated_by          TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    UNIQUE (workspace_id, name),
    CHECK ((active_revision IS NULL) = (active_fingerprint IS NULL)),
    CHECK (reviewed_revision <= revision AND active_revision <= reviewed_revision),
    CHECK (status <> 'active' OR coalesce(active_revision, 0) = revision),
    CHECK (status <> 'reviewed' OR coalesce(reviewed_revision, 0) = revision),
    CHECK (status <> 'edited' OR reviewed_revision IS NULL OR reviewed_revision < revision)
);

CREATE TABLE evidence_revisions (
    workspace_id  INTEGER NOT NULL REFERENCES workspaces (id),
    unit_id       INTEGER NOT NULL REFERENCES evidence_units (id),
    revision      INTEGER NOT NULL CHECK (revision >= 1),
    title         TEXT NOT NULL,
    body          TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    provenance    TEXT NOT NULL,
    lineage       TEXT NOT NULL,
    author        TEXT NOT NULL,
    reason        TEXT,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (unit_id, revision)
);

CREATE TABLE evidence_search (
    unit_id       INTEGER PRIMARY KEY REFERENCES evidence_units (id),
    workspace_id  INTEGER NOT NULL REFERENCES workspaces (id),
    revision      INTEGER NOT NULL,
    name          TEXT NOT NULL,
    title         TEXT NOT NULL,
    body          TEXT NOT NULL,
    search_body   TEXT
);

CREATE VIEW evidence_search_text AS
    SELECT unit_id, name, title, coalesce(search_body, body) AS body FROM evidence_search;

CREATE VIRTUAL TABLE evidence_fts USING fts5 (
    name, title, body, content = 'evidence_search_text', content_rowid = 'unit_id',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER evidence_fts_insert AFTER INSERT ON evidence_search BEGIN
    INSERT INTO evidence_fts (rowid, name, title, body)
        VALUES (new.unit_id, new.name, new.title, coalesce(new.search_body, new.body));
END;

CREATE TRIGGER evidence_fts_update AFTER UPDATE OF name, title, body, search_body ON evidence_search BEGIN
    INSERT INTO evidence_fts (evidence_fts, rowid, name, title, body)
        VALUES ('delete', old.unit_id, old.name, old.title, coalesce(old.search_body, old.body));
    INSERT INTO evidence_fts (rowid, name, title, body)
        VALUES (new.unit_id, new.name, new.title, coalesce(new.search_body, new.body));
END;

CREATE TRIGGER evidence_fts_delete AFTER DELETE ON evidence_search BEGIN
    INSERT INTO evidence_fts (evidence_fts, rowid, name, title, body)
        VALUES ('delete', old.unit_id, old.name, old.title, coalesce(old.search_body, old.body));
END;
