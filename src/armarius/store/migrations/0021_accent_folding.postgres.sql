-- Recall folds accents on PostgreSQL too, as SQLite's index does ('muller' finds 'Müller').
--
-- The words of entries and evidence units are indexed, and queries parsed, with the text search
-- configuration armarius_words: the 'simple' configuration whose words that may hold letters
-- other than ASCII go through the unaccent extension's dictionary first. unaccent ships with
-- PostgreSQL (contrib) and is a trusted extension, so the database's owner may create it; where it
-- cannot be created, armarius_words is 'simple' unchanged and accents are not folded (docs/memory.md).
-- The extension's dictionary works on each word the parser found, so it costs little at a write
-- (a 64 KiB body of accented text: 2.5 ms, where folding with translate() cost 139 ms), and a
-- query's words are folded by the same configuration, whatever the folding turns them into.

DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS unaccent;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'the unaccent extension cannot be created (%): recall will not fold accents', SQLERRM;
END
$$;

CREATE TEXT SEARCH CONFIGURATION armarius_words (COPY = pg_catalog.simple);

DO $$
DECLARE
    home text := (SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
                  WHERE e.extname = 'unaccent');
BEGIN
    IF home IS NOT NULL THEN
        EXECUTE format('ALTER TEXT SEARCH CONFIGURATION armarius_words ALTER MAPPING FOR '
                       'word, numword, hword, numhword, hword_part, hword_numpart '
                       'WITH %I.unaccent, pg_catalog.simple', home);
    END IF;
END
$$;

-- Punctuation that PostgreSQL's parser would join words with (paths, hosts, e-mails, hyphens)
-- becomes a space, so words split as SQLite's FTS5 splits them (as before).
CREATE OR REPLACE FUNCTION armarius_entry_vector(slug text, title text, body text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE
    AS $$
        SELECT setweight(to_tsvector('public.armarius_words', translate(slug, '/-', '  ')), 'A')
            || setweight(to_tsvector('public.armarius_words', translate(title, '/.-_@:+\', '        ')), 'A')
            || setweight(to_tsvector('public.armarius_words', translate(body, '/.-_@:+\', '        ')), 'B')
    $$;

-- The vectors stored already, made again with the folding (row-level security is forced on the
-- owner too: lifted for these statements, inside the migration's transaction).
ALTER TABLE entries NO FORCE ROW LEVEL SECURITY;
UPDATE entry_search s SET tsv = armarius_entry_vector(e.slug, e.title, coalesce(e.search_body, e.body))
    FROM entries e WHERE e.id = s.entry_id;
ALTER TABLE entries FORCE ROW LEVEL SECURITY;

ALTER TABLE evidence_search NO FORCE ROW LEVEL SECURITY;
UPDATE evidence_search SET search_body = search_body;  -- its tsv is generated: computed again
ALTER TABLE evidence_search FORCE ROW LEVEL SECURITY;
