-- Audit events are authenticated with an HMAC under a key kept outside the database (the data
-- folder's audit.key or ARMARIUS_AUDIT_KEY): key_id names the key, mac is the HMAC of the event's
-- hash. Events written before this migration keep NULL in both. They are legacy events: this
-- migration records how far each chain's legacy events go, and `armarius init` seals a chain
-- that still ends there by appending an authenticated event. Unauthenticated events appended
-- later are never sealed.

ALTER TABLE audit_events ADD COLUMN key_id text, ADD COLUMN mac text;

CREATE TABLE audit_legacy_events (
    chain_id     bigint PRIMARY KEY,
    through_seq  bigint NOT NULL
);

-- Every chain that exists, whatever workspace it claims. Row-level security hides other
-- workspaces' events from the server role, so `armarius audit verify` could never find a chain
-- forged under a workspace id that does not exist; a trigger running as the owner notes the id of
-- every chain an insert touches.
CREATE TABLE audit_chains (
    chain_id  bigint PRIMARY KEY
);

CREATE FUNCTION armarius_note_audit_chain() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM public.audit_chains WHERE chain_id = NEW.workspace_id) THEN
            INSERT INTO public.audit_chains (chain_id) VALUES (NEW.workspace_id) ON CONFLICT DO NOTHING;
        END IF;
        RETURN NULL;
    END
    $$;
REVOKE ALL ON FUNCTION armarius_note_audit_chain() FROM PUBLIC;

CREATE TRIGGER audit_events_chain AFTER INSERT OR UPDATE OF workspace_id ON audit_events
    FOR EACH ROW EXECUTE FUNCTION armarius_note_audit_chain();
CREATE TRIGGER audit_heads_chain AFTER INSERT OR UPDATE OF workspace_id ON audit_heads
    FOR EACH ROW EXECUTE FUNCTION armarius_note_audit_chain();

-- The chains and legacy events that exist already. Row-level security is forced on the owner
-- too, so lift it for these statements (inside the migration's transaction, which holds the
-- tables locked).
ALTER TABLE audit_events NO FORCE ROW LEVEL SECURITY;
ALTER TABLE audit_heads NO FORCE ROW LEVEL SECURITY;
INSERT INTO audit_chains (chain_id)
    SELECT workspace_id FROM audit_events UNION SELECT workspace_id FROM audit_heads;
INSERT INTO audit_legacy_events (chain_id, through_seq)
    SELECT workspace_id, max(seq) FROM audit_events GROUP BY workspace_id;
ALTER TABLE audit_events FORCE ROW LEVEL SECURITY;
ALTER TABLE audit_heads FORCE ROW LEVEL SECURITY;

-- The server role may read both lists, never change them.
REVOKE ALL ON audit_chains, audit_legacy_events FROM PUBLIC;
GRANT SELECT ON audit_chains, audit_legacy_events TO {app_role};
