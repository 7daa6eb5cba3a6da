-- Full-text search that can use its index under row-level security.
--
-- `tsvector @@ tsquery` is not leakproof, so PostgreSQL may not evaluate it before a table's
-- row-level security policy, and never uses the GIN index on an RLS table: every search would
-- scan the workspace. The search vectors therefore live in entry_search, a table the server role
-- cannot touch at all, kept by a trigger and read only through armarius_search_entries(), which
-- runs as the owner and admits only the transaction's workspace (the same armarius_workspace()
-- the policies use).

ALTER TABLE entries DROP COLUMN tsv;

DROP INDEX entry_tags_tag;
CREATE INDEX entry_tags_tag ON entry_tags (tag, workspace_id);
DROP INDEX entry_links_target;
CREATE INDEX entry_links_target ON entry_links (target_slug, workspace_id);

CREATE TABLE entry_search (
    entry_id      bigint PRIMARY KEY REFERENCES entries (id),
    workspace_id  bigint NOT NULL,
    tsv           tsvector NOT NULL
);
CREATE INDEX entry_search_tsv ON entry_search USING gin (tsv);
REVOKE ALL ON entry_search FROM PUBLIC;

-- Punctuation that PostgreSQL's parser would join words with (paths, hosts, e-mails, hyphens)
-- becomes a space, so words split as SQLite's FTS5 splits them.
CREATE FUNCTION armarius_entry_vector(slug text, title text, body text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE
    AS $$
        SELECT setweight(to_tsvector('simple', translate(slug, '/-', '  ')), 'A')
            || setweight(to_tsvector('simple', translate(title, '/.-_@:+\', '        ')), 'A')
            || setweight(to_tsvector('simple', translate(body, '/.-_@:+\', '        ')), 'B')
    $$;

CREATE FUNCTION armarius_index_entry() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        INSERT INTO public.entry_search (entry_id, workspace_id, tsv)
        VALUES (NEW.id, NEW.workspace_id, public.armarius_entry_vector(NEW.slug, NEW.title, NEW.body))
        ON CONFLICT (entry_id) DO UPDATE SET tsv = EXCLUDED.tsv;
        RETURN NULL;
    END
    $$;

CREATE TRIGGER entries_search AFTER INSERT OR UPDATE OF slug, title, body ON entries
    FOR EACH ROW EXECUTE FUNCTION armarius_index_entry();

INSERT INTO entry_search (entry_id, workspace_id, tsv)
    SELECT id, workspace_id, armarius_entry_vector(slug, title, body) FROM entries;

-- Ranked entry ids of the current workspace matching a query, optionally only curated entries and
-- only entries carrying every one of required_tags.
CREATE FUNCTION armarius_search_entries(query tsquery, max_rows integer, curated_only boolean, required_tags text[])
    RETURNS TABLE (entry_id bigint, rank real)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
        SELECT s.entry_id, ts_rank(s.tsv, query) AS rank
        FROM public.entry_search s
        WHERE s.workspace_id = public.armarius_workspace()
          AND s.tsv @@ query
          AND (NOT curated_only OR EXISTS (
                SELECT 1 FROM public.entries e
                WHERE e.id = s.entry_id AND e.workspace_id = s.workspace_id AND e.curated_revision = e.revision))
          AND (cardinality(required_tags) = 0 OR cardinality(required_tags) = (
                SELECT count(*) FROM public.entry_tags t
                WHERE t.entry_id = s.entry_id AND t.workspace_id = s.workspace_id AND t.tag = ANY (required_tags)))
        ORDER BY rank DESC, s.entry_id
        LIMIT max_rows
    $$;

REVOKE ALL ON FUNCTION armarius_search_entries(tsquery, integer, boolean, text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION armarius_index_entry() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION armarius_search_entries(tsquery, integer, boolean, text[]) TO {app_role};
