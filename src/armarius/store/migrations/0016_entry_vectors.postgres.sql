-- Recall by meaning: one vector per entry, of its current revision (memory.vectors).
--
-- The vector is the model's unit vector quantized to one signed byte per dimension; `model` names
-- the model that made it (a vector of another model is never compared with the current one's, and
-- `armarius memory reindex` replaces it). `seq` numbers a workspace's vectors in the order they were
-- written (writers take the workspace's vector lock), so that a server process can keep a copy in
-- memory and read only what is new. Vectors are ranked in the server process, so no extension
-- (pgvector) is needed. The vectors of entries written before this migration are made by
-- `armarius init` (or `armarius memory reindex`); until then recall finds those entries by their
-- words alone.

CREATE TABLE entry_vectors (
    entry_id      bigint PRIMARY KEY REFERENCES entries (id),
    workspace_id  bigint NOT NULL,
    revision      integer NOT NULL,
    model         text NOT NULL,
    seq           bigint NOT NULL,
    vector        bytea NOT NULL
);
CREATE INDEX entry_vectors_seq ON entry_vectors (workspace_id, seq);
ALTER TABLE entry_vectors ENABLE ROW LEVEL SECURITY;
ALTER TABLE entry_vectors FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON entry_vectors
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
GRANT SELECT, INSERT, UPDATE, DELETE ON entry_vectors TO {app_role};
