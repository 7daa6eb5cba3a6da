-- Recall by meaning finds active evidence units too: one vector per unit, of its active revision,
-- written in the transaction that activates it (memory.vectors, kind UNITS), laid out as
-- entry_vectors and numbered per workspace on its own. The vectors of units activated before this
-- migration are made by `armarius init` (or `armarius memory reindex`); until then recall finds those
-- units by their words alone.

CREATE TABLE unit_vectors (
    unit_id       INTEGER PRIMARY KEY REFERENCES evidence_units (id),
    workspace_id  INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    revision      INTEGER NOT NULL,
    model         INTEGER NOT NULL REFERENCES vector_models (id),
    vector        BLOB NOT NULL
);
CREATE INDEX unit_vectors_seq ON unit_vectors (workspace_id, seq);
