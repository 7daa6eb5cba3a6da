-- Secondary indexes that do not start with workspace_id: with them, SQLite's planner (which has
-- no statistics here) no longer picks them over the primary keys for per-entry tag and link work.

DROP INDEX entry_tags_tag;
CREATE INDEX entry_tags_tag ON entry_tags (tag, workspace_id);
DROP INDEX entry_links_target;
CREATE INDEX entry_links_target ON entry_links (target_slug, workspace_id);
