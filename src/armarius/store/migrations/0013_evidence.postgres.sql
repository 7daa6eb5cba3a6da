-- Evidence units: local, editable evidence documents kept as canonical files (SPEC §5).
--
-- evidence_units holds each unit's state: its latest, reviewed and active revision, and the
-- fingerprint of the active revision's file. evidence_revisions holds every revision in full, with
-- the fingerprint of its rendered file, its provenance (the captures it came from) and its lineage:
-- records, which the server adds and never changes or removes. evidence_search holds the active
-- revision of each activated unit: what recall searches. Its vector is computed with the entries'
-- word rules (armarius_entry_vector, migration 0004) from search_body when the application wrote
-- one (evidence.model.search_text: repetitions past the 255th left out, and the words cut where the
-- vector would outgrow its limit of 1 MiB), else from the body. It stays under row-level security like every
-- workspace table, so PostgreSQL will not use a GIN index for the match (the operator is not
-- leakproof): a search matches the workspace's active units, found by their workspace index.

CREATE TABLE evidence_units (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id        bigint NOT NULL REFERENCES workspaces (id),
    name                text NOT NULL,
    title               text NOT NULL,
    status              text NOT NULL CHECK (status IN ('edited', 'reviewed', 'active')),
    revision            integer NOT NULL CHECK (revision >= 1),
    reviewed_revision   integer,
    reviewed_by         text,
    reviewed_at         text,
    active_revision     integer,
    active_fingerprint  text,
    activated_by        text,
    activated_at        text,
    created_by          text NOT NULL,
    created_at          text NOT NULL,
    updated_by          text NOT NULL,
    updated_at          text NOT NULL,
    UNIQUE (workspace_id, name),
    CHECK ((active_revision IS NULL) = (active_fingerprint IS NULL)),
    CHECK (reviewed_revision <= revision AND active_revision <= reviewed_revision),
    CHECK (status <> 'active' OR coalesce(active_revision, 0) = revision),
    CHECK (status <> 'reviewed' OR coalesce(reviewed_revision, 0) = revision),
    CHECK (status <> 'edited' OR reviewed_revision IS NULL OR reviewed_revision < revision)
);

CREATE TABLE evidence_revisions (
    workspace_id  bigint NOT NULL REFERENCES workspaces (id),
    unit_id       bigint NOT NULL REFERENCES evidence_units (id),
    revision      integer NOT NULL CHECK (revision >= 1),
    title         text NOT NULL,
    body          text NOT NULL,
    fingerprint   text NOT NULL,
    provenance    text NOT NULL,
    lineage       text NOT NULL,
    author        text NOT NULL,
    reason        text,
    created_at    text NOT NULL,
    PRIMARY KEY (unit_id, revision)
);

CREATE TABLE evidence_search (
    unit_id       bigint PRIMARY KEY REFERENCES evidence_units (id),
    workspace_id  bigint NOT NULL REFERENCES workspaces (id),
    revision      integer NOT NULL,
    name          text NOT NULL,
    title         text NOT NULL,
    body          text NOT NULL,
    search_body   text,
    tsv           tsvector GENERATED ALWAYS AS (armarius_entry_vector(name, title, coalesce(search_body, body))) STORED
);
CREATE INDEX evidence_search_workspace ON evidence_search (workspace_id);

ALTER TABLE evidence_units ENABLE ROW LEVEL SECURITY;
ALTER TABLE evidence_units FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON evidence_units
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
ALTER TABLE evidence_revisions ENABLE ROW LEVEL SECURITY;
ALTER TABLE evidence_revisions FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON evidence_revisions
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
ALTER TABLE evidence_search ENABLE ROW LEVEL SECURITY;
ALTER TABLE evidence_search FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON evidence_search
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());

GRANT SELECT, INSERT, UPDATE ON evidence_units, evidence_search TO {app_role};
-- Records: appended, never changed or removed by the server.
GRANT SELECT, INSERT ON evidence_revisions TO {app_role};
