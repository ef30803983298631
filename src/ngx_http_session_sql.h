/*
 * Every SQL statement the module sends, each named once, always with
 * $n parameters.
 */

#ifndef _NGX_HTTP_SESSION_SQL_H_INCLUDED_
#define _NGX_HTTP_SESSION_SQL_H_INCLUDED_


/* $1: SHA-256 of the key (bytea, binary) */
#define NGX_HTTP_SESSION_SQL_AUTH                                             \
    "SELECT k.project_id::text, p.account_id::text, a.status"                \
    " FROM api_keys k"                                                        \
    " JOIN projects p ON p.id = k.project_id"                                 \
    " JOIN accounts a ON a.id = p.account_id"                                 \
    " WHERE k.key_hash = $1 AND k.deleted_at IS NULL"


/* $1 project, $2 delivery mode, $3 webhook url or NULL, $4 ttl seconds */
#define NGX_HTTP_SESSION_SQL_SESSION_CREATE                                   \
    "SELECT outcome, body, id::text FROM session_create($1, $2, $3, $4)"

/* $1 project, $2 session id */
#define NGX_HTTP_SESSION_SQL_SESSION_GET                                      \
    "SELECT outcome, body FROM session_get($1, $2)"

#define NGX_HTTP_SESSION_SQL_SESSION_COMPLETE                                 \
    "SELECT outcome, body FROM session_complete($1, $2)"

/* $1 project, $2 status or NULL, $3 $4 cursor or NULLs, $5 rows */
#define NGX_HTTP_SESSION_SQL_SESSION_LIST                                     \
    "SELECT body, created_us, id::text"                                       \
    " FROM session_list($1, $2, $3, $4, $5)"

/* $1 batch size: (swept, more, ran), see src/sql/005_expiry_sweep.sql */
#define NGX_HTTP_SESSION_SQL_SWEEP                                            \
    "SELECT swept, more, ran FROM session_sweep($1)"


/*
 * $1 project, $2 key, $3 method, $4 path with query, $5 SHA-256 of the
 * body (bytea, binary), $6 lease seconds; results in binary format
 */
#define NGX_HTTP_SESSION_SQL_IDEM_CLAIM                                       \
    "SELECT outcome, claim, status, location, body"                           \
    " FROM idempotency_claim($1, $2, $3, $4, $5, $6)"

/* $1 project, $2 key, $3 claim (uuid, binary), $4 status, $5 type,
 * $6 location or NULL, $7 body (bytea, binary) */
#define NGX_HTTP_SESSION_SQL_IDEM_STORE                                       \
    "SELECT idempotency_store($1, $2, $3, $4, $5, $6, $7)"

/* $1 project, $2 key, $3 claim (uuid, binary) */
#define NGX_HTTP_SESSION_SQL_IDEM_RELEASE                                     \
    "SELECT idempotency_release($1, $2, $3)"


/* the channels every worker listens on */
#define NGX_HTTP_SESSION_CHANNEL_AUTH    "session_auth"
#define NGX_HTTP_SESSION_CHANNEL_EVENTS  "session_events"

#define NGX_HTTP_SESSION_SQL_LISTEN                                           \
    "LISTEN " NGX_HTTP_SESSION_CHANNEL_AUTH ";"                               \
    " LISTEN " NGX_HTTP_SESSION_CHANNEL_EVENTS


#endif /* _NGX_HTTP_SESSION_SQL_H_INCLUDED_ */
