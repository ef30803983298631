-- Session Service schema, version 12: a request with an Idempotency-Key
-- claims its key, does its work and keeps its answer in one transaction
-- (docs/decisions.md (xa)-(xe)).
--
-- Version 3 claimed the key with a committed row (idempotency_claim) and
-- version 10 let the keyed statement of the work store the answer in
-- that row: two commits a request.  Now the module sends one statement
-- (NGX_HTTP_SESSION_SQL_*_KEYED in src/ngx_http_session_sql.h) that
--   * tries an advisory lock on a hash of (project, key), held until its
--     commit: a concurrent request with the key answers 409 at once
--     instead of waiting on an uncommitted row;
--   * reads the key's row: a kept answer is replayed, another request
--     under the key is 422, a claim of a node of the previous version is
--     still 409 until its lease ends;
--   * otherwise does the work and inserts the key's row with the answer.
-- A row of the key that another request committed after the statement's
-- snapshot was taken (it held the lock until its commit, just before
-- this statement took it) is invisible to that read; the insert then
-- meets it (ON CONFLICT, which sees committed rows) and inserts nothing,
-- and the statement calls idempotency_conflict(), which undoes the work
-- done meanwhile: the request answers 409 and its retry replays.
--
-- Additive, for one release: a cluster is upgraded node by node, and a
-- node of the previous version keeps working on this schema.  Nothing of
-- versions 3 and 10 is dropped or changed: idempotency_claim,
-- idempotency_store and idempotency_release stay for those nodes, and
-- rows of both kinds live side by side in idempotency_keys.  The rows
-- this version writes carry an answer (status NOT NULL) and no claim
-- (claim_id NULL), which an old node replays as its own and never takes
-- over; an old node's claim (status NULL) is honoured by the new
-- statements as before (409 within its lease, taken over after it).  A
-- node of this version needs this migration (its statements are prepared
-- with idempotency_conflict()), so migrate before upgrading the nodes, as
-- always.  The functions of versions 3 and 10 can go in a later version,
-- once no node of the previous version is left.

-- Raised by a keyed statement whose work must not commit: another
-- request kept an answer for the key after this statement's snapshot.
-- serialization_failure, as PostgreSQL itself answers a transaction that
-- lost a race and may simply be run again.
CREATE FUNCTION idempotency_conflict()
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'the Idempotency-Key was answered by a concurrent request'
        USING ERRCODE = 'serialization_failure';
END
$$;
