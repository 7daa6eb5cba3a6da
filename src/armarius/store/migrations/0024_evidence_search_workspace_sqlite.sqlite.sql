-- SQLite's recall looks for any active evidence unit of the workspace before it searches them
-- (evidence.queries.search): most workspaces have none, and a ranked FTS5 search costs six times
-- the look. This index keeps the look one step however many units other workspaces hold (without it
-- the look reads the rows of every other workspace's units). PostgreSQL has had it since 0013.

CREATE INDEX evidence_search_workspace ON evidence_search (workspace_id);
