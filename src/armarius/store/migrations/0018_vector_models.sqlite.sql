-- Entry vectors name their model by a small number (vector_models) instead of its name on every
-- row: about 3 MB less for 100,000 vectors.

CREATE TABLE vector_models (
    id    INTEGER PRIMARY KEY,
    name  TEXT NOT NULL UNIQUE
);
INSERT INTO vector_models (name) SELECT DISTINCT model FROM entry_vectors ORDER BY model;

CREATE TABLE entry_vectors_0018 (
    entry_id      INTEGER PRIMARY KEY REFERENCES entries (id),
    workspace_id  INTEGER NOT NULL,
    seq           INTEGER NOT NULL,
    revision      INTEGER NOT NULL,
    model         INTEGER NOT NULL REFERENCES vector_models (id),
    vector        BLOB NOT NULL
);
INSERT INTO entry_vectors_0018 (entry_id, workspace_id, seq, revision, model, vector)
    SELECT v.entry_id, v.workspace_id, v.seq, v.revision, m.id, v.vector
    FROM entry_vectors v JOIN vector_models m ON m.name = v.model;
DROP TABLE entry_vectors;
ALTER TABLE entry_vectors_0018 RENAME TO entry_vectors;
CREATE INDEX entry_vectors_seq ON entry_vectors (workspace_id, seq);
