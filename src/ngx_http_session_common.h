/*
 * ngx_http_session_module: configuration and request context shared by
 * every file of the module.
 */

#ifndef _NGX_HTTP_SESSION_COMMON_H_INCLUDED_
#define _NGX_HTTP_SESSION_COMMON_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_session_cursor.h"
#include "ngx_http_session_json.h"
#include "ngx_http_session_key.h"
#include "ngx_http_session_route.h"


typedef struct ngx_http_session_db_query_s  ngx_http_session_db_query_t;
typedef struct ngx_http_session_dbhosts_s   ngx_http_session_dbhosts_t;
typedef struct ngx_http_session_idem_s      ngx_http_session_idem_t;
typedef struct ngx_http_session_poll_s      ngx_http_session_poll_t;
typedef struct ngx_http_session_ctx_s       ngx_http_session_ctx_t;
typedef struct ngx_http_session_advance_s   ngx_http_session_advance_t;


/*
 * How a stage hands a request on without importing the stage that comes
 * next (or the one that called it): the caller passes the function in.
 */

/* the next stage: returns what a handler returns (NGX_DONE: later) */
typedef ngx_int_t (*ngx_http_session_next_pt)(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);

/* an asynchronous step is over: rc is its outcome; finalizes r */
typedef void (*ngx_http_session_resume_pt)(ngx_http_request_t *r,
    ngx_int_t rc);

/* takes an answer over before it is sent (ngx_http_session_response.c) */
typedef ngx_int_t (*ngx_http_session_answer_pt)(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_uint_t status, ngx_buf_t *b);


typedef struct {
    ngx_str_t                   db_conninfo;
    /* "options" of the conninfo, if any: the module appends to them */
    ngx_str_t                   db_options;
    /* the host list when it has names to resolve, else NULL */
    ngx_http_session_dbhosts_t *db_hosts;
    ngx_uint_t                  db_connections;
    /* most waiting reads sent on one connection at once, 1: one by one */
    ngx_uint_t                  db_batch;
    ngx_msec_t                  db_timeout;
    /* an idle connection is checked this often, 0: never */
    ngx_msec_t                  db_idle_check;
    /* connections per worker for streamed uploads (COPY), see db_copy.c */
    ngx_uint_t                  image_upload_connections;
    /* session_db_pooler: NGX_HTTP_SESSION_POOLER_OFF, ..._TRANSACTION */
    ngx_uint_t                  db_pooler;
    /* where "session_db_pooler" stands, for configuration errors */
    ngx_str_t                   db_pooler_file;
    ngx_uint_t                  db_pooler_line;

    /*
     * session_db_listen: the LISTEN connection's own conninfo, its
     * "options" and host list, as those of session_db; data NULL:
     * session_db's
     */
    ngx_str_t                   listen_conninfo;
    ngx_str_t                   listen_options;
    ngx_http_session_dbhosts_t *listen_hosts;

    ngx_shm_zone_t             *shm_zone;
    /* the workers' sockets and shared slots, see db_relay.c; NULL: none */
    void                       *relay;

    ngx_str_t                   key_prefix;
    ngx_msec_t                  auth_cache_ttl;
    /* failed lookups per client address per minute, 0: no limit */
    ngx_uint_t                  auth_fail_limit;
    /* session_limit_scope: NGX_HTTP_SESSION_SCOPE_NODE or _CLUSTER */
    ngx_uint_t                  limit_scope;

    ngx_flag_t                  webhook_allow_private;
    ngx_msec_t                  webhook_timeout;
    ngx_uint_t                  webhook_max_attempts;
    /* deliveries in flight per worker */
    ngx_uint_t                  webhook_concurrency;
    /* CA certificates for https targets; empty: the system's */
    ngx_str_t                   webhook_trusted_certificate;
    /* where it is written, for a file that cannot be loaded */
    ngx_str_t                   webhook_trusted_file;
    ngx_uint_t                  webhook_trusted_line;
    /* the TLS client context (ngx_ssl_t), NULL without SSL */
    void                       *webhook_ssl;

    /* how often each worker tries the expiry sweep, milliseconds */
    ngx_msec_t                  sweep_interval;
    /* session_retention in seconds; NGX_HTTP_SESSION_RETENTION_OFF */
    ngx_int_t                   retention;

    /* where the first "session_api" stands, for configuration errors */
    ngx_str_t                   api_file;
    ngx_uint_t                  api_line;

    /* where the first "session_status" stands */
    ngx_str_t                   status_file;
    ngx_uint_t                  status_line;

    unsigned                    enabled:1;
} ngx_http_session_main_conf_t;


typedef struct {
    /* a location of this server serves the API: nginx's errors are JSON */
    ngx_flag_t                  api;
} ngx_http_session_srv_conf_t;


typedef struct {
    ngx_flag_t                  api;
    /* session_status is served here (not inherited: never merged) */
    ngx_flag_t                  status_location;
    /* requests per key per minute, by NGX_HTTP_SESSION_CLASS_* */
    ngx_uint_t                  limits[NGX_HTTP_SESSION_NCLASSES];
    /* the same in decimal, as X-RateLimit-Limit sends them */
    ngx_str_t                   limit_text[NGX_HTTP_SESSION_NCLASSES];
    /* session lifetime, seconds */
    time_t                      ttl;
    time_t                      max_ttl;
    /* the largest image an upload may carry, bytes */
    off_t                       image_max_size;
    /*
     * the piece of an image held per transfer: an upload larger is
     * streamed to PostgreSQL, a download is read a slice at a time
     */
    size_t                      image_chunk_size;
    /*
     * a body announced up to this size is read into memory whole, never
     * into nginx's temporary file (0: as nginx reads any body)
     */
    size_t                      body_buffer_size;
    /* long poll: the wait without "timeout", and the largest, seconds */
    time_t                      poll_timeout;
    time_t                      poll_max_timeout;
    /* a waiting plain HTTP/1.x poll keeps its connection, not its request */
    ngx_flag_t                  poll_park;
} ngx_http_session_loc_conf_t;


/* what stage 1 learnt about the caller */
typedef struct {
    u_char                      hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
    u_char                      project_id[NGX_HTTP_SESSION_UUID_LEN];
    u_char                      account_id[NGX_HTTP_SESSION_UUID_LEN];
    /* the key's id ($session_key_id), never the key */
    u_char                      key_id[NGX_HTTP_SESSION_UUID_LEN];
    /* the account's plan: NGX_HTTP_SESSION_PLAN_*, and its quota */
    ngx_uint_t                  plan;
    ngx_uint_t                  quota;
} ngx_http_session_principal_t;

/*
 * What a key's lookup tells of its account's plan, cached with it: no
 * monthly quota, or the quota, and the delivery modes it allows.  What
 * the create statement goes by when the plan allows the mode (decision
 * (nc)); otherwise the database reads the plan and has the last word.
 */
#define NGX_HTTP_SESSION_PLAN_UNLIMITED  0x01
#define NGX_HTTP_SESSION_PLAN_LONG_POLL  0x02
#define NGX_HTTP_SESSION_PLAN_WEBHOOK    0x04
/* a monthly quota, in quota */
#define NGX_HTTP_SESSION_PLAN_QUOTA      0x08


/* session_limit_scope */
#define NGX_HTTP_SESSION_SCOPE_NODE     0
#define NGX_HTTP_SESSION_SCOPE_CLUSTER  1


/*
 * Stage 2's check-and-increment; a cache hit in stage 1 does it under the
 * same turn of the zone mutex as the lookup.
 */
typedef struct {
    time_t                      now;
    ngx_uint_t                  cls;
    ngx_uint_t                  limit;
    /*
     * NGX_OK, NGX_BUSY or NGX_ERROR once taken, NGX_DECLINED before;
     * with session_limit_scope cluster also NGX_AGAIN (the node holds no
     * budget: the request waits for a lease) and NGX_ABORT (no lease,
     * the database is unavailable)
     */
    ngx_int_t                   rc;
    ngx_uint_t                  remaining;
    /*
     * the zone-full ALERT this take is to write once the mutex is
     * released: counters of other keys evicted to make room and keys seen
     * valid forgotten since the last ALERT (0 and 0: none)
     */
    ngx_uint_t                  evicted;
    ngx_uint_t                  forgotten;

    /*
     * Cluster scope (src/zone/ngx_http_session_zone_lease.c): a lease to
     * ask for, 0: none (with NGX_AGAIN for this request, with NGX_OK
     * ahead of need), the window it is for in epoch minutes, and the
     * stamp that marks it in flight in the zone (0: not marked)
     */
    uint32_t                    lease;
    uint32_t                    minute;
    uint32_t                    asked;
    /* a lease in flight longer than this is taken for lost */
    uint32_t                    stale;
    /*
     * what the node was leased in the window, told to the database when
     * known is set (it agreed with the row at an answer, decision (qk))
     */
    uint32_t                    took;
    unsigned                    known:1;
    unsigned                    cluster:1;
    /* the lease is the next window's first block, asked for near the end */
    unsigned                    next:1;
} ngx_http_session_take_t;


/* "Retry-After" and three X-RateLimit values, formatted by hand */
#define NGX_HTTP_SESSION_RL_BUF_LEN  (4 * NGX_HTTP_SESSION_DECIMAL_MAX)


/* how far the access-phase handler took a request (ctx->stage) */
#define NGX_HTTP_SESSION_STAGE_NEW       0
/* well formed, not in the auth cache: the database decides */
#define NGX_HTTP_SESSION_STAGE_KEYED     1
/* stages 1 and 2 passed, the rate-limit headers are set */
#define NGX_HTTP_SESSION_STAGE_ADMITTED  2
/* stage 1 passed; stage 2 waits for a lease (session_limit_scope cluster) */
#define NGX_HTTP_SESSION_STAGE_LEASE     3


struct ngx_http_session_ctx_s {
    ngx_http_session_principal_t  principal;
    ngx_http_session_route_t      route;
    ngx_http_session_take_t       take;

    /* the header for a fixed error body, which stays in static memory */
    ngx_buf_t                     err_buf;
    u_char                        rl_buf[NGX_HTTP_SESSION_RL_BUF_LEN];
    u_char                        content_length[
                                               NGX_HTTP_SESSION_DECIMAL_MAX];

    ngx_uint_t                    cache_generation;
    /* ngx_http_session_err_e of the answer when a stage refuses */
    ngx_uint_t                    err;
    ngx_uint_t                    method;
    ngx_uint_t                    stage;
    ngx_uint_t                    delivery_mode;
    /* the project id, NUL-terminated, for query parameters */
    u_char                       *project;
    ngx_http_session_db_query_t  *query;
    /* a POST with an Idempotency-Key */
    ngx_http_session_idem_t      *idem;
    /*
     * the key (NUL-terminated) once the body is read: the endpoints that
     * do work then send their keyed statements, which keep the answer
     * with the work
     */
    u_char                       *idem_key;
    /* a long poll */
    ngx_http_session_poll_t      *poll;

    /* where a database lookup of the key, or a lease, continues it */
    ngx_http_session_resume_pt    resume;
    /* gets the answer before it is sent, once (see the response room) */
    ngx_http_session_answer_pt    answer_hook;

    /* the body of an error that nginx raised, rendered as JSON */
    ngx_buf_t                    *json_error;

    /* the request body filter's count, and its limit while reading */
    off_t                         body_received;
    off_t                         body_limit;

    /*
     * a body read into memory (session_body_buffer_size): where it is
     * gathered, and the endpoint's handler once it is whole
     */
    ngx_buf_t                    *body_buf;
    ngx_http_client_body_handler_pt  body_handler;

    /* SHA-256 of the request body, once something needed it */
    u_char                        body_sha256[32];

    /* a lookup counted against the client address, or waiting to be */
    ngx_http_session_advance_t   *advance;

    unsigned                      own_response:1;
    unsigned                      json_error_sent:1;
    unsigned                      body_hashed:1;
    /* the keyed statement did the work and kept its answer */
    unsigned                      idem_kept:1;
};


extern ngx_module_t  ngx_http_session_module;


/* adds "name: value" to the answer's headers; NULL when out of memory */

static ngx_inline ngx_table_elt_t *
ngx_http_session_header_add(ngx_http_request_t *r, ngx_str_t *name,
    u_char *value, size_t len)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NULL;
    }

    h->hash = 1;
    h->key = *name;
    h->value.data = value;
    h->value.len = len;

    return h;
}


/* the request's context, made on first use; NULL when out of memory */

static ngx_inline ngx_http_session_ctx_t *
ngx_http_session_get_ctx(ngx_http_request_t *r)
{
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
    if (ctx) {
        return ctx;
    }

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_session_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    ngx_http_set_ctx(r, ctx, ngx_http_session_module);

    return ctx;
}


/*
 * A stamp of now, a millisecond time that says both "when" and, by
 * being 0, "never": never 0, and never ahead of now, so that "now -
 * stamp" is the time since (0 in the same millisecond).  "now | 1" was
 * one ahead of an even now and read as 2^32 - 1 ms (or 2^64 - 1) in that
 * millisecond.  Kept in fewer bits, it is cut there too: the cut of the
 * largest value is the largest of the narrower type, one behind 0.
 */

static ngx_inline ngx_msec_t
ngx_http_session_stamp(ngx_msec_t now)
{
    return now ? now : (ngx_msec_t) -1;
}


/*
 * The worker is on its way out (a graceful shutdown, a quit, a
 * terminate): nothing new is begun, no timer is set again
 */

static ngx_inline ngx_uint_t
ngx_http_session_stopping(void)
{
    return ngx_exiting || ngx_quit || ngx_terminate;
}


/*
 * What a structure holds and lets go of before its end: released when
 * held, and forgotten, so that a second release finds nothing
 */

static ngx_inline void
ngx_http_session_destroy_pool(ngx_pool_t **pool)
{
    if (*pool) {
        ngx_destroy_pool(*pool);
        *pool = NULL;
    }
}


static ngx_inline void
ngx_http_session_resolve_done(ngx_resolver_ctx_t **ctx)
{
    if (*ctx) {
        ngx_resolve_name_done(*ctx);
        *ctx = NULL;
    }
}


/*
 * A walk over the elements of list: *part its first part and *i 0 to
 * begin with; the next element each call, NULL after the last
 */

static ngx_inline void *
ngx_http_session_list_next(ngx_list_t *list, ngx_list_part_t **part,
    ngx_uint_t *i)
{
    while (*i >= (*part)->nelts) {
        if ((*part)->next == NULL) {
            return NULL;
        }

        *part = (*part)->next;
        *i = 0;
    }

    return (u_char *) (*part)->elts + (*i)++ * list->size;
}


#endif /* _NGX_HTTP_SESSION_COMMON_H_INCLUDED_ */
