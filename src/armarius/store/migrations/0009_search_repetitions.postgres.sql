-- The words an entry is found by: its body with each word's repetitions past the 255th left out.
--
-- PostgreSQL keeps at most 255 positions of a word per document anyway; SQLite's FTS5 does not,
-- and its bm25() reads every one (see the SQLite version of this migration). Both engines index
-- the same text: entries.search_body when the application wrote one (memory.queries.search_body),
-- else the body. Entries written earlier keep their vectors until their next revision.

ALTER TABLE entries ADD COLUMN search_body text;

CREATE OR REPLACE FUNCTION armarius_index_entry() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        INSERT INTO public.entry_search (entry_id, workspace_id, tsv)
        VALUES (NEW.id, NEW.workspace_id,
                public.armarius_entry_vector(NEW.slug, NEW.title, coalesce(NEW.search_body, NEW.body)))
        ON CONFLICT (entry_id) DO UPDATE SET tsv = EXCLUDED.tsv;
        RETURN NULL;
    END
    $$;

DROP TRIGGER entries_search ON entries;
CREATE TRIGGER entries_search AFTER INSERT OR UPDATE OF slug, title, body, search_body ON entries
    FOR EACH ROW EXECUTE FUNCTION armarius_index_entry();
