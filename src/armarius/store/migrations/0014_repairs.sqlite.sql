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
    id                       INTEGER PRIMARY KEY,
    workspace_id             INTEGER NOT NULL REFERENCES workspaces (id),
    session_id               INTEGER NOT NULL REFERENCES sessions (id),
    subject                  TEXT NOT NULL,
    conflict                 TEXT NOT NULL,
    alternatives             TEXT NOT NULL,
    status                   TEXT NOT NULL CHECK (status IN ('proposed', 'rejected', 'applying', 'pending_activation',
                                                             'active', 'superseded')),
    reformulation_requested  INTEGER NOT NULL DEFAULT 0,
    comment                  TEXT,
    chosen_option            TEXT,
    applied_revision         INTEGER,
    activation_deferred      INTEGER NOT NULL DEFAULT 0,
    snapshot                 TEXT,
    correction               TEXT,
    base_fingerprint         TEXT,
    result_fingerprint       TEXT,
    proposer_id              INTEGER NOT NULL REFERENCES principals (id),
    proposer                 TEXT NOT NULL,
    decided_by               TEXT,
    created_at               TEXT NOT NULL,
    updated_at               TEXT NOT NULL,
    CHECK (status NOT IN ('applying', 'pending_activation', 'active') OR chosen_option IS NOT NULL)
);
CREATE INDEX repairs_of_session ON repairs (workspace_id, session_id, id);
CREATE INDEX repairs_by_status ON repairs (workspace_id, status, id);

CREATE TABLE repair_events (
    workspace_id  INTEGER NOT NULL REFERENCES workspaces (id),
    repair_id     INTEGER NOT NULL REFERENCES repairs (id),
    seq           INTEGER NOT NULL,
    event         TEXT NOT NULL,
    status        TEXT NOT NULL,
    actor         TEXT NOT NULL,
    details       TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    PRIMARY KEY (workspace_id, repair_id, seq)
);

CREATE TABLE pending_operations (
    id            INTEGER PRIMARY KEY,
    workspace_id  INTEGER NOT NULL REFERENCES workspaces (id),
    kind          TEXT NOT NULL CHECK (kind IN ('mirror_receipt')),
    repair_id     INTEGER NOT NULL REFERENCES repairs (id),
    payload       TEXT NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT,
    created_at    TEXT NOT NULL,
    done_at       TEXT
);
CREATE INDEX pending_operations_open ON pending_operations (workspace_id, repair_id) WHERE done_at IS NULL;
