-- Session Service schema, version 17: a cheaper keyed create (goal 2; docs/decisions.md (xf)-(xh)).
--
-- The create with an Idempotency-Key of a plan without a quota (the
-- insert alone, NGX_HTTP_SESSION_SQL_SESSION_CREATE_FREE_KEYED) inserts
-- the key's row with its answer first, ON CONFLICT DO NOTHING, and the
-- session only when that row went in: the answer (the new id, its
-- times) is computed before either insert, so nothing has to be read
-- before the work, and nothing done is undone when the key has a row.
-- The two functions below run only when the key's row is in the way,
-- which a request with a new key never meets:
--
--   idempotency_seen()  the key's row as the statement sees it (STABLE:
--                       the calling statement's snapshot), unless it
--                       may be replaced: 'replay', 'mismatch', 'running'
--                       (a claim of a node of version 11 or older within
--                       its lease), or NULL;
--   idempotency_keep()  keeps an answer of work over a row that may be
--                       replaced (past its 24 h, or such a claim past
--                       its lease); a row that may not (it committed
--                       after the statement's snapshot) is the race of
--                       decision (xc): idempotency_conflict() undoes the
--                       work.
--
-- The foreign key from idempotency_keys to projects goes: the project of
-- a key's row is always the authenticated key's own (no statement writes
-- another), the service never deletes projects, and its check cost a
-- lookup of the project's row and its FOR KEY SHARE lock on every keyed
-- request (about 30,000 of the 614,000 instructions the keyed create
-- cost PostgreSQL, util/bench-sql.sh).  The indexes stay (decision
-- (xh)): idempotency_keys_pkey is the unique index that every ON
-- CONFLICT (project_id, key) of both versions infers;
-- idempotency_keys_expiry serves idempotency_purge() (the sweep's batch
-- of keys past their 24 h) and idempotency_keys_session the deletion of
-- the keys of the sessions that session_sweep_retain() purges.
--
-- Additive, for one release (src/sql/README.md): it adds two functions
-- and drops a constraint that no statement of the previous version
-- needs: none names it, no ON CONFLICT infers a constraint of that kind,
-- and nothing such a node answers depends on it (it writes only the
-- authenticated project, as this version does).  Nothing else changes:
-- a node of the previous version keeps working on this schema, replays
-- the rows this version keeps (they carry the same columns, the answer's
-- session included) and has its own replayed.  A node of this version
-- needs this migration (its create statement calls the two functions
-- and is prepared when a connection opens), so migrate first, as always
-- (docs/operations.md, "Upgrading").  Dropping the constraint takes a
-- brief ACCESS EXCLUSIVE lock on idempotency_keys and projects, which
-- waits for the transactions that use them (every request's, a few
-- milliseconds); the lock_timeout bounds how long the requests queued
-- behind it wait: on a timeout the migration rolls back whole and
-- "sessionctl migrate" can simply be run again.

SET LOCAL lock_timeout = '5s';

ALTER TABLE idempotency_keys
    DROP CONSTRAINT IF EXISTS idempotency_keys_project_id_fkey;

-- The key's row as the calling statement sees it, unless it may be
-- replaced: the outcome of a request (method POST, p_path, p_body_sha256)
-- under the key, or NULL when there is no such row.  Its plan is kept
-- for the connection; enable_seqscan is off while it is planned, so that
-- a plan made while the table was empty still reads the primary key.
CREATE FUNCTION idempotency_seen(p_project uuid, p_key text, p_path text,
                                 p_body_sha256 bytea, p_lease integer)
RETURNS text
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
AS $$
DECLARE
    v_row  record;
BEGIN
    SELECT e.method, e.path, e.body_sha256, e.status INTO v_row
      FROM idempotency_keys e
     WHERE e.project_id = p_project AND e.key = p_key
       AND NOT (e.expires_at <= now()
                OR (e.status IS NULL
                    AND e.claimed_at <= now() - make_interval(secs => p_lease)
                    AND e.method = 'POST' AND e.path = p_path
                    AND e.body_sha256 = p_body_sha256));

    IF NOT FOUND THEN
        RETURN NULL;
    END IF;

    IF v_row.method <> 'POST' OR v_row.path <> p_path
       OR v_row.body_sha256 <> p_body_sha256
    THEN
        RETURN 'mismatch';
    END IF;

    IF v_row.status IS NULL THEN
        RETURN 'running';
    END IF;

    RETURN 'replay';
END
$$;

-- The answer of work done under the key, kept as the key's row (a POST
-- to p_path with a body of p_body_sha256) over a row that may be
-- replaced; true, or idempotency_conflict() when the row may not be.
CREATE FUNCTION idempotency_keep(p_project uuid, p_key text, p_path text,
                                 p_body_sha256 bytea, p_lease integer,
                                 p_status integer, p_location text,
                                 p_body bytea,
                                 p_session idempotency_session_answer,
                                 p_image idempotency_image_answer)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO idempotency_keys AS k
           (project_id, key, method, path, body_sha256, status,
            content_type, location, body, answer_session, answer_image,
            expires_at)
    VALUES (p_project, p_key, 'POST', p_path, p_body_sha256, p_status,
            'application/json', p_location, p_body, p_session, p_image,
            now() + interval '24 hours')
    ON CONFLICT (project_id, key) DO UPDATE
        SET method = EXCLUDED.method,
            path = EXCLUDED.path,
            body_sha256 = EXCLUDED.body_sha256,
            status = EXCLUDED.status,
            content_type = EXCLUDED.content_type,
            location = EXCLUDED.location,
            body = EXCLUDED.body,
            answer_session = EXCLUDED.answer_session,
            answer_image = EXCLUDED.answer_image,
            claim_id = NULL,
            claimed_at = NULL,
            created_at = now(),
            expires_at = EXCLUDED.expires_at
        WHERE k.expires_at <= now()
           OR (k.status IS NULL
               AND k.claimed_at <= now() - make_interval(secs => p_lease)
               AND k.method = 'POST' AND k.path = p_path
               AND k.body_sha256 = p_body_sha256);

    IF FOUND THEN
        RETURN true;
    END IF;

    RETURN idempotency_conflict();
END
$$;
