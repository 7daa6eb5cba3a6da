-- The words an entry is found by: its body with each word's repetitions past the 255th left out.
--
-- FTS5's bm25() reads every position of every matching word of a row, so an entry at the body
-- limit repeating one word 21,000 times cost about a millisecond of ranking on each search for that
-- word (PostgreSQL keeps at most 255 positions of a word per document anyway). entries.search_body
-- holds the text the index is given when it differs from the body (the application writes it,
-- memory.queries.search_body; NULL: the body itself), and the index reads its content through the
-- view entries_search, so that a 'rebuild' or an 'integrity-check' sees what was indexed.
-- Entries written earlier keep their full index until their next revision.

ALTER TABLE entries ADD COLUMN search_body TEXT;

CREATE VIEW entries_search AS SELECT id, slug, title, coalesce(search_body, body) AS body FROM entries;

DROP TRIGGER entries_fts_insert;
DROP TRIGGER entries_fts_update;
DROP TRIGGER entries_fts_delete;
DROP TABLE entries_fts;

CREATE VIRTUAL TABLE entries_fts USING fts5 (
    slug, title, body, content = 'entries_search', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER entries_fts_insert AFTER INSERT ON entries BEGIN
    INSERT INTO entries_fts (rowid, slug, title, body)
        VALUES (new.id, new.slug, new.title, coalesce(new.search_body, new.body));
END;

CREATE TRIGGER entries_fts_update AFTER UPDATE OF slug, title, body, search_body ON entries BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, slug, title, body)
        VALUES ('delete', old.id, old.slug, old.title, coalesce(old.search_body, old.body));
    INSERT INTO entries_fts (rowid, slug, title, body)
        VALUES (new.id, new.slug, new.title, coalesce(new.search_body, new.body));
END;

CREATE TRIGGER entries_fts_delete AFTER DELETE ON entries BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, slug, title, body)
        VALUES ('delete', old.id, old.slug, old.title, coalesce(old.search_body, old.body));
END;

INSERT INTO entries_fts (entries_fts) VALUES ('rebuild');
