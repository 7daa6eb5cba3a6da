-- Where in a long entry its words are, so that recall's snippet reads only the parts of the body
-- that may hold a query word instead of searching the whole of it (an entry at the body limit
-- whose only hit is near its end was read through to its end on every recall).
--
-- entry_word_maps holds an entry's word map (memory.snippets.word_map): a Bloom filter per 4,096
-- characters of its body, which the application writes with each revision (none for a body of at
-- most two such pieces). Entries written earlier have none until their next revision: their
-- snippets are cut as before, by searching the body from its start. Bloom filters do not
-- compress: the column is stored as it is.

CREATE TABLE entry_word_maps (
    entry_id      bigint PRIMARY KEY REFERENCES entries (id),
    workspace_id  bigint NOT NULL,
    word_map      bytea NOT NULL
);
ALTER TABLE entry_word_maps ALTER COLUMN word_map SET STORAGE EXTERNAL;
ALTER TABLE entry_word_maps ENABLE ROW LEVEL SECURITY;
ALTER TABLE entry_word_maps FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON entry_word_maps
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
GRANT SELECT, INSERT, UPDATE, DELETE ON entry_word_maps TO {app_role};

-- Recall reads the bodies of its results whole, and unpacking them cost more than sending them:
-- PostgreSQL's default compression (pglz) takes about 0.3 ms to unpack 64 KiB of prose (ten
-- entries at the body limit cost recall 3 ms), and even LZ4 is slower than no compression at all,
-- on prose and much more on repetitive text. Bodies longer than about 2 KB are stored out of line
-- uncompressed from now on (the revisions keep theirs compressed), and the bodies already
-- compressed are stored again: as the owner, whom FORCE would subject to the workspace policies,
-- so it is lifted for this transaction; the search trigger is held, as the words do not change.
ALTER TABLE entries ALTER COLUMN body SET STORAGE EXTERNAL;
ALTER TABLE entries NO FORCE ROW LEVEL SECURITY;
ALTER TABLE entries DISABLE TRIGGER entries_search;
UPDATE entries SET body = body || '' WHERE pg_column_size(body) < octet_length(body);
ALTER TABLE entries ENABLE TRIGGER entries_search;
ALTER TABLE entries FORCE ROW LEVEL SECURITY;
