/*
 * libpq resolves a host name with getaddrinfo(), which blocks, inside
 * PQconnectStart().  Here every entry of host= that is a name is looked
 * up first, with nginx's resolver, and libpq gets one entry per address:
 *
 *     host=db.example.com,10.0.0.7 port=5432
 *     -> host=db.example.com,db.example.com,10.0.0.7
 *        hostaddr=10.0.0.5,10.0.0.6,10.0.0.7
 *
 * libpq connects to hostaddr and still uses host for TLS (SNI and
 * sslmode=verify-full), the password file and messages.  A socket
 * directory has an empty hostaddr, an IP literal itself.  A per-host
 * port list is repeated along.  A name that does not resolve is left
 * out of the attempt; the attempt fails when nothing is left.
 */

#include "ngx_http_session_db_hosts.h"


typedef struct {
    ngx_str_t   host;
    ngx_str_t   addr;
    ngx_str_t   port;
} ngx_http_session_dbhost_target_t;


static void ngx_http_session_dbhost_hidden(ngx_conf_t *cf, ngx_str_t *name,
    PQconninfoOption *opts);
static ngx_int_t ngx_http_session_dbhost_split(ngx_conf_t *cf,
    const char *list, ngx_array_t *out);
static ngx_uint_t ngx_http_session_dbhost_kind(ngx_str_t *host);
static void ngx_http_session_dbhost_next(ngx_http_session_dbhost_ctx_t *ctx);
static void ngx_http_session_dbhost_resolved(ngx_resolver_ctx_t *rctx);
static ngx_int_t ngx_http_session_dbhost_add(
    ngx_http_session_dbhost_ctx_t *ctx, ngx_http_session_dbhost_t *h,
    struct sockaddr *sa, socklen_t socklen);
static void ngx_http_session_dbhost_finish(
    ngx_http_session_dbhost_ctx_t *ctx);
static char *ngx_http_session_dbhost_join(ngx_pool_t *pool, ngx_array_t *a,
    size_t field);


char *
ngx_http_session_dbhost_parse(ngx_conf_t *cf, ngx_str_t *name,
    PQconninfoOption *opts, ngx_http_session_dbhosts_t **out)
{
    ngx_str_t                   *names, *ports;
    ngx_uint_t                   i, nnames;
    const char                  *host, *hostaddr, *port;
    ngx_array_t                  hostv, portv;
    PQconninfoOption            *opt;
    ngx_http_session_dbhost_t   *h;
    ngx_http_session_dbhosts_t  *hosts;

    host = NULL;
    hostaddr = NULL;
    port = NULL;

    for (opt = opts; opt->keyword; opt++) {
        if (opt->val == NULL) {
            continue;
        }

        if (ngx_strcmp(opt->keyword, "host") == 0) {
            host = opt->val;

        } else if (ngx_strcmp(opt->keyword, "hostaddr") == 0) {
            hostaddr = opt->val;

        } else if (ngx_strcmp(opt->keyword, "port") == 0) {
            port = opt->val;
        }
    }

    /* the operator's addresses stand; no host: libpq's socket default */

    if (hostaddr && *hostaddr) {
        return NGX_CONF_OK;
    }

    if (host == NULL || *host == '\0') {
        ngx_http_session_dbhost_hidden(cf, name, opts);
        return NGX_CONF_OK;
    }

    if (ngx_http_session_dbhost_split(cf, host, &hostv) != NGX_OK
        || ngx_http_session_dbhost_split(cf, port ? port : "", &portv)
           != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    names = hostv.elts;
    ports = portv.elts;

    if (portv.nelts > 1 && portv.nelts != hostv.nelts) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" has %ui ports for %ui hosts",
                           name, portv.nelts, hostv.nelts);
        return NGX_CONF_ERROR;
    }

    nnames = 0;

    for (i = 0; i < hostv.nelts; i++) {
        if (ngx_http_session_dbhost_kind(&names[i])
            == NGX_HTTP_SESSION_DBHOST_NAME)
        {
            nnames++;
        }
    }

    if (nnames == 0) {
        /* sockets and IP literals: libpq looks nothing up */
        return NGX_CONF_OK;
    }

    hosts = ngx_pcalloc(cf->pool, sizeof(ngx_http_session_dbhosts_t));
    if (hosts == NULL) {
        return NGX_CONF_ERROR;
    }

    if (ngx_array_init(&hosts->hosts, cf->pool, hostv.nelts,
                       sizeof(ngx_http_session_dbhost_t))
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    hosts->name = *name;
    hosts->file = cf->conf_file->file.name;
    hosts->line = cf->conf_file->line;
    hosts->ports = (portv.nelts > 1);

    for (i = 0; i < hostv.nelts; i++) {
        h = ngx_array_push(&hosts->hosts);
        if (h == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_memzero(h, sizeof(ngx_http_session_dbhost_t));

        h->host = names[i];
        h->kind = ngx_http_session_dbhost_kind(&names[i]);

        if (hosts->ports) {
            h->port = ports[i];
        }
    }

    *out = hosts;

    return NGX_CONF_OK;
}


/*
 * No host= in session_db: libpq takes the host from a service file
 * (service=, or PGSERVICE) or from PGHOST, when the worker connects.
 * The module does not see that host and cannot resolve it; if it is a
 * name, libpq looks it up with a blocking getaddrinfo() in the worker,
 * on every connect.  Said once, at configuration time (docs/decisions.md
 * (kb)).  The workers see PGHOST and PGSERVICE only through "env" (the
 * "env" lines above the http block).
 */

static void
ngx_http_session_dbhost_hidden(ngx_conf_t *cf, ngx_str_t *name,
    PQconninfoOption *opts)
{
    u_char            *value;
    size_t             len;
    ngx_str_t         *var;
    ngx_uint_t         i;
    ngx_core_conf_t   *ccf;
    PQconninfoOption  *opt;

    for (opt = opts; opt->keyword; opt++) {
        if (ngx_strcmp(opt->keyword, "service") == 0 && opt->val
            && *opt->val)
        {
            ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                               "\"%V\" has service=%s and no host=: "
                               "libpq looks a host name of the service "
                               "file up in the worker, blocking it, on "
                               "every connect; give host= in \"%V\"",
                               name, opt->val, name);
            return;
        }
    }

    ccf = (ngx_core_conf_t *) ngx_get_conf(cf->cycle->conf_ctx,
                                           ngx_core_module);
    if (ccf == NULL || ccf->env.elts == NULL) {
        return;
    }

    var = ccf->env.elts;

    for (i = 0; i < ccf->env.nelts; i++) {
        /*
         * "env NAME;" or "env NAME=value;": the name, and for the latter
         * the value right after it (ngx_set_env() keeps the whole
         * argument, null-terminated, and cuts the length at the '=')
         */

        len = var[i].len;
        value = var[i].data + len;

        if (*value == '=' && (value[1] == '/' || value[1] == '@')) {
            /* a socket directory: nothing to look up */
            continue;
        }

        if ((len == sizeof("PGHOST") - 1
             && ngx_strncmp(var[i].data, "PGHOST", len) == 0)
            || (len == sizeof("PGSERVICE") - 1
                && ngx_strncmp(var[i].data, "PGSERVICE", len) == 0))
        {
            ngx_conf_log_error(NGX_LOG_WARN, cf, 0,
                               "\"%V\" has no host= and \"env\" "
                               "passes %*s to the workers: libpq looks a "
                               "host name from it up in the worker, "
                               "blocking it, on every connect; give host= "
                               "in \"%V\"", name, len, var[i].data, name);
            return;
        }
    }
}


/* "a,b,,c" into null-terminated strings, empty ones included */

static ngx_int_t
ngx_http_session_dbhost_split(ngx_conf_t *cf, const char *list,
    ngx_array_t *out)
{
    u_char     *p, *end, *comma;
    ngx_str_t  *s;

    if (ngx_array_init(out, cf->pool, 4, sizeof(ngx_str_t)) != NGX_OK) {
        return NGX_ERROR;
    }

    if (*list == '\0') {
        return NGX_OK;
    }

    p = (u_char *) list;
    end = p + ngx_strlen(p);

    for ( ;; p = comma + 1) {
        comma = ngx_strlchr(p, end, ',');
        if (comma == NULL) {
            comma = end;
        }

        s = ngx_array_push(out);
        if (s == NULL) {
            return NGX_ERROR;
        }

        s->len = comma - p;
        s->data = ngx_pnalloc(cf->pool, s->len + 1);
        if (s->data == NULL) {
            return NGX_ERROR;
        }

        *ngx_cpymem(s->data, p, s->len) = '\0';

        if (comma == end) {
            return NGX_OK;
        }
    }
}


static ngx_uint_t
ngx_http_session_dbhost_kind(ngx_str_t *host)
{
#if (NGX_HAVE_INET6)
    u_char  addr6[16];
#endif

    /* empty: libpq's default socket directory; '@': an abstract socket */

    if (host->len == 0 || host->data[0] == '/' || host->data[0] == '@') {
        return NGX_HTTP_SESSION_DBHOST_SOCKET;
    }

    if (ngx_inet_addr(host->data, host->len) != INADDR_NONE) {
        return NGX_HTTP_SESSION_DBHOST_LITERAL;
    }

#if (NGX_HAVE_INET6)
    if (ngx_inet6_addr(host->data, host->len, addr6) == NGX_OK) {
        return NGX_HTTP_SESSION_DBHOST_LITERAL;
    }
#endif

    return NGX_HTTP_SESSION_DBHOST_NAME;
}


ngx_int_t
ngx_http_session_dbhost_init_conf(ngx_conf_t *cf,
    ngx_http_session_dbhosts_t *hosts)
{
    ngx_url_t                    u;
    ngx_uint_t                   i, local, warned;
    ngx_http_conf_ctx_t         *ctx;
    ngx_http_core_loc_conf_t    *clcf;
    ngx_http_session_dbhost_t   *h;

    if (hosts == NULL) {
        return NGX_OK;
    }

    ctx = (ngx_http_conf_ctx_t *) cf->ctx;
    clcf = ctx->loc_conf[ngx_http_core_module.ctx_index];

    if (clcf->resolver && clcf->resolver->connections.nelts) {
        hosts->resolver = clcf->resolver;
        hosts->resolver_timeout =
                         (clcf->resolver_timeout == NGX_CONF_UNSET_MSEC)
                         ? 30000 : clcf->resolver_timeout;
    }

    h = hosts->hosts.elts;
    warned = 0;

    for (i = 0; i < hosts->hosts.nelts; i++) {
        if (h[i].kind != NGX_HTTP_SESSION_DBHOST_NAME) {
            continue;
        }

        /*
         * "localhost" is the system's own (/etc/hosts), which a DNS
         * resolver may not know, and never moves: resolved now, always
         */

        local = (h[i].host.len == sizeof("localhost") - 1
                 && ngx_strcasecmp(h[i].host.data, (u_char *) "localhost")
                    == 0);

        if (hosts->resolver && !local) {
            continue;
        }

        if (!local && !warned) {
            ngx_log_error(NGX_LOG_WARN, cf->log, 0,
                          "no \"resolver\" in the http block: the host "
                          "names of \"%V\" are resolved now, once, "
                          "and again only on a reload", &hosts->name);
            warned = 1;
        }

        ngx_memzero(&u, sizeof(ngx_url_t));

        u.host = h[i].host;
        u.port = 5432;

        if (ngx_inet_resolve_host(cf->pool, &u) != NGX_OK) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "host not found in \"%V\": \"%V\" in %V:%ui",
                          &hosts->name, &h[i].host, &hosts->file,
                          hosts->line);
            return NGX_ERROR;
        }

        h[i].addrs = u.addrs;
        h[i].naddrs = u.naddrs;
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_session_dbhost_resolve(ngx_http_session_dbhost_ctx_t *ctx)
{
    ngx_http_session_dbhost_cancel(ctx);

    ctx->pool = ngx_create_pool(1024, ctx->log);
    if (ctx->pool == NULL) {
        return NGX_ERROR;
    }

    if (ngx_array_init(&ctx->targets, ctx->pool, 4,
                       sizeof(ngx_http_session_dbhost_target_t))
        != NGX_OK)
    {
        ngx_http_session_dbhost_cancel(ctx);
        return NGX_ERROR;
    }

    ctx->next = 0;

    ngx_http_session_dbhost_next(ctx);

    return NGX_OK;
}


void
ngx_http_session_dbhost_cancel(ngx_http_session_dbhost_ctx_t *ctx)
{
    ngx_http_session_resolve_done(&ctx->resolving);
    ngx_http_session_destroy_pool(&ctx->pool);
}


/* the entries from ctx->next on, up to the next name to look up */

static void
ngx_http_session_dbhost_next(ngx_http_session_dbhost_ctx_t *ctx)
{
    ngx_uint_t                   i;
    ngx_resolver_ctx_t          *rctx;
    ngx_http_session_dbhost_t   *h;

    for ( ;; ) {
        if (ctx->next == ctx->hosts->hosts.nelts) {
            ngx_http_session_dbhost_finish(ctx);
            return;
        }

        h = (ngx_http_session_dbhost_t *) ctx->hosts->hosts.elts + ctx->next;
        ctx->next++;

        if (h->kind != NGX_HTTP_SESSION_DBHOST_NAME) {
            if (ngx_http_session_dbhost_add(ctx, h, NULL, 0) != NGX_OK) {
                goto failed;
            }

            continue;
        }

        if (h->addrs) {
            /* resolved at configuration time */

            for (i = 0; i < h->naddrs; i++) {
                if (ngx_http_session_dbhost_add(ctx, h, h->addrs[i].sockaddr,
                                                h->addrs[i].socklen)
                    != NGX_OK)
                {
                    goto failed;
                }
            }

            continue;
        }

        rctx = ngx_resolve_start(ctx->hosts->resolver, NULL);
        if (rctx == NULL || rctx == NGX_NO_RESOLVER) {
            goto failed;
        }

        rctx->name = h->host;
        rctx->handler = ngx_http_session_dbhost_resolved;
        rctx->data = ctx;
        rctx->timeout = ctx->hosts->resolver_timeout;
        /* a worker that is shutting down does not wait for the answer */
        rctx->cancelable = 1;

        ctx->resolving = rctx;

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ctx->log, 0,
                       "session db: resolving \"%V\"", &h->host);

        if (ngx_resolve_name(rctx) != NGX_OK) {
            ctx->resolving = NULL;
            goto failed;
        }

        /* the handler goes on, maybe already has: ctx is not ours now */

        return;
    }

failed:

    ngx_log_error(NGX_LOG_ALERT, ctx->log, 0,
                  "session db: cannot start resolving the hosts");

    ctx->done(ctx->data, NULL, NULL, NULL);
}


static void
ngx_http_session_dbhost_resolved(ngx_resolver_ctx_t *rctx)
{
    ngx_uint_t                      i;
    ngx_http_session_dbhost_t      *h;
    ngx_http_session_dbhost_ctx_t  *ctx;

    ctx = rctx->data;
    h = (ngx_http_session_dbhost_t *) ctx->hosts->hosts.elts + ctx->next - 1;

    ctx->resolving = NULL;

    if (rctx->state) {
        ngx_log_error(ctx->level, ctx->log, 0,
                      "session db: cannot resolve \"%V\": %s",
                      &h->host, ngx_resolver_strerror(rctx->state));

    } else {
        for (i = 0; i < rctx->naddrs; i++) {
            if (ngx_http_session_dbhost_add(ctx, h, rctx->addrs[i].sockaddr,
                                            rctx->addrs[i].socklen)
                != NGX_OK)
            {
                ngx_resolve_name_done(rctx);
                ctx->done(ctx->data, NULL, NULL, NULL);
                return;
            }
        }
    }

    ngx_resolve_name_done(rctx);

    ngx_http_session_dbhost_next(ctx);
}


/* one target: the entry's host and port, and the address (sa) if any */

static ngx_int_t
ngx_http_session_dbhost_add(ngx_http_session_dbhost_ctx_t *ctx,
    ngx_http_session_dbhost_t *h, struct sockaddr *sa, socklen_t socklen)
{
    ngx_http_session_dbhost_target_t  *t;

    t = ngx_array_push(&ctx->targets);
    if (t == NULL) {
        return NGX_ERROR;
    }

    t->host = h->host;
    t->port = h->port;
    ngx_str_null(&t->addr);

    if (h->kind == NGX_HTTP_SESSION_DBHOST_LITERAL) {
        t->addr = h->host;

    } else if (sa) {
        t->addr.data = ngx_pnalloc(ctx->pool, NGX_SOCKADDR_STRLEN);
        if (t->addr.data == NULL) {
            return NGX_ERROR;
        }

        t->addr.len = ngx_sock_ntop(sa, socklen, t->addr.data,
                                    NGX_SOCKADDR_STRLEN, 0);
    }

    return NGX_OK;
}


static void
ngx_http_session_dbhost_finish(ngx_http_session_dbhost_ctx_t *ctx)
{
    char  *host, *hostaddr, *port;

    if (ctx->targets.nelts == 0) {
        ngx_log_error(ctx->level, ctx->log, 0,
                      "session db: no address for any host of \"%V\"",
                      &ctx->hosts->name);
        ctx->done(ctx->data, NULL, NULL, NULL);
        return;
    }

    host = ngx_http_session_dbhost_join(ctx->pool, &ctx->targets,
                          offsetof(ngx_http_session_dbhost_target_t, host));
    hostaddr = ngx_http_session_dbhost_join(ctx->pool, &ctx->targets,
                          offsetof(ngx_http_session_dbhost_target_t, addr));
    port = ctx->hosts->ports
           ? ngx_http_session_dbhost_join(ctx->pool, &ctx->targets,
                          offsetof(ngx_http_session_dbhost_target_t, port))
           : NULL;

    if (host == NULL || hostaddr == NULL || (ctx->hosts->ports && !port)) {
        ctx->done(ctx->data, NULL, NULL, NULL);
        return;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ctx->log, 0,
                   "session db: host=%s hostaddr=%s port=%s",
                   host, hostaddr, port ? port : "");

    ctx->done(ctx->data, host, hostaddr, port);
}


/* one field of every target, comma-separated, null-terminated */

static char *
ngx_http_session_dbhost_join(ngx_pool_t *pool, ngx_array_t *a, size_t field)
{
    u_char                            *p, *start;
    size_t                             len;
    ngx_str_t                         *s;
    ngx_uint_t                         i;
    ngx_http_session_dbhost_target_t  *t;

    t = a->elts;
    len = a->nelts;

    for (i = 0; i < a->nelts; i++) {
        s = (ngx_str_t *) ((u_char *) &t[i] + field);
        len += s->len;
    }

    start = ngx_pnalloc(pool, len);
    if (start == NULL) {
        return NULL;
    }

    p = start;

    for (i = 0; i < a->nelts; i++) {
        s = (ngx_str_t *) ((u_char *) &t[i] + field);

        if (i) {
            *p++ = ',';
        }

        p = ngx_cpymem(p, s->data, s->len);
    }

    *p = '\0';

    return (char *) start;
}
