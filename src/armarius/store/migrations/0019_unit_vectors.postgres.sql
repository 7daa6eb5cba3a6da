-- Recall by meaning finds active evidence units too: one vector per unit, of its active revision,
-- written in the transaction that activates it (memory.vectors, kind UNITS), laid out as
-- entry_vectors (no byte of a row is padding) and numbered per workspace on its own, under the
-- workspace policy like every workspace table. The vectors of units activated before this migration
-- are made by `armarius init` (or `armarius memory reindex`); until then recall finds those units by
-- their words alone.

CREATE TABLE unit_vectors (
    unit_id       bigint PRIMARY KEY REFERENCES evidence_units (id),
    workspace_id  bigint NOT NULL,
    seq           bigint NOT NULL,
    revision      integer NOT NULL,
    model         smallint NOT NULL REFERENCES vector_models (id),
    vector        bytea NOT NULL
);
CREATE INDEX unit_vectors_seq ON unit_vectors (workspace_id, seq);
ALTER TABLE unit_vectors ENABLE ROW LEVEL SECURITY;
ALTER TABLE unit_vectors FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON unit_vectors
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
GRANT SELECT, INSERT, UPDATE ON unit_vectors TO {app_role};
