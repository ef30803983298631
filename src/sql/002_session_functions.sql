-- Session Service schema, version 2: the statements behind the sessions
-- endpoints, as functions, so that each API operation is one
-- parameterised statement and one transaction.

-- RFC 3339 UTC with seconds
CREATE FUNCTION session_ts(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
$$;

-- status as clients see it: expired once now >= expires_at
CREATE FUNCTION session_status(s sessions) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN s.status <> 'expired' AND now() >= s.expires_at
                THEN 'expired' ELSE s.status END
$$;

CREATE FUNCTION session_json(s sessions) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT json_build_object(
        'id', s.id,
        'project_id', s.project_id,
        'delivery_mode', s.delivery_mode,
        'webhook_url', s.webhook_url,
        'status', session_status(s),
        'image_count', s.image_count,
        'acknowledged_count', s.acknowledged_count,
        'created_at', session_ts(s.created_at),
        'expires_at', session_ts(s.expires_at),
        'completed_at', session_ts(s.completed_at))::text
$$;

-- microseconds since the epoch: the exact sort key the list cursor holds
CREATE FUNCTION session_us(t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT (extract(epoch FROM t) * 1000000)::bigint
$$;

-- outcome: 'ok' with the session, 'feature' (plan lacks the delivery
-- mode) or 'quota' (monthly quota used up).  The quota is counted in the
-- same transaction as the insert, under the usage row's lock, so that
-- concurrent creates never exceed it.
CREATE FUNCTION session_create(p_project uuid, p_mode text, p_url text,
                               p_ttl integer)
RETURNS TABLE (outcome text, body text, id uuid)
LANGUAGE plpgsql AS $$
DECLARE
    -- one instant for created_at and expires_at: expires_in exactly
    v_now       timestamptz := clock_timestamp();
    v_account   uuid;
    v_quota     integer;
    v_features  text[];
    v_month     date;
    v_session   sessions;
BEGIN
    SELECT a.id, pl.monthly_quota, pl.features
      INTO v_account, v_quota, v_features
      FROM projects p
      JOIN accounts a ON a.id = p.account_id
      JOIN plans pl ON pl.name = a.plan
     WHERE p.id = p_project;

    IF NOT FOUND OR NOT (p_mode = ANY (v_features)) THEN
        RETURN QUERY SELECT 'feature'::text, NULL::text, NULL::uuid;
        RETURN;
    END IF;

    v_month := date_trunc('month', now() AT TIME ZONE 'UTC')::date;

    IF v_quota = 0 THEN
        RETURN QUERY SELECT 'quota'::text, NULL::text, NULL::uuid;
        RETURN;
    END IF;

    INSERT INTO monthly_usage AS u (account_id, month, sessions_created)
    VALUES (v_account, v_month, 1)
    ON CONFLICT (account_id, month) DO UPDATE
        SET sessions_created = u.sessions_created + 1
        WHERE v_quota IS NULL OR u.sessions_created < v_quota;

    IF NOT FOUND THEN
        RETURN QUERY SELECT 'quota'::text, NULL::text, NULL::uuid;
        RETURN;
    END IF;

    INSERT INTO sessions (project_id, delivery_mode, webhook_url,
                          created_at, expires_at)
    VALUES (p_project, p_mode, p_url, v_now,
            v_now + make_interval(secs => p_ttl))
    RETURNING * INTO v_session;

    RETURN QUERY SELECT 'ok'::text, session_json(v_session), v_session.id;
END
$$;

-- outcome: 'ok', 'missing' (no such session), 'forbidden' (another
-- project's), 'expired'
CREATE FUNCTION session_get(p_project uuid, p_id uuid)
RETURNS TABLE (outcome text, body text)
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN s.id IS NULL THEN 'missing'
                WHEN s.project_id <> p_project THEN 'forbidden'
                WHEN session_status(s) = 'expired' THEN 'expired'
                ELSE 'ok' END,
           session_json(s)
      FROM (SELECT 1) one
      LEFT JOIN sessions s ON s.id = p_id
$$;

-- completing a completed session answers 'ok' again (idempotent)
CREATE FUNCTION session_complete(p_project uuid, p_id uuid)
RETURNS TABLE (outcome text, body text)
LANGUAGE plpgsql AS $$
DECLARE
    v_session  sessions;
BEGIN
    SELECT * INTO v_session FROM sessions WHERE id = p_id FOR UPDATE;

    IF NOT FOUND THEN
        RETURN QUERY SELECT 'missing'::text, NULL::text;
        RETURN;
    END IF;

    IF v_session.project_id <> p_project THEN
        RETURN QUERY SELECT 'forbidden'::text, NULL::text;
        RETURN;
    END IF;

    IF session_status(v_session) = 'expired' THEN
        RETURN QUERY SELECT 'expired'::text, NULL::text;
        RETURN;
    END IF;

    IF v_session.status = 'open' THEN
        UPDATE sessions SET status = 'completed', completed_at = now()
         WHERE id = p_id
        RETURNING * INTO v_session;

        PERFORM pg_notify('session_events', 'completed:' || p_id::text);

        IF v_session.delivery_mode = 'webhook' THEN
            INSERT INTO webhook_outbox (id, project_id, session_id,
                                        event_type, url, payload)
            SELECT e.id, v_session.project_id, v_session.id,
                   'session.completed',
                   v_session.webhook_url,
                   json_build_object('id', e.id,
                                     'type', 'session.completed',
                                     'created_at', session_ts(now()),
                                     'data', session_json(v_session)::json)
                   ::text
              FROM (SELECT gen_random_uuid() AS id) e;
        END IF;
    END IF;

    RETURN QUERY SELECT 'ok'::text, session_json(v_session);
END
$$;

-- one page of a project's sessions, newest first, after the cursor
-- (created_at in microseconds, id); p_limit rows at most
CREATE FUNCTION session_list(p_project uuid, p_status text,
                             p_after_us bigint, p_after_id uuid,
                             p_limit integer)
RETURNS TABLE (body text, created_us bigint, id uuid)
LANGUAGE sql STABLE AS $$
    SELECT session_json(s), session_us(s.created_at), s.id
      FROM sessions s
     WHERE s.project_id = p_project
       AND (p_status IS NULL OR session_status(s) = p_status)
       AND (p_after_us IS NULL
            OR (s.created_at, s.id)
               < (timestamptz 'epoch' + p_after_us * interval '1 microsecond',
                  p_after_id))
     ORDER BY s.created_at DESC, s.id DESC
     LIMIT p_limit
$$;
