-- Session Service schema, version 4: the statements behind the image
-- endpoints, as functions, so that each API operation is one
-- parameterised statement and one transaction.

-- Images arrive compressed (JPEG, PNG, WebP, HEIC ...): storing them
-- uncompressed out of line spares pglz a futile attempt on every upload,
-- and lets a download read the value without decompressing it.
ALTER TABLE images ALTER COLUMN content SET STORAGE EXTERNAL;

-- The image object of docs/api.md §4.  Columns, not the row: a whole
-- images row as a value would fetch (detoast) its content too.
CREATE FUNCTION image_json(p_id uuid, p_session uuid, p_sequence integer,
                           p_type text, p_size integer, p_sha256 bytea,
                           p_created timestamptz, p_acknowledged timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT json_build_object(
        'id', p_id,
        'session_id', p_session,
        'sequence', p_sequence,
        'content_type', p_type,
        'size', p_size,
        'sha256', encode(p_sha256, 'hex'),
        'created_at', session_ts(p_created),
        'acknowledged', p_acknowledged IS NOT NULL,
        'acknowledged_at', session_ts(p_acknowledged))::text
$$;

-- stage 5 for every image endpoint: 'ok', 'missing' (no such session),
-- 'forbidden' (another project's) or 'expired'
CREATE FUNCTION image_session_check(p_project uuid, p_session uuid)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN s.id IS NULL THEN 'missing'
                WHEN s.project_id <> p_project THEN 'forbidden'
                WHEN session_status(s) = 'expired' THEN 'expired'
                ELSE 'ok' END
      FROM (SELECT 1) one
      LEFT JOIN sessions s ON s.id = p_session
$$;

-- outcome: 'ok' with the image, or the session's 'missing', 'forbidden',
-- 'expired', 'completed'.  The sequence is the session's image_count,
-- incremented under the session row's lock: concurrent uploads into one
-- session take 1, 2, 3 ... in turn, with no gap (a failed insert rolls
-- the increment back with it).  The notification and, for webhook
-- sessions, the outbox row commit with the image or not at all.
CREATE FUNCTION image_upload(p_project uuid, p_session uuid, p_type text,
                             p_sha256 bytea, p_content bytea)
RETURNS TABLE (outcome text, body text, id uuid)
LANGUAGE plpgsql AS $$
DECLARE
    v_session  sessions;
    v_id       uuid;
    v_body     text;
BEGIN
    UPDATE sessions s SET image_count = s.image_count + 1
     WHERE s.id = p_session
       AND s.project_id = p_project
       AND session_status(s) = 'open'
    RETURNING * INTO v_session;

    IF NOT FOUND THEN
        RETURN QUERY
            SELECT CASE WHEN c.v <> 'ok' THEN c.v ELSE 'completed' END,
                   NULL::text, NULL::uuid
              FROM (SELECT image_session_check(p_project, p_session) AS v) c;
        RETURN;
    END IF;

    INSERT INTO images AS i (session_id, sequence, content_type, size,
                             sha256, content)
    VALUES (p_session, v_session.image_count, p_type,
            octet_length(p_content), p_sha256, p_content)
    RETURNING i.id,
              image_json(i.id, i.session_id, i.sequence, i.content_type,
                         i.size, i.sha256, i.created_at, i.acknowledged_at)
         INTO v_id, v_body;

    PERFORM pg_notify('session_events', 'uploaded:' || p_session::text);

    IF v_session.delivery_mode = 'webhook' THEN
        INSERT INTO webhook_outbox (id, project_id, session_id, event_type,
                                    url, payload)
        SELECT e.id, v_session.project_id, v_session.id, 'image.uploaded',
               v_session.webhook_url,
               json_build_object('id', e.id,
                                 'type', 'image.uploaded',
                                 'created_at', session_ts(now()),
                                 'data', v_body::json)::text
          FROM (SELECT gen_random_uuid() AS id) e;
    END IF;

    RETURN QUERY SELECT 'ok'::text, v_body, v_id;
END
$$;

-- one page of a session's images in ascending sequence after p_after,
-- acknowledged or not (p_acknowledged NULL: both): one row with the
-- outcome, the page as a JSON array, its last sequence and whether more
-- images follow
CREATE FUNCTION image_list(p_project uuid, p_session uuid,
                           p_acknowledged boolean, p_after integer,
                           p_limit integer)
RETURNS TABLE (outcome text, body text, last_sequence integer,
               has_more boolean)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_outcome  text;
BEGIN
    v_outcome := image_session_check(p_project, p_session);

    IF v_outcome <> 'ok' THEN
        RETURN QUERY SELECT v_outcome, NULL::text, NULL::integer,
                            NULL::boolean;
        RETURN;
    END IF;

    RETURN QUERY
        SELECT 'ok'::text,
               '[' || coalesce(string_agg(p.j, ', ' ORDER BY p.seq)
                                   FILTER (WHERE p.rn <= p_limit), '')
                   || ']',
               max(p.seq) FILTER (WHERE p.rn <= p_limit),
               count(*) > p_limit
          FROM (SELECT i.sequence AS seq,
                       image_json(i.id, i.session_id, i.sequence,
                                  i.content_type, i.size, i.sha256,
                                  i.created_at, i.acknowledged_at) AS j,
                       row_number() OVER (ORDER BY i.sequence) AS rn
                  FROM images i
                 WHERE i.session_id = p_session
                   AND (p_acknowledged IS NULL
                        OR (i.acknowledged_at IS NOT NULL) = p_acknowledged)
                   AND (p_after IS NULL OR i.sequence > p_after)
                 ORDER BY i.sequence
                 LIMIT p_limit + 1) p;
END
$$;

-- outcome: the session's, 'image_missing' (no such image in this
-- session), or 'ok' with the image
CREATE FUNCTION image_get(p_project uuid, p_session uuid, p_image uuid)
RETURNS TABLE (outcome text, body text)
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN c.v <> 'ok' THEN c.v
                WHEN i.id IS NULL THEN 'image_missing'
                ELSE 'ok' END,
           CASE WHEN i.id IS NOT NULL
                THEN image_json(i.id, i.session_id, i.sequence,
                                i.content_type, i.size, i.sha256,
                                i.created_at, i.acknowledged_at) END
      FROM (SELECT image_session_check(p_project, p_session) AS v) c
      LEFT JOIN images i ON c.v = 'ok' AND i.id = p_image
                        AND i.session_id = p_session
$$;

-- The bytes of an image, for a request in binary result format.
-- not_modified: p_tags (the entity tags of If-None-Match, '*' for any)
-- holds the image's.  content is NULL when not modified or not wanted
-- (HEAD), so that PostgreSQL neither reads nor sends it.
CREATE FUNCTION image_content(p_project uuid, p_session uuid,
                              p_image uuid, p_tags text[], p_want boolean)
RETURNS TABLE (outcome text, content_type text, etag text, size integer,
               not_modified boolean, content bytea)
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN c.v <> 'ok' THEN c.v
                WHEN i.id IS NULL THEN 'image_missing'
                ELSE 'ok' END,
           i.content_type,
           encode(i.sha256, 'hex'),
           i.size,
           coalesce(t.hit, false),
           CASE WHEN p_want AND NOT coalesce(t.hit, false)
                THEN i.content END
      FROM (SELECT image_session_check(p_project, p_session) AS v) c
      LEFT JOIN images i ON c.v = 'ok' AND i.id = p_image
                        AND i.session_id = p_session
      LEFT JOIN LATERAL (
          SELECT '*' = ANY (p_tags)
                 OR encode(i.sha256, 'hex') = ANY (p_tags) AS hit) t
        ON true
$$;

-- outcome: the session's ('expired' included; a completed session is
-- fine), 'image_missing', 'acknowledged' (already), or 'ok' with the
-- image; the session's acknowledged_count moves in the same transaction
CREATE FUNCTION image_ack(p_project uuid, p_session uuid, p_image uuid)
RETURNS TABLE (outcome text, body text)
LANGUAGE plpgsql AS $$
DECLARE
    v_outcome  text;
    v_body     text;
BEGIN
    v_outcome := image_session_check(p_project, p_session);

    IF v_outcome <> 'ok' THEN
        RETURN QUERY SELECT v_outcome, NULL::text;
        RETURN;
    END IF;

    UPDATE images i SET acknowledged_at = now()
     WHERE i.id = p_image
       AND i.session_id = p_session
       AND i.acknowledged_at IS NULL
    RETURNING image_json(i.id, i.session_id, i.sequence, i.content_type,
                         i.size, i.sha256, i.created_at, i.acknowledged_at)
         INTO v_body;

    IF NOT FOUND THEN
        RETURN QUERY
            SELECT CASE WHEN EXISTS (SELECT 1 FROM images i
                                      WHERE i.id = p_image
                                        AND i.session_id = p_session)
                        THEN 'acknowledged' ELSE 'image_missing' END,
                   NULL::text;
        RETURN;
    END IF;

    UPDATE sessions s SET acknowledged_count = s.acknowledged_count + 1
     WHERE s.id = p_session;

    RETURN QUERY SELECT 'ok'::text, v_body;
END
$$;
