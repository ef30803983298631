/*
 * Authentication: the Authorization header, the shared-memory cache, and
 * the database.  The key itself is never logged nor kept: only its hash.
 */

#include "ngx_http_session_auth.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_limit.h"
#include "ngx_http_session_shm.h"
#include "ngx_http_session_sql.h"
#include "ngx_http_session_stats.h"


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


typedef struct {
    u_char                        key[NGX_HTTP_SESSION_KEY_LEN];
    u_char                        used;
    u_char                        hash[NGX_HTTP_SESSION_KEY_HASH_LEN];
} ngx_http_session_memo_t;


static ngx_int_t ngx_http_session_auth_hash(const u_char *token,
    u_char *hash);
static void ngx_http_session_auth_done(ngx_http_session_db_query_t *q,
    PGresult *res);


static ngx_http_session_memo_t  ngx_http_session_memo[
                                                NGX_HTTP_SESSION_MEMO_SIZE];
static uint64_t                 ngx_http_session_memo_seed;

/* ngx_hash_key_lc() of "Authorization", as the header parser computes it */
static ngx_uint_t               ngx_http_session_auth_header_hash;


void
ngx_http_session_auth_init_process(void)
{
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
    ngx_uint_t                     n;
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
    n = 0;
    part = &r->headers_in.headers.part;
    h = part->elts;

    for ( ;; ) {
        if (n >= part->nelts) {
            if (part->next == NULL) {
                break;
            }

            part = part->next;
            h = part->elts;
            n = 0;
        }

        if (h[n].hash == ngx_http_session_auth_header_hash
            && h[n].key.len == sizeof("authorization") - 1
            && ngx_memcmp(h[n].lowcase_key, "authorization",
                          sizeof("authorization") - 1)
               == 0)
        {
            if (auth) {
                ctx->err = NGX_HTTP_SESSION_ERR_BAD_REQUEST;
                return NGX_DECLINED;
            }

            auth = &h[n];
        }

        n++;
    }

    if (auth == NULL) {
        ctx->err = NGX_HTTP_SESSION_ERR_KEY_REQUIRED;
        return NGX_DECLINED;
    }

    if (ngx_http_session_key_parse_header(auth->value.data, auth->value.len,
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
        ctx->err = NGX_HTTP_SESSION_ERR_KEY_INVALID;
        return NGX_DECLINED;

    case NGX_HTTP_SESSION_AUTH_SUSPENDED:
        ngx_http_session_stat(auth_hits, 1);
        ctx->err = NGX_HTTP_SESSION_ERR_SUSPENDED;
        return NGX_DECLINED;

    default:
        ngx_http_session_stat(auth_misses, 1);
        return NGX_BUSY;
    }
}


ngx_int_t
ngx_http_session_auth_lookup(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, ngx_http_session_resume_pt resume)
{
    ngx_http_session_db_query_t  *q;

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "session auth: cache miss, asking the database");

    q = ngx_http_session_db_query_stmt(r, NGX_HTTP_SESSION_STMT_AUTH,
                                       ngx_http_session_auth_done);
    if (q == NULL) {
        ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;
        return NGX_DECLINED;
    }

    /* the answer is read as text */
    q->result_format = 0;

    ngx_http_session_db_param(q, ctx->principal.hash,
                              NGX_HTTP_SESSION_KEY_HASH_LEN, 1);

    if (ngx_http_session_db_query_run(q) != NGX_OK) {
        ctx->err = NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE;
        return NGX_DECLINED;
    }

    ctx->query = q;
    ctx->resume = resume;

    return NGX_AGAIN;
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


static void
ngx_http_session_auth_done(ngx_http_session_db_query_t *q, PGresult *res)
{
    char                          *status;
    ngx_int_t                      rc;
    ngx_uint_t                     outcome;
    ngx_http_request_t            *r;
    ngx_http_session_ctx_t        *ctx;
    ngx_http_session_main_conf_t  *smcf;

    r = q->request;
    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
    smcf = ngx_http_get_module_main_conf(r, ngx_http_session_module);

    ctx->query = NULL;

    if (res == NULL) {
        ctx->err = NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE;
        ctx->resume(r, NGX_DECLINED);
        return;
    }

    if (ngx_http_session_db_result_ok(q, res) != NGX_OK
        || (PQntuples(res) == 1
            && (PQgetlength(res, 0, 0) != NGX_HTTP_SESSION_UUID_LEN
                || PQgetlength(res, 0, 1) != NGX_HTTP_SESSION_UUID_LEN)))
    {
        ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;
        ctx->resume(r, NGX_DECLINED);
        return;
    }

    if (PQntuples(res) == 0) {
        outcome = NGX_HTTP_SESSION_AUTH_INVALID;
        ngx_memzero(ctx->principal.project_id, NGX_HTTP_SESSION_UUID_LEN);
        ngx_memzero(ctx->principal.account_id, NGX_HTTP_SESSION_UUID_LEN);

    } else {
        ngx_memcpy(ctx->principal.project_id, PQgetvalue(res, 0, 0),
                   NGX_HTTP_SESSION_UUID_LEN);
        ngx_memcpy(ctx->principal.account_id, PQgetvalue(res, 0, 1),
                   NGX_HTTP_SESSION_UUID_LEN);

        status = PQgetvalue(res, 0, 2);
        outcome = (ngx_strcmp(status, "active") == 0)
                  ? NGX_HTTP_SESSION_AUTH_VALID
                  : NGX_HTTP_SESSION_AUTH_SUSPENDED;
    }

    ngx_http_session_auth_cache_put(smcf->shm_zone, &ctx->principal, outcome,
                                    smcf->auth_cache_ttl,
                                    ctx->cache_generation);

    switch (outcome) {

    case NGX_HTTP_SESSION_AUTH_VALID:
        rc = NGX_OK;
        break;

    case NGX_HTTP_SESSION_AUTH_INVALID:
        ctx->err = NGX_HTTP_SESSION_ERR_KEY_INVALID;
        rc = NGX_DECLINED;
        break;

    default:
        ctx->err = NGX_HTTP_SESSION_ERR_SUSPENDED;
        rc = NGX_DECLINED;
        break;
    }

    ctx->resume(r, rc);
}
