-- Session Service schema, version 10: the answer of an Idempotency-Key
-- request commits with the work it answers (docs/api.md §6).
--
-- Version 3 claimed the key, ran the work and stored the answer in three
-- transactions: a worker that died (or gave up on a statement that the
-- server then committed) between the work and the store left the work
-- done and the key without an answer, and the retry did the work again.
--
-- Now the statements that do work (create, complete, upload, ack) have a
-- keyed variant (src/ngx_http_session_sql.h) that, in the same statement:
--   * locks the key's row, and works only while the claim is still the
--     request's (claim_id, no answer yet): a claim taken over after its
--     lease can no longer be worked on by the request that lost it;
--   * stores the answer's status and Location and the resource as it was
--     answered (the columns below), so that the commit of the work is the
--     commit of the answer.  A replay renders the body again from them,
--     with the same code and the same values, so byte for byte the same.
-- Answers without work (4xx) are still stored afterwards by
-- idempotency_store: repeating them does nothing twice.

-- the session of an answer: the columns of NGX_HTTP_SESSION_SQL_SESSION_COLS
CREATE TYPE idempotency_session_answer AS (
    id                  uuid,
    project_id          uuid,
    delivery_mode       text,
    webhook_url         text,
    status              text,
    image_count         integer,
    acknowledged_count  integer,
    created_at          timestamptz,
    expires_at          timestamptz,
    completed_at        timestamptz
);

-- the image of an answer: the columns of NGX_HTTP_SESSION_SQL_IMAGE_COLS
CREATE TYPE idempotency_image_answer AS (
    id                  uuid,
    session_id          uuid,
    sequence            integer,
    content_type        text,
    size                integer,
    sha256              bytea,
    created_at          timestamptz,
    acknowledged_at     timestamptz
);

ALTER TABLE idempotency_keys
    ADD COLUMN answer_session  idempotency_session_answer,
    ADD COLUMN answer_image    idempotency_image_answer;

-- As in version 3, and a replay also returns the answer's resource (body
-- NULL: the body is rendered from it).  A key taken over (past 24 h or
-- its lease) forgets the resource of its previous answer.
DROP FUNCTION idempotency_claim(uuid, text, text, text, bytea, integer);

CREATE FUNCTION idempotency_claim(p_project uuid, p_key text, p_method text,
                                  p_path text, p_body_sha256 bytea,
                                  p_lease integer)
RETURNS TABLE (outcome text, claim uuid, status integer, location text,
               body bytea, answer_session idempotency_session_answer,
               answer_image idempotency_image_answer)
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
                answer_session = NULL,
                answer_image = NULL,
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
                                NULL::text, NULL::bytea,
                                NULL::idempotency_session_answer,
                                NULL::idempotency_image_answer;
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
                                NULL::text, NULL::bytea,
                                NULL::idempotency_session_answer,
                                NULL::idempotency_image_answer;
            RETURN;
        END IF;

        IF v_row.status IS NULL THEN
            RETURN QUERY SELECT 'running'::text, NULL::uuid, NULL::integer,
                                NULL::text, NULL::bytea,
                                NULL::idempotency_session_answer,
                                NULL::idempotency_image_answer;
            RETURN;
        END IF;

        RETURN QUERY SELECT 'replay'::text, NULL::uuid, v_row.status,
                            v_row.location, v_row.body,
                            v_row.answer_session, v_row.answer_image;
        RETURN;
    END LOOP;

    RETURN QUERY SELECT 'running'::text, NULL::uuid, NULL::integer,
                        NULL::text, NULL::bytea,
                        NULL::idempotency_session_answer,
                        NULL::idempotency_image_answer;
END
$$;

-- Gives a claim up (the request answered 429 or 5xx) unless its row is
-- locked: then the request's own keyed statement still runs in the server
-- (the module gave up on it) and holds the row until it commits the work
-- with its answer or rolls back; waiting for it would only hold the 5xx
-- back.  A claim not given up is taken over after its lease.
CREATE OR REPLACE FUNCTION idempotency_release(p_project uuid, p_key text,
                                               p_claim uuid)
RETURNS boolean
LANGUAGE sql AS $$
    WITH released AS (
        DELETE FROM idempotency_keys
         WHERE ctid = (SELECT ctid FROM idempotency_keys
                        WHERE project_id = p_project AND key = p_key
                          AND claim_id = p_claim AND status IS NULL
                          FOR UPDATE SKIP LOCKED)
        RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM released)
$$;
