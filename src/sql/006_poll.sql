-- Session Service schema, version 6: the statement behind the long poll,
-- as a function, so that each read of a poll is one parameterised
-- statement.  The worker calls it when the poll arrives and again after
-- every wake-up (a NOTIFY on session_events is only a hint).

-- outcome: the session's 'missing', 'forbidden' or 'expired';
-- 'acknowledged_all' when the session is completed and no image waits for an
-- acknowledgement (none at all included); else 'ok' with
-- {"session": {...}, "images": [...]}: the unacknowledged images, oldest
-- first (sequence), at most p_limit, and their number in images (0: the
-- poll has nothing to deliver yet).
CREATE FUNCTION session_poll(p_project uuid, p_session uuid,
                             p_limit integer)
RETURNS TABLE (outcome text, body text, images integer)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_session  sessions;
    v_images   text;
    v_count    integer;
BEGIN
    SELECT * INTO v_session FROM sessions s WHERE s.id = p_session;

    IF NOT FOUND THEN
        RETURN QUERY SELECT 'missing'::text, NULL::text, NULL::integer;
        RETURN;
    END IF;

    IF v_session.project_id <> p_project THEN
        RETURN QUERY SELECT 'forbidden'::text, NULL::text, NULL::integer;
        RETURN;
    END IF;

    IF session_status(v_session) = 'expired' THEN
        RETURN QUERY SELECT 'expired'::text, NULL::text, NULL::integer;
        RETURN;
    END IF;

    -- the partial index images_unacknowledged, in sequence order
    SELECT coalesce(string_agg(p.j, ', ' ORDER BY p.seq), ''), count(*)
      INTO v_images, v_count
      FROM (SELECT i.sequence AS seq,
                   image_json(i.id, i.session_id, i.sequence,
                              i.content_type, i.size, i.sha256,
                              i.created_at, i.acknowledged_at) AS j
              FROM images i
             WHERE i.session_id = p_session
               AND i.acknowledged_at IS NULL
             ORDER BY i.sequence
             LIMIT p_limit) p;

    IF v_count = 0 AND v_session.status = 'completed' THEN
        RETURN QUERY SELECT 'acknowledged_all'::text, NULL::text,
                            NULL::integer;
        RETURN;
    END IF;

    RETURN QUERY
        SELECT 'ok'::text,
               '{"session": ' || session_json(v_session)
               || ', "images": [' || v_images || ']}',
               v_count;
END
$$;
