/*
 * The LISTEN connection, one per node: worker 0's (db_relay.c passes
 * on to the other workers what they need).  Payloads on session_auth:
 *   "key:<64 hex of the key's SHA-256>"  a key was deleted
 *   "account:<uuid>"                     an account was suspended/activated
 * and on session_events, for the long polls of the node's workers:
 *   "uploaded:<uuid>", "completed:<uuid>", "expired:<uuid>"
 * and on session_webhooks, for the webhook dispatcher: "" (a row was
 * queued in webhook_outbox).
 * While the connection is down notifications are lost, so every
 * (re)connection empties the auth cache once LISTEN is in effect, and
 * every waiting long poll reads its session again.
 */

#include "ngx_http_session_db_listen.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_db_conn.h"
#include "ngx_http_session_db_relay.h"
#include "ngx_http_session_zone_auth.h"
#include "ngx_http_session_sql.h"


/* the node's LISTEN connection, in worker 0 (see db_relay.c) */
typedef struct {
    ngx_http_session_db_conn_t                *conn;
} ngx_http_session_listen_t;


static void ngx_http_session_listen_ready(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_listen_answer(ngx_http_session_db_conn_t *dc,
    PGresult *res);
static void ngx_http_session_listen_notify(ngx_http_session_db_conn_t *dc,
    PGnotify *n);
static void ngx_http_session_listen_event(ngx_http_session_db_conn_t *dc,
    PGnotify *n);
static ngx_int_t ngx_http_session_unhex(u_char *dst, const char *src,
    size_t len);


static ngx_http_session_listen_t  ngx_http_session_listen;


ngx_int_t
ngx_http_session_listen_init_process(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf)
{
    ngx_http_session_db_conn_t  *dc;

    /* worker 0 listens for the node, and passes on what others need */

    if (!ngx_http_session_relay_listens()) {
        return NGX_OK;
    }

    dc = ngx_http_session_db_conn_create(cycle, smcf, 1,
                                         "nginx session listen",
                                         ngx_http_session_listen_ready,
                                         ngx_http_session_listen_answer,
                                         NULL, NULL);
    if (dc == NULL) {
        return NGX_ERROR;
    }

    dc->notify = ngx_http_session_listen_notify;
    dc->data = smcf;

    /* session_db_listen: straight to PostgreSQL, past a pooler */

    if (smcf->listen_conninfo.data) {
        dc->conninfo = (const char *) smcf->listen_conninfo.data;
        dc->hosts = smcf->listen_hosts;
        dc->options = ngx_http_session_db_options(cycle,
                                                  &smcf->listen_options);

        if (dc->options == NULL) {
            return NGX_ERROR;
        }
    }

    ngx_http_session_listen.conn = dc;

    ngx_http_session_db_conn_add(dc);
    ngx_http_session_db_conn_open(dc);

    return NGX_OK;
}


void
ngx_http_session_listen_exit_process(ngx_cycle_t *cycle)
{
    if (ngx_http_session_listen.conn) {
        ngx_http_session_db_conn_close(ngx_http_session_listen.conn);
        ngx_http_session_listen.conn = NULL;
    }
}


static void
ngx_http_session_listen_ready(ngx_http_session_db_conn_t *dc)
{
    ngx_uint_t                     level;
    ngx_http_session_main_conf_t  *smcf = dc->data;

    /*
     * A pooler in session mode keeps LISTEN; one in transaction mode
     * runs it on a server connection that it then hands to others, and
     * no notification comes back.  Which mode it is it does not say:
     * the module listens all the same, and says so at every connect
     * unless session_db_pooler says "session"; an error where it says
     * "transaction" (session_db_listen should pass the pooler by).
     */

    if (dc->pooled && smcf->db_pooler != NGX_HTTP_SESSION_POOLER_SESSION) {
        level = (smcf->db_pooler == NGX_HTTP_SESSION_POOLER_OFF)
                ? NGX_LOG_WARN : NGX_LOG_ERR;

        ngx_log_error(level, dc->log, 0,
                      "session listen: the LISTEN connection goes "
                      "through a connection pooler (the server process "
                      "differs from the connection's): if it pools "
                      "transactions, no notification arrives; point "
                      "\"%s\" at PostgreSQL itself",
                      smcf->listen_conninfo.data ? "session_db_listen"
                                                 : "session_db");
    }

    if (ngx_http_session_db_conn_send(dc, NGX_HTTP_SESSION_SQL_LISTEN)
        != NGX_OK)
    {
        ngx_http_session_db_conn_fail(dc);
    }
}


/* LISTEN is in effect */

static void
ngx_http_session_listen_answer(ngx_http_session_db_conn_t *dc, PGresult *res)
{
    ngx_http_session_main_conf_t  *smcf = dc->data;

    ngx_http_session_db_conn_clear(dc, res);

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, dc->log, 0,
                   "session listen: listening, auth cache emptied");

    ngx_http_session_auth_cache_flush(smcf->shm_zone);

    /* a change may have come and gone unheard while this was down */
    ngx_http_session_relay_events_lost();
    ngx_http_session_relay_webhooks();
}


static void
ngx_http_session_listen_notify(ngx_http_session_db_conn_t *dc, PGnotify *n)
{
    size_t                         len;
    u_char                         hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
    ngx_http_session_main_conf_t  *smcf = dc->data;

    if (ngx_strcmp(n->relname, NGX_HTTP_SESSION_CHANNEL_EVENTS) == 0) {
        ngx_http_session_listen_event(dc, n);
        return;
    }

    if (ngx_strcmp(n->relname, NGX_HTTP_SESSION_CHANNEL_WEBHOOKS) == 0) {
        ngx_http_session_relay_webhooks();
        return;
    }

    if (ngx_strcmp(n->relname, NGX_HTTP_SESSION_CHANNEL_AUTH) != 0) {
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, dc->log, 0,
                   "session listen: auth \"%s\"", n->extra);

    len = ngx_strlen(n->extra);

    if (len == sizeof("key:") - 1 + 2 * NGX_HTTP_SESSION_KEY_HASH_LEN
        && ngx_strncmp(n->extra, "key:", sizeof("key:") - 1) == 0
        && ngx_http_session_unhex(hash, n->extra + sizeof("key:") - 1,
                                  NGX_HTTP_SESSION_KEY_HASH_LEN)
           == NGX_OK)
    {
        ngx_http_session_auth_cache_drop_key(smcf->shm_zone, hash);
        return;
    }

    if (len == sizeof("account:") - 1 + NGX_HTTP_SESSION_UUID_LEN
        && ngx_strncmp(n->extra, "account:", sizeof("account:") - 1) == 0)
    {
        ngx_http_session_auth_cache_drop_account(smcf->shm_zone,
                                  (u_char *) n->extra + sizeof("account:") - 1);
        return;
    }

    /* the plans changed (src/sql/011_plan_notify.sql): every key's entry */

    if (len == sizeof("plans") - 1 && ngx_strcmp(n->extra, "plans") == 0) {
        ngx_http_session_auth_cache_flush(smcf->shm_zone);
        return;
    }

    /* unknown payload: when in doubt, forget everything */

    ngx_log_error(NGX_LOG_WARN, dc->log, 0,
                  "session listen: unexpected notification \"%s\"", n->extra);

    ngx_http_session_auth_cache_flush(smcf->shm_zone);
}


/* "<event>:<session id>": the session's long polls read again */

static void
ngx_http_session_listen_event(ngx_http_session_db_conn_t *dc, PGnotify *n)
{
    u_char  *p, *colon;
    size_t   len;

    p = (u_char *) n->extra;
    len = ngx_strlen(p);

    colon = ngx_strlchr(p, p + len, ':');

    if (colon == NULL) {
        ngx_log_error(NGX_LOG_WARN, dc->log, 0,
                      "session listen: unexpected notification \"%s\"",
                      n->extra);
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, dc->log, 0,
                   "session listen: event \"%s\"", n->extra);

    /* uploaded, completed and expired all mean "look again" */

    ngx_http_session_relay_event(colon + 1, p + len - colon - 1);
}


static ngx_int_t
ngx_http_session_unhex(u_char *dst, const char *src, size_t len)
{
    ngx_int_t  hi, lo;

    while (len--) {
        hi = ngx_hextoi((u_char *) src, 1);
        lo = ngx_hextoi((u_char *) src + 1, 1);

        if (hi == NGX_ERROR || lo == NGX_ERROR) {
            return NGX_ERROR;
        }

        *dst++ = (u_char) (hi * 16 + lo);
        src += 2;
    }

    return NGX_OK;
}
