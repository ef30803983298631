-- Session Service schema, version 3: Idempotency-Key (docs/api.md §6).
--
-- A POST with an Idempotency-Key first claims (project, key) with the
-- fingerprint of the request (method, path with query, SHA-256 of the
-- body).  The claim carries a random id; only the holder of that id may
-- store the answer or give the claim up, so a request that lost its claim
-- (see the lease below) can never overwrite another's answer.

ALTER TABLE idempotency_keys
    ADD COLUMN claim_id    uuid,
    ADD COLUMN claimed_at  timestamptz;

-- outcome:
--   'new'      the caller holds the claim (claim) and runs the request
--   'replay'   a stored answer: status, location, body
--   'running'  the first request with this key has not answered yet
--   'mismatch' the key was used with another method, path or body
--
-- A stored answer lives 24 h; after that the key is free again.  A claim
-- whose request never stored an answer (its node died between the
-- operation and the store) is taken over by the same request after
-- p_lease seconds, so that a key is not stuck at 409 for a day.
CREATE FUNCTION idempotency_claim(p_project uuid, p_key text, p_method text,
                                  p_path text, p_body_sha256 bytea,
                                  p_lease integer)
RETURNS TABLE (outcome text, claim uuid, status integer, location text,
               body bytea)
LANGUAGE plpgsql AS $$
DECLARE
    v_claim  uuid := gen_random_uuid();
    v_row    idempotency_keys;
BEGIN
    FOR attempt IN 1 .. 3 LOOP
        INSERT INTO idempotency_keys AS k
               (project_id, key, method, path, body_sha256, claim_id,
                claimed_at)
        VALUES (p_project, p_key, p_method, p_path, p_body_sha256, v_claim,
                now())
        ON CONFLICT (project_id, key) DO UPDATE
            SET method = EXCLUDED.method,
                path = EXCLUDED.path,
                body_sha256 = EXCLUDED.body_sha256,
                status = NULL,
                content_type = NULL,
                location = NULL,
                body = NULL,
                claim_id = EXCLUDED.claim_id,
                claimed_at = now(),
                created_at = now(),
                expires_at = now() + interval '24 hours'
            WHERE k.expires_at <= now()
               OR (k.status IS NULL
                   AND k.claimed_at
                       <= now() - make_interval(secs => p_lease)
                   AND k.method = EXCLUDED.method
                   AND k.path = EXCLUDED.path
                   AND k.body_sha256 = EXCLUDED.body_sha256)
        RETURNING * INTO v_row;

        IF FOUND THEN
            RETURN QUERY SELECT 'new'::text, v_claim, NULL::integer,
                                NULL::text, NULL::bytea;
            RETURN;
        END IF;

        SELECT * INTO v_row FROM idempotency_keys
         WHERE project_id = p_project AND key = p_key;

        -- gone between the two statements (its claim was given up): again
        CONTINUE WHEN NOT FOUND;

        IF v_row.method <> p_method OR v_row.path <> p_path
           OR v_row.body_sha256 <> p_body_sha256
        THEN
            RETURN QUERY SELECT 'mismatch'::text, NULL::uuid, NULL::integer,
                                NULL::text, NULL::bytea;
            RETURN;
        END IF;

        IF v_row.status IS NULL THEN
            RETURN QUERY SELECT 'running'::text, NULL::uuid, NULL::integer,
                                NULL::text, NULL::bytea;
            RETURN;
        END IF;

        RETURN QUERY SELECT 'replay'::text, NULL::uuid, v_row.status,
                            v_row.location, v_row.body;
        RETURN;
    END LOOP;

    RETURN QUERY SELECT 'running'::text, NULL::uuid, NULL::integer,
                        NULL::text, NULL::bytea;
END
$$;

-- the answer of the claim's request; false when the claim was lost
CREATE FUNCTION idempotency_store(p_project uuid, p_key text, p_claim uuid,
                                  p_status integer, p_content_type text,
                                  p_location text, p_body bytea)
RETURNS boolean
LANGUAGE sql AS $$
    WITH stored AS (
        UPDATE idempotency_keys
           SET status = p_status, content_type = p_content_type,
               location = p_location, body = p_body,
               expires_at = now() + interval '24 hours'
         WHERE project_id = p_project AND key = p_key
           AND claim_id = p_claim AND status IS NULL
        RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM stored)
$$;

-- gives a claim up (the request answered 429 or 5xx: a retry runs again)
CREATE FUNCTION idempotency_release(p_project uuid, p_key text, p_claim uuid)
RETURNS boolean
LANGUAGE sql AS $$
    WITH released AS (
        DELETE FROM idempotency_keys
         WHERE project_id = p_project AND key = p_key
           AND claim_id = p_claim AND status IS NULL
        RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM released)
$$;

-- drops up to p_batch keys past their 24 h; the number dropped
CREATE FUNCTION idempotency_purge(p_batch integer)
RETURNS integer
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM idempotency_keys
         WHERE ctid IN (SELECT ctid FROM idempotency_keys
                         WHERE expires_at <= now()
                         LIMIT p_batch
                           FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT count(*)::integer FROM gone
$$;
