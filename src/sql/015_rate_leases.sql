-- Session Service schema, version 15: rate limits that hold across nodes
-- (session_limit_scope cluster, docs/decisions.md (qa)).
--
-- A key's budget for a class and a one-minute window is leased to the
-- nodes in blocks from one row: the row holds the total leased, and a
-- lease never takes it past the limit, so whatever the nodes do (start,
-- stop, die, lose their connection) the requests they admit in a window
-- never exceed the limit.  A node admits from its block in its shared
-- memory and asks for the next one when half of it is spent; what it
-- holds and does not use is lost when the window ends (under-admission,
-- never over-admission).  Nothing here runs in node-local mode (the
-- default): the table stays empty.
--
-- Numbers 12 and 13 are taken by work on other branches; a gap is
-- harmless (src/sql/README.md).

-- minute: the window, minutes since 1970 UTC (the node's clock);
-- key_hash: SHA-256 of the key, as api_keys has it; class: 0 create,
-- 1 list, 2 other; granted: leased to all nodes so far; given: the last
-- lease; nodes: the ids of the nodes that took a lease in the window.
-- The window leads the key so that the sweep deletes old windows by a
-- range of the primary key.  Rows change often and only their unindexed
-- columns: room on the page keeps the updates HOT.
CREATE TABLE rate_leases (
    minute    integer  NOT NULL,
    key_hash  bytea    NOT NULL,
    class     smallint NOT NULL,
    granted   integer  NOT NULL,
    given     integer  NOT NULL,
    nodes     bigint[] NOT NULL,
    PRIMARY KEY (minute, key_hash, class)
) WITH (fillfactor = 70);

-- One lease: at most p_want of the window's budget p_limit to node
-- p_node, and never more than what is left, nor more than an equal share
-- of what is left among the nodes that took a lease in the window (at
-- least 1), so that near the end of the budget the nodes hold about as
-- much as one another and a key spread evenly over them is refused
-- nowhere before its limit is reached.  Returns (leased, total, nodes):
-- the lease, the window's total after it and the nodes that leased in
-- the window; no row when the budget is leased out already (or p_limit
-- is lower than what was leased under a higher limit).  The row's lock
-- orders concurrent leases of one key.
CREATE FUNCTION session_rate_lease(p_key bytea, p_class integer,
                                   p_minute integer, p_want integer,
                                   p_limit integer, p_node bigint)
RETURNS TABLE (leased integer, total integer, nodes integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_want  integer := greatest(coalesce(p_want, 1), 1);
BEGIN
    RETURN QUERY
    INSERT INTO rate_leases AS l (minute, key_hash, class, granted, given,
                                  nodes)
    VALUES (p_minute, p_key, p_class, least(v_want, p_limit),
            least(v_want, p_limit), ARRAY[p_node])
    ON CONFLICT (minute, key_hash, class) DO UPDATE
       SET given = least(v_want, p_limit - l.granted,
                         greatest(1, (p_limit - l.granted
                                      + cardinality(l.nodes)
                                      + (p_node <> ALL (l.nodes))::integer
                                      - 1)
                                     / (cardinality(l.nodes)
                                        + (p_node <> ALL (l.nodes))::integer))),
           granted = l.granted
                     + least(v_want, p_limit - l.granted,
                             greatest(1, (p_limit - l.granted
                                          + cardinality(l.nodes)
                                          + (p_node <> ALL (l.nodes))::integer
                                          - 1)
                                         / (cardinality(l.nodes)
                                            + (p_node <> ALL (l.nodes))
                                              ::integer))),
           nodes = CASE WHEN p_node = ANY (l.nodes)
                          OR cardinality(l.nodes) >= 64
                        THEN l.nodes
                        ELSE l.nodes || p_node END
     WHERE l.granted < p_limit
    RETURNING l.given, l.granted, cardinality(l.nodes);
END
$$;

-- session_sweep of version 5, which now also drops the lease rows of
-- windows more than five minutes old (at most ten times p_batch per
-- run), under the same lock: one node at a time.
CREATE OR REPLACE FUNCTION session_sweep(p_batch integer)
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

    -- lease rows of windows that are over (session_limit_scope cluster)
    DELETE FROM rate_leases
     WHERE (minute, key_hash, class) IN (
           SELECT o.minute, o.key_hash, o.class
             FROM rate_leases o
            WHERE o.minute < floor(extract(epoch FROM now()) / 60)::integer
                             - 5
            LIMIT v_batch * 10
              FOR UPDATE SKIP LOCKED);

    RETURN QUERY SELECT v_count, v_count >= v_batch, true;
END
$$;
