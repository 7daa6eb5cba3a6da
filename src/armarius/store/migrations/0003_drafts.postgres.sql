-- Drafts written only with a human approval bound to their exact content.

CREATE TABLE draft_proposals (
    id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id           bigint NOT NULL REFERENCES workspaces (id),
    slug                   text NOT NULL,
    title                  text NOT NULL,
    text                   text NOT NULL,
    fingerprint            text NOT NULL,
    proposer_id            bigint NOT NULL REFERENCES principals (id),
    proposed_by            text NOT NULL,
    collection_public_key  text,
    status                 text NOT NULL CHECK (status IN ('pending', 'approved', 'rejected')),
    decided_by             text,
    decided_at             text,
    decision_note          text,
    created_at             text NOT NULL
);
CREATE INDEX draft_proposals_status ON draft_proposals (workspace_id, status);

-- An approval token exists only as its SHA-256 digest; sealed_token is the token encrypted to the
-- proposing agent's collection key (only that agent can open it), cleared once collected.
CREATE TABLE approvals (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id   bigint NOT NULL REFERENCES workspaces (id),
    kind           text NOT NULL,
    token_digest   text NOT NULL UNIQUE,
    fingerprint    text NOT NULL,
    proposal_id    bigint REFERENCES draft_proposals (id),
    approver_id    bigint NOT NULL REFERENCES principals (id),
    approved_by    text NOT NULL,
    issued_at      text NOT NULL,
    expires_at     text NOT NULL,
    outcome        text NOT NULL CHECK (outcome IN ('issued', 'consumed', 'expired')),
    used_at        text,
    operation_id   text,
    sealed_token   text
);

CREATE TABLE drafts (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id       bigint NOT NULL REFERENCES workspaces (id),
    slug               text NOT NULL,
    title              text NOT NULL,
    text               text NOT NULL,
    fingerprint        text NOT NULL,
    approval_id        bigint NOT NULL UNIQUE REFERENCES approvals (id),
    operation_id       text NOT NULL,
    created_by         text NOT NULL,
    created_at         text NOT NULL,
    promoted_by        text,
    promoted_at        text,
    promoted_revision  integer,
    UNIQUE (workspace_id, slug)
);

CREATE TABLE operations (
    workspace_id  bigint NOT NULL,
    operation_id  text NOT NULL,
    kind          text NOT NULL,
    fingerprint   text NOT NULL,
    result        text NOT NULL,
    created_at    text NOT NULL,
    PRIMARY KEY (workspace_id, operation_id)
);

ALTER TABLE draft_proposals ENABLE ROW LEVEL SECURITY;
ALTER TABLE draft_proposals FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON draft_proposals
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
ALTER TABLE approvals ENABLE ROW LEVEL SECURITY;
ALTER TABLE approvals FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON approvals
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
ALTER TABLE drafts ENABLE ROW LEVEL SECURITY;
ALTER TABLE drafts FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON drafts
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
ALTER TABLE operations ENABLE ROW LEVEL SECURITY;
ALTER TABLE operations FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON operations
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());

GRANT SELECT, INSERT, UPDATE ON draft_proposals, approvals, drafts TO {app_role};
GRANT SELECT, INSERT ON operations TO {app_role};
