/*
 * Authentication: the Authorization header, the shared-memory cache, and
 * the database.  The key itself is never logged nor kept: only its hash.
 */

#include "ngx_http_session_auth.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_request.h"
#include "ngx_http_session_limit.h"
#include "ngx_http_session_zone_auth.h"
#include "ngx_http_session_zone_fail.h"
#include "ngx_http_session_sql.h"
#include "ngx_http_session_stats.h"
#include "ngx_http_session_window.h"


/*
 * The memo: per worker, the SHA-256 of the last keys seen, so that a busy
 * key is not hashed again on every request.  It holds the key as the
 * client sent it next to its hash in this process's memory only: never in
 * the shared zone, never in a log, wiped when the worker exits.  A slot
 * is found from the key's hex digits mixed with a per-process random
 * seed, and the whole key is compared in constant time, so a client
 * learns nothing of a cached key it does not already hold.  Which key is
 * valid is still decided by hash, in the auth cache or the database: the
 * memo only saves the computation of a pure function (docs/decisions.md,
 * (ad)).
 */

#define NGX_HTTP_SESSION_MEMO_SIZE  256    /* a power of two */

/* buckets of the per-worker table of lookups in flight */
#define NGX_HTTP_SESSION_FLIGHTS    64     /* a power of two */


typedef struct {
    u_char                        key[NGX_HTTP_SESSION_KEY_LEN];
    u_char                        used;
    u_char                        hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
} ngx_http_session_memo_t;


/*
 * A lookup in flight: one query per key per worker, whatever the number
 * of requests that wait for its answer.  It lives in a pool of its own,
 * so that it outlives any of them.
 */
typedef struct {
    ngx_queue_t                   queue;
    ngx_queue_t                   waiters;
    ngx_pool_t                   *pool;
    ngx_uint_t                    generation;
    u_char                        hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
} ngx_http_session_flight_t;


/*
 * The request's lookup as its client address's failure limit sees it:
 * counted in advance while under way (reserved), or waiting for the
 * address's other lookups (waiting).  In the request's pool, with a
 * cleanup: a client that goes away with a lookup under way leaves it
 * counted as a failure, and a waiting one takes its timer with it.
 */
struct ngx_http_session_advance_s {
    ngx_http_request_t           *request;
    ngx_event_t                   wait;
    /* when the wait began, and the next pause */
    ngx_msec_t                    started;
    ngx_msec_t                    delay;
    u_char                        addr[NGX_HTTP_SESSION_KEY_HASH_LEN];
    /* the minute the lookup was counted in */
    uint32_t                      since;
    unsigned                      reserved:1;
    unsigned                      waiting:1;
};

/* a lookup waiting for the address's others looks again after this (ms) */
#define NGX_HTTP_SESSION_ADVANCE_FIRST  10
#define NGX_HTTP_SESSION_ADVANCE_MAX    200


static ngx_int_t ngx_http_session_auth_hash(const u_char *token,
    u_char *hash);
static ngx_int_t ngx_http_session_auth_fail_check(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_uint_t op);
static void ngx_http_session_auth_fail_add(ngx_http_request_t *r);
static void ngx_http_session_advance_end(ngx_http_session_advance_t *adv,
    ngx_uint_t op);
static ngx_http_session_advance_t *ngx_http_session_advance(
    ngx_http_request_t *r, ngx_http_session_ctx_t *ctx);
static void ngx_http_session_advance_cleanup(void *data);
static ngx_int_t ngx_http_session_auth_start(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx);
static void ngx_http_session_auth_waited(ngx_event_t *ev);
static void ngx_http_session_auth_addr(ngx_http_request_t *r, u_char *key);
static ngx_http_session_flight_t *ngx_http_session_flight_find(u_char *hash);
static ngx_http_session_flight_t *ngx_http_session_flight_start(
    ngx_http_request_t *r, ngx_http_session_ctx_t *ctx);
static ngx_uint_t ngx_http_session_auth_flag(PGresult *res, int col,
    ngx_uint_t flag);
static void ngx_http_session_auth_done(ngx_http_session_db_query_t *q,
    PGresult *res);


static ngx_http_session_memo_t  ngx_http_session_memo[
                                                NGX_HTTP_SESSION_MEMO_SIZE];
static uint64_t                 ngx_http_session_memo_seed;

/* ngx_hash_key_lc() of "Authorization", as the header parser computes it */
static ngx_uint_t               ngx_http_session_auth_header_hash;

static ngx_queue_t              ngx_http_session_flights[
                                                NGX_HTTP_SESSION_FLIGHTS];

static ngx_str_t  ngx_http_session_auth_retry_after =
    ngx_string("Retry-After");


void
ngx_http_session_auth_init_process(void)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_SESSION_FLIGHTS; i++) {
        ngx_queue_init(&ngx_http_session_flights[i]);
    }

    ngx_http_session_memo_seed = ((uint64_t) ngx_random() << 32)
                                 ^ (uint64_t) ngx_random();

    ngx_http_session_auth_header_hash =
        ngx_hash_key_lc((u_char *) "Authorization",
                        sizeof("Authorization") - 1);
}


void
ngx_http_session_auth_exit_process(void)
{
    ngx_explicit_memzero(ngx_http_session_memo,
                         sizeof(ngx_http_session_memo));
}


ngx_int_t
ngx_http_session_auth(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx)
{
    u_char                        *value, *end;
    ngx_uint_t                     n;
    ngx_list_t                    *headers;
    ngx_list_part_t               *part;
    ngx_table_elt_t               *h, *auth;
    const u_char                  *token;
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_get_module_main_conf(r, ngx_http_session_module);

    /*
     * Two Authorization headers are refused (docs/decisions.md, (a)),
     * whichever nginx let them through.  The parser has hashed every
     * header's lower-case name: one compare per header, and the name only
     * when the hash matches.
     */

    auth = NULL;
    headers = &r->headers_in.headers;
    part = &headers->part;
    n = 0;

    while ((h = ngx_http_session_list_next(headers, &part, &n)) != NULL) {
        if (h->hash == ngx_http_session_auth_header_hash
            && h->key.len == sizeof("authorization") - 1
            && ngx_memcmp(h->lowcase_key, "authorization",
                          sizeof("authorization") - 1)
               == 0)
        {
            if (auth) {
                ctx->err = NGX_HTTP_SESSION_ERR_BAD_REQUEST;
                return NGX_DECLINED;
            }

            auth = h;
        }
    }

    if (auth == NULL) {
        ctx->err = NGX_HTTP_SESSION_ERR_KEY_REQUIRED;
        return NGX_DECLINED;
    }

    ngx_http_session_header_value(auth, &value, &end);

    if (ngx_http_session_key_parse_header(value, end - value,
                                          smcf->key_prefix.data, &token)
        != NGX_HTTP_SESSION_KEY_OK)
    {
        ctx->err = NGX_HTTP_SESSION_ERR_KEY_MALFORMED;
        return NGX_DECLINED;
    }

    if (ngx_http_session_auth_hash(token, ctx->principal.hash) != NGX_OK) {
        ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;
        return NGX_DECLINED;
    }

    ngx_http_session_limit_prepare(r, ctx);

    switch (ngx_http_session_auth_cache_get(smcf->shm_zone, &ctx->principal,
                                            &ctx->cache_generation,
                                            &ctx->take))
    {
    case NGX_HTTP_SESSION_AUTH_VALID:
        ngx_http_session_stat(auth_hits, 1);
        return NGX_OK;

    case NGX_HTTP_SESSION_AUTH_INVALID:
        ngx_http_session_stat(auth_hits, 1);

        /*
         * a failure of the address, counted, or 429 at its limit: only
         * a key found valid is served past it (docs/api.md §10.12)
         */

        if (ngx_http_session_auth_fail_check(r, ctx,
                                             NGX_HTTP_SESSION_FAIL_COUNT)
            == NGX_BUSY)
        {
            ctx->err = NGX_HTTP_SESSION_ERR_KEY_INVALID;
        }

        return NGX_DECLINED;

    case NGX_HTTP_SESSION_AUTH_SUSPENDED:
        ngx_http_session_stat(auth_hits, 1);
        ctx->err = NGX_HTTP_SESSION_ERR_SUSPENDED;
        return NGX_DECLINED;

    case NGX_HTTP_SESSION_AUTH_SEEN:

        /*
         * Found valid within the hour: looked up again, whatever its
         * address's failures (docs/api.md §10), and counted as a
         * failure only when it turns out deleted.
         */

        ngx_http_session_stat(auth_misses, 1);
        return NGX_BUSY;

    default:
        ngx_http_session_stat(auth_misses, 1);

        /* joining a lookup that runs costs nothing and counts nothing */

        return ngx_http_session_auth_fail_check(r, ctx,
                   ngx_http_session_flight_find(ctx->principal.hash)
                   ? NGX_HTTP_SESSION_FAIL_CHECK
                   : NGX_HTTP_SESSION_FAIL_RESERVE);
    }
}


ngx_int_t
ngx_http_session_auth_lookup(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_http_session_resume_pt resume)
{
    ngx_http_session_advance_t  *adv;

    ctx->resume = resume;

    adv = ctx->advance;

    if (adv == NULL || !adv->waiting) {
        return ngx_http_session_auth_start(r, ctx);
    }

    /* the address's lookups under way are at its limit: wait for one */

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "session auth: waiting for the address's lookups");

    adv->started = ngx_current_msec;
    adv->delay = NGX_HTTP_SESSION_ADVANCE_FIRST;

    adv->wait.handler = ngx_http_session_auth_waited;
    adv->wait.data = adv;
    adv->wait.log = r->connection->log;

    ngx_add_timer(&adv->wait, adv->delay);

    return NGX_AGAIN;
}


/* the lookup of the key: started, or joined when one runs */

static ngx_int_t
ngx_http_session_auth_start(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx)
{
    ngx_http_session_flight_t   *f;
    ngx_http_session_waiter_t   *w;
    ngx_http_session_advance_t  *adv;

    adv = ctx->advance;

    w = ngx_http_session_waiter_create(r);
    f = NULL;

    if (w == NULL) {
        ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;

    } else {
        f = ngx_http_session_flight_find(ctx->principal.hash);

        if (f) {
            ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                           "session auth: cache miss, joining a lookup");

        } else {
            ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                           "session auth: cache miss, asking the database");

            f = ngx_http_session_flight_start(r, ctx);
        }
    }

    if (f == NULL) {
        /* no lookup, no failure: the advance is given back */

        if (adv && adv->reserved) {
            ngx_http_session_advance_end(adv, NGX_HTTP_SESSION_FAIL_REFUND);
        }

        return NGX_DECLINED;
    }

    ngx_http_session_waiter_join(w, &f->waiters, f);

    return NGX_AGAIN;
}


/*
 * A lookup that waited for its address's others looks again: the
 * address's failures may have reached the limit meanwhile (429), a
 * lookup of the same key may run in this worker (joined), one of the
 * others may have ended (started); else it waits on, at most
 * session_db_timeout in all (then 503: the lookups are that slow).
 */

static void
ngx_http_session_auth_waited(ngx_event_t *ev)
{
    ngx_int_t                      rc;
    ngx_connection_t              *c;
    ngx_http_request_t            *r;
    ngx_http_session_ctx_t        *ctx;
    ngx_http_session_advance_t    *adv;
    ngx_http_session_main_conf_t  *smcf;

    adv = ev->data;
    r = adv->request;
    c = r->connection;
    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
    smcf = ngx_http_get_module_main_conf(r, ngx_http_session_module);

    adv->waiting = 0;

    rc = ngx_http_session_auth_fail_check(r, ctx,
                   ngx_http_session_flight_find(ctx->principal.hash)
                   ? NGX_HTTP_SESSION_FAIL_CHECK
                   : NGX_HTTP_SESSION_FAIL_RESERVE);

    if (rc == NGX_BUSY && adv->waiting) {

        if (ngx_current_msec - adv->started < smcf->db_timeout) {
            adv->delay = ngx_min(adv->delay * 2,
                                 NGX_HTTP_SESSION_ADVANCE_MAX);
            ngx_add_timer(&adv->wait,
                          ngx_min(adv->delay, smcf->db_timeout
                                  - (ngx_current_msec - adv->started)));
            return;
        }

        ngx_log_error(NGX_LOG_WARN, c->log, 0,
                      "session auth: the client address's lookups did not"
                      " end within session_db_timeout");

        adv->waiting = 0;
        ctx->err = NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE;
        rc = NGX_DECLINED;
    }

    if (rc == NGX_BUSY) {
        rc = ngx_http_session_auth_start(r, ctx);

        if (rc == NGX_AGAIN) {
            return;
        }
    }

    ctx->resume(r, rc);
    ngx_http_run_posted_requests(c);
}


/*
 * Stage 1 for a key not seen valid within the hour, on a cache miss or
 * known unknown: a client address with session_auth_fail_limit failures
 * this minute gets 429 without a lookup.  A known unknown counts its
 * failure (COUNT).  Starting a lookup counts it as under way (RESERVE)
 * until its answer says whether it failed, so that however many lookups
 * a client starts at once, its failures and lookups under way never pass
 * the limit together; when they are at it with failures to spare, the
 * lookup waits (the request's advance is waiting) until one ends.
 * Joining a lookup that runs only checks (CHECK).  NGX_BUSY: under the
 * limit (and op done, or waiting); NGX_DECLINED: refused, ctx->err says.
 */

static ngx_int_t
ngx_http_session_auth_fail_check(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_uint_t op)
{
    u_char                        *p;
    size_t                         len;
    time_t                         now;
    ngx_time_t                    *tp;
    ngx_http_session_fail_t        f;
    ngx_http_session_advance_t    *adv;
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_get_module_main_conf(r, ngx_http_session_module);

    if (smcf->auth_fail_limit == 0) {
        return NGX_BUSY;
    }

    /* a lookup's holder first: none is counted without one to end it */

    adv = NULL;

    if (op == NGX_HTTP_SESSION_FAIL_RESERVE) {
        adv = ngx_http_session_advance(r, ctx);
        if (adv == NULL) {
            ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;
            return NGX_DECLINED;
        }
    }

    tp = ngx_timeofday();

    ngx_http_session_auth_addr(r, f.key);
    f.op = op;
    f.limit = (uint32_t) smcf->auth_fail_limit;
    f.minute = (uint32_t) ngx_http_session_window_minute(tp->sec);

    switch (ngx_http_session_auth_fail(smcf->shm_zone, &f)) {

    case NGX_OK:
        if (adv) {
            ngx_memcpy(adv->addr, f.key, NGX_HTTP_SESSION_KEY_HASH_LEN);
            adv->since = f.minute;
            adv->reserved = 1;
        }

        return NGX_BUSY;

    case NGX_AGAIN:
        adv->waiting = 1;
        return NGX_BUSY;

    default: /* NGX_BUSY */
        break;
    }

    /* the minute counted in may be ahead of this worker's clock */

    now = (time_t) f.minute * NGX_HTTP_SESSION_WINDOW_SECONDS;
    now = ngx_max(now, tp->sec);

    p = ctx->rl_buf;
    len = ngx_http_session_decimal(p,
                   ngx_http_session_window_retry_after(now, tp->msec))
          - p;

    if (ngx_http_session_header_add(r, &ngx_http_session_auth_retry_after,
                                    p, len)
        == NULL)
    {
        ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;
        return NGX_DECLINED;
    }

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "session auth: the client is at its failure limit");

    ctx->err = NGX_HTTP_SESSION_ERR_AUTH_FAIL_LIMITED;

    return NGX_DECLINED;
}


/* a failure of the request's address, whatever its count */

static void
ngx_http_session_auth_fail_add(ngx_http_request_t *r)
{
    ngx_http_session_fail_t        f;
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_get_module_main_conf(r, ngx_http_session_module);

    if (smcf->auth_fail_limit == 0) {
        return;
    }

    ngx_http_session_auth_addr(r, f.key);
    f.op = NGX_HTTP_SESSION_FAIL_ADD;
    f.limit = (uint32_t) smcf->auth_fail_limit;
    f.minute = (uint32_t) ngx_http_session_window_minute(ngx_time());

    (void) ngx_http_session_auth_fail(smcf->shm_zone, &f);
}


/* the end of the request's lookup under way: failed (CONFIRM) or not */

static void
ngx_http_session_advance_end(ngx_http_session_advance_t *adv, ngx_uint_t op)
{
    ngx_http_session_fail_t        f;
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                               ngx_http_session_module);

    ngx_memcpy(f.key, adv->addr, NGX_HTTP_SESSION_KEY_HASH_LEN);
    f.op = op;
    f.limit = (uint32_t) smcf->auth_fail_limit;
    f.minute = (uint32_t) ngx_http_session_window_minute(ngx_time());
    f.since = adv->since;

    adv->reserved = 0;

    (void) ngx_http_session_auth_fail(smcf->shm_zone, &f);
}


/* the request's advance, made at its first use */

static ngx_http_session_advance_t *
ngx_http_session_advance(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx)
{
    ngx_pool_cleanup_t          *cln;
    ngx_http_session_advance_t  *adv;

    if (ctx->advance) {
        return ctx->advance;
    }

    cln = ngx_pool_cleanup_add(r->pool, sizeof(ngx_http_session_advance_t));
    if (cln == NULL) {
        return NULL;
    }

    adv = cln->data;
    ngx_memzero(adv, sizeof(ngx_http_session_advance_t));

    adv->request = r;

    cln->handler = ngx_http_session_advance_cleanup;

    ctx->advance = adv;

    return adv;
}


/* the request goes away: its lookup under way counts as a failure */

static void
ngx_http_session_advance_cleanup(void *data)
{
    ngx_http_session_advance_t  *adv = data;

    if (adv->wait.timer_set) {
        ngx_del_timer(&adv->wait);
    }

    if (adv->reserved) {
        ngx_http_session_advance_end(adv, NGX_HTTP_SESSION_FAIL_CONFIRM);
    }
}


/*
 * The client address ($remote_addr, after realip if any) as a tree key:
 * four bytes of hash first (the tree orders by them), then the family
 * and the address; every Unix-socket client shares one.
 */

static void
ngx_http_session_auth_addr(ngx_http_request_t *r, u_char *key)
{
    uint32_t              h;
    struct sockaddr      *sa;
    struct sockaddr_in   *sin;
#if (NGX_HAVE_INET6)
    struct sockaddr_in6  *sin6;
#endif

    ngx_memzero(key, NGX_HTTP_SESSION_KEY_HASH_LEN);

    sa = r->connection->sockaddr;
    key[4] = (u_char) sa->sa_family;

    switch (sa->sa_family) {

    case AF_INET:
        sin = (struct sockaddr_in *) sa;
        ngx_memcpy(key + 8, &sin->sin_addr, 4);
        break;

#if (NGX_HAVE_INET6)
    case AF_INET6:
        sin6 = (struct sockaddr_in6 *) sa;
        ngx_memcpy(key + 8, &sin6->sin6_addr, 16);
        break;
#endif

    default:
        break;
    }

    h = ngx_murmur_hash2(key + 4, NGX_HTTP_SESSION_KEY_HASH_LEN - 4);

    key[0] = (u_char) (h >> 24);
    key[1] = (u_char) (h >> 16);
    key[2] = (u_char) (h >> 8);
    key[3] = (u_char) h;
}


/* the per-worker table of lookups in flight */

static ngx_http_session_flight_t *
ngx_http_session_flight_find(u_char *hash)
{
    ngx_queue_t                *b, *q;
    ngx_http_session_flight_t  *f;

    b = &ngx_http_session_flights[hash[4] & (NGX_HTTP_SESSION_FLIGHTS - 1)];

    for (q = ngx_queue_head(b);
         q != ngx_queue_sentinel(b);
         q = ngx_queue_next(q))
    {
        f = ngx_queue_data(q, ngx_http_session_flight_t, queue);

        if (ngx_memcmp(f->hash, hash, NGX_HTTP_SESSION_KEY_HASH_LEN) == 0) {
            return f;
        }
    }

    return NULL;
}


static ngx_http_session_flight_t *
ngx_http_session_flight_start(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx)
{
    ngx_pool_t                   *pool;
    ngx_http_session_flight_t    *f;
    ngx_http_session_db_query_t  *q;

    pool = ngx_create_pool(512, ngx_cycle->log);
    if (pool == NULL) {
        goto failed;
    }

    f = ngx_palloc(pool, sizeof(ngx_http_session_flight_t));
    if (f == NULL) {
        goto failed;
    }

    q = ngx_http_session_db_query_create_pool(pool, ngx_cycle->log,
                                              NGX_HTTP_SESSION_SQL_AUTH,
                                              ngx_http_session_auth_done);
    if (q == NULL) {
        goto failed;
    }

    f->pool = pool;
    f->generation = ctx->cache_generation;
    ngx_memcpy(f->hash, ctx->principal.hash, NGX_HTTP_SESSION_KEY_HASH_LEN);
    ngx_queue_init(&f->waiters);

    /* prepared once per connection; the answer is read as text */
    q->stmt = NGX_HTTP_SESSION_STMT_AUTH;

    q->data = f;
    ngx_http_session_db_param(q, f->hash, NGX_HTTP_SESSION_KEY_HASH_LEN, 1);

    if (ngx_http_session_db_query_run(q) != NGX_OK) {
        ngx_destroy_pool(pool);
        ctx->err = NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE;
        return NULL;
    }

    ngx_queue_insert_tail(&ngx_http_session_flights[f->hash[4]
                                          & (NGX_HTTP_SESSION_FLIGHTS - 1)],
                          &f->queue);

    return f;

failed:

    if (pool) {
        ngx_destroy_pool(pool);
    }

    ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;

    return NULL;
}


/*
 * The SHA-256 of a well-formed key, from the memo when it is there.  The
 * memo is keyed by the token as it came, so "sess_AB.." and "sess_ab.."
 * may take two slots: both map to the hash of the lower-case form.
 */

static ngx_int_t
ngx_http_session_auth_hash(const u_char *token, u_char *hash)
{
    uint64_t                  h, w;
    ngx_uint_t                i;
    ngx_http_session_memo_t  *m;
    u_char                    lower[NGX_HTTP_SESSION_KEY_LEN];

    h = ngx_http_session_memo_seed;

    for (i = NGX_HTTP_SESSION_KEY_PREFIX_LEN + 1;
         i + sizeof(uint64_t) <= NGX_HTTP_SESSION_KEY_LEN;
         i += sizeof(uint64_t))
    {
        ngx_memcpy(&w, &token[i], sizeof(uint64_t));
        h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 29;
    }

    m = &ngx_http_session_memo[h & (NGX_HTTP_SESSION_MEMO_SIZE - 1)];

    if (m->used
        && ngx_http_session_equal(m->key, token, NGX_HTTP_SESSION_KEY_LEN))
    {
        ngx_memcpy(hash, m->hash, NGX_HTTP_SESSION_KEY_HASH_LEN);
        return NGX_OK;
    }

    ngx_http_session_key_lower(token, lower);

    if (ngx_http_session_key_hash(lower, hash) != 0) {
        ngx_explicit_memzero(lower, sizeof(lower));
        return NGX_ERROR;
    }

    ngx_explicit_memzero(lower, sizeof(lower));

    ngx_memcpy(m->key, token, NGX_HTTP_SESSION_KEY_LEN);
    ngx_memcpy(m->hash, hash, NGX_HTTP_SESSION_KEY_HASH_LEN);
    m->used = 1;

    return NGX_OK;
}


/* flag when the boolean in column col is true ("t", the text format) */

static ngx_uint_t
ngx_http_session_auth_flag(PGresult *res, int col, ngx_uint_t flag)
{
    if (PQnfields(res) <= col || PQgetisnull(res, 0, col)) {
        return 0;
    }

    return PQgetvalue(res, 0, col)[0] == 't' ? flag : 0;
}


/* the answer of a flight, for every request that waits for it */

static void
ngx_http_session_auth_done(ngx_http_session_db_query_t *q, PGresult *res)
{
    char                          *status;
    ngx_int_t                      rc, quota;
    ngx_uint_t                     outcome, err;
    ngx_connection_t              *c;
    ngx_http_request_t            *r;
    ngx_http_session_ctx_t        *ctx;
    ngx_http_session_flight_t     *f;
    ngx_http_session_waiter_t     *w;
    ngx_http_session_advance_t    *adv;
    ngx_http_session_principal_t   p;
    ngx_http_session_main_conf_t  *smcf;

    f = q->data;

    ngx_queue_remove(&f->queue);

    ngx_memzero(&p, sizeof(ngx_http_session_principal_t));
    ngx_memcpy(p.hash, f->hash, NGX_HTTP_SESSION_KEY_HASH_LEN);

    outcome = NGX_HTTP_SESSION_AUTH_INVALID;
    err = NGX_HTTP_SESSION_ERR_LAST;

    if (res == NULL) {
        err = NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE;

    } else if (ngx_http_session_db_result_ok(q, res) != NGX_OK
               || (PQntuples(res) == 1
                   && (PQgetlength(res, 0, 0) != NGX_HTTP_SESSION_UUID_LEN
                       || PQgetlength(res, 0, 1) != NGX_HTTP_SESSION_UUID_LEN
                       || PQgetlength(res, 0, 3)
                          != NGX_HTTP_SESSION_UUID_LEN)))
    {
        err = NGX_HTTP_SESSION_ERR_INTERNAL;

    } else if (PQntuples(res) == 1) {
        ngx_memcpy(p.project_id, PQgetvalue(res, 0, 0),
                   NGX_HTTP_SESSION_UUID_LEN);
        ngx_memcpy(p.account_id, PQgetvalue(res, 0, 1),
                   NGX_HTTP_SESSION_UUID_LEN);
        ngx_memcpy(p.key_id, PQgetvalue(res, 0, 3),
                   NGX_HTTP_SESSION_UUID_LEN);

        status = PQgetvalue(res, 0, 2);
        outcome = (ngx_strcmp(status, "active") == 0)
                  ? NGX_HTTP_SESSION_AUTH_VALID
                  : NGX_HTTP_SESSION_AUTH_SUSPENDED;

        p.plan = ngx_http_session_auth_flag(res, 4,
                                            NGX_HTTP_SESSION_PLAN_LONG_POLL)
                 | ngx_http_session_auth_flag(res, 5,
                                              NGX_HTTP_SESSION_PLAN_WEBHOOK);

        /*
         * The quota, NULL for none (or for no plan row, when no mode is
         * allowed either, so that the create reads the plan itself)
         */

        if (PQnfields(res) > 6) {
            if (PQgetisnull(res, 0, 6)) {
                p.plan |= NGX_HTTP_SESSION_PLAN_UNLIMITED;

            } else {
                quota = ngx_atoi((u_char *) PQgetvalue(res, 0, 6),
                                 PQgetlength(res, 0, 6));

                if (quota != NGX_ERROR) {
                    p.plan |= NGX_HTTP_SESSION_PLAN_QUOTA;
                    p.quota = (ngx_uint_t) quota;
                }
            }
        }
    }

    if (err == NGX_HTTP_SESSION_ERR_LAST) {
        smcf = ngx_http_cycle_get_module_main_conf(ngx_cycle,
                                                   ngx_http_session_module);

        ngx_http_session_auth_cache_put(smcf->shm_zone, &p, outcome,
                                        smcf->auth_cache_ttl, f->generation);
    }

    switch (outcome) {

    case NGX_HTTP_SESSION_AUTH_VALID:
        rc = NGX_OK;
        break;

    case NGX_HTTP_SESSION_AUTH_INVALID:
        rc = NGX_DECLINED;
        break;

    default:
        err = NGX_HTTP_SESSION_ERR_SUSPENDED;
        rc = NGX_DECLINED;
        break;
    }

    if (err == NGX_HTTP_SESSION_ERR_LAST) {
        err = (outcome == NGX_HTTP_SESSION_AUTH_INVALID)
              ? NGX_HTTP_SESSION_ERR_KEY_INVALID : err;

    } else {
        rc = NGX_DECLINED;
    }

    while (!ngx_queue_empty(&f->waiters)) {
        w = ngx_http_session_waiter_next(&f->waiters);

        r = w->request;
        c = r->connection;
        ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

        ctx->query = NULL;

        /* the same key (the flight is found by its hash): all of it */
        ctx->principal = p;

        /*
         * An unknown key is a failure of every client that sent it (the
         * one that started the lookup counted it already); a known key,
         * or no answer at all, gives the advance back.
         */

        adv = ctx->advance;

        if (adv && adv->reserved) {
            ngx_http_session_advance_end(adv,
                                   err == NGX_HTTP_SESSION_ERR_KEY_INVALID
                                   ? NGX_HTTP_SESSION_FAIL_CONFIRM
                                   : NGX_HTTP_SESSION_FAIL_REFUND);

        } else if (err == NGX_HTTP_SESSION_ERR_KEY_INVALID) {
            ngx_http_session_auth_fail_add(r);
        }

        if (rc != NGX_OK) {
            ctx->err = err;
        }

        ctx->resume(r, rc);
        ngx_http_run_posted_requests(c);
    }

    /* the flight's query and result are in its pool */

    ngx_destroy_pool(f->pool);
}
