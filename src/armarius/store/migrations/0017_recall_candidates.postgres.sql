-- Recall ranks at most a bounded number of candidates, so that a word found in a third of the
-- workspace costs what a word found in a thousand entries costs.
--
-- armarius_search_entries() ranked every entry matching the query: ts_rank reads each one's vector,
-- which is stored out of line (about 2 KB, compressed), so a common word at 100,000 entries (30,000
-- matches) took over 100 ms however few rows recall returned. Now it takes the first max_candidates
-- entries of the workspace that match and pass the filters, in the index's order (a GIN posting list
-- is in row order, so the bitmap scan hands them out in that order without reading a vector), and
-- ranks only those. Every candidate holds all the words of an AND query, so a query that some entry
-- matches never comes back empty (and never falls back to "any word"); a query matching at most
-- max_candidates entries is ranked exactly as before. max_candidates NULL ranks every match, as
-- before (the duplicate check wants that, and so does a caller of the old four-argument form).
--
-- The function is PL/pgSQL now: its statement's plan is kept for the session, where an SQL
-- function's body was parsed and planned again on every call. The planner would take the first
-- rows of a LIMIT from a sequential scan, which tests the match against every vector it passes
-- (reading each): the function forbids sequential scans, and parallel ones, which would make the
-- candidates differ from one call to the next.

DROP FUNCTION armarius_search_entries(tsquery, integer, boolean, text[]);

CREATE FUNCTION armarius_search_entries(query tsquery, max_rows integer, curated_only boolean,
                                        required_tags text[], max_candidates integer DEFAULT NULL)
    RETURNS TABLE (entry_id bigint, rank real)
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off
    SET max_parallel_workers_per_gather = 0
    ROWS 10
    AS $$
    BEGIN
        RETURN QUERY
        SELECT candidate.entry_id, ts_rank(candidate.tsv, query)
        FROM (
            SELECT s.entry_id, s.tsv
            FROM public.entry_search s
            WHERE s.workspace_id = public.armarius_workspace()
              AND s.tsv @@ query
              AND (NOT curated_only OR EXISTS (
                    SELECT 1 FROM public.entries e
                    WHERE e.id = s.entry_id AND e.workspace_id = s.workspace_id AND e.curated_revision = e.revision))
              AND (cardinality(required_tags) = 0 OR cardinality(required_tags) = (
                    SELECT count(*) FROM public.entry_tags t
                    WHERE t.entry_id = s.entry_id AND t.workspace_id = s.workspace_id AND t.tag = ANY (required_tags)))
            LIMIT max_candidates
        ) candidate
        ORDER BY 2 DESC, 1
        LIMIT max_rows;
    END
    $$;

REVOKE ALL ON FUNCTION armarius_search_entries(tsquery, integer, boolean, text[], integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION armarius_search_entries(tsquery, integer, boolean, text[], integer) TO {app_role};
