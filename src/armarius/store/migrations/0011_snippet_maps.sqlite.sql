-- Where in a long entry its words are, so that recall's snippet reads only the parts of the body
-- that may hold a query word instead of searching the whole of it (an entry at the body limit
-- whose only hit is near its end was read through to its end on every recall).
--
-- entry_word_maps holds an entry's word map (memory.snippets.word_map): a Bloom filter per 4,096
-- characters of its body, which the application writes with each revision (none for a body of at
-- most two such pieces). Entries written earlier have none until their next revision: their
-- snippets are cut as before, by searching the body from its start. The maps have a table of their
-- own because SQLite stores a row's columns one after the other: a column after the body (and
-- after entries.search_body, often a near copy of it) is read by paging through them.

CREATE TABLE entry_word_maps (
    entry_id      INTEGER PRIMARY KEY REFERENCES entries (id),
    workspace_id  INTEGER NOT NULL,
    word_map      BLOB NOT NULL
);
