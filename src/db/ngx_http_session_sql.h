/*
 * Every SQL statement the module sends, each named once, always with
 * $n parameters.
 */

#ifndef _NGX_HTTP_SESSION_SQL_H_INCLUDED_
#define _NGX_HTTP_SESSION_SQL_H_INCLUDED_


/* $1: SHA-256 of the key (bytea, binary) */
#define NGX_HTTP_SESSION_SQL_AUTH                                             \
    "SELECT k.project_id::text, p.account_id::text, a.status, k.id::text,"   \
    " 'long_poll' = ANY (pl.features), 'webhook' = ANY (pl.features),"       \
    " pl.monthly_quota::text"                                                 \
    " FROM api_keys k"                                                        \
    " JOIN projects p ON p.id = k.project_id"                                 \
    " JOIN accounts a ON a.id = p.account_id"                                 \
    " LEFT JOIN plans pl ON pl.name = a.plan"                                 \
    " WHERE k.key_hash = $1 AND k.deleted_at IS NULL"


/*
 * The statements of the endpoints return rows, not documents: the worker
 * renders the JSON (src/core/ngx_http_session_doc.c).  Each is prepared
 * once per connection and asked for in binary result format: uuid as 16
 * bytes, integer as 4, boolean as 1, timestamptz as 8 (microseconds since
 * 2000-01-01 UTC), text and bytea as they are.
 */

/* a session's status as clients see it: expired once now >= expires_at */
#define NGX_HTTP_SESSION_SQL_STATUS(t)                                        \
    NGX_HTTP_SESSION_SQL_STATUS_AT(t, "now()")

/* the same at the instant at */
#define NGX_HTTP_SESSION_SQL_STATUS_AT(t, at)                                 \
    "CASE WHEN " t ".status <> 'expired' AND " at " >= " t ".expires_at"      \
    " THEN 'expired' ELSE " t ".status END"

/*
 * A write (an upload, a complete) is judged when it takes the session's
 * row, not at now(), the start of its transaction, which a wait for
 * another write's lock on the row can leave far behind (decision (x)).
 * An upload's tk locks the row first (FOR NO KEY UPDATE, the lock of its
 * own UPDATE), so the upload waits there, whether the other write then
 * commits a change, none, or rolls back; TAKEN is the clock once tk has
 * the row (NULL when there is none), read by the upload's condition.  A
 * complete compares clock_timestamp() in its UPDATE's condition, which
 * PostgreSQL evaluates again after a wait behind a committed change (the
 * lock first would cost it 5 % more of PostgreSQL's time; behind a write
 * that rolled back it is judged by the clock before its wait).  The
 * status of an answer is computed at the same point: now() when the write
 * was done (earlier than its condition's clock), else the clock once it
 * found it could not.
 */
#define NGX_HTTP_SESSION_SQL_TAKE(held)                                       \
    "tk AS (SELECT 1 FROM sessions t WHERE t.id = $2::uuid"                   \
    " AND t.project_id = $1::uuid" held " FOR NO KEY UPDATE)"

#define NGX_HTTP_SESSION_SQL_TAKEN  "(SELECT clock_timestamp() FROM tk)"

#define NGX_HTTP_SESSION_SQL_WRITE_AT(wrote)                                  \
    "CASE WHEN " wrote " THEN now() ELSE clock_timestamp() END"

/* the ten columns of a session, NGX_HTTP_SESSION_COL_S_* */
#define NGX_HTTP_SESSION_SQL_SESSION_COLS(t)                                  \
    NGX_HTTP_SESSION_SQL_SESSION_COLS_AT(t, "now()")

/* the same, its status at the instant at */
#define NGX_HTTP_SESSION_SQL_SESSION_COLS_AT(t, at)                           \
    t ".id, " t ".project_id, " t ".delivery_mode, " t ".webhook_url, "       \
    NGX_HTTP_SESSION_SQL_STATUS_AT(t, at) ", " t ".image_count, "             \
    t ".acknowledged_count, " t ".created_at, " t ".expires_at, "             \
    t ".completed_at"

/* the eight columns of an image, NGX_HTTP_SESSION_COL_I_* */
#define NGX_HTTP_SESSION_SQL_IMAGE_COLS(t)                                    \
    t ".id, " t ".session_id, " t ".sequence, " t ".content_type, "           \
    t ".size, " t ".sha256, " t ".created_at, " t ".acknowledged_at"

/* stage 5 of every session-scoped statement: the session's owner, status */
#define NGX_HTTP_SESSION_SQL_CHECK_COLS                                       \
    NGX_HTTP_SESSION_SQL_CHECK_COLS_AT("now()")

/* the same, the status at the instant at */
#define NGX_HTTP_SESSION_SQL_CHECK_COLS_AT(at)                                \
    "x.project_id, " NGX_HTTP_SESSION_SQL_STATUS_AT("x", at)

/* the one row that a missing session still gives */
#define NGX_HTTP_SESSION_SQL_CHECK_FROM                                       \
    " FROM (SELECT 1) one LEFT JOIN sessions x ON x.id = $2::uuid"


/*
 * $1 project, $2 delivery mode, $3 webhook url or NULL, $4 ttl seconds:
 * (allowed, id, created_at, expires_at).  allowed NULL or false: the plan
 * lacks the mode; id NULL: the monthly quota is used up.  A plan with no
 * quota touches no usage row; one with a quota counts the session on the
 * account's usage row of the month, locked until the commit, so that
 * concurrent creates never exceed it (see docs/decisions.md).
 */
#define NGX_HTTP_SESSION_SQL_SESSION_CREATE                                   \
    "WITH " NGX_HTTP_SESSION_SQL_CREATE_WORK("")                              \
    " SELECT p.allowed, s.id, s.created_at, s.expires_at"                     \
    NGX_HTTP_SESSION_SQL_CREATE_FROM

/* the CTEs p, u, s of the create; held: a condition on p */
#define NGX_HTTP_SESSION_SQL_CREATE_WORK(held)                                \
    "p AS ("                                                                  \
    "SELECT a.id AS account, pl.monthly_quota AS quota,"                      \
    " $2::text = ANY (pl.features) AS allowed"                                \
    " FROM projects p JOIN accounts a ON a.id = p.account_id"                 \
    " JOIN plans pl ON pl.name = a.plan WHERE p.id = $1::uuid" held "),"      \
    " u AS ("                                                                 \
    "INSERT INTO monthly_usage AS u (account_id, month, sessions_created)"    \
    " SELECT p.account,"                                                      \
    " date_trunc('month', now() AT TIME ZONE 'UTC')::date, 1"                 \
    " FROM p WHERE p.allowed AND p.quota > 0"                                 \
    " ON CONFLICT (account_id, month) DO UPDATE"                              \
    " SET sessions_created = u.sessions_created + 1"                          \
    " WHERE u.sessions_created < (SELECT p.quota FROM p)"                     \
    " RETURNING 1),"                                                          \
    " s AS ("                                                                 \
    NGX_HTTP_SESSION_SQL_CREATE_INSERT("p, ",                                 \
        " WHERE p.allowed AND (p.quota IS NULL OR EXISTS (SELECT 1 FROM u))", \
        "id, created_at, expires_at") ")"

/* the insert of a create: $1 project, $2 mode, $3 URL, $4 seconds */
#define NGX_HTTP_SESSION_SQL_CREATE_INSERT(from, where, returning)            \
    "INSERT INTO sessions (project_id, delivery_mode, webhook_url,"           \
    " created_at, expires_at)"                                                \
    " SELECT $1::uuid, $2::text, $3::text, t.now,"                            \
    " t.now + $4::integer * interval '1 second'"                              \
    " FROM " from "(SELECT clock_timestamp() AS now) t" where                 \
    " RETURNING " returning

#define NGX_HTTP_SESSION_SQL_CREATE_FROM                                      \
    " FROM (SELECT 1) one LEFT JOIN p ON true LEFT JOIN s ON true"

/*
 * The create of a key whose plan, as the auth cache knows it, has no
 * quota and allows the delivery mode: the insert alone, with the
 * parameters and the columns of NGX_HTTP_SESSION_SQL_SESSION_CREATE
 * (allowed is true), decision (nc)
 */
#define NGX_HTTP_SESSION_SQL_SESSION_CREATE_FREE                              \
    NGX_HTTP_SESSION_SQL_CREATE_INSERT("", "",                                \
                                       "true, id, created_at, expires_at")

/*
 * The same for a plan with a quota, as the auth cache knows it: $5 the
 * account, $6 its quota; the usage row counted (and locked until the
 * commit) only while under the quota, the insert only when it was.  No
 * row of s (id NULL) is 429.
 */
#define NGX_HTTP_SESSION_SQL_SESSION_CREATE_COUNTED                           \
    "WITH " NGX_HTTP_SESSION_SQL_COUNTED_WORK("")                             \
    " SELECT true, s.id, s.created_at, s.expires_at"                          \
    " FROM (SELECT 1) one LEFT JOIN s ON true"

/* the CTEs u, s of the counted create; held: a condition on u */
#define NGX_HTTP_SESSION_SQL_COUNTED_WORK(held)                               \
    "u AS ("                                                                  \
    "INSERT INTO monthly_usage AS u (account_id, month, sessions_created)"    \
    " SELECT $5::uuid, date_trunc('month', now() AT TIME ZONE 'UTC')::date,"  \
    " 1 WHERE $6::integer > 0" held                                           \
    " ON CONFLICT (account_id, month) DO UPDATE"                              \
    " SET sessions_created = u.sessions_created + 1"                          \
    " WHERE u.sessions_created < $6::integer"                                 \
    " RETURNING 1),"                                                          \
    " s AS ("                                                                 \
    NGX_HTTP_SESSION_SQL_CREATE_INSERT("", " WHERE EXISTS (SELECT 1 FROM u)", \
                                       "id, created_at, expires_at") ")"


/*
 * The keyed statements (decision (xa)): those that do work (create,
 * complete, upload, ack) for a POST with an Idempotency-Key, in one
 * statement, so one transaction and one commit:
 *
 *   il  tries the key's advisory lock, held until the commit: a request
 *       with the same key meanwhile does not get it and answers 409 at
 *       once, without waiting on any row;
 *   ie  the key's row as the statement sees it, unless it may be
 *       replaced (past its 24 h, or a claim of a node of the previous
 *       version past its lease): a kept answer to replay, a request to
 *       tell apart (422), or such a claim still running (409);
 *   the plain statement's CTEs, working only when il got the lock and ie
 *       is empty (NGX_HTTP_SESSION_SQL_IDEM_GO, their held condition);
 *   ik  the answer of the work, inserted as the key's row (or over one
 *       that may be replaced): status, Location and the resource as
 *       answered, see src/sql/010_idempotent_work.sql.
 *
 * $k the key, $p the path with its query, $h the SHA-256 of the body
 * (bytea, binary), $l the lease in seconds (src/sql/003_idempotency.sql).
 * Two columns follow the endpoint's: the outcome ("new": the request
 * went on; "replay", "running", "mismatch") and kept (the work was done
 * and its answer kept).  A replay reads the kept answer with
 * NGX_HTTP_SESSION_SQL_IDEM_READ: the statement of every request stays
 * narrow.  A row of the key that committed after the statement's
 * snapshot was taken is not in ie; ik then inserts nothing, and the work
 * done meanwhile is undone (idempotency_conflict(),
 * src/sql/012_idempotent_commit.sql).
 *
 * A streamed upload's transaction (db_copy.c) holds these pieces in its
 * first statement (il, ie, the session's update) and its last (ik and
 * the columns), with the COPY between them: see
 * NGX_HTTP_SESSION_SQL_IMAGE_STREAM_BEGIN_KEYED.
 */
#define NGX_HTTP_SESSION_SQL_IDEM_SEEN(k, p, h, l)                            \
    "il AS (SELECT " NGX_HTTP_SESSION_SQL_IDEM_LOCK(k) " AS got),"            \
    " ie AS (SELECT e.method, e.path, e.body_sha256, e.status"                \
    " FROM idempotency_keys e WHERE e.project_id = $1::uuid"                  \
    " AND e.key = $" k "::text"                                               \
    " AND NOT (" NGX_HTTP_SESSION_SQL_IDEM_FREE("e", p, h, l) "))"

/* the key's advisory lock, tried (decision (xb)): true when it is got */
#define NGX_HTTP_SESSION_SQL_IDEM_LOCK(k)                                     \
    "pg_try_advisory_xact_lock(hashtextextended("                             \
    "$1::uuid::text || $" k "::text, 0))"

/* the key's row t may be replaced: past its 24 h, or a claim past lease */
#define NGX_HTTP_SESSION_SQL_IDEM_FREE(t, p, h, l)                            \
    t ".expires_at <= now() OR (" t ".status IS NULL"                         \
    " AND " t ".claimed_at <= now() - $" l "::integer * interval '1 second'"  \
    " AND " t ".method = 'POST' AND " t ".path = $" p "::text"                \
    " AND " t ".body_sha256 = $" h "::bytea)"

/* the work may be done: the lock is this request's, no row is in the way */
#define NGX_HTTP_SESSION_SQL_IDEM_GO                                          \
    "(SELECT il.got FROM il) AND NOT EXISTS (SELECT 1 FROM ie)"

/*
 * ik: the answer (status, location, body, the resource as answered) as
 * the key's row, for each row of from
 */
#define NGX_HTTP_SESSION_SQL_IDEM_KEEP(k, p, h, l, status, loc, body, sess,   \
                                       img, from)                             \
    "ik AS (INSERT INTO idempotency_keys AS k (project_id, key, method,"      \
    " path, body_sha256, status, content_type, location, body,"               \
    " answer_session, answer_image, expires_at)"                              \
    " SELECT $1::uuid, $" k "::text, 'POST', $" p "::text, $" h "::bytea, "   \
    status ", 'application/json', " loc ", " body ", " sess ", " img ","      \
    " now() + interval '24 hours' FROM " from                                 \
    " ON CONFLICT (project_id, key) DO UPDATE"                                \
    " SET method = EXCLUDED.method, path = EXCLUDED.path,"                    \
    " body_sha256 = EXCLUDED.body_sha256, status = EXCLUDED.status,"          \
    " content_type = EXCLUDED.content_type, location = EXCLUDED.location,"    \
    " body = EXCLUDED.body, answer_session = EXCLUDED.answer_session,"        \
    " answer_image = EXCLUDED.answer_image, claim_id = NULL,"                 \
    " claimed_at = NULL, created_at = now(),"                                 \
    " expires_at = EXCLUDED.expires_at"                                       \
    " WHERE " NGX_HTTP_SESSION_SQL_IDEM_FREE("k", p, h, l)                    \
    " RETURNING 1)"

/* the key's two columns: the outcome (see above), then kept */
#define NGX_HTTP_SESSION_SQL_IDEM_COLS(p, h, kept)                            \
    "CASE WHEN ie.method IS NULL"                                             \
    " THEN CASE WHEN il.got THEN 'new' ELSE 'running' END"                    \
    " WHEN ie.method <> 'POST' OR ie.path <> $" p "::text"                    \
    " OR ie.body_sha256 <> $" h "::bytea THEN 'mismatch'"                     \
    " WHEN ie.status IS NULL THEN 'running' ELSE 'replay' END, " kept

#define NGX_HTTP_SESSION_SQL_IDEM_FROM  " LEFT JOIN ie ON true CROSS JOIN il"

/*
 * kept: the work (the rows of f) was done and its answer kept; work done
 * while another request kept an answer for the key is undone
 */
#define NGX_HTTP_SESSION_SQL_IDEM_KEPT(f)                                     \
    "CASE WHEN EXISTS (SELECT 1 FROM ik) THEN true"                           \
    " WHEN EXISTS (SELECT 1 FROM " f ") THEN idempotency_conflict()"          \
    " ELSE false END"

/*
 * The kept answer of a key, for a replay: $1 project, $2 key, $3 path,
 * $4 SHA-256 (bytea, binary), $5 lease; one row: the outcome ("replay",
 * "mismatch", or "running": none kept, or gone since), status,
 * location, body, then the columns of the answer's session
 * (NGX_HTTP_SESSION_SQL_SESSION_COLS) and image (_IMAGE_), see
 * NGX_HTTP_SESSION_IDEM_R_*
 */
#define NGX_HTTP_SESSION_SQL_IDEM_READ                                        \
    "SELECT CASE WHEN e.method IS NULL THEN 'running'"                        \
    " WHEN e.method <> 'POST' OR e.path <> $3::text"                          \
    " OR e.body_sha256 <> $4::bytea THEN 'mismatch'"                          \
    " WHEN e.status IS NULL THEN 'running' ELSE 'replay' END,"                \
    " e.status, e.location, e.body, (e.answer_session).*,"                    \
    " (e.answer_image).*"                                                     \
    " FROM (SELECT 1) one LEFT JOIN idempotency_keys e"                       \
    " ON e.project_id = $1::uuid AND e.key = $2::text"                        \
    " AND NOT (" NGX_HTTP_SESSION_SQL_IDEM_FREE("e", "3", "4", "5") ")"

/* the columns of the session (image) t as an answer's resource */
#define NGX_HTTP_SESSION_SQL_IDEM_SESSION(t)                                  \
    "ROW(" NGX_HTTP_SESSION_SQL_SESSION_COLS(t) ")::idempotency_session_answer"
#define NGX_HTTP_SESSION_SQL_IDEM_IMAGE(t)                                    \
    "ROW(" NGX_HTTP_SESSION_SQL_IMAGE_COLS(t) ")::idempotency_image_answer"

/* the answer of a create: s the new session, as $1, $2, $3 asked */
#define NGX_HTTP_SESSION_SQL_IDEM_CREATED(k, p, h, l)                         \
    NGX_HTTP_SESSION_SQL_IDEM_KEEP(k, p, h, l, "201",                         \
        "'/api/v1/sessions/' || s.id", "NULL",                                \
        "ROW(s.id, $1::uuid, $2::text,"                                       \
        " CASE WHEN $2::text = 'webhook' THEN $3::text END, 'open', 0, 0,"    \
        " s.created_at, s.expires_at, NULL)::idempotency_session_answer",     \
        "NULL", "s")

/* $5 key, $6 path, $7 SHA-256, $8 lease: the create's columns, the key's */
#define NGX_HTTP_SESSION_SQL_SESSION_CREATE_KEYED                             \
    "WITH " NGX_HTTP_SESSION_SQL_IDEM_SEEN("5", "6", "7", "8") ", "           \
    NGX_HTTP_SESSION_SQL_CREATE_WORK(" AND " NGX_HTTP_SESSION_SQL_IDEM_GO)    \
    ", " NGX_HTTP_SESSION_SQL_IDEM_CREATED("5", "6", "7", "8")                \
    " SELECT p.allowed, s.id, s.created_at, s.expires_at, "                   \
    NGX_HTTP_SESSION_SQL_IDEM_COLS("6", "7",                                  \
                                   NGX_HTTP_SESSION_SQL_IDEM_KEPT("s"))       \
    NGX_HTTP_SESSION_SQL_CREATE_FROM NGX_HTTP_SESSION_SQL_IDEM_FROM

/*
 * The same as NGX_HTTP_SESSION_SQL_SESSION_CREATE_FREE, the key's row
 * first (decision (xf), src/sql/017_keyed_create.sql): t tries the key's
 * lock and makes the new session's id and times, ik inserts the key's
 * row with the answer made of them (ON CONFLICT DO NOTHING), and the
 * session is inserted only when ik did: a request with a new key reads
 * nothing before its work and has nothing to undo.  When the key's row
 * is in the way, idempotency_seen() tells one the statement sees (no
 * work) from one that may be replaced: idempotency_keep() keeps the
 * answer over it, then the session is inserted, or, for a row committed
 * after the statement's snapshot, undoes the statement (decision (xc)).
 * The plain create's columns and the key's ("new", true); no row when
 * nothing was done: the key's lock is held elsewhere or the key has a
 * row, whose answer the module reads (NGX_HTTP_SESSION_SQL_IDEM_READ).
 */
#define NGX_HTTP_SESSION_SQL_SESSION_CREATE_FREE_KEYED                        \
    "WITH t AS (SELECT " NGX_HTTP_SESSION_SQL_IDEM_LOCK("5") " AS got,"       \
    " gen_random_uuid() AS id, clock_timestamp() AS now),"                    \
    " ik AS (INSERT INTO idempotency_keys (project_id, key, method, path,"    \
    " body_sha256, status, content_type, location, answer_session,"          \
    " expires_at)"                                                            \
    " SELECT $1::uuid, $5::text, 'POST', $6::text, $7::bytea, 201,"           \
    " 'application/json', " NGX_HTTP_SESSION_SQL_IDEM_FRESH_LOC ", "          \
    NGX_HTTP_SESSION_SQL_IDEM_FRESH_SESSION ","                               \
    " now() + interval '24 hours' FROM t WHERE t.got"                         \
    " ON CONFLICT (project_id, key) DO NOTHING RETURNING 1)"                  \
    " INSERT INTO sessions (id, project_id, delivery_mode, webhook_url,"      \
    " created_at, expires_at)"                                                \
    " SELECT t.id, $1::uuid, $2::text, $3::text, t.now, "                     \
    NGX_HTTP_SESSION_SQL_IDEM_FRESH_EXPIRES                                   \
    " FROM t WHERE EXISTS (SELECT 1 FROM ik) OR (t.got"                       \
    " AND idempotency_seen($1::uuid, $5::text, $6::text, $7::bytea,"          \
    " $8::integer) IS NULL"                                                   \
    " AND idempotency_keep($1::uuid, $5::text, $6::text, $7::bytea,"          \
    " $8::integer, 201, " NGX_HTTP_SESSION_SQL_IDEM_FRESH_LOC ", NULL, "      \
    NGX_HTTP_SESSION_SQL_IDEM_FRESH_SESSION ", NULL))"                        \
    " RETURNING true, id, created_at, expires_at, 'new', true"

/* the answer of the create above: its Location, the session as made */
#define NGX_HTTP_SESSION_SQL_IDEM_FRESH_LOC  "'/api/v1/sessions/' || t.id"

#define NGX_HTTP_SESSION_SQL_IDEM_FRESH_SESSION                               \
    "ROW(t.id, $1::uuid, $2::text, $3::text, 'open', 0, 0, t.now, "           \
    NGX_HTTP_SESSION_SQL_IDEM_FRESH_EXPIRES                                   \
    ", NULL)::idempotency_session_answer"

#define NGX_HTTP_SESSION_SQL_IDEM_FRESH_EXPIRES                               \
    "t.now + $4::integer * interval '1 second'"

/* the same as NGX_HTTP_SESSION_SQL_SESSION_CREATE_COUNTED: $7 key ... */
#define NGX_HTTP_SESSION_SQL_SESSION_CREATE_COUNTED_KEYED                     \
    "WITH " NGX_HTTP_SESSION_SQL_IDEM_SEEN("7", "8", "9", "10") ", "          \
    NGX_HTTP_SESSION_SQL_COUNTED_WORK(" AND " NGX_HTTP_SESSION_SQL_IDEM_GO)   \
    ", " NGX_HTTP_SESSION_SQL_IDEM_CREATED("7", "8", "9", "10")               \
    " SELECT true, s.id, s.created_at, s.expires_at, "                        \
    NGX_HTTP_SESSION_SQL_IDEM_COLS("8", "9",                                  \
                                   NGX_HTTP_SESSION_SQL_IDEM_KEPT("s"))       \
    " FROM (SELECT 1) one LEFT JOIN s ON true" NGX_HTTP_SESSION_SQL_IDEM_FROM

/*
 * An answer that did no work (a 4xx but 429, or a 2xx that changed
 * nothing), kept for the key in one statement: $1 project, $2 key, $3
 * path, $4 SHA-256 (bytea, binary), $5 lease, $6 status, $7 location or
 * NULL, $8 body (bytea, binary); the key's two columns, kept false with
 * outcome "new" when another request kept an answer first
 */
#define NGX_HTTP_SESSION_SQL_IDEM_STORE                                       \
    "WITH " NGX_HTTP_SESSION_SQL_IDEM_SEEN("2", "3", "4", "5") ", "           \
    NGX_HTTP_SESSION_SQL_IDEM_KEEP("2", "3", "4", "5", "$6::integer",         \
        "$7::text", "$8::bytea", "NULL", "NULL",                              \
        "il WHERE il.got AND NOT EXISTS (SELECT 1 FROM ie)")                  \
    " SELECT " NGX_HTTP_SESSION_SQL_IDEM_COLS("3", "4",                       \
                                       "EXISTS (SELECT 1 FROM ik)")           \
    " FROM (SELECT 1) one" NGX_HTTP_SESSION_SQL_IDEM_FROM

/* $1 session id: the session's columns, or no row */
#define NGX_HTTP_SESSION_SQL_SESSION_GET                                      \
    "SELECT " NGX_HTTP_SESSION_SQL_SESSION_COLS("s")                          \
    " FROM sessions s WHERE s.id = $1::uuid"

/*
 * $1 project, $2 session id: the session's columns after the change, or
 * as they are when there was none to make (already completed, expired,
 * another project's), or no row: when there was no change, the row is
 * read locked, so that it is the newest; the notification and, for
 * webhook sessions, the outbox row commit with the change or not at all.
 */
#define NGX_HTTP_SESSION_SQL_SESSION_COMPLETE                                 \
    "WITH " NGX_HTTP_SESSION_SQL_COMPLETE_WORK("")                            \
    " SELECT " NGX_HTTP_SESSION_SQL_SESSION_COLS_AT("(x.r)", "x.at")          \
    NGX_HTTP_SESSION_SQL_COMPLETE_FROM

/*
 * the CTEs c, l, o of the complete; held: a condition on c and l.  The
 * update first; only when it changed nothing is the row read, locked, so that
 * the row returned is the newest (a concurrent complete committed while
 * this one waited is seen as completed)
 */
#define NGX_HTTP_SESSION_SQL_COMPLETE_WORK(held)                              \
    "c AS ("                                                                  \
    "UPDATE sessions s SET status = 'completed',"                             \
    " completed_at = clock_timestamp()"                                       \
    " WHERE s.id = $2::uuid AND s.project_id = $1::uuid"                      \
    " AND s.status = 'open' AND clock_timestamp() < s.expires_at" held        \
    " RETURNING s AS r, " NGX_HTTP_SESSION_SQL_WAKE("completed", "s")         \
    " AS n),"                                                                 \
    " l AS (SELECT s AS r FROM sessions s WHERE s.id = $2::uuid"              \
    " AND NOT EXISTS (SELECT 1 FROM c)" held " FOR UPDATE),"                  \
    " o AS ("                                                                 \
    "INSERT INTO webhook_outbox (id, project_id, session_id, event_type,"     \
    " url, payload)"                                                          \
    " SELECT e.id, (c.r).project_id, (c.r).id, 'session.completed',"          \
    " (c.r).webhook_url,"                                                     \
    " json_build_object('id', e.id, 'type', 'session.completed',"             \
    " 'created_at', session_ts(now()),"                                       \
    " 'data', session_json(c.r)::json)::text"                                 \
    " FROM c, LATERAL (SELECT gen_random_uuid() AS id) e"                     \
    " WHERE (c.r).delivery_mode = 'webhook')"

#define NGX_HTTP_SESSION_SQL_COMPLETE_FROM                                    \
    " FROM " NGX_HTTP_SESSION_SQL_COMPLETE_ROWS " x"

/* the row, and the instant of its status: the change's, or once locked */
#define NGX_HTTP_SESSION_SQL_COMPLETE_ROWS                                    \
    "(SELECT c.r, now() AS at FROM c UNION ALL"                               \
    " SELECT l.r, clock_timestamp() FROM l"                                   \
    " WHERE NOT EXISTS (SELECT 1 FROM c))"

/*
 * $3 key, $4 path, $5 SHA-256, $6 lease: the complete's columns, the
 * key's; one row always (NULL session columns: no such session)
 */
#define NGX_HTTP_SESSION_SQL_SESSION_COMPLETE_KEYED                           \
    "WITH " NGX_HTTP_SESSION_SQL_IDEM_SEEN("3", "4", "5", "6") ", "           \
    NGX_HTTP_SESSION_SQL_COMPLETE_WORK(" AND " NGX_HTTP_SESSION_SQL_IDEM_GO)  \
    ", " NGX_HTTP_SESSION_SQL_IDEM_KEEP("3", "4", "5", "6", "200", "NULL",    \
        "NULL", NGX_HTTP_SESSION_SQL_IDEM_SESSION("(c.r)"), "NULL", "c")      \
    " SELECT " NGX_HTTP_SESSION_SQL_SESSION_COLS_AT("(x.r)", "x.at") ", "     \
    NGX_HTTP_SESSION_SQL_IDEM_COLS("4", "5",                                  \
                                   NGX_HTTP_SESSION_SQL_IDEM_KEPT("c"))       \
    " FROM (SELECT 1) one LEFT JOIN " NGX_HTTP_SESSION_SQL_COMPLETE_ROWS      \
    " x ON true" NGX_HTTP_SESSION_SQL_IDEM_FROM

/* $1 project, $2 status or NULL, $3 rows: newest first */
#define NGX_HTTP_SESSION_SQL_SESSION_LIST                                     \
    "SELECT " NGX_HTTP_SESSION_SQL_SESSION_COLS("s")                          \
    " FROM sessions s WHERE s.project_id = $1::uuid"                          \
    " AND ($2::text IS NULL OR " NGX_HTTP_SESSION_SQL_STATUS("s")             \
    " = $2::text)"                                                            \
    " ORDER BY s.created_at DESC, s.id DESC LIMIT $3::integer"

/* the same after the cursor: $4 created_at (binary), $5 id */
#define NGX_HTTP_SESSION_SQL_SESSION_LIST_AFTER                               \
    "SELECT " NGX_HTTP_SESSION_SQL_SESSION_COLS("s")                          \
    " FROM sessions s WHERE s.project_id = $1::uuid"                          \
    " AND ($2::text IS NULL OR " NGX_HTTP_SESSION_SQL_STATUS("s")             \
    " = $2::text)"                                                            \
    " AND (s.created_at, s.id) < ($4::timestamptz, $5::uuid)"                 \
    " ORDER BY s.created_at DESC, s.id DESC LIMIT $3::integer"

/*
 * $1 expiry batch, $2 purge batch, $3 session_retention in seconds or NULL
 * (off): (swept, purged, more, ran), see src/sql/009_retention.sql
 */
#define NGX_HTTP_SESSION_SQL_SWEEP                                            \
    "SELECT swept, purged, more, ran FROM session_sweep_retain($1, $2, $3)"


/*
 * session_limit_scope cluster, see src/sql/015_rate_leases.sql and
 * 021_rate_lease_known.sql: $1 SHA-256 of the key (bytea, binary), $2
 * class, $3 window (epoch minute), $4 the lease wanted, $5 the limit, $6
 * the node's id, $7 what the node was leased in the window as far as it
 * knows (NULL: it does not know): (leased, total, nodes, took), took NULL
 * when the row does not list the node; leased 0 when the window's budget
 * is leased out or budget is on its way to the node (took > $7); no row
 * when the window's row is gone.  Sent as text with its parameters: it
 * runs at most once per NGX_HTTP_SESSION_LEASE_MIN requests of a key,
 * and db_stmt.c's prepared list is left to the statements of every
 * request.
 */
#define NGX_HTTP_SESSION_SQL_LEASE                                            \
    "SELECT leased, total, nodes, took FROM session_rate_lease($1,"           \
    " $2::integer, $3::integer, $4::integer, $5::integer, $6::bigint,"        \
    " $7::integer)"

/*
 * The same on a schema before 21 (src/sql/019_rate_lease_parts.sql), for a
 * node upgraded before its database: $1 to $6 as above, (leased, total,
 * nodes) or no row when the window's budget is leased out
 */
#define NGX_HTTP_SESSION_SQL_LEASE_V19                                        \
    "SELECT leased, total, nodes FROM session_rate_lease($1, $2::integer,"    \
    " $3::integer, $4::integer, $5::integer, $6::bigint)"


/*
 * How many nodes lease lately, read by a worker when it starts (decision
 * (qo)): $1 the window; (window, nodes) for the window before and this
 * one, in that order, nodes the most that a sample of the window's rows
 * lists (NULL: no row).  The sample is the window's first 256 rows in
 * the primary key's order, that is by the keys' hashes: an index scan
 * of a few pages however many keys there are (without the ORDER BY the
 * planner scans the table, 53 ms at 300,000 rows against 4 ms).
 */
#define NGX_HTTP_SESSION_SQL_LEASE_NODES                                      \
    "SELECT w.m, (SELECT max(cardinality(s.nodes)) FROM (SELECT l.nodes"      \
    " FROM rate_leases l WHERE l.minute = w.m"                                \
    " ORDER BY l.minute, l.key_hash LIMIT 256) s)"                            \
    " FROM (VALUES ($1::integer - 1), ($1::integer)) w(m) ORDER BY w.m"


/*
 * The next window's first blocks of many keys, src/sql/018_rate_lease_
 * many.sql: $1 the keys' SHA-256, 32 bytes each (bytea, binary), $2 their
 * classes, $3 the window, $4 the leases wanted, $5 the limits, $6 the
 * node's id: (i, leased, total, nodes) for each, i from 1, total NULL
 * when the window's budget of that key is leased out.  Sent as text, as
 * NGX_HTTP_SESSION_SQL_LEASE.
 */
#define NGX_HTTP_SESSION_SQL_LEASE_MANY                                       \
    "SELECT i, leased, total, nodes FROM session_rate_lease_many($1,"         \
    " $2::integer[], $3::integer, $4::integer[], $5::integer[], $6::bigint)"


/*
 * $1 project, $2 session id, $3 content type, $4 SHA-256 (bytea,
 * binary), $5 the bytes (bytea, binary): the check columns and the new
 * image's (NULL when there is none: the session is missing, another
 * project's, expired or completed).  The sequence is the session's
 * image_count, incremented under the session row's lock: concurrent
 * uploads into one session take 1, 2, 3 ... in turn, with no gap.  The
 * notification and the outbox row commit with the image or not at all.
 */
#define NGX_HTTP_SESSION_SQL_IMAGE_UPLOAD                                     \
    "WITH " NGX_HTTP_SESSION_SQL_UPLOAD_WORK("")                              \
    " SELECT " NGX_HTTP_SESSION_SQL_UPLOAD_CHECK("i") ", "                    \
    NGX_HTTP_SESSION_SQL_IMAGE_COLS("i")                                      \
    NGX_HTTP_SESSION_SQL_CHECK_FROM " LEFT JOIN i ON true"

/* the CTEs tk, s, i, o of the upload; held: a condition on tk and s */
#define NGX_HTTP_SESSION_SQL_UPLOAD_WORK(held)                                \
    NGX_HTTP_SESSION_SQL_UPLOAD_SESSION(held) ","                             \
    " i AS ("                                                                 \
    "INSERT INTO images AS i (session_id, sequence, content_type, size,"      \
    " sha256, content)"                                                       \
    " SELECT s.id, s.image_count, $3::text, octet_length($5::bytea),"         \
    " $4::bytea, $5::bytea FROM s"                                            \
    " RETURNING " NGX_HTTP_SESSION_SQL_IMAGE_COLS("i") "),"                   \
    NGX_HTTP_SESSION_SQL_UPLOAD_OUTBOX

/*
 * tk, s: the session that takes the image, its image_count incremented, and
 * the wake-up, which commits with the image (a streamed upload's too,
 * whose first statement this is) or not at all
 */
#define NGX_HTTP_SESSION_SQL_UPLOAD_SESSION(held)                             \
    NGX_HTTP_SESSION_SQL_TAKE(held) ","                                       \
    " s AS ("                                                                 \
    "UPDATE sessions s SET image_count = s.image_count + 1"                   \
    " WHERE s.id = $2::uuid AND s.project_id = $1::uuid"                      \
    " AND s.status = 'open'"                                                  \
    " AND " NGX_HTTP_SESSION_SQL_TAKEN " < s.expires_at" held                 \
    " RETURNING s.id, s.project_id, s.image_count, s.delivery_mode,"          \
    " s.webhook_url, " NGX_HTTP_SESSION_SQL_WAKE("uploaded", "s") " AS n)"

/* the check columns of an upload, whose row t is the session taken */
#define NGX_HTTP_SESSION_SQL_UPLOAD_CHECK(t)                                  \
    NGX_HTTP_SESSION_SQL_CHECK_COLS_AT(                                       \
        NGX_HTTP_SESSION_SQL_WRITE_AT(t ".id IS NOT NULL"))

/*
 * The wake-up of a change to the session row r (its alias in a RETURNING
 * that the change locked it for), on session_events as "event:<id>": a
 * NOTIFY only when a long poll may wait on the session (decision (yf),
 * src/sql/020_poll_wakeups.sql): a poll armed it and the arm has not
 * lapsed, or not every node arms yet (session_wakeups).  A poll arms
 * (NGX_HTTP_SESSION_SQL_POLL_ARM) and commits before the read that lets
 * it wait: if this change locked the row first, the arm waited for its
 * commit and that read sees the change; else this change sees the arm.
 */
#define NGX_HTTP_SESSION_SQL_WAKE(event, r)                                   \
    "CASE WHEN " r ".polled_until > now() OR NOT coalesce("                   \
    "(SELECT w.polled_only FROM session_wakeups w), false)"                   \
    " THEN pg_notify('session_events', '" event ":' || " r ".id::text) END"

/* o: image.uploaded for a webhook session s, with the image i as data */
#define NGX_HTTP_SESSION_SQL_UPLOAD_OUTBOX                                    \
    " o AS ("                                                                 \
    "INSERT INTO webhook_outbox (id, project_id, session_id, event_type,"     \
    " url, payload)"                                                          \
    " SELECT e.id, s.project_id, s.id, 'image.uploaded', s.webhook_url,"      \
    " json_build_object('id', e.id, 'type', 'image.uploaded',"                \
    " 'created_at', session_ts(now()),"                                       \
    " 'data', image_json(" NGX_HTTP_SESSION_SQL_IMAGE_COLS("i") ")::json)"    \
    "::text"                                                                  \
    " FROM s, i, LATERAL (SELECT gen_random_uuid() AS id) e"                  \
    " WHERE s.delivery_mode = 'webhook')"

/* $6 key, $7 path, $8 SHA-256, $9 lease: the upload's columns, the key's */
#define NGX_HTTP_SESSION_SQL_IMAGE_UPLOAD_KEYED                               \
    "WITH " NGX_HTTP_SESSION_SQL_IDEM_SEEN("6", "7", "8", "9") ", "           \
    NGX_HTTP_SESSION_SQL_UPLOAD_WORK(" AND " NGX_HTTP_SESSION_SQL_IDEM_GO)    \
    ", " NGX_HTTP_SESSION_SQL_IDEM_UPLOADED("6", "7", "8", "9")               \
    NGX_HTTP_SESSION_SQL_UPLOAD_KEYED_ROW("7", "8")

/* ik of an upload: the image i as answered, with its Location */
#define NGX_HTTP_SESSION_SQL_IDEM_UPLOADED(k, p, h, l)                        \
    NGX_HTTP_SESSION_SQL_IDEM_KEEP(k, p, h, l, "201",                         \
        "'/api/v1/sessions/' || i.session_id || '/images/' || i.id",          \
        "NULL", "NULL", NGX_HTTP_SESSION_SQL_IDEM_IMAGE("i"), "i")

/* the row of a keyed upload: the check columns, the image's, the key's */
#define NGX_HTTP_SESSION_SQL_UPLOAD_KEYED_ROW(p, h)                           \
    " SELECT " NGX_HTTP_SESSION_SQL_UPLOAD_CHECK("i") ", "                    \
    NGX_HTTP_SESSION_SQL_IMAGE_COLS("i") ", "                                 \
    NGX_HTTP_SESSION_SQL_IDEM_COLS(p, h, NGX_HTTP_SESSION_SQL_IDEM_KEPT("i")) \
    NGX_HTTP_SESSION_SQL_CHECK_FROM " LEFT JOIN i ON true"                    \
    NGX_HTTP_SESSION_SQL_IDEM_FROM

/*
 * A streamed upload (an image over session_image_chunk_size, see
 * db_copy.c) is one transaction of three statements on a connection of
 * its own: the session takes the image (BEGIN), the bytes are copied
 * into a new images row, and the image is announced (then COMMIT).
 * What commits is what IMAGE_UPLOAD commits.
 *
 * $1 project, $2 session id: the check columns and the session's
 * image_count, the new image's sequence (NULL: the session is missing,
 * another project's, expired or completed); the session row stays
 * locked until the end of the transaction, as in IMAGE_UPLOAD.
 */
#define NGX_HTTP_SESSION_SQL_IMAGE_STREAM_BEGIN                               \
    "WITH " NGX_HTTP_SESSION_SQL_UPLOAD_SESSION("")                           \
    " SELECT " NGX_HTTP_SESSION_SQL_UPLOAD_CHECK("s") ", s.image_count"       \
    NGX_HTTP_SESSION_SQL_CHECK_FROM " LEFT JOIN s ON true"

/*
 * $3 key, $4 path, $5 SHA-256, $6 lease: the same under an
 * Idempotency-Key, whose statement of work it begins (decision (zd)):
 * the key's advisory lock, held until the COMMIT or ROLLBACK, and its
 * row (NGX_HTTP_SESSION_SQL_IDEM_SEEN); the session takes the image only
 * when NGX_HTTP_SESSION_SQL_IDEM_GO.  The key's two columns follow, kept
 * always false: the answer is kept by the end, with the image.
 */
#define NGX_HTTP_SESSION_SQL_IMAGE_STREAM_BEGIN_KEYED                         \
    "WITH " NGX_HTTP_SESSION_SQL_IDEM_SEEN("3", "4", "5", "6") ", "           \
    NGX_HTTP_SESSION_SQL_UPLOAD_SESSION(" AND " NGX_HTTP_SESSION_SQL_IDEM_GO) \
    " SELECT " NGX_HTTP_SESSION_SQL_UPLOAD_CHECK("s") ", s.image_count, "     \
    NGX_HTTP_SESSION_SQL_IDEM_COLS("4", "5", "false")                         \
    NGX_HTTP_SESSION_SQL_CHECK_FROM " LEFT JOIN s ON true"                    \
    NGX_HTTP_SESSION_SQL_IDEM_FROM

/*
 * The row, in COPY's binary format (the worker writes it): the session,
 * the sequence, content type, size, the bytes, and their SHA-256 last,
 * as it is computed while they stream
 */
#define NGX_HTTP_SESSION_SQL_IMAGE_COPY                                       \
    "COPY images (session_id, sequence, content_type, size, content,"         \
    " sha256) FROM STDIN (FORMAT binary)"

/*
 * $1 project, $2 session id, $3 the sequence: the columns of
 * IMAGE_UPLOAD and its outbox row (its wake-up went with the first
 * statement, NGX_HTTP_SESSION_SQL_UPLOAD_SESSION)
 */
#define NGX_HTTP_SESSION_SQL_IMAGE_STREAM_END                                 \
    "WITH " NGX_HTTP_SESSION_SQL_STREAM_WORK                                  \
    " SELECT " NGX_HTTP_SESSION_SQL_CHECK_COLS ", "                           \
    NGX_HTTP_SESSION_SQL_IMAGE_COLS("i")                                      \
    NGX_HTTP_SESSION_SQL_CHECK_FROM " LEFT JOIN i ON true"

/* the CTEs s, i, o of the streamed upload's end */
#define NGX_HTTP_SESSION_SQL_STREAM_WORK                                      \
    "s AS (SELECT s.id, s.project_id, s.image_count, s.delivery_mode,"        \
    " s.webhook_url FROM sessions s WHERE s.id = $2::uuid"                    \
    " AND s.project_id = $1::uuid),"                                          \
    " i AS (SELECT " NGX_HTTP_SESSION_SQL_IMAGE_COLS("i")                     \
    " FROM images i WHERE i.session_id = $2::uuid"                            \
    " AND i.sequence = $3::integer),"                                         \
    NGX_HTTP_SESSION_SQL_UPLOAD_OUTBOX

/*
 * $4 key, $5 path, $6 SHA-256, $7 lease: the same, and the answer kept
 * as IMAGE_UPLOAD_KEYED keeps it, with its columns: a row of the key
 * committed since the beginning (by a node of the previous version,
 * which takes no advisory lock) undoes the whole upload
 */
#define NGX_HTTP_SESSION_SQL_IMAGE_STREAM_END_KEYED                           \
    "WITH " NGX_HTTP_SESSION_SQL_IDEM_SEEN("4", "5", "6", "7") ", "           \
    NGX_HTTP_SESSION_SQL_STREAM_WORK ", "                                     \
    NGX_HTTP_SESSION_SQL_IDEM_UPLOADED("4", "5", "6", "7")                    \
    NGX_HTTP_SESSION_SQL_UPLOAD_KEYED_ROW("5", "6")

/*
 * $1 project, $2 session id, $3 acknowledged or NULL, $4 after this
 * sequence, $5 rows: the check columns and an image per row (one row of
 * NULL image columns when there is none)
 */
#define NGX_HTTP_SESSION_SQL_IMAGE_LIST                                       \
    "SELECT " NGX_HTTP_SESSION_SQL_CHECK_COLS ", "                            \
    NGX_HTTP_SESSION_SQL_IMAGE_COLS("i")                                      \
    NGX_HTTP_SESSION_SQL_CHECK_FROM                                           \
    " LEFT JOIN LATERAL (SELECT " NGX_HTTP_SESSION_SQL_IMAGE_COLS("i")        \
    " FROM images i WHERE x.project_id = $1::uuid AND i.session_id = x.id"    \
    " AND i.sequence > $4::integer AND ($3::boolean IS NULL"                  \
    " OR (i.acknowledged_at IS NOT NULL) = $3::boolean)"                      \
    " ORDER BY i.sequence LIMIT $5::integer) i ON true"

/* $1 project, $2 session id, $3 image id or NULL (malformed) */
#define NGX_HTTP_SESSION_SQL_IMAGE_GET                                        \
    "SELECT " NGX_HTTP_SESSION_SQL_CHECK_COLS ", "                            \
    NGX_HTTP_SESSION_SQL_IMAGE_COLS("i")                                      \
    NGX_HTTP_SESSION_SQL_CHECK_FROM                                           \
    " LEFT JOIN images i ON x.project_id = $1::uuid AND i.id = $3::uuid"      \
    " AND i.session_id = x.id"

/*
 * The same, acknowledging the image if the session is not expired (a
 * completed one is fine) and the image was not acknowledged yet; the
 * fourth column tells an image that exists from a missing one, the image
 * columns are the acknowledged image's.  The session's
 * acknowledged_count moves in the same transaction.
 */
#define NGX_HTTP_SESSION_SQL_IMAGE_ACK                                        \
    "WITH " NGX_HTTP_SESSION_SQL_ACK_WORK("")                                 \
    " SELECT " NGX_HTTP_SESSION_SQL_CHECK_COLS ", "                           \
    NGX_HTTP_SESSION_SQL_IMAGE_COLS("a") ", " NGX_HTTP_SESSION_SQL_ACK_FOUND  \
    NGX_HTTP_SESSION_SQL_CHECK_FROM " LEFT JOIN a ON true"

/* the CTEs a, c of the acknowledgement; held: a condition on a */
#define NGX_HTTP_SESSION_SQL_ACK_WORK(held)                                   \
    "a AS ("                                                                  \
    "UPDATE images i SET acknowledged_at = now() FROM sessions x"             \
    " WHERE i.id = $3::uuid AND i.session_id = $2::uuid"                      \
    " AND i.acknowledged_at IS NULL AND x.id = $2::uuid"                      \
    " AND x.project_id = $1::uuid AND x.status <> 'expired'"                  \
    " AND now() < x.expires_at" held                                          \
    " RETURNING " NGX_HTTP_SESSION_SQL_IMAGE_COLS("i") "),"                   \
    " c AS ("                                                                 \
    "UPDATE sessions s SET acknowledged_count = s.acknowledged_count + 1"     \
    " FROM a WHERE s.id = a.session_id)"

/* whether the image exists, acknowledged or not */
#define NGX_HTTP_SESSION_SQL_ACK_FOUND                                        \
    "EXISTS (SELECT 1 FROM images e WHERE e.id = $3::uuid"                    \
    " AND e.session_id = $2::uuid)"

/* $4 key, $5 path, $6 SHA-256, $7 lease: the acknowledgement's, the key's */
#define NGX_HTTP_SESSION_SQL_IMAGE_ACK_KEYED                                  \
    "WITH " NGX_HTTP_SESSION_SQL_IDEM_SEEN("4", "5", "6", "7") ", "           \
    NGX_HTTP_SESSION_SQL_ACK_WORK(" AND " NGX_HTTP_SESSION_SQL_IDEM_GO)       \
    ", " NGX_HTTP_SESSION_SQL_IDEM_KEEP("4", "5", "6", "7", "200", "NULL",    \
        "NULL", "NULL", NGX_HTTP_SESSION_SQL_IDEM_IMAGE("a"), "a")            \
    " SELECT " NGX_HTTP_SESSION_SQL_CHECK_COLS ", "                           \
    NGX_HTTP_SESSION_SQL_IMAGE_COLS("a") ", " NGX_HTTP_SESSION_SQL_ACK_FOUND  \
    ", " NGX_HTTP_SESSION_SQL_IDEM_COLS("5", "6",                             \
                                        NGX_HTTP_SESSION_SQL_IDEM_KEPT("a"))  \
    NGX_HTTP_SESSION_SQL_CHECK_FROM " LEFT JOIN a ON true"                    \
    NGX_HTTP_SESSION_SQL_IDEM_FROM

/*
 * $1 project, $2 session id, $3 image id or NULL, $4 If-None-Match tags
 * (text[]) or NULL, $5 whether the bytes are wanted (false for HEAD), $6
 * the most bytes wanted: the check columns, content type (NULL: no such
 * image), etag, size, whether the tags hold the image's, and the first
 * $6 bytes (NULL when not modified or not wanted, so that PostgreSQL
 * neither reads nor sends them).  The content is stored uncompressed out
 * of line (src/sql/004_images.sql): a slice reads only its own pieces.
 */
#define NGX_HTTP_SESSION_SQL_IMAGE_CONTENT                                    \
    "SELECT " NGX_HTTP_SESSION_SQL_CHECK_COLS ", i.content_type,"             \
    " encode(i.sha256, 'hex'), i.size, t.hit,"                                \
    " CASE WHEN $5::boolean AND NOT t.hit"                                    \
    " THEN substring(i.content FROM 1 FOR $6::integer) END"                   \
    NGX_HTTP_SESSION_SQL_CHECK_FROM                                           \
    " LEFT JOIN images i ON x.project_id = $1::uuid AND i.id = $3::uuid"      \
    " AND i.session_id = x.id"                                                \
    " LEFT JOIN LATERAL (SELECT coalesce('*' = ANY ($4::text[])"              \
    " OR encode(i.sha256, 'hex') = ANY ($4::text[]), false) AS hit) t"        \
    " ON true"

/*
 * The rest of a download, a slice at a time: $1 image id, $2 session id,
 * $3 the first byte (from 1), $4 the most bytes: the slice, or no row
 * when the image is gone meanwhile (its session deleted)
 */
#define NGX_HTTP_SESSION_SQL_IMAGE_SLICE                                      \
    "SELECT substring(i.content FROM $3::integer FOR $4::integer)"            \
    " FROM images i WHERE i.id = $1::uuid AND i.session_id = $2::uuid"


/*
 * The long poll's read of many sessions at once: $1 their projects and
 * $2 their ids (arrays of the same length, the k-th project with the
 * k-th id), $3 most images a session.  For each k in order: the
 * session's columns and an unacknowledged image per row, oldest first
 * (one row of NULL image columns when there is none, or when the session
 * is not the k-th project's; a row of NULL session columns when the
 * session is missing), then the milliseconds its arm has left (bigint,
 * negative or NULL: none, see NGX_HTTP_SESSION_SQL_POLL_ARM) and k
 * (bigint, from 1) as the last two columns.
 */
#define NGX_HTTP_SESSION_SQL_POLL                                             \
    "SELECT " NGX_HTTP_SESSION_SQL_SESSION_COLS("x") ", "                     \
    NGX_HTTP_SESSION_SQL_IMAGE_COLS("i") ","                                  \
    " (extract(epoch FROM x.polled_until - now()) * 1000)::bigint, w.k"       \
    " FROM unnest($1::uuid[], $2::uuid[]) WITH ORDINALITY w(project, id, k)"  \
    " LEFT JOIN sessions x ON x.id = w.id"                                    \
    " LEFT JOIN LATERAL (SELECT " NGX_HTTP_SESSION_SQL_IMAGE_COLS("i")        \
    " FROM images i WHERE i.session_id = x.id"                                \
    " AND i.acknowledged_at IS NULL"                                          \
    " ORDER BY i.sequence LIMIT $3::integer) i ON x.project_id = w.project"   \
    " ORDER BY w.k, i.sequence"

/*
 * The long poll's arm (decision (yf)): $1 projects and $2 ids of sessions
 * that polls are about to wait on (as in NGX_HTTP_SESSION_SQL_POLL), $3
 * seconds from now; until then every change to them notifies
 * (NGX_HTTP_SESSION_SQL_WAKE).  Never shortens an arm.  The rows are
 * locked first, in the order of their ids, so that two arms of the same
 * sessions (two workers, two nodes, each batch in the order its polls
 * came) cannot deadlock: each would lock them in its own order.
 */
#define NGX_HTTP_SESSION_SQL_POLL_ARM                                         \
    "WITH l AS (SELECT x.id FROM sessions x"                                  \
    " JOIN unnest($1::uuid[], $2::uuid[]) w(project, id)"                     \
    " ON x.id = w.id AND x.project_id = w.project"                            \
    " ORDER BY x.id FOR NO KEY UPDATE OF x)"                                  \
    " UPDATE sessions s SET polled_until = greatest(s.polled_until,"          \
    " now() + $3::integer * interval '1 second')"                             \
    " FROM l WHERE s.id = l.id"


/*
 * The statements every pool connection prepares once when it connects
 * (ngx_http_session_db_query_stmt()); each request then sends only its
 * parameters, with no parse and no plan.
 */
typedef enum {
    NGX_HTTP_SESSION_STMT_NONE = 0,
    NGX_HTTP_SESSION_STMT_AUTH,
    NGX_HTTP_SESSION_STMT_SESSION_CREATE,
    NGX_HTTP_SESSION_STMT_SESSION_GET,
    NGX_HTTP_SESSION_STMT_SESSION_COMPLETE,
    NGX_HTTP_SESSION_STMT_SESSION_LIST,
    NGX_HTTP_SESSION_STMT_SESSION_LIST_AFTER,
    NGX_HTTP_SESSION_STMT_IMAGE_UPLOAD,
    NGX_HTTP_SESSION_STMT_IMAGE_LIST,
    NGX_HTTP_SESSION_STMT_IMAGE_GET,
    NGX_HTTP_SESSION_STMT_IMAGE_ACK,
    NGX_HTTP_SESSION_STMT_IMAGE_CONTENT,
    NGX_HTTP_SESSION_STMT_POLL,
    NGX_HTTP_SESSION_STMT_SESSION_CREATE_KEYED,
    NGX_HTTP_SESSION_STMT_SESSION_COMPLETE_KEYED,
    NGX_HTTP_SESSION_STMT_IMAGE_UPLOAD_KEYED,
    NGX_HTTP_SESSION_STMT_IMAGE_ACK_KEYED,
    NGX_HTTP_SESSION_STMT_WEBHOOK_CLAIM,
    NGX_HTTP_SESSION_STMT_WEBHOOK_RECORD,
    NGX_HTTP_SESSION_STMT_SESSION_CREATE_FREE,
    NGX_HTTP_SESSION_STMT_SESSION_CREATE_COUNTED,
    NGX_HTTP_SESSION_STMT_SESSION_CREATE_FREE_KEYED,
    NGX_HTTP_SESSION_STMT_SESSION_CREATE_COUNTED_KEYED,
    NGX_HTTP_SESSION_STMT_IDEM_STORE,
    NGX_HTTP_SESSION_STMT_IDEM_READ,
    NGX_HTTP_SESSION_STMT_IMAGE_SLICE,
    NGX_HTTP_SESSION_NSTMTS
} ngx_http_session_stmt_e;

/*
 * The statements that change nothing, which the pool may send several
 * at a time under one Sync (src/db/ngx_http_session_db_batch.c): a bit per
 * ngx_http_session_stmt_e
 */
#define NGX_HTTP_SESSION_STMT_READS                                           \
    ((1U << NGX_HTTP_SESSION_STMT_AUTH)                                       \
     | (1U << NGX_HTTP_SESSION_STMT_SESSION_GET)                              \
     | (1U << NGX_HTTP_SESSION_STMT_SESSION_LIST)                             \
     | (1U << NGX_HTTP_SESSION_STMT_SESSION_LIST_AFTER)                       \
     | (1U << NGX_HTTP_SESSION_STMT_IMAGE_LIST)                               \
     | (1U << NGX_HTTP_SESSION_STMT_IMAGE_GET)                                \
     | (1U << NGX_HTTP_SESSION_STMT_IMAGE_CONTENT)                            \
     | (1U << NGX_HTTP_SESSION_STMT_IMAGE_SLICE)                              \
     | (1U << NGX_HTTP_SESSION_STMT_POLL)                                     \
     | (1U << NGX_HTTP_SESSION_STMT_IDEM_READ))


/*
 * Webhook delivery, see src/sql/008_webhooks.sql.  $1 most rows, $2 the
 * lease in milliseconds: the claimed rows (id, url, payload, the
 * project's secret, attempts including this one, NULL), then one row
 * (NULL, ..., milliseconds until the next row is due, or NULL when none
 * is pending).
 */
#define NGX_HTTP_SESSION_SQL_WEBHOOK_CLAIM                                    \
    "WITH due AS ("                                                           \
    "SELECT id FROM webhook_outbox"                                           \
    " WHERE delivered_at IS NULL AND failed_at IS NULL"                       \
    " AND next_attempt_at <= now()"                                           \
    " ORDER BY next_attempt_at LIMIT $1 FOR UPDATE SKIP LOCKED),"             \
    " claimed AS ("                                                           \
    "UPDATE webhook_outbox o SET attempts = o.attempts + 1,"                  \
    " claimed_until = now() + $2::float8 * interval '1 millisecond',"         \
    " next_attempt_at = now() + $2::float8 * interval '1 millisecond'"        \
    " FROM due WHERE o.id = due.id"                                           \
    " RETURNING o.id, o.project_id, o.url, o.payload, o.attempts)"            \
    " SELECT c.id::text, c.url, c.payload, p.webhook_secret, c.attempts,"     \
    " NULL::bigint"                                                           \
    " FROM claimed c JOIN projects p ON p.id = c.project_id"                  \
    " UNION ALL"                                                              \
    " SELECT NULL, NULL, NULL, NULL, NULL,"                                   \
    " ceil(extract(epoch FROM min(next_attempt_at) - now()) * 1000)::bigint"  \
    " FROM webhook_outbox"                                                    \
    " WHERE delivered_at IS NULL AND failed_at IS NULL"                       \
    " AND next_attempt_at > now()"

/*
 * The outcomes of attempts, as arrays of one element per attempt: $1 event
 * ids, $2 attempts of the claims (the lease's token), $3 errors (NULL when
 * delivered), $4 milliseconds to the next attempt (NULL: none), $5
 * delivered.  Neither delivered nor a next attempt: the event failed.
 */
#define NGX_HTTP_SESSION_SQL_WEBHOOK_RECORD                                   \
    "UPDATE webhook_outbox o SET claimed_until = NULL,"                       \
    " delivered_at = CASE WHEN b.ok THEN now() END,"                          \
    " failed_at = CASE WHEN NOT b.ok AND b.delay IS NULL THEN now() END,"     \
    " last_error = CASE WHEN b.ok THEN o.last_error ELSE b.err END,"          \
    " next_attempt_at = CASE WHEN b.delay IS NULL THEN o.next_attempt_at"     \
    " ELSE now() + b.delay * interval '1 millisecond' END"                    \
    " FROM unnest($1::uuid[], $2::integer[], $3::text[], $4::float8[],"       \
    " $5::boolean[]) AS b(id, attempts, err, delay, ok)"                      \
    " WHERE o.id = b.id AND o.attempts = b.attempts"                          \
    " AND o.delivered_at IS NULL"


/*
 * Wakes every sender: a worker that is exiting (reload, shutdown) has
 * recorded retries that its own timer will not see to.
 */
#define NGX_HTTP_SESSION_SQL_WEBHOOK_WAKE                                     \
    "SELECT pg_notify('session_webhooks', '')"

/*
 * The queue for session_status: events not delivered nor failed (due,
 * scheduled or in flight), and the milliseconds since the oldest due one
 * became due (0: none is due).  Both over the partial index
 * webhook_outbox_due.
 */
#define NGX_HTTP_SESSION_SQL_WEBHOOK_QUEUE                                    \
    "SELECT count(*), coalesce(ceil(extract(epoch FROM now()"                 \
    " - min(next_attempt_at) FILTER (WHERE next_attempt_at <= now()))"        \
    " * 1000), 0)::bigint"                                                    \
    " FROM webhook_outbox"                                                    \
    " WHERE delivered_at IS NULL AND failed_at IS NULL"

/* the channels every worker listens on */
#define NGX_HTTP_SESSION_CHANNEL_AUTH    "session_auth"
#define NGX_HTTP_SESSION_CHANNEL_EVENTS  "session_events"
/* a webhook_outbox row was queued (src/sql/008_webhooks.sql) */
#define NGX_HTTP_SESSION_CHANNEL_WEBHOOKS  "session_webhooks"

#define NGX_HTTP_SESSION_SQL_LISTEN                                           \
    "LISTEN " NGX_HTTP_SESSION_CHANNEL_AUTH ";"                               \
    " LISTEN " NGX_HTTP_SESSION_CHANNEL_EVENTS ";"                           \
    " LISTEN " NGX_HTTP_SESSION_CHANNEL_WEBHOOKS

/*
 * The first statement of every connection (db_conn.c): the server
 * process that runs it, which is the one the connection started with
 * (PQbackendPID()) unless a pooler stands in between, and the
 * statement_timeout it runs under, in milliseconds
 */
#define NGX_HTTP_SESSION_SQL_PROBE                                            \
    "SELECT pg_backend_pid(), setting FROM pg_settings"                       \
    " WHERE name = 'statement_timeout'"

/*
 * Behind a transaction pooler, in the pipeline that prepares a
 * connection's statements (db_prepare.c, decisions.md (pg)): how many of
 * them the server holds under the names the module gave them (those of
 * the pool, ngx_session_<n>, and of the uploads, ngx_upload_<n>).  None:
 * the pooler renamed them, it keeps statements for its clients and
 * prepares them on whichever server connection runs the next Bind
 * (PgBouncer 1.21 and later with max_prepared_statements).  Some: it
 * passed them on as they are, to a server connection that the next
 * transaction may not get; then the second statement takes them back.
 * The second also comes first in the pipeline, for what a pipeline
 * that failed halfway left there.
 */
#define NGX_HTTP_SESSION_SQL_PREPARED_NAMES                                   \
    "SELECT count(*) FROM pg_catalog.pg_prepared_statements"                  \
    " WHERE name ~ '^ngx_(session|upload)_[0-9]+$'"

#define NGX_HTTP_SESSION_SQL_PREPARED_DROP                                    \
    "DO $$DECLARE s text; BEGIN"                                              \
    " FOR s IN SELECT name FROM pg_catalog.pg_prepared_statements"            \
    " WHERE name ~ '^ngx_(session|upload)_[0-9]+$' LOOP"                      \
    " EXECUTE format('DEALLOCATE %I', s); END LOOP; END$$"


#endif /* _NGX_HTTP_SESSION_SQL_H_INCLUDED_ */
