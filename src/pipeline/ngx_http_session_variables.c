/*
 * $session_key_id, $session_project_id, $session_account_id: the caller
 * once stage 1 knows the key (valid, or of a suspended account);
 * $session_rate_class and $session_rate_remaining once stage 2 counted
 * the request.  Empty (not found) otherwise, and outside session_api
 * locations.  Not cacheable: the values appear while the request runs,
 * and a variable read early (a map, a rewrite) must not freeze them.
 */

#include "ngx_http_session_variables.h"
#include "ngx_http_session_limit.h"


static ngx_int_t ngx_http_session_variable_id(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_session_variable_rate_class(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);
static ngx_int_t ngx_http_session_variable_rate_remaining(
    ngx_http_request_t *r, ngx_http_variable_value_t *v, uintptr_t data);
static ngx_http_session_take_t *ngx_http_session_variable_take(
    ngx_http_request_t *r);
static ngx_int_t ngx_http_session_variable_set(ngx_http_variable_value_t *v,
    u_char *data, size_t len);


static ngx_http_variable_t  ngx_http_session_vars[] = {

    { ngx_string("session_key_id"), NULL,
      ngx_http_session_variable_id,
      offsetof(ngx_http_session_principal_t, key_id),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("session_project_id"), NULL,
      ngx_http_session_variable_id,
      offsetof(ngx_http_session_principal_t, project_id),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("session_account_id"), NULL,
      ngx_http_session_variable_id,
      offsetof(ngx_http_session_principal_t, account_id),
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("session_rate_class"), NULL,
      ngx_http_session_variable_rate_class, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("session_rate_remaining"), NULL,
      ngx_http_session_variable_rate_remaining, 0,
      NGX_HTTP_VAR_NOCACHEABLE, 0 },

      ngx_http_null_variable
};


ngx_int_t
ngx_http_session_variables_add(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_session_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


/* one of the principal's ids, once stage 1 has set it (zeroes before) */

static ngx_int_t
ngx_http_session_variable_id(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                  *id;
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (ctx == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    id = (u_char *) &ctx->principal + data;

    if (id[0] == '\0') {
        v->not_found = 1;
        return NGX_OK;
    }

    return ngx_http_session_variable_set(v, id, NGX_HTTP_SESSION_UUID_LEN);
}


static ngx_int_t
ngx_http_session_variable_rate_class(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    const char               *name;
    ngx_http_session_take_t  *take;

    take = ngx_http_session_variable_take(r);

    if (take == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    name = ngx_http_session_limit_class_name(take->cls);

    return ngx_http_session_variable_set(v, (u_char *) name,
                                         ngx_strlen(name));
}


static ngx_int_t
ngx_http_session_variable_rate_remaining(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    u_char                   *p, *end;
    ngx_http_session_take_t  *take;

    take = ngx_http_session_variable_take(r);

    if (take == NULL) {
        v->not_found = 1;
        return NGX_OK;
    }

    p = ngx_pnalloc(r->pool, NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    end = ngx_sprintf(p, "%ui", take->remaining);

    return ngx_http_session_variable_set(v, p, end - p);
}


/*
 * The take, once counted or refused by stage 2: stage 1 prepared it (its
 * limit is never 0) and stage 2 set take.rc, NGX_DECLINED until then.
 */

static ngx_http_session_take_t *
ngx_http_session_variable_take(ngx_http_request_t *r)
{
    ngx_http_session_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_session_module);

    if (ctx == NULL
        || ctx->take.limit == 0
        || ctx->take.rc == NGX_DECLINED
        || ctx->take.rc == NGX_ERROR)
    {
        return NULL;
    }

    return &ctx->take;
}


/* a value found: not cacheable, as every one of these variables */

static ngx_int_t
ngx_http_session_variable_set(ngx_http_variable_value_t *v, u_char *data,
    size_t len)
{
    v->len = len;
    v->valid = 1;
    v->no_cacheable = 1;
    v->not_found = 0;
    v->data = data;

    return NGX_OK;
}
