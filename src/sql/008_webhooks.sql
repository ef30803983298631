-- Session Service schema, version 8: webhook delivery.
--
-- Every worker of every node delivers outbox rows.  A worker claims due
-- rows with FOR UPDATE SKIP LOCKED and, in the same statement, leases
-- them: attempts + 1, and claimed_until = next_attempt_at = now() + the
-- lease, which outlasts session_webhook_timeout and the statement that
-- records the outcome.  No other sender takes a leased row; if its
-- sender dies, the row is due again when the lease ends, and another
-- sender takes it (at-least-once).  attempts doubles as the lease's
-- token: an outcome is recorded only by the sender whose claim made the
-- current attempts value.

-- when the current lease ends; NULL when no sender holds the row
ALTER TABLE webhook_outbox ADD COLUMN claimed_until timestamptz;

-- A new row wakes every worker at once (LISTEN session_webhooks), so
-- the first attempt does not wait for a timer.  One notification per
-- statement: the expiry sweep queues hundreds of rows in one.
CREATE FUNCTION webhook_outbox_queued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('session_webhooks', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_outbox_queued
    AFTER INSERT ON webhook_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_outbox_queued();

-- "sessionctl webhook list" by session, and the cascade from sessions
CREATE INDEX webhook_outbox_session ON webhook_outbox (session_id);
