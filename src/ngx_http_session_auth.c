/*
 * Authentication: the Authorization header, the shared-memory cache, and
 * the database.  The key itself is never logged nor kept: only its hash.
 */

#include "ngx_http_session_auth.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_handler.h"
#include "ngx_http_session_shm.h"
#include "ngx_http_session_sql.h"


static void ngx_http_session_auth_done(ngx_http_session_db_query_t *q,
    PGresult *res);


ngx_int_t
ngx_http_session_auth(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx)
{
    ngx_int_t                      rc;
    ngx_uint_t                     n;
    ngx_list_part_t               *part;
    ngx_table_elt_t               *h, *auth;
    const u_char                  *token;
    ngx_http_session_db_query_t   *q;
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_get_module_main_conf(r, ngx_http_session_module);

    /* nginx 1.22 keeps only one of repeated Authorization headers */

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

        if (h[n].hash
            && h[n].key.len == sizeof("Authorization") - 1
            && ngx_strncasecmp(h[n].key.data, (u_char *) "Authorization",
                               sizeof("Authorization") - 1)
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

    if (ngx_http_session_key_hash(token, ctx->principal.hash) != 0) {
        ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;
        return NGX_DECLINED;
    }

    rc = ngx_http_session_auth_cache_get(smcf->shm_zone, &ctx->principal,
                                         &ctx->cache_generation);

    switch (rc) {

    case NGX_HTTP_SESSION_AUTH_VALID:
        return NGX_OK;

    case NGX_HTTP_SESSION_AUTH_INVALID:
        ctx->err = NGX_HTTP_SESSION_ERR_KEY_INVALID;
        return NGX_DECLINED;

    case NGX_HTTP_SESSION_AUTH_SUSPENDED:
        ctx->err = NGX_HTTP_SESSION_ERR_SUSPENDED;
        return NGX_DECLINED;

    default:
        break;
    }

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "session auth: cache miss, asking the database");

    q = ngx_http_session_db_query_create(r, NGX_HTTP_SESSION_SQL_AUTH,
                                         ngx_http_session_auth_done);
    if (q == NULL) {
        ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;
        return NGX_DECLINED;
    }

    ngx_http_session_db_param(q, ctx->principal.hash,
                              NGX_HTTP_SESSION_KEY_HASH_LEN, 1);

    if (ngx_http_session_db_query_run(q) != NGX_OK) {
        ctx->err = NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE;
        return NGX_DECLINED;
    }

    ctx->query = q;

    return NGX_AGAIN;
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
        ngx_http_session_resume(r, NGX_DECLINED);
        return;
    }

    if (ngx_http_session_db_result_ok(q, res) != NGX_OK
        || (PQntuples(res) == 1
            && (PQgetlength(res, 0, 0) != NGX_HTTP_SESSION_UUID_LEN
                || PQgetlength(res, 0, 1) != NGX_HTTP_SESSION_UUID_LEN)))
    {
        ctx->err = NGX_HTTP_SESSION_ERR_INTERNAL;
        ngx_http_session_resume(r, NGX_DECLINED);
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

    ngx_http_session_resume(r, rc);
}
