-- Two things an approval and an operation now remember.
--
-- An approval is 'revoked' when its approver lost the right to approve in the workspace (another
-- role, or no membership) while it was unused: next to 'issued', 'consumed', 'expired',
-- 'superseded' and 'withdrawn'.
--
-- An operation belongs to the principal that made it (principal_id): only that principal's retry
-- replays it. An existing operation was made by the call that wrote its draft, whose created_by
-- names the principal ('<kind>:<name>'; names are unique and never change); an operation no draft
-- names stays without one and is replayed for nobody.

ALTER TABLE approvals DROP CONSTRAINT approvals_outcome_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_outcome_check
    CHECK (outcome IN ('issued', 'consumed', 'expired', 'superseded', 'withdrawn', 'revoked'));

ALTER TABLE operations ADD COLUMN principal_id bigint REFERENCES principals (id);

-- The backfill runs as the owner, whom FORCE would subject to the workspace policies (and so show
-- no rows at all); lifted for this transaction only.
ALTER TABLE operations NO FORCE ROW LEVEL SECURITY;
ALTER TABLE drafts NO FORCE ROW LEVEL SECURITY;

UPDATE operations o SET principal_id = (
    SELECT min(p.id) FROM drafts d JOIN principals p ON d.created_by = p.kind || ':' || p.name
    WHERE d.workspace_id = o.workspace_id AND d.operation_id = o.operation_id);

ALTER TABLE operations FORCE ROW LEVEL SECURITY;
ALTER TABLE drafts FORCE ROW LEVEL SECURITY;
