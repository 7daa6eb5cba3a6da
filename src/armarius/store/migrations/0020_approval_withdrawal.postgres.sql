-- A human may reject a proposal after approving it, as long as the approval was not used: a live
-- approval is then 'withdrawn' (its token is dead at once, its sealed copy goes), next to 'issued',
-- 'consumed', 'expired' and 'superseded'.

ALTER TABLE approvals DROP CONSTRAINT approvals_outcome_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_outcome_check
    CHECK (outcome IN ('issued', 'consumed', 'expired', 'superseded', 'withdrawn'));
