-- Session Service schema, version 14: the workers' webhook dispatchers
-- are woken only when an event was queued.
--
-- Version 8's trigger ran once for every INSERT statement into
-- webhook_outbox, also for one that inserted nothing.  The statements of
-- an upload, a completion and the expiry sweep queue their event with
-- INSERT ... SELECT ... WHERE the session is a webhook session, so every
-- upload and completion of a long_poll session woke every worker of
-- every node, and each of them claimed due rows for nothing: two
-- statements more per write with two workers, and a wake-up of each
-- LISTEN backend (docs/benchmarks.md, "Cost per request").  The trigger
-- now reads the statement's rows (a transition table) and notifies only
-- when there are some.
--
-- Numbers 12 and 13 are taken by work in progress on other branches;
-- sessionctl applies every embedded migration above the database's
-- version in order, so a gap is harmless (src/sql/README.md).  An older
-- module is not affected: it listens on the same channel, and hears it
-- less often.

CREATE OR REPLACE FUNCTION webhook_outbox_queued() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM queued) THEN
        PERFORM pg_notify('session_webhooks', '');
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER webhook_outbox_queued ON webhook_outbox;

CREATE TRIGGER webhook_outbox_queued
    AFTER INSERT ON webhook_outbox
    REFERENCING NEW TABLE AS queued
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_outbox_queued();
