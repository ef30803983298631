/*
 * Every SQL statement sessionctl sends, in one place.
 *
 * Values always travel as $n parameters; the only SQL not listed here is
 * the text of the embedded migrations (build/ngx_http_session_migrations.h).
 */

#ifndef _NGX_HTTP_SESSION_CTL_SQL_H_INCLUDED_
#define _NGX_HTTP_SESSION_CTL_SQL_H_INCLUDED_


/* RFC 3339 UTC with seconds, e.g. 2026-11-21T10:00:00Z */
#define SESSIONCTL_SQL_TIME(col)                                              \
    "to_char(" col " AT TIME ZONE 'UTC', "                                    \
    "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"


#define SESSIONCTL_SQL_BEGIN      "BEGIN"
#define SESSIONCTL_SQL_COMMIT     "COMMIT"


/*
 * migrate: the server process, which is the connection's own
 * (PQbackendPID()) unless a connection pooler stands in between
 */
#define SESSIONCTL_SQL_BACKEND    "SELECT pg_backend_pid()"

/* migrate: $1 is SESSIONCTL_MIGRATE_LOCK, a bigint constant */

#define SESSIONCTL_SQL_LOCK                                                   \
    "SELECT pg_advisory_lock($1::bigint)"

#define SESSIONCTL_SQL_UNLOCK                                                 \
    "SELECT pg_advisory_unlock($1::bigint)"

#define SESSIONCTL_SQL_MIGRATIONS_TABLE                                       \
    "CREATE TABLE IF NOT EXISTS session_schema_migrations ("                  \
    " version     integer PRIMARY KEY,"                                       \
    " name        text,"                                                      \
    " applied_at  timestamptz DEFAULT now())"

#define SESSIONCTL_SQL_SCHEMA_VERSION                                         \
    "SELECT coalesce(max(version), 0) FROM session_schema_migrations"

/* $1 version: one row when that migration has been applied */
#define SESSIONCTL_SQL_MIGRATION_APPLIED                                      \
    "SELECT 1 FROM session_schema_migrations WHERE version = $1::integer"

#define SESSIONCTL_SQL_MIGRATION_DONE                                         \
    "INSERT INTO session_schema_migrations (version, name)"                   \
    " VALUES ($1::integer, $2::text)"

/*
 * $1 the schema version found before any migration of this run: a
 * migration that starts a setting one way for a new database and another
 * for an upgraded one reads it (src/sql/020_poll_wakeups.sql)
 */
#define SESSIONCTL_SQL_SCHEMA_BEFORE                                          \
    "SELECT set_config('sessionctl.schema_before', $1::text, false)"


/*
 * wakeups: whether a write wakes the polls of every session ("all") or
 * only of those a poll armed ("polled"); $1 the new mode
 */
#define SESSIONCTL_SQL_WAKEUPS_TABLE                                          \
    "SELECT to_regclass('session_wakeups') IS NOT NULL"

#define SESSIONCTL_SQL_WAKEUPS                                                \
    "SELECT CASE WHEN polled_only THEN 'polled' ELSE 'all' END"               \
    " FROM session_wakeups"

#define SESSIONCTL_SQL_WAKEUPS_SET                                            \
    "UPDATE session_wakeups SET polled_only = ($1::text = 'polled')"          \
    " RETURNING CASE WHEN polled_only THEN 'polled' ELSE 'all' END"


/*
 * plan set: $1 name, $2 whether --quota was given, $3 the quota (NULL for
 * unlimited), $4 whether --features was given, $5 the features joined
 * with commas ("" for none).  A new plan defaults to no limit and no
 * features; an existing plan keeps what was not given.
 */

#define SESSIONCTL_SQL_PLAN_SET                                               \
    "INSERT INTO plans AS p (name, monthly_quota, features)"                  \
    " VALUES ($1::text,"                                                      \
    "         CASE WHEN $2::boolean THEN $3::integer END,"                    \
    "         CASE WHEN $4::boolean"                                          \
    "              THEN string_to_array($5::text, ',')"                       \
    "              ELSE '{}'::text[] END)"                                    \
    " ON CONFLICT (name) DO UPDATE SET"                                       \
    "  monthly_quota = CASE WHEN $2::boolean"                                 \
    "                       THEN excluded.monthly_quota"                      \
    "                       ELSE p.monthly_quota END,"                        \
    "  features = CASE WHEN $4::boolean"                                      \
    "                  THEN excluded.features"                                \
    "                  ELSE p.features END,"                                  \
    "  updated_at = now()"                                                    \
    " RETURNING p.name, p.monthly_quota, array_to_string(p.features, ',')"


/* account create: $1 name, $2 plan; no row when the plan is unknown */

#define SESSIONCTL_SQL_ACCOUNT_CREATE                                         \
    "INSERT INTO accounts (name, plan)"                                       \
    " SELECT $1::text, name FROM plans WHERE name = $2::text"                 \
    " RETURNING id::text"

/* account suspend/activate: $1 id, $2 status */

#define SESSIONCTL_SQL_ACCOUNT_STATUS                                         \
    "UPDATE accounts SET status = $2::text WHERE id = $1::uuid"               \
    " RETURNING id::text, status"

/* every worker drops its cached auth answers for the account */

#define SESSIONCTL_SQL_NOTIFY_ACCOUNT                                         \
    "SELECT pg_notify('session_auth', 'account:' || $1::text)"


/* project create: $1 account id, $2 name, $3 webhook secret */

#define SESSIONCTL_SQL_PROJECT_CREATE                                         \
    "INSERT INTO projects (account_id, name, webhook_secret)"                 \
    " SELECT id, $2::text, $3::text FROM accounts WHERE id = $1::uuid"        \
    " RETURNING id::text"


/* key create: $1 project id, $2 SHA-256 (binary), $3 prefix, $4 hint */

#define SESSIONCTL_SQL_KEY_CREATE                                             \
    "INSERT INTO api_keys (project_id, key_hash, prefix, hint)"               \
    " SELECT id, $2::bytea, $3::text, $4::text"                               \
    " FROM projects WHERE id = $1::uuid"                                      \
    " RETURNING id::text"

/*
 * key list: $1 project id; no row when the project is unknown, one row
 * with a NULL key id when it has no keys
 */

#define SESSIONCTL_SQL_KEY_LIST                                               \
    "SELECT k.id::text, k.hint, "                                             \
    SESSIONCTL_SQL_TIME("k.created_at") ", "                                  \
    SESSIONCTL_SQL_TIME("k.deleted_at")                                       \
    " FROM projects p LEFT JOIN api_keys k ON k.project_id = p.id"            \
    " WHERE p.id = $1::uuid"                                                  \
    " ORDER BY k.created_at, k.id"

/* key delete: $1 key id; no row when unknown or already deleted */

#define SESSIONCTL_SQL_KEY_DELETE                                             \
    "UPDATE api_keys SET deleted_at = now()"                                  \
    " WHERE id = $1::uuid AND deleted_at IS NULL"                             \
    " RETURNING id::text"

/* every worker drops its cached auth answer for the key's hash */

#define SESSIONCTL_SQL_NOTIFY_KEY                                             \
    "SELECT pg_notify('session_auth', 'key:' || encode(key_hash, 'hex'))"     \
    " FROM api_keys WHERE id = $1::uuid"


/*
 * webhook list: $1 project or NULL, $2 session or NULL, $3 state or NULL,
 * $4 most rows; newest first
 */

#define SESSIONCTL_SQL_WEBHOOK_LIST                                           \
    "SELECT id, session_id, event_type, state, attempts, last_error, url,"    \
    " created, next_attempt, finished FROM ("                                 \
    "SELECT o.id::text AS id, o.session_id::text AS session_id,"              \
    " o.event_type, CASE"                                                     \
    " WHEN o.delivered_at IS NOT NULL THEN 'delivered'"                       \
    " WHEN o.failed_at IS NOT NULL THEN 'failed'"                             \
    " WHEN o.claimed_until > now() THEN 'sending'"                            \
    " ELSE 'pending' END AS state,"                                           \
    " o.attempts, o.last_error, o.url, o.created_at, o.id AS uid, "           \
    SESSIONCTL_SQL_TIME("o.created_at") " AS created, "                       \
    "CASE WHEN o.delivered_at IS NULL AND o.failed_at IS NULL THEN "          \
    SESSIONCTL_SQL_TIME("o.next_attempt_at") " END AS next_attempt, "         \
    SESSIONCTL_SQL_TIME("coalesce(o.delivered_at, o.failed_at)")              \
    " AS finished"                                                            \
    " FROM webhook_outbox o"                                                  \
    " WHERE ($1::uuid IS NULL OR o.project_id = $1::uuid)"                    \
    " AND ($2::uuid IS NULL OR o.session_id = $2::uuid)) e"                   \
    " WHERE ($3::text IS NULL OR state = $3::text)"                           \
    " ORDER BY created_at DESC, uid DESC LIMIT $4::integer"

/*
 * webhook retry: $1 event id.  No row: unknown; busy: a sender holds it
 * now (left alone: its outcome would be lost); else it is due again
 * with a fresh count of attempts, and every worker hears of it.
 */

#define SESSIONCTL_SQL_WEBHOOK_RETRY                                          \
    "WITH e AS (SELECT id, coalesce(claimed_until > now(), false) AS busy"    \
    " FROM webhook_outbox WHERE id = $1::uuid FOR UPDATE),"                   \
    " u AS (UPDATE webhook_outbox o SET delivered_at = NULL,"                 \
    " failed_at = NULL, attempts = 0, next_attempt_at = now(),"               \
    " claimed_until = NULL FROM e WHERE o.id = e.id AND NOT e.busy"           \
    " RETURNING o.id)"                                                        \
    " SELECT e.id::text, e.busy, pg_notify('session_webhooks', '')"           \
    " FROM e"


#endif /* _NGX_HTTP_SESSION_CTL_SQL_H_INCLUDED_ */
