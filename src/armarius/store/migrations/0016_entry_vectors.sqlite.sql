-- Recall by meaning: one vector per entry, of its current revision (memory.vectors).
--
-- The vector is the model's unit vector quantized to one signed byte per dimension; `model` names
-- the model that made it (a vector of another model is never compared with the current one's, and
-- `armarius memory reindex` replaces it). `seq` numbers a workspace's vectors in the order they were
-- written, so that a server process can keep a copy in memory and read only what is new. The
-- vectors of entries written before this migration are made by `armarius init` (or `armarius
-- memory reindex`); until then recall finds those entries by their words alone.

CREATE TABLE entry_vectors (
    entry_id      INTEGER PRIMARY KEY REFERENCES entries (id),
    workspace_id  INTEGER NOT NULL,
    revision      INTEGER NOT NULL,
    model         TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    vector        BLOB NOT NULL
);
CREATE INDEX entry_vectors_seq ON entry_vectors (workspace_id, seq);
