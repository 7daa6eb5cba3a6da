-- armarius_search_entries() returns at most its max_rows (recall's limit, 10 by default), but a
-- set-returning function is estimated at 1,000 rows, so on small workspaces the planner joined
-- its result to entries with a full scan of entries. Say what it returns.
ALTER FUNCTION armarius_search_entries(tsquery, integer, boolean, text[]) ROWS 10;
