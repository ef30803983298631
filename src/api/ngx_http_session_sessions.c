/*
 * Sessions: each endpoint is one prepared statement (one transaction)
 * that returns rows; the answer is rendered in C from them, from the
 * event loop when PostgreSQL replies.
 */

#include "ngx_http_session_sessions.h"
#include "ngx_http_session_body.h"
#include "ngx_http_session_cursor.h"
#include "ngx_http_session_db.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_idempotency.h"
#include "ngx_http_session_render.h"
#include "ngx_http_session_request.h"
#include "ngx_http_session_sql.h"


#define NGX_HTTP_SESSION_LIST_DEFAULT  20
#define NGX_HTTP_SESSION_LIST_MAX      100


/* the list's query parameters */

typedef struct {
    /* the created_at (binary timestamptz) and id of the page's last row */
    u_char                          *us;
    u_char                          *id;
} ngx_http_session_list_after_t;

typedef struct {
    long long                        limit;
    u_char                          *status;
    ngx_http_session_list_after_t    after;
} ngx_http_session_list_args_t;


static void ngx_http_session_create_body(ngx_http_request_t *r);
static ngx_int_t ngx_http_session_create_query(ngx_http_request_t *r,
    u_char *body, size_t len);
static ngx_int_t ngx_http_session_json_type(ngx_http_request_t *r);
static ngx_int_t ngx_http_session_sid(ngx_http_request_t *r,
    ngx_http_session_ctx_t *ctx, u_char **sid);
static void ngx_http_session_created(ngx_http_session_db_query_t *q,
    PGresult *res);
static ngx_int_t ngx_http_session_created_send(ngx_http_request_t *r,
    ngx_http_session_db_query_t *q, PGresult *res);
static void ngx_http_session_one(ngx_http_session_db_query_t *q,
    PGresult *res);
static ngx_int_t ngx_http_session_list_status(ngx_http_request_t *r,
    ngx_str_t *value, void *field, ngx_uint_t data);
static ngx_int_t ngx_http_session_list_cursor(ngx_http_request_t *r,
    ngx_str_t *value, void *field, ngx_uint_t data);
static void ngx_http_session_listed(ngx_http_session_db_query_t *q,
    PGresult *res);


static const ngx_http_session_arg_t  ngx_http_session_list_args[] = {

    { ngx_string("limit"), ngx_http_session_arg_limit,
      offsetof(ngx_http_session_list_args_t, limit),
      NGX_HTTP_SESSION_LIST_MAX },

    { ngx_string("status"), ngx_http_session_list_status,
      offsetof(ngx_http_session_list_args_t, status), 0 },

    { ngx_string("cursor"), ngx_http_session_list_cursor,
      offsetof(ngx_http_session_list_args_t, after), 0 },

    { ngx_null_string, NULL, 0, 0 }
};


/* POST /api/v1/sessions */

ngx_int_t
ngx_http_session_create(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx)
{
    ngx_int_t  rc;

    /* stage 4 in its order: headers, query, body */

    if (ngx_http_session_json_type(r) != NGX_OK) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_JSON_TYPE);
    }

    if (r->headers_in.content_length_n > NGX_HTTP_SESSION_JSON_BODY_MAX) {
        return ngx_http_session_error(r,
                                      NGX_HTTP_SESSION_ERR_JSON_TOO_LARGE);
    }

    rc = ngx_http_session_no_args(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    return ngx_http_session_body_start(r, ctx, NGX_HTTP_SESSION_JSON_BODY_MAX,
                                       ngx_http_session_create_body);
}


static void
ngx_http_session_create_body(ngx_http_request_t *r)
{
    size_t   len;
    u_char  *body;

    if (r->request_body == NULL) {
        ngx_http_session_refuse(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        return;
    }

    body = ngx_http_session_read_body(r, NGX_HTTP_SESSION_JSON_BODY_MAX, &len);

    if (body == NULL) {
        ngx_http_finalize_request(r, (len > NGX_HTTP_SESSION_JSON_BODY_MAX)
            ? ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_JSON_TOO_LARGE)
            : ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL));
        return;
    }

    ngx_http_finalize_request(r, ngx_http_session_create_query(r, body, len));
}


static ngx_int_t
ngx_http_session_create_query(ngx_http_request_t *r, u_char *body,
    size_t len)
{
    int                            rc;
    u_char                        *p;
    ngx_str_t                      msg;
    ngx_uint_t                     mode, plan;
    ngx_http_session_ctx_t        *ctx;
    ngx_http_session_stmt_e        stmt, keyed;
    ngx_http_session_create_t      cr;
    ngx_http_session_db_query_t   *q;
    ngx_http_session_loc_conf_t   *slcf;
    ngx_http_session_main_conf_t  *smcf;
    char                          *err;
    size_t                         err_size;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);
    slcf = ngx_http_get_module_loc_conf(r, ngx_http_session_module);
    smcf = ngx_http_get_module_main_conf(r, ngx_http_session_module);

    /* room for any message, an unknown field's whole name included */
    err_size = len + NGX_HTTP_SESSION_BODY_MSG_MAX;

    err = ngx_pnalloc(r->pool, err_size);
    if (err == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    rc = ngx_http_session_create_parse(body, len, (long long) slcf->max_ttl,
                                       smcf->webhook_allow_private, &cr,
                                       err, err_size);

    if (rc == NGX_HTTP_SESSION_CREATE_ERROR) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    if (rc != NGX_HTTP_SESSION_CREATE_OK) {
        msg.data = (u_char *) err;
        msg.len = ngx_strlen(err);
        return ngx_http_session_error_message(r, NGX_HTTP_BAD_REQUEST, &msg);
    }

    /*
     * A plan that allows the mode, as the auth cache knows it: no plan
     * to read; without a quota the insert alone, with one the usage row
     * counted against the quota the cache knows, then the insert
     */

    mode = (cr.delivery_mode == NGX_HTTP_SESSION_MODE_WEBHOOK)
           ? NGX_HTTP_SESSION_PLAN_WEBHOOK : NGX_HTTP_SESSION_PLAN_LONG_POLL;
    plan = ctx->principal.plan;

    if (!(plan & mode)) {
        stmt = NGX_HTTP_SESSION_STMT_SESSION_CREATE;
        keyed = NGX_HTTP_SESSION_STMT_SESSION_CREATE_KEYED;

    } else if (plan & NGX_HTTP_SESSION_PLAN_UNLIMITED) {
        stmt = NGX_HTTP_SESSION_STMT_SESSION_CREATE_FREE;
        keyed = NGX_HTTP_SESSION_STMT_SESSION_CREATE_FREE_KEYED;

    } else if (plan & NGX_HTTP_SESSION_PLAN_QUOTA) {
        stmt = NGX_HTTP_SESSION_STMT_SESSION_CREATE_COUNTED;
        keyed = NGX_HTTP_SESSION_STMT_SESSION_CREATE_COUNTED_KEYED;

    } else {
        stmt = NGX_HTTP_SESSION_STMT_SESSION_CREATE;
        keyed = NGX_HTTP_SESSION_STMT_SESSION_CREATE_KEYED;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "session create: %s",
                   (stmt == NGX_HTTP_SESSION_STMT_SESSION_CREATE_FREE)
                   ? "the insert alone"
                   : (stmt == NGX_HTTP_SESSION_STMT_SESSION_CREATE_COUNTED)
                     ? "counted, then the insert" : "with the plan");

    q = ngx_http_session_work_query(r, stmt, keyed, ngx_http_session_created);
    if (q == NULL) {
        ngx_http_session_create_free(&cr);
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    ctx->delivery_mode = cr.delivery_mode;

    if (ngx_http_session_project(r, ctx) == NULL) {
        ngx_http_session_create_free(&cr);
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    ngx_http_session_db_param(q, ngx_http_session_project(r, ctx), 0, 0);

    ngx_http_session_db_param(q,
                 (cr.delivery_mode == NGX_HTTP_SESSION_MODE_WEBHOOK)
                 ? "webhook" : "long_poll", 0, 0);

    /* the URL stays in the pool: the answer repeats it */

    if (cr.webhook_url) {
        p = ngx_pnalloc(r->pool, cr.webhook_url_len + 1);
        if (p == NULL) {
            ngx_http_session_create_free(&cr);
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        ngx_memcpy(p, cr.webhook_url, cr.webhook_url_len);
        p[cr.webhook_url_len] = '\0';

        ngx_http_session_db_param(q, p, cr.webhook_url_len, 0);

    } else {
        ngx_http_session_db_param(q, NULL, 0, 0);
    }

    p = ngx_pnalloc(r->pool, NGX_TIME_T_LEN + 1);
    if (p == NULL) {
        ngx_http_session_create_free(&cr);
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    *ngx_sprintf(p, "%T", cr.has_expires_in ? (time_t) cr.expires_in
                                            : (time_t) slcf->ttl) = '\0';

    ngx_http_session_db_param(q, p, 0, 0);

    if (stmt == NGX_HTTP_SESSION_STMT_SESSION_CREATE_COUNTED) {
        p = ngx_pnalloc(r->pool, NGX_HTTP_SESSION_UUID_LEN + 1
                                 + NGX_INT_T_LEN + 1);
        if (p == NULL) {
            ngx_http_session_create_free(&cr);
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        *ngx_cpymem(p, ctx->principal.account_id,
                    NGX_HTTP_SESSION_UUID_LEN) = '\0';
        ngx_http_session_db_param(q, p, 0, 0);

        p += NGX_HTTP_SESSION_UUID_LEN + 1;
        *ngx_sprintf(p, "%ui", ctx->principal.quota) = '\0';
        ngx_http_session_db_param(q, p, 0, 0);
    }

    ngx_http_session_work_params(q);

    ngx_http_session_create_free(&cr);

    return ngx_http_session_run(r, q);
}


/* (allowed, id, created_at, expires_at), see the statement */

static void
ngx_http_session_created(ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_http_request_t  *r;

    r = q->request;

    if (ngx_http_session_work_held(q, res) == NGX_DONE) {
        return;
    }

    ngx_http_finalize_request(r, ngx_http_session_created_send(r, q, res));
}


static ngx_int_t
ngx_http_session_created_send(ngx_http_request_t *r,
    ngx_http_session_db_query_t *q, PGresult *res)
{
    u_char                          *p, project[16];
    ngx_buf_t                       *b;
    ngx_http_session_ctx_t          *ctx;
    ngx_http_session_doc_session_t   s;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (res == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE);
    }

    if (ngx_http_session_db_result_ok(q, res) != NGX_OK
        || PQntuples(res) != 1
        || PQnfields(res) != 4 + ngx_http_session_work_ncols(q))
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    if (PQgetisnull(res, 0, 0) || PQgetvalue(res, 0, 0)[0] == 0) {
        return ngx_http_session_error(r,
                       (ctx->delivery_mode == NGX_HTTP_SESSION_MODE_WEBHOOK)
                       ? NGX_HTTP_SESSION_ERR_PLAN_WEBHOOK
                       : NGX_HTTP_SESSION_ERR_PLAN_LONG_POLL);
    }

    if (PQgetisnull(res, 0, 1)) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_QUOTA);
    }

    if (PQgetlength(res, 0, 1) != NGX_HTTP_SESSION_UUID_BIN_LEN
        || ngx_http_session_render_time(res, 0, 2, &s.created_us) != NGX_OK
        || ngx_http_session_render_time(res, 0, 3, &s.expires_us) != NGX_OK
        || ngx_http_session_uuid_parse(ctx->principal.project_id,
                                       NGX_HTTP_SESSION_UUID_LEN, project)
           != 0)
    {
        ngx_http_session_render_bad(r->connection->log);
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    /* the new session is what was asked for: open, nothing in it yet */

    s.id = (u_char *) PQgetvalue(res, 0, 1);
    s.project_id = project;

    if (ctx->delivery_mode == NGX_HTTP_SESSION_MODE_WEBHOOK) {
        s.delivery_mode = (u_char *) "webhook";
        s.delivery_mode_len = sizeof("webhook") - 1;
        s.webhook_url = (u_char *) q->values[2];
        s.webhook_url_len = q->lengths[2];

    } else {
        s.delivery_mode = (u_char *) "long_poll";
        s.delivery_mode_len = sizeof("long_poll") - 1;
        s.webhook_url = NULL;
        s.webhook_url_len = 0;
    }

    s.status = (u_char *) "open";
    s.status_len = sizeof("open") - 1;
    s.image_count = 0;
    s.acknowledged_count = 0;
    s.completed = 0;
    s.completed_us = 0;

    b = ngx_create_temp_buf(r->pool, ngx_http_session_doc_session_size(&s));
    p = ngx_pnalloc(r->pool, sizeof("/api/v1/sessions/") - 1
                             + NGX_HTTP_SESSION_UUID_LEN);

    if (b == NULL || p == NULL
        || ngx_http_session_header_add(r, &ngx_http_session_location, p,
                                       sizeof("/api/v1/sessions/") - 1
                                       + NGX_HTTP_SESSION_UUID_LEN)
           == NULL)
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    p = ngx_cpymem(p, "/api/v1/sessions/", sizeof("/api/v1/sessions/") - 1);
    ngx_http_session_uuid_format(s.id, p);

    b->last = ngx_http_session_doc_session(b->last, &s);

    return ngx_http_session_send_json(r, NGX_HTTP_CREATED, b);
}


/* GET /api/v1/sessions/{sid} and POST /api/v1/sessions/{sid}/complete */

ngx_int_t
ngx_http_session_get(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx)
{
    u_char                       *sid;
    ngx_int_t                     rc;
    ngx_http_session_db_query_t  *q;

    sid = NULL;

    rc = ngx_http_session_sid(r, ctx, &sid);
    if (sid == NULL) {
        /* the error was sent: rc is what sending it returned */
        return rc;
    }

    if (ctx->route.id == NGX_HTTP_SESSION_ROUTE_COMPLETE) {
        q = ngx_http_session_work_query(r,
                                 NGX_HTTP_SESSION_STMT_SESSION_COMPLETE,
                                 NGX_HTTP_SESSION_STMT_SESSION_COMPLETE_KEYED,
                                 ngx_http_session_one);
        if (q == NULL) {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        ngx_http_session_db_param(q, ngx_http_session_project(r, ctx), 0, 0);
        ngx_http_session_db_param(q, sid, 0, 0);
        ngx_http_session_work_params(q);

    } else {
        q = ngx_http_session_db_query_stmt(r, NGX_HTTP_SESSION_STMT_SESSION_GET,
                                           ngx_http_session_one);
        if (q == NULL) {
            return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        }

        ngx_http_session_db_param(q, sid, 0, 0);
    }

    return ngx_http_session_run(r, q);
}


ngx_int_t
ngx_http_session_complete(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx)
{
    return ngx_http_session_get(r, ctx);
}


/* the session's columns, or no row */

static void
ngx_http_session_one(ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_buf_t               *b;
    ngx_http_request_t      *r;
    ngx_http_session_err_e   err;

    r = q->request;

    if (ngx_http_session_work_held(q, res) == NGX_DONE) {
        return;
    }

    err = ngx_http_session_check(q, res, NGX_HTTP_SESSION_COL_S_PROJECT,
                                 NGX_HTTP_SESSION_COL_S_STATUS);

    if (err != NGX_HTTP_SESSION_ERR_LAST) {
        ngx_http_session_refuse(r, err);
        return;
    }

    b = ngx_http_session_render_session(r, res, 0, 0);
    ngx_http_session_reply(r, NGX_HTTP_OK, b);
}


/*
 * Validates the query string (no parameter is known) and the session id;
 * a malformed id is a session that does not exist.  On failure *sid stays
 * NULL, the error is sent, and what sending returned is returned.
 */

static ngx_int_t
ngx_http_session_sid(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx,
    u_char **sid)
{
    ngx_int_t  rc;

    rc = ngx_http_session_no_args(r);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    *sid = ngx_http_session_route_sid(r, ctx, &rc);
    if (*sid == NULL) {
        return rc;
    }

    if (ngx_http_session_project(r, ctx) == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    return NGX_OK;
}


/* GET /api/v1/sessions */

ngx_int_t
ngx_http_session_list(ngx_http_request_t *r, ngx_http_session_ctx_t *ctx)
{
    u_char                           *rows, *status, *after_us, *after_id;
    ngx_int_t                         rc;
    long long                         limit;
    ngx_http_session_db_query_t      *q;
    ngx_http_session_list_args_t      args;

    args.limit = NGX_HTTP_SESSION_LIST_DEFAULT;
    args.status = NULL;
    args.after.us = NULL;
    args.after.id = NULL;

    rc = ngx_http_session_args(r, ngx_http_session_list_args, &args);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    limit = args.limit;
    status = args.status;
    after_us = args.after.us;
    after_id = args.after.id;

    q = ngx_http_session_db_query_stmt(r,
                                   after_id
                                   ? NGX_HTTP_SESSION_STMT_SESSION_LIST_AFTER
                                   : NGX_HTTP_SESSION_STMT_SESSION_LIST,
                                   ngx_http_session_listed);
    rows = ngx_http_session_page_ask(q, limit);

    if (rows == NULL || ngx_http_session_project(r, ctx) == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    ngx_http_session_db_param(q, ngx_http_session_project(r, ctx), 0, 0);
    ngx_http_session_db_param(q, status, 0, 0);
    ngx_http_session_db_param(q, rows, 0, 0);

    if (after_id) {
        /* timestamptz in binary: microseconds since 2000-01-01, big-endian */
        ngx_http_session_db_param(q, after_us, 8, 1);
        ngx_http_session_db_param(q, after_id, 0, 0);
    }

    return ngx_http_session_run(r, q);
}


/* "status": one of the three, NUL-terminated for the statement */

static ngx_int_t
ngx_http_session_list_status(ngx_http_request_t *r, ngx_str_t *value,
    void *field, ngx_uint_t data)
{
    u_char  *status;

    if (!((value->len == 4 && ngx_strncmp(value->data, "open", 4) == 0)
          || (value->len == 9
              && ngx_strncmp(value->data, "completed", 9) == 0)
          || (value->len == 7
              && ngx_strncmp(value->data, "expired", 7) == 0)))
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_STATUS);
    }

    status = ngx_pnalloc(r->pool, value->len + 1);
    if (status == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    *ngx_cpymem(status, value->data, value->len) = '\0';

    *(u_char **) field = status;

    return NGX_DECLINED;
}


/*
 * "cursor": the created_at and id of the last session of the page before,
 * as the statement's parameters
 */

static ngx_int_t
ngx_http_session_list_cursor(ngx_http_request_t *r, ngx_str_t *value,
    void *field, ngx_uint_t data)
{
    ngx_http_session_list_after_t  *after = field;

    int        i;
    u_char     uuid[16];
    uint64_t   pg_us;
    long long  created_us;

    if (ngx_http_session_cursor_decode_session(value->data, value->len,
                                               &created_us, uuid)
        != 0)
    {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_CURSOR);
    }

    /* only what PostgreSQL can hold, or it would refuse with 500 */

    if (created_us < 0 || created_us >= NGX_HTTP_SESSION_DOC_US_MAX) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_CURSOR);
    }

    after->us = ngx_pnalloc(r->pool, 8);
    after->id = ngx_pnalloc(r->pool, NGX_HTTP_SESSION_UUID_LEN + 1);

    if (after->us == NULL || after->id == NULL) {
        return ngx_http_session_error(r, NGX_HTTP_SESSION_ERR_INTERNAL);
    }

    pg_us = (uint64_t) (created_us - NGX_HTTP_SESSION_DOC_PG_EPOCH_US);

    for (i = 7; i >= 0; i--) {
        after->us[i] = (u_char) (pg_us & 0xff);
        pg_us >>= 8;
    }

    ngx_http_session_uuid_format(uuid, after->id);
    after->id[NGX_HTTP_SESSION_UUID_LEN] = '\0';

    return NGX_DECLINED;
}


static void
ngx_http_session_listed(ngx_http_session_db_query_t *q, PGresult *res)
{
    int                  n;
    int64_t              created_us;
    ngx_buf_t           *b;
    ngx_uint_t           more;
    ngx_http_request_t  *r;
    size_t               cursor_len;
    u_char               cursor[NGX_HTTP_SESSION_CURSOR_MAX];

    r = q->request;

    if (res == NULL) {
        ngx_http_session_refuse(r, NGX_HTTP_SESSION_ERR_DB_UNAVAILABLE);
        return;
    }

    if (ngx_http_session_db_result_ok(q, res) != NGX_OK
        || PQnfields(res) != NGX_HTTP_SESSION_SESSION_NCOLS)
    {
        ngx_http_session_refuse(r, NGX_HTTP_SESSION_ERR_INTERNAL);
        return;
    }

    n = ngx_http_session_page_rows(q, PQntuples(res), &more);
    cursor_len = 0;

    if (more) {
        if (ngx_http_session_render_time(res, n - 1,
                                         NGX_HTTP_SESSION_COL_S_CREATED,
                                         &created_us)
            != NGX_OK
            || PQgetlength(res, n - 1, NGX_HTTP_SESSION_COL_S_ID)
               != NGX_HTTP_SESSION_UUID_BIN_LEN)
        {
            ngx_http_session_refuse(r, NGX_HTTP_SESSION_ERR_INTERNAL);
            return;
        }

        cursor_len = ngx_http_session_cursor_encode_session(cursor,
                         created_us,
                         (u_char *) PQgetvalue(res, n - 1,
                                               NGX_HTTP_SESSION_COL_S_ID));
    }

    b = ngx_http_session_render_sessions(r, res, n, cursor, cursor_len);
    ngx_http_session_reply(r, NGX_HTTP_OK, b);
}


/* "application/json", any case, parameters allowed */

static ngx_int_t
ngx_http_session_json_type(ngx_http_request_t *r)
{
    u_char     *p, *end;
    ngx_str_t  *ct;

    if (r->headers_in.content_type == NULL) {
        return NGX_DECLINED;
    }

    ct = &r->headers_in.content_type->value;
    end = ct->data + ct->len;

    for (p = ct->data; p < end && *p != ';'; p++) {
        /* void */
    }

    while (p > ct->data && (p[-1] == ' ' || p[-1] == '\t')) {
        p--;
    }

    if ((size_t) (p - ct->data) == sizeof("application/json") - 1
        && ngx_strncasecmp(ct->data, (u_char *) "application/json",
                           sizeof("application/json") - 1)
           == 0)
    {
        return NGX_OK;
    }

    return NGX_DECLINED;
}
