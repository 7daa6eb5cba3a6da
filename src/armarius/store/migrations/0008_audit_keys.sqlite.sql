-- Audit events are authenticated with an HMAC under a key kept outside the database (the data
-- folder's audit.key or ARMARIUS_AUDIT_KEY): key_id names the key, mac is the HMAC of the event's
-- hash. Events written before this migration keep NULL in both. They are legacy events: this
-- migration records how far each chain's legacy events go, and `armarius init` seals a chain
-- that still ends there by appending an authenticated event. Unauthenticated events appended
-- later are never sealed.

ALTER TABLE audit_events ADD COLUMN key_id TEXT;
ALTER TABLE audit_events ADD COLUMN mac TEXT;

CREATE TABLE audit_legacy_events (
    chain_id     INTEGER PRIMARY KEY,
    through_seq  INTEGER NOT NULL
);
INSERT INTO audit_legacy_events (chain_id, through_seq)
    SELECT workspace_id, max(seq) FROM audit_events GROUP BY workspace_id;
