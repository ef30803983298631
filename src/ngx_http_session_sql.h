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


/* the channels every worker listens on */
#define NGX_HTTP_SESSION_CHANNEL_AUTH    "session_auth"
#define NGX_HTTP_SESSION_CHANNEL_EVENTS  "session_events"

#define NGX_HTTP_SESSION_SQL_LISTEN                                           \
    "LISTEN " NGX_HTTP_SESSION_CHANNEL_AUTH ";"                               \
    " LISTEN " NGX_HTTP_SESSION_CHANNEL_EVENTS


#endif /* _NGX_HTTP_SESSION_SQL_H_INCLUDED_ */
