-- Archive repairs: an agent's proposal of one to five complete alternatives for archived knowledge
-- (an entry or an evidence unit) that conflicts with what a session observed; a human's choice, and
-- its application, recoverable from the receipt.
--
-- repairs holds the current state of each proposal, its session's subject (the decision's context)
-- and, per alternative (JSON), the target and the revision it was prepared against, the complete
-- current content beside the complete resulting one.
-- repair_events is the status history (the receipt is the repair row and its events): a record, the
-- server may add to it, never change or remove it. pending_operations holds follow-up work that can
-- fail after a transition committed (writing the receipt's mirror file): retried until done.

CREATE TABLE repairs (
    id                       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id             bigint NOT NULL REFERENCES workspaces (id),
    session_id               bigint NOT NULL REFERENCES sessions (id),
    subject                  text NOT NULL,
    conflict                 text NOT NULL,
    alternatives             text NOT NULL,
    status                   text NOT NULL CHECK (status IN ('proposed', 'rejected', 'applying', 'pending_activation',
                                                             'active', 'superseded')),
    reformulation_requested  boolean NOT NULL DEFAULT false,
    comment                  text,
    chosen_option            text,
    applied_revision         integer,
    activation_deferred      boolean NOT NULL DEFAULT false,
    snapshot                 text,
    correction               text,
    base_fingerprint         text,
    result_fingerprint       text,
    proposer_id              bigint NOT NULL REFERENCES principals (id),
    proposer                 text NOT NULL,
    decided_by               text,
    created_at               text NOT NULL,
    updated_at               text NOT NULL,
    CHECK (status NOT IN ('applying', 'pending_activation', 'active') OR chosen_option IS NOT NULL)
);
CREATE INDEX repairs_of_session ON repairs (workspace_id, session_id, id);
CREATE INDEX repairs_by_status ON repairs (workspace_id, status, id);

CREATE TABLE repair_events (
    workspace_id  bigint NOT NULL REFERENCES workspaces (id),
    repair_id     bigint NOT NULL REFERENCES repairs (id),
    seq           integer NOT NULL,
    event         text NOT NULL,
    status        text NOT NULL,
    actor         text NOT NULL,
    details       text NOT NULL,
    created_at    text NOT NULL,
    PRIMARY KEY (workspace_id, repair_id, seq)
);

CREATE TABLE pending_operations (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id  bigint NOT NULL REFERENCES workspaces (id),
    kind          text NOT NULL CHECK (kind IN ('mirror_receipt')),
    repair_id     bigint NOT NULL REFERENCES repairs (id),
    payload       text NOT NULL,
    attempts      integer NOT NULL DEFAULT 0,
    last_error    text,
    created_at    text NOT NULL,
    done_at       text
);
CREATE INDEX pending_operations_open ON pending_operations (workspace_id, repair_id) WHERE done_at IS NULL;

ALTER TABLE repairs ENABLE ROW LEVEL SECURITY;
ALTER TABLE repairs FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON repairs
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
ALTER TABLE repair_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE repair_events FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON repair_events
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());
ALTER TABLE pending_operations ENABLE ROW LEVEL SECURITY;
ALTER TABLE pending_operations FORCE ROW LEVEL SECURITY;
CREATE POLICY workspace_isolation ON pending_operations
    USING (workspace_id = armarius_workspace()) WITH CHECK (workspace_id = armarius_workspace());

GRANT SELECT, INSERT, UPDATE ON repairs, pending_operations TO {app_role};
-- The status history is a record: appended, never changed or removed by the server.
GRANT SELECT, INSERT ON repair_events TO {app_role};
