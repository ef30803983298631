/*
 * Every SQL statement the module sends, each named once, always with
 * $n parameters.
 */

#ifndef _NGX_HTTP_SESSION_SQL_H_INCLUDED_
#define _NGX_HTTP_SESSION_SQL_H_INCLUDED_


/* $1: SHA-256 of the key (bytea, binary) */
#define NGX_HTTP_SESSION_SQL_AUTH                                             \
    "SELECT k.project_id::text, p.account_id::text, a.status, k.id::text"    \
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


/*
 * $1 project, $2 session id, $3 content type, $4 SHA-256 (bytea,
 * binary), $5 the bytes (bytea, binary)
 */
#define NGX_HTTP_SESSION_SQL_IMAGE_UPLOAD                                     \
    "SELECT outcome, body, id::text"                                          \
    " FROM image_upload($1, $2, $3, $4, $5)"

/* $1 project, $2 session id, $3 acknowledged or NULL, $4 cursor, $5 rows */
#define NGX_HTTP_SESSION_SQL_IMAGE_LIST                                       \
    "SELECT outcome, body, last_sequence, has_more"                           \
    " FROM image_list($1, $2, $3, $4, $5)"

/* $1 project, $2 session id, $3 image id or NULL (malformed) */
#define NGX_HTTP_SESSION_SQL_IMAGE_GET                                        \
    "SELECT outcome, body FROM image_get($1, $2, $3)"

#define NGX_HTTP_SESSION_SQL_IMAGE_ACK                                        \
    "SELECT outcome, body FROM image_ack($1, $2, $3)"

/*
 * $1 project, $2 session id, $3 image id or NULL, $4 If-None-Match tags
 * (text[]) or NULL, $5 whether the bytes are wanted (false for HEAD);
 * asked for in binary result format
 */
#define NGX_HTTP_SESSION_SQL_IMAGE_CONTENT                                    \
    "SELECT outcome, content_type, etag, size, not_modified, content"         \
    " FROM image_content($1, $2, $3, $4, $5)"


/*
 * $1 project, $2 session id, $3 most images: (outcome, body, images), see
 * src/sql/006_poll.sql
 */
#define NGX_HTTP_SESSION_SQL_POLL                                             \
    "SELECT outcome, body, images FROM session_poll($1, $2, $3)"


/* the channels every worker listens on */
#define NGX_HTTP_SESSION_CHANNEL_AUTH    "session_auth"
#define NGX_HTTP_SESSION_CHANNEL_EVENTS  "session_events"

#define NGX_HTTP_SESSION_SQL_LISTEN                                           \
    "LISTEN " NGX_HTTP_SESSION_CHANNEL_AUTH ";"                               \
    " LISTEN " NGX_HTTP_SESSION_CHANNEL_EVENTS


#endif /* _NGX_HTTP_SESSION_SQL_H_INCLUDED_ */
