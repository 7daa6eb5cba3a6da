-- Approvals become a lifecycle a human can restart. An approval is 'issued' (live), 'consumed'
-- (it created its draft), 'expired' (its lifetime passed unused) or 'superseded' (a human approved
-- the same proposal again while it was unused: the old token is dead). The sealed copy for the
-- proposing agent is kept until the token is consumed, expires or is superseded, so that the
-- hand-over can be repeated with the same collection key; collected_at records the first
-- hand-over. slug names the approved content (for the audit log of expiries).

ALTER TABLE approvals ADD COLUMN slug text, ADD COLUMN collected_at text;
ALTER TABLE approvals DROP CONSTRAINT approvals_outcome_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_outcome_check
    CHECK (outcome IN ('issued', 'consumed', 'expired', 'superseded'));

-- The backfill runs as the owner, whom FORCE would subject to the workspace policies (and so show
-- no rows at all); lifted for this transaction only.
ALTER TABLE approvals NO FORCE ROW LEVEL SECURITY;
ALTER TABLE draft_proposals NO FORCE ROW LEVEL SECURITY;
ALTER TABLE drafts NO FORCE ROW LEVEL SECURITY;
ALTER TABLE audit_events NO FORCE ROW LEVEL SECURITY;

-- Earlier versions deleted the sealed copy at the first hand-over; the audit log's
-- approval.collected event (canonical JSON, so its text is known exactly) says when that was.
UPDATE approvals a SET
    slug = coalesce((SELECT p.slug FROM draft_proposals p WHERE p.id = a.proposal_id),
                    (SELECT d.slug FROM drafts d WHERE d.approval_id = a.id)),
    collected_at = (SELECT min(e.at) FROM audit_events e
                     WHERE e.workspace_id = a.workspace_id AND e.action = 'approval.collected'
                       AND e.details = '{"approval":' || a.id || ',"proposal":' || a.proposal_id || '}');

ALTER TABLE approvals FORCE ROW LEVEL SECURITY;
ALTER TABLE draft_proposals FORCE ROW LEVEL SECURITY;
ALTER TABLE drafts FORCE ROW LEVEL SECURITY;
ALTER TABLE audit_events FORCE ROW LEVEL SECURITY;

CREATE INDEX approvals_of_proposal ON approvals (workspace_id, proposal_id, id);
-- Live approvals by expiry: the sweep that marks them expired reads only these.
CREATE INDEX approvals_due ON approvals (workspace_id, expires_at) WHERE outcome = 'issued';
