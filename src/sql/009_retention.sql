-- Session Service schema, version 9: session_retention (docs/api.md §8
-- and 10).  Sessions whose expires_at is older than the retention go, with
-- their images and webhook events (both ON DELETE CASCADE) and the
-- Idempotency-Key answers of requests about them; afterwards their ids
-- answer 404 "session not found".

-- Purge candidates: sessions the expiry sweep has marked, oldest first.
-- (sessions_due_expiry covers the others; together they cover all.)
CREATE INDEX sessions_retention
    ON sessions (expires_at) WHERE status = 'expired';

-- The session an Idempotency-Key row is about, in lower case: the id in
-- its path (/api/v1/sessions/<sid>/..., every POST but create) or, for a
-- create, in the Location of its answer (/api/v1/sessions/<sid>); NULL
-- when there is none.  "/api/v1/sessions/" is 17 characters.
CREATE FUNCTION idempotency_session(p_path text, p_location text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT lower(substr(CASE WHEN p_path LIKE '/api/v1/sessions/_%'
                             THEN p_path ELSE p_location END, 18, 36))
$$;

CREATE INDEX idempotency_keys_session
    ON idempotency_keys (idempotency_session(path, location));

-- One run of the sweep: session_sweep(p_batch) of version 5 (expiry), then,
-- unless p_retention is NULL ("off"), the purge of at most p_purge_batch
-- sessions whose expires_at is more than p_retention seconds ago.
--
-- swept:   sessions marked expired;
-- purged:  sessions deleted (with their images, events, idempotency rows);
-- more:    a batch was full, so more may be due: run again at once;
-- ran:     false when another sweep holds the lock and nothing was done.
--
-- The same advisory lock as session_sweep (taken again inside it, which
-- a transaction may), only tried: one sweep at a time across all nodes,
-- the others return at once.  Only sessions already marked expired are
-- purged, so their long polls have been woken and their session.expired
-- event queued first; rows another transaction holds are skipped (SKIP
-- LOCKED) and taken by a later run.  A batch counts sessions: their
-- images go with them, so keep p_purge_batch small.
CREATE FUNCTION session_sweep_retain(p_batch integer, p_purge_batch integer,
                                     p_retention bigint)
RETURNS TABLE (swept integer, purged integer, more boolean, ran boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_batch   integer := greatest(coalesce(p_purge_batch, 1), 1);
    v_swept   integer;
    v_more    boolean;
    v_ids     text[];
BEGIN
    IF NOT pg_try_advisory_xact_lock(8315179226771058804) THEN
        RETURN QUERY SELECT 0, 0, false, false;
        RETURN;
    END IF;

    SELECT s.swept, s.more INTO v_swept, v_more FROM session_sweep(p_batch) s;

    IF p_retention IS NULL THEN
        RETURN QUERY SELECT v_swept, 0, v_more, true;
        RETURN;
    END IF;

    WITH gone AS (
        DELETE FROM sessions s
         WHERE s.id IN (SELECT d.id
                          FROM sessions d
                         WHERE d.status = 'expired'
                           AND d.expires_at
                               < now() - make_interval(secs => p_retention)
                         ORDER BY d.expires_at
                         LIMIT v_batch
                           FOR UPDATE SKIP LOCKED)
        RETURNING s.id)
    SELECT coalesce(array_agg(g.id::text), '{}') INTO v_ids FROM gone g;

    IF cardinality(v_ids) > 0 THEN
        DELETE FROM idempotency_keys
         WHERE idempotency_session(path, location) = ANY (v_ids);
    END IF;

    RETURN QUERY SELECT v_swept, cardinality(v_ids),
                        v_more OR cardinality(v_ids) >= v_batch, true;
END
$$;
