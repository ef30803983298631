-- Session Service schema, version 5: the expiry sweep.
--
-- Reads never needed it (session_status computes "expired" from
-- expires_at); the sweep records the state in the row, wakes the long
-- polls (NOTIFY 'expired:<id>' on session_events) and queues the
-- session.expired webhook event, once per session, on whatever node
-- runs it.

-- At most one session.expired event per session, whatever runs the
-- sweep and however often: a second one is skipped, not an error.
CREATE UNIQUE INDEX webhook_outbox_one_expired
    ON webhook_outbox (session_id) WHERE event_type = 'session.expired';

-- Marks at most p_batch due sessions (status <> 'expired', expires_at
-- passed) as expired, oldest first, in one transaction, and drops up to
-- p_batch Idempotency-Key rows past their 24 h (idempotency_purge).
--
-- swept:  how many it marked;
-- more:   the batch was full, so more may be due: run again at once;
-- ran:    false when another sweep holds the lock and nothing was done.
--
-- It never waits: the sweep lock is only tried
-- (pg_try_advisory_xact_lock, key "sesswept" as a bigint), so one
-- sweep at a time runs across all nodes and the others return at once;
-- rows that an upload or a complete holds are skipped (SKIP LOCKED) and
-- taken by the next run.  The due rows are found through the partial
-- index sessions_due_expiry, so a sweep with nothing due reads one
-- index page.
CREATE FUNCTION session_sweep(p_batch integer)
RETURNS TABLE (swept integer, more boolean, ran boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_batch    integer := greatest(coalesce(p_batch, 1), 1);
    v_count    integer := 0;
    v_session  sessions;
BEGIN
    IF NOT pg_try_advisory_xact_lock(8315179226771058804) THEN
        RETURN QUERY SELECT 0, false, false;
        RETURN;
    END IF;

    FOR v_session IN
        UPDATE sessions s SET status = 'expired'
          FROM (SELECT d.id
                  FROM sessions d
                 WHERE d.status <> 'expired' AND d.expires_at <= now()
                 ORDER BY d.expires_at
                 LIMIT v_batch
                   FOR UPDATE SKIP LOCKED) due
         WHERE s.id = due.id
        RETURNING s.*
    LOOP
        v_count := v_count + 1;

        PERFORM pg_notify('session_events',
                          'expired:' || v_session.id::text);

        -- completed or not (docs/api.md §10); completed_at stays
        IF v_session.delivery_mode = 'webhook' THEN
            INSERT INTO webhook_outbox (id, project_id, session_id,
                                        event_type, url, payload)
            SELECT e.id, v_session.project_id, v_session.id,
                   'session.expired',
                   v_session.webhook_url,
                   json_build_object('id', e.id,
                                     'type', 'session.expired',
                                     'created_at', session_ts(now()),
                                     'data', session_json(v_session)::json)
                   ::text
              FROM (SELECT gen_random_uuid() AS id) e
            ON CONFLICT (session_id) WHERE event_type = 'session.expired'
            DO NOTHING;
        END IF;
    END LOOP;

    -- Idempotency-Key answers past their 24 h go in the same run: the
    -- claim ignores them already, this only gives the space back
    PERFORM idempotency_purge(v_batch);

    RETURN QUERY SELECT v_count, v_count >= v_batch, true;
END
$$;
