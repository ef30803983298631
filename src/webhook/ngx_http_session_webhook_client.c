/*
 * One delivery: an HTTP/1.1 POST built from nginx's own parts: the http
 * block's "resolver" for host names, every address checked against the
 * private ranges before any connection, ngx_event_connect_peer() (or an
 * idle connection to the same place, see webhook_keepalive.c), nginx's SSL
 * layer (verification against the system trust store or
 * session_webhook_trusted_certificate, SNI, host name check), and
 * ngx_http_parse_status_line() for the answer.  One timer bounds it all
 * (session_webhook_timeout).  The final status line decides (interim 1xx
 * answers before it are gone over); the rest of the answer is not read.
 * The outcome goes to the handler that the dispatcher set on the
 * delivery (d->done); this file knows nothing of the outbox.
 *
 * Over 1,000 lines, and kept whole: it is one state machine, from the URL
 * to the status line, whose stages hand over to each other and to
 * ngx_http_session_webhook_fail() from everywhere; cut in two, each half
 * would call the other.
 */

#include "ngx_http_session_webhook_client.h"
#include "ngx_http_session_webhook.h"
#include "ngx_http_session_webhook_keepalive.h"
#include "ngx_http_session_delivery.h"


/* "resolver_timeout" when the http block sets none, as nginx's default */
#define NGX_HTTP_SESSION_WEBHOOK_RESOLVER_TIMEOUT  30000
/* the buffer of the answer's head, read again and again if need be */
#define NGX_HTTP_SESSION_WEBHOOK_ANSWER     1024
/* the final status line must come within this many bytes of the answer */
#define NGX_HTTP_SESSION_WEBHOOK_HEAD_MAX   65536
#define NGX_HTTP_SESSION_WEBHOOK_ERROR_MAX  256

#define NGX_HTTP_SESSION_WEBHOOK_USER_AGENT  "ngx_http_session_module"


/* the worker's settings of every delivery */
typedef struct {
    /* connections log here: their errors become last_error instead */
    ngx_log_t                     quiet;

    ngx_resolver_t               *resolver;
    ngx_msec_t                    resolver_timeout;
#if (NGX_SSL)
    ngx_ssl_t                    *ssl;
#endif

    ngx_msec_t                    timeout;
    ngx_flag_t                    allow_private;
} ngx_http_session_webhook_client_t;


static void ngx_http_session_webhook_begin(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_resolved(ngx_resolver_ctx_t *ctx);
static ngx_int_t ngx_http_session_webhook_refused(
    ngx_http_session_webhook_delivery_t *d, struct sockaddr *sa,
    socklen_t socklen);
static void ngx_http_session_webhook_connect(
    ngx_http_session_webhook_delivery_t *d);
static ngx_int_t ngx_http_session_webhook_reuse(
    ngx_http_session_webhook_delivery_t *d, ngx_addr_t *addr);
static void ngx_http_session_webhook_connected(
    ngx_http_session_webhook_delivery_t *d);
#if (NGX_SSL)
static void ngx_http_session_webhook_ssl_handshaked(ngx_connection_t *c);
#endif
static ngx_int_t ngx_http_session_webhook_build(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_event(ngx_event_t *ev);
static void ngx_http_session_webhook_unwanted(
    ngx_http_session_webhook_delivery_t *d, ngx_event_t *ev);
static void ngx_http_session_webhook_send(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_read(
    ngx_http_session_webhook_delivery_t *d);
static ngx_int_t ngx_http_session_webhook_status(
    ngx_http_session_webhook_delivery_t *d);
static ngx_int_t ngx_http_session_webhook_stale(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_keep(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_timeout(ngx_event_t *ev);
static void ngx_http_session_webhook_fail(
    ngx_http_session_webhook_delivery_t *d, const char *fmt, ...);
static void ngx_http_session_webhook_close(
    ngx_http_session_webhook_delivery_t *d);
static void ngx_http_session_webhook_finish(
    ngx_http_session_webhook_delivery_t *d, ngx_uint_t delivered);


static const char  *ngx_http_session_webhook_stages[] = {
    "resolving the host name",
    "connecting",
    "in the TLS handshake",
    "sending the request",
    "waiting for the answer"
};


static ngx_http_session_webhook_client_t  ngx_http_session_webhook_client;


ngx_int_t
ngx_http_session_webhook_init_conf(ngx_conf_t *cf,
    ngx_http_session_main_conf_t *smcf)
{
    ngx_http_conf_ctx_t       *ctx;
    ngx_http_core_loc_conf_t  *clcf;
#if (NGX_SSL)
    ngx_ssl_t                 *ssl;
    ngx_pool_cleanup_t        *cln;
#endif

    ctx = (ngx_http_conf_ctx_t *) cf->ctx;
    clcf = ctx->loc_conf[ngx_http_core_module.ctx_index];

    if (clcf->resolver == NULL || clcf->resolver->connections.nelts == 0) {
        ngx_log_error(NGX_LOG_WARN, cf->log, 0,
                      "no \"resolver\" in the http block: webhooks to host "
                      "names will fail, only IP addresses can be reached");
    }

#if (NGX_SSL)

    ssl = ngx_pcalloc(cf->pool, sizeof(ngx_ssl_t));
    if (ssl == NULL) {
        return NGX_ERROR;
    }

    ssl->log = cf->log;

    if (ngx_ssl_create(ssl, NGX_SSL_TLSv1_2|NGX_SSL_TLSv1_3, NULL)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        ngx_ssl_cleanup_ctx(ssl);
        return NGX_ERROR;
    }

    cln->handler = ngx_ssl_cleanup_ctx;
    cln->data = ssl;

    if (smcf->webhook_trusted_certificate.len) {
        if (ngx_conf_full_name(cf->cycle, &smcf->webhook_trusted_certificate,
                               1)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (SSL_CTX_load_verify_locations(ssl->ctx,
                           (char *) smcf->webhook_trusted_certificate.data,
                           NULL)
            == 0)
        {
            ngx_ssl_error(NGX_LOG_EMERG, cf->log, 0,
                          "cannot load \"session_webhook_trusted_certificate\""
                          " \"%V\" in %V:%ui",
                          &smcf->webhook_trusted_certificate,
                          &smcf->webhook_trusted_file,
                          smcf->webhook_trusted_line);
            return NGX_ERROR;
        }

    } else if (SSL_CTX_set_default_verify_paths(ssl->ctx) == 0) {
        ngx_ssl_error(NGX_LOG_EMERG, cf->log, 0,
                      "cannot load the system's trusted certificates");
        return NGX_ERROR;
    }

    smcf->webhook_ssl = ssl;

#endif

    return NGX_OK;
}


void
ngx_http_session_webhook_client_init(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf)
{
    ngx_http_conf_ctx_t                *ctx;
    ngx_http_core_loc_conf_t           *clcf;
    ngx_http_session_webhook_client_t  *cl;

    cl = &ngx_http_session_webhook_client;

    ngx_memzero(cl, sizeof(ngx_http_session_webhook_client_t));

    /*
     * nginx logs a refused connect() at "error"; here that is the
     * receiver's state, recorded in last_error and logged at "info".
     */

    cl->quiet = *cycle->log;
    cl->quiet.log_level = NGX_LOG_CRIT;
    cl->quiet.next = NULL;

    ctx = (ngx_http_conf_ctx_t *) cycle->conf_ctx[ngx_http_module.index];
    clcf = ctx->loc_conf[ngx_http_core_module.ctx_index];

    /*
     * The http block's own: merging fills in the servers' values, not
     * those of the http level, so an unset timeout keeps nginx's default.
     */

    cl->resolver = clcf->resolver;
    cl->resolver_timeout = (clcf->resolver_timeout == NGX_CONF_UNSET_MSEC)
                           ? NGX_HTTP_SESSION_WEBHOOK_RESOLVER_TIMEOUT
                           : clcf->resolver_timeout;

#if (NGX_SSL)
    cl->ssl = smcf->webhook_ssl;
#endif

    cl->timeout = smcf->webhook_timeout;
    cl->allow_private = smcf->webhook_allow_private;
}


void
ngx_http_session_webhook_deliver(ngx_http_session_webhook_delivery_t *d)
{
    d->timer.handler = ngx_http_session_webhook_timeout;
    d->timer.data = d;
    d->timer.log = d->log;

    ngx_add_timer(&d->timer, ngx_http_session_webhook_client.timeout);

    ngx_http_session_webhook_begin(d);
}


void
ngx_http_session_webhook_cancel(ngx_http_session_webhook_delivery_t *d)
{
    d->finished = 1;
    ngx_http_session_webhook_close(d);
}


static void
ngx_http_session_webhook_begin(ngx_http_session_webhook_delivery_t *d)
{
    size_t                              len;
    ngx_sockaddr_t                     *sa;
    ngx_resolver_ctx_t                 *ctx;
    ngx_http_session_webhook_client_t  *cl;

    cl = &ngx_http_session_webhook_client;

    if (ngx_http_session_url_parse(d->url.data, d->url.len, &d->u)
        != NGX_HTTP_SESSION_URL_OK)
    {
        ngx_http_session_webhook_fail(d, "webhook_url is not a valid URL");
        return;
    }

#if (NGX_SSL)
    if (d->u.https && cl->ssl == NULL) {
#else
    if (d->u.https) {
#endif
        ngx_http_session_webhook_fail(d, "https is not available: nginx "
                                      "was built without SSL");
        return;
    }

    if (ngx_http_session_webhook_build(d) != NGX_OK) {
        return;
    }

    if (d->u.host_type == NGX_HTTP_SESSION_URL_HOST_NAME) {
        len = d->u.host_len;

        if (d->u.host[len - 1] == '.') {
            len--;
        }

        d->host.len = len;
        d->host.data = ngx_pnalloc(d->pool, len + 1);
        if (d->host.data == NULL) {
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        ngx_memcpy(d->host.data, d->u.host, len);
        d->host.data[len] = '\0';

        if (!cl->allow_private
            && ngx_http_session_host_private(d->host.data, d->host.len))
        {
            ngx_http_session_webhook_fail(d, "refused: \"%V\" is a private "
                                          "host name", &d->host);
            return;
        }

        ctx = ngx_resolve_start(cl->resolver, NULL);

        if (ctx == NULL) {
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        if (ctx == NGX_NO_RESOLVER) {
            ngx_http_session_webhook_fail(d, "cannot resolve \"%V\": no "
                                          "\"resolver\" is configured in "
                                          "the http block", &d->host);
            return;
        }

        ctx->name = d->host;
        ctx->handler = ngx_http_session_webhook_resolved;
        ctx->data = d;
        ctx->timeout = cl->resolver_timeout;

        d->state = ngx_http_session_webhook_resolving;
        d->resolve = ctx;

        if (ngx_resolve_name(ctx) != NGX_OK) {
            d->resolve = NULL;
            ngx_http_session_webhook_fail(d, "cannot resolve \"%V\"",
                                          &d->host);
        }

        /* the handler may have run already, from the resolver's cache */

        return;
    }

    /* an IP literal: one address */

    d->addrs = ngx_pcalloc(d->pool, sizeof(ngx_addr_t));
    sa = ngx_pcalloc(d->pool, sizeof(ngx_sockaddr_t));

    if (d->addrs == NULL || sa == NULL) {
        ngx_http_session_webhook_fail(d, "out of memory");
        return;
    }

    d->naddrs = 1;
    d->addrs->sockaddr = &sa->sockaddr;

#if (NGX_HAVE_INET6)
    if (d->u.host_type == NGX_HTTP_SESSION_URL_HOST_IPV6) {
        sa->sockaddr_in6.sin6_family = AF_INET6;
        ngx_memcpy(sa->sockaddr_in6.sin6_addr.s6_addr, d->u.addr, 16);
        d->addrs->socklen = sizeof(struct sockaddr_in6);

    } else
#endif
    if (d->u.host_type == NGX_HTTP_SESSION_URL_HOST_IPV4) {
        sa->sockaddr_in.sin_family = AF_INET;
        ngx_memcpy(&sa->sockaddr_in.sin_addr.s_addr, d->u.addr, 4);
        d->addrs->socklen = sizeof(struct sockaddr_in);

    } else {
        ngx_http_session_webhook_fail(d, "IPv6 is not available");
        return;
    }

    ngx_inet_set_port(d->addrs->sockaddr, (in_port_t) d->u.port);

    if (ngx_http_session_webhook_refused(d, d->addrs->sockaddr,
                                         d->addrs->socklen))
    {
        return;
    }

    ngx_http_session_webhook_connect(d);
}


static void
ngx_http_session_webhook_resolved(ngx_resolver_ctx_t *ctx)
{
    ngx_uint_t                            i;
    struct sockaddr                      *sa;
    ngx_http_session_webhook_delivery_t  *d;

    d = ctx->data;

    if (ctx->state) {
        d->resolve = NULL;
        ngx_http_session_webhook_fail(d, "cannot resolve \"%V\": %s",
                                      &d->host,
                                      ngx_resolver_strerror(ctx->state));
        ngx_resolve_name_done(ctx);
        return;
    }

    d->addrs = ngx_pcalloc(d->pool, ctx->naddrs * sizeof(ngx_addr_t));
    if (d->addrs == NULL) {
        d->resolve = NULL;
        ngx_resolve_name_done(ctx);
        ngx_http_session_webhook_fail(d, "out of memory");
        return;
    }

    /* every address, before any connection */

    for (i = 0; i < ctx->naddrs; i++) {
        sa = ngx_pnalloc(d->pool, ctx->addrs[i].socklen);
        if (sa == NULL) {
            d->resolve = NULL;
            ngx_resolve_name_done(ctx);
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        ngx_memcpy(sa, ctx->addrs[i].sockaddr, ctx->addrs[i].socklen);
        ngx_inet_set_port(sa, (in_port_t) d->u.port);

        d->addrs[i].sockaddr = sa;
        d->addrs[i].socklen = ctx->addrs[i].socklen;
        d->naddrs++;
    }

    d->resolve = NULL;
    ngx_resolve_name_done(ctx);

    for (i = 0; i < d->naddrs; i++) {
        if (ngx_http_session_webhook_refused(d, d->addrs[i].sockaddr,
                                             d->addrs[i].socklen))
        {
            return;
        }
    }

    ngx_http_session_webhook_connect(d);
}


/* fails the attempt if the address is private and that is not allowed */

static ngx_int_t
ngx_http_session_webhook_refused(ngx_http_session_webhook_delivery_t *d,
    struct sockaddr *sa, socklen_t socklen)
{
    int                   private;
    u_char                text[NGX_SOCKADDR_STRLEN];
    size_t                len;
    struct sockaddr_in   *sin;
#if (NGX_HAVE_INET6)
    struct sockaddr_in6  *sin6;
#endif

    if (ngx_http_session_webhook_client.allow_private) {
        return 0;
    }

    switch (sa->sa_family) {

    case AF_INET:
        sin = (struct sockaddr_in *) sa;
        private = ngx_http_session_addr_private(AF_INET,
                                     (const unsigned char *) &sin->sin_addr);
        break;

#if (NGX_HAVE_INET6)
    case AF_INET6:
        sin6 = (struct sockaddr_in6 *) sa;
        private = ngx_http_session_addr_private(AF_INET6,
                                            sin6->sin6_addr.s6_addr);
        break;
#endif

    default:
        private = 1;
    }

    if (!private) {
        return 0;
    }

    len = ngx_sock_ntop(sa, socklen, text, NGX_SOCKADDR_STRLEN, 0);

    if (d->u.host_type == NGX_HTTP_SESSION_URL_HOST_NAME) {
        ngx_http_session_webhook_fail(d, "refused: \"%V\" resolves to the "
                                      "private address %*s", &d->host,
                                      len, text);
    } else {
        ngx_http_session_webhook_fail(d, "refused: %*s is a private "
                                      "address", len, text);
    }

    return 1;
}


static void
ngx_http_session_webhook_connect(ngx_http_session_webhook_delivery_t *d)
{
    u_char            *text;
    size_t             len;
    ngx_err_t          err;
    ngx_int_t          rc;
    ngx_addr_t        *addr;
    ngx_connection_t  *c;

    for ( ;; ) {
        if (d->next_addr >= d->naddrs) {
            if (d->error.len == 0) {
                ngx_http_session_webhook_fail(d, "no address to connect to");
            } else {
                ngx_http_session_webhook_fail(d, "%V", &d->error);
            }
            return;
        }

        addr = &d->addrs[d->next_addr++];

        text = ngx_pnalloc(d->pool, NGX_SOCKADDR_STRLEN);
        if (text == NULL) {
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        len = ngx_sock_ntop(addr->sockaddr, addr->socklen, text,
                            NGX_SOCKADDR_STRLEN, 1);

        ngx_memzero(&d->peer, sizeof(ngx_peer_connection_t));

        d->peer.name = ngx_palloc(d->pool, sizeof(ngx_str_t));
        if (d->peer.name == NULL) {
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        d->peer.name->data = text;
        d->peer.name->len = len;

        if (!d->fresh && ngx_http_session_webhook_reuse(d, addr) == NGX_OK) {
            d->state = ngx_http_session_webhook_sending;
            ngx_http_session_webhook_send(d);
            return;
        }

        d->peer.sockaddr = addr->sockaddr;
        d->peer.socklen = addr->socklen;
        d->peer.get = ngx_event_get_peer;
        d->peer.log = &ngx_http_session_webhook_client.quiet;
        d->peer.log_error = NGX_ERROR_INFO;

        d->state = ngx_http_session_webhook_connecting;

        ngx_set_socket_errno(0);

        rc = ngx_event_connect_peer(&d->peer);
        err = ngx_socket_errno;

        if (rc == NGX_ERROR || rc == NGX_BUSY || rc == NGX_DECLINED) {
            /* remembered in case no other address answers */
            d->error.data = ngx_pnalloc(d->pool,
                                        NGX_HTTP_SESSION_WEBHOOK_ERROR_MAX);
            if (d->error.data) {
                d->error.len = ngx_snprintf(d->error.data,
                                    NGX_HTTP_SESSION_WEBHOOK_ERROR_MAX,
                                    "cannot connect to %V: %s", d->peer.name,
                                    err ? strerror(err) : "failed")
                               - d->error.data;
            }

            d->peer.connection = NULL;
            continue;
        }

        c = d->peer.connection;

        c->data = d;
        c->read->handler = ngx_http_session_webhook_event;
        c->write->handler = ngx_http_session_webhook_event;

        /* the connection's own pool: it may outlive this delivery */

        c->pool = ngx_create_pool(512, d->log);
        d->conn = (c->pool == NULL) ? NULL
                  : ngx_pcalloc(c->pool,
                                sizeof(ngx_http_session_webhook_conn_t));

        if (d->conn == NULL) {
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        d->conn->connection = c;
        d->conn->https = d->u.https;
        d->conn->socklen = addr->socklen;
        d->conn->sockaddr = ngx_pnalloc(c->pool, addr->socklen);

        if (d->conn->sockaddr == NULL) {
            ngx_http_session_webhook_fail(d, "out of memory");
            return;
        }

        ngx_memcpy(d->conn->sockaddr, addr->sockaddr, addr->socklen);

        if (d->u.https && d->host.len) {
            d->conn->host.data = ngx_pstrdup(c->pool, &d->host);
            if (d->conn->host.data == NULL) {
                ngx_http_session_webhook_fail(d, "out of memory");
                return;
            }

            d->conn->host.len = d->host.len;
        }

        if (rc == NGX_AGAIN) {
            /* the write event tells when connect() is done */
            return;
        }

        ngx_http_session_webhook_connected(d);
        return;
    }
}


/* an idle connection to addr, if there is one (see webhook_keepalive.c) */

static ngx_int_t
ngx_http_session_webhook_reuse(ngx_http_session_webhook_delivery_t *d,
    ngx_addr_t *addr)
{
    ngx_connection_t                 *c;
    ngx_http_session_webhook_conn_t  *conn;

    conn = ngx_http_session_webhook_keepalive_get(addr->sockaddr,
                                                  addr->socklen,
                                                  d->u.https, &d->host);
    if (conn == NULL) {
        return NGX_DECLINED;
    }

    c = conn->connection;

    c->data = d;
    c->read->handler = ngx_http_session_webhook_event;
    c->write->handler = ngx_http_session_webhook_event;

    d->peer.connection = c;
    d->peer.sockaddr = conn->sockaddr;
    d->peer.socklen = conn->socklen;
    d->conn = conn;
    d->reused = 1;

    return NGX_OK;
}


static void
ngx_http_session_webhook_connected(ngx_http_session_webhook_delivery_t *d)
{
    int                err;
    socklen_t          len;
    ngx_connection_t  *c;
#if (NGX_SSL)
    ngx_int_t          rc;
#endif

    c = d->peer.connection;

    err = 0;
    len = sizeof(int);

    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, (void *) &err, &len) == -1) {
        err = ngx_socket_errno;
    }

    if (err) {
        ngx_http_session_webhook_conn_close(c);
        d->peer.connection = NULL;
        d->conn = NULL;

        d->error.data = ngx_pnalloc(d->pool,
                                    NGX_HTTP_SESSION_WEBHOOK_ERROR_MAX);
        if (d->error.data) {
            d->error.len = ngx_snprintf(d->error.data,
                                   NGX_HTTP_SESSION_WEBHOOK_ERROR_MAX,
                                   "cannot connect to %V: %s",
                                   d->peer.name, strerror(err))
                           - d->error.data;
        }

        ngx_http_session_webhook_connect(d);
        return;
    }

#if (NGX_SSL)

    if (d->u.https) {
        if (ngx_ssl_create_connection(ngx_http_session_webhook_client.ssl, c,
                                      NGX_SSL_BUFFER|NGX_SSL_CLIENT)
            != NGX_OK)
        {
            ngx_http_session_webhook_fail(d, "TLS setup failed");
            return;
        }

        if (d->u.host_type == NGX_HTTP_SESSION_URL_HOST_NAME
            && SSL_set_tlsext_host_name(c->ssl->connection,
                                        (char *) d->host.data)
               == 0)
        {
            ngx_http_session_webhook_fail(d, "TLS setup failed (SNI)");
            return;
        }

        d->state = ngx_http_session_webhook_handshaking;

        rc = ngx_ssl_handshake(c);

        if (rc == NGX_AGAIN) {
            c->ssl->handler = ngx_http_session_webhook_ssl_handshaked;
            return;
        }

        ngx_http_session_webhook_ssl_handshaked(c);
        return;
    }

#endif

    d->state = ngx_http_session_webhook_sending;
    ngx_http_session_webhook_send(d);
}


#if (NGX_SSL)

static void
ngx_http_session_webhook_ssl_handshaked(ngx_connection_t *c)
{
    int                                   ok;
    long                                  rc;
    X509                                 *cert;
    ngx_http_session_webhook_delivery_t  *d;

    d = c->data;

    if (!c->ssl->handshaked) {
        ngx_http_session_webhook_fail(d, "TLS handshake with %V failed",
                                      d->peer.name);
        return;
    }

    rc = SSL_get_verify_result(c->ssl->connection);

    if (rc != X509_V_OK) {
        ngx_http_session_webhook_fail(d, "TLS certificate of %V not "
                                      "trusted: %s", d->peer.name,
                                      X509_verify_cert_error_string(rc));
        return;
    }

    if (d->u.host_type == NGX_HTTP_SESSION_URL_HOST_NAME) {
        ok = ngx_ssl_check_host(c, &d->host) == NGX_OK;

    } else {
        /* an IP literal must be an IP address of the certificate */

        cert = SSL_get_peer_certificate(c->ssl->connection);
        ok = cert != NULL
             && X509_check_ip(cert, d->u.addr,
                              d->u.host_type == NGX_HTTP_SESSION_URL_HOST_IPV4
                              ? 4 : 16, 0) == 1;
        if (cert) {
            X509_free(cert);
        }
    }

    if (!ok) {
        ngx_http_session_webhook_fail(d, "TLS certificate of %V does not "
                                      "match \"%*s\"", d->peer.name,
                                      d->u.host_len, d->u.host);
        return;
    }

    c->read->handler = ngx_http_session_webhook_event;
    c->write->handler = ngx_http_session_webhook_event;

    d->state = ngx_http_session_webhook_sending;
    ngx_http_session_webhook_send(d);
}

#endif


/* the request: headers of Standard Webhooks, the payload as stored */

static ngx_int_t
ngx_http_session_webhook_build(ngx_http_session_webhook_delivery_t *d)
{
    int         key_len;
    size_t      len;
    time_t      now;
    ngx_buf_t  *b;
    u_char      key[NGX_HTTP_SESSION_WEBHOOK_KEY_MAX];
    u_char      sig[NGX_HTTP_SESSION_WEBHOOK_SIG_LEN];

    key_len = ngx_http_session_webhook_key(d->secret.data, d->secret.len,
                                           key);
    if (key_len < 0) {
        ngx_http_session_webhook_fail(d, "the project's webhook_secret is "
                                      "malformed");
        return NGX_ERROR;
    }

    now = ngx_time();

    if (ngx_http_session_webhook_sign(key, key_len, d->id.data, d->id.len,
                                      now, d->payload.data, d->payload.len,
                                      sig)
        != 0)
    {
        ngx_explicit_memzero(key, sizeof(key));
        ngx_http_session_webhook_fail(d, "cannot sign the event");
        return NGX_ERROR;
    }

    ngx_explicit_memzero(key, sizeof(key));

    len = sizeof("POST / HTTP/1.1" CRLF) - 1 + d->u.path_len
          + sizeof("Host: " CRLF) - 1 + d->u.authority_len
          + sizeof("User-Agent: " NGX_HTTP_SESSION_WEBHOOK_USER_AGENT CRLF)
          - 1
          + sizeof("Content-Type: application/json" CRLF) - 1
          + sizeof("Content-Length: " CRLF) - 1 + NGX_SIZE_T_LEN
          + sizeof("webhook-id: " CRLF) - 1 + d->id.len
          + sizeof("webhook-timestamp: " CRLF) - 1 + NGX_TIME_T_LEN
          + sizeof("webhook-signature: " CRLF) - 1
          + NGX_HTTP_SESSION_WEBHOOK_SIG_LEN
          + sizeof(CRLF) - 1
          + d->payload.len;

    b = ngx_create_temp_buf(d->pool, len);
    if (b == NULL) {
        ngx_http_session_webhook_fail(d, "out of memory");
        return NGX_ERROR;
    }

    b->last = ngx_cpymem(b->last, "POST ", sizeof("POST ") - 1);

    if (d->u.path_len == 0 || d->u.path[0] != '/') {
        *b->last++ = '/';
    }

    b->last = ngx_sprintf(b->last, "%*s HTTP/1.1" CRLF "Host: %*s" CRLF
                          "User-Agent: " NGX_HTTP_SESSION_WEBHOOK_USER_AGENT
                          CRLF "Content-Type: application/json" CRLF
                          "Content-Length: %uz" CRLF
                          "webhook-id: %V" CRLF
                          "webhook-timestamp: %T" CRLF
                          "webhook-signature: %*s" CRLF CRLF,
                          d->u.path_len, d->u.path,
                          d->u.authority_len, d->u.authority,
                          d->payload.len, &d->id, now,
                          (size_t) NGX_HTTP_SESSION_WEBHOOK_SIG_LEN, sig);

    b->last = ngx_cpymem(b->last, d->payload.data, d->payload.len);

    d->request = b;

    return NGX_OK;
}


static void
ngx_http_session_webhook_event(ngx_event_t *ev)
{
    ngx_connection_t                     *c;
    ngx_http_session_webhook_delivery_t  *d;

    c = ev->data;
    d = c->data;

    switch (d->state) {

    case ngx_http_session_webhook_connecting:
        if (ev->write) {
            ngx_http_session_webhook_connected(d);
            return;
        }
        break;

    case ngx_http_session_webhook_sending:
        if (ev->write) {
            ngx_http_session_webhook_send(d);
            return;
        }
        break;

    case ngx_http_session_webhook_reading:
        if (!ev->write) {
            ngx_http_session_webhook_read(d);
            return;
        }
        break;

    default:
        break;
    }

    ngx_http_session_webhook_unwanted(d, ev);
}


/*
 * An event the stage does not wait for: a write event once the request
 * is sent, a read event before it is (the receiver answered early, or
 * closed).  Under a level-triggered method (poll, select) it would fire
 * again at every pass of the event loop for as long as the stage lasts:
 * its interest goes, as nginx's upstream does with its write event.  A
 * read event stays ready, and the reading stage reads what came (and
 * adds the interest again once it has read all there is).
 */

static void
ngx_http_session_webhook_unwanted(ngx_http_session_webhook_delivery_t *d,
    ngx_event_t *ev)
{
    if (!(ngx_event_flags & NGX_USE_LEVEL_EVENT) || !ev->active) {
        return;
    }

    if (ngx_del_event(ev, ev->write ? NGX_WRITE_EVENT : NGX_READ_EVENT, 0)
        != NGX_OK)
    {
        ngx_http_session_webhook_fail(d, "cannot wait for %V",
                                      d->peer.name);
    }
}


static void
ngx_http_session_webhook_send(ngx_http_session_webhook_delivery_t *d)
{
    ssize_t            n;
    ngx_buf_t         *b;
    ngx_connection_t  *c;

    c = d->peer.connection;
    b = d->request;

    while (b->pos < b->last) {
        n = c->send(c, b->pos, b->last - b->pos);

        if (n > 0) {
            b->pos += n;
            continue;
        }

        if (n == NGX_AGAIN) {
            if (ngx_handle_write_event(c->write, 0) != NGX_OK) {
                ngx_http_session_webhook_fail(d, "cannot send to %V",
                                              d->peer.name);
            }
            return;
        }

        if (ngx_http_session_webhook_stale(d) == NGX_OK) {
            return;
        }

        ngx_http_session_webhook_fail(d, "cannot send to %V: the "
                                      "connection was closed", d->peer.name);
        return;
    }

    /*
     * The whole request is out: no more write events (the socket stays
     * writable, which a level-triggered method would report at every
     * pass while the receiver takes its time to answer)
     */

    if (ngx_handle_write_event(c->write, 0) != NGX_OK) {
        ngx_http_session_webhook_fail(d, "cannot wait for %V",
                                      d->peer.name);
        return;
    }

    if (d->answer == NULL) {
        d->answer = ngx_create_temp_buf(d->pool,
                                        NGX_HTTP_SESSION_WEBHOOK_ANSWER);
        d->parser = ngx_pcalloc(d->pool, sizeof(ngx_http_request_t));
    }

    if (d->answer == NULL || d->parser == NULL) {
        ngx_http_session_webhook_fail(d, "out of memory");
        return;
    }

    d->state = ngx_http_session_webhook_reading;

    ngx_http_session_webhook_read(d);
}


static void
ngx_http_session_webhook_read(ngx_http_session_webhook_delivery_t *d)
{
    ssize_t            n;
    ngx_int_t          rc;
    ngx_uint_t         code;
    ngx_buf_t         *b;
    ngx_connection_t  *c;

    c = d->peer.connection;
    b = d->answer;

    for ( ;; ) {
        if (d->received >= NGX_HTTP_SESSION_WEBHOOK_HEAD_MAX) {
            ngx_http_session_webhook_fail(d, "the answer of %V has no "
                                          "final HTTP status line in its "
                                          "first %uz bytes", d->peer.name,
                                          (size_t)
                                          NGX_HTTP_SESSION_WEBHOOK_HEAD_MAX);
            return;
        }

        if (b->last == b->end) {
            /*
             * the parsers keep their state, not the bytes they went
             * over (a long reason phrase, interim answers): room again
             */
            b->pos = b->start;
            b->last = b->start;
        }

        n = c->recv(c, b->last, b->end - b->last);

        if (n == NGX_AGAIN) {
            if (ngx_handle_read_event(c->read, 0) != NGX_OK) {
                ngx_http_session_webhook_fail(d, "cannot read from %V",
                                              d->peer.name);
            }
            return;
        }

        if (n == 0 || n == NGX_ERROR) {
            if (d->received == 0
                && ngx_http_session_webhook_stale(d) == NGX_OK)
            {
                return;
            }

            ngx_http_session_webhook_fail(d, "%V closed the connection "
                                          "without an answer",
                                          d->peer.name);
            return;
        }

        b->last += n;
        d->received += n;

        rc = ngx_http_session_webhook_status(d);

        if (rc == NGX_AGAIN) {
            continue;
        }

        if (rc != NGX_OK) {
            ngx_http_session_webhook_fail(d, "the answer of %V is not HTTP",
                                          d->peer.name);
            return;
        }

        break;
    }

    code = d->status.code;

    if (ngx_http_session_webhook_delivered(code)) {
        /* kept only when the whole answer is in the buffer */

        if (d->conn && d->received == (size_t) (b->last - b->start)
            && ngx_http_session_webhook_keepalive_allowed(&d->status,
                                                          d->answer,
                                                          d->parser))
        {
            ngx_http_session_webhook_keep(d);
        }

        ngx_http_session_webhook_finish(d, 1);
        return;
    }

    if (code >= 300 && code < 400) {
        ngx_http_session_webhook_fail(d, "answered %ui: redirects are not "
                                      "followed", code);
        return;
    }

    ngx_http_session_webhook_fail(d, "answered %ui", code);
}


/*
 * The final status line of what is in d->answer: NGX_OK, NGX_AGAIN (not
 * there yet) or NGX_ERROR (not HTTP).  Interim answers (1xx but 101,
 * which only an Upgrade asks for) come before it, each a status line and
 * header lines (RFC 9110 15.2: 100 Continue, 103 Early Hints that a proxy
 * may add): they are gone over.
 */

static ngx_int_t
ngx_http_session_webhook_status(ngx_http_session_webhook_delivery_t *d)
{
    ngx_int_t  rc;

    for ( ;; ) {
        if (d->interim) {
            rc = ngx_http_parse_header_line(d->parser, d->answer, 1);

            if (rc == NGX_OK) {
                continue;
            }

            if (rc != NGX_HTTP_PARSE_HEADER_DONE) {
                return (rc == NGX_AGAIN) ? NGX_AGAIN : NGX_ERROR;
            }

            d->interim = 0;
            ngx_memzero(&d->status, sizeof(ngx_http_status_t));
        }

        rc = ngx_http_parse_status_line(d->parser, d->answer, &d->status);

        if (rc != NGX_OK) {
            return rc;
        }

        if (d->status.code >= 200 || d->status.code == 101) {
            return NGX_OK;
        }

        d->interim = 1;
    }
}


/*
 * A reused connection that the receiver had closed (it fails before a
 * byte of the answer): the same address again on a new connection,
 * within the same attempt.  NGX_DECLINED: not such a case.
 */

static ngx_int_t
ngx_http_session_webhook_stale(ngx_http_session_webhook_delivery_t *d)
{
    if (!d->reused) {
        return NGX_DECLINED;
    }

    ngx_http_session_webhook_conn_close(d->peer.connection);
    d->peer.connection = NULL;
    d->conn = NULL;
    d->reused = 0;
    d->fresh = 1;

    d->request->pos = d->request->start;

    if (d->answer) {
        d->answer->pos = d->answer->start;
        d->answer->last = d->answer->start;
        ngx_memzero(d->parser, sizeof(ngx_http_request_t));
        ngx_memzero(&d->status, sizeof(ngx_http_status_t));
        d->received = 0;
        d->interim = 0;
    }

    d->next_addr--;

    ngx_http_session_webhook_connect(d);

    return NGX_OK;
}


/* the connection stays open, idle, for the next delivery to its place */

static void
ngx_http_session_webhook_keep(ngx_http_session_webhook_delivery_t *d)
{
    if (ngx_http_session_webhook_keepalive_put(d->conn) != NGX_OK) {
        /* ngx_http_session_webhook_close() closes it */
        return;
    }

    d->peer.connection = NULL;
    d->conn = NULL;
}


static void
ngx_http_session_webhook_timeout(ngx_event_t *ev)
{
    ngx_http_session_webhook_delivery_t  *d;

    d = ev->data;

    ngx_http_session_webhook_fail(d, "timed out after %M ms %s",
                                  ngx_http_session_webhook_client.timeout,
                                  ngx_http_session_webhook_stages[d->state]);
}


static void
ngx_http_session_webhook_fail(ngx_http_session_webhook_delivery_t *d,
    const char *fmt, ...)
{
    u_char   *p;
    va_list   args;

    if (d->finished) {
        return;
    }

    /* NUL-terminated: it is a query parameter */

    p = ngx_pnalloc(d->pool, NGX_HTTP_SESSION_WEBHOOK_ERROR_MAX + 1);

    if (p == NULL) {
        ngx_str_set(&d->error, "out of memory");

    } else {
        va_start(args, fmt);
        d->error.len = ngx_vslprintf(p, p + NGX_HTTP_SESSION_WEBHOOK_ERROR_MAX,
                                     fmt, args)
                       - p;
        va_end(args);
        p[d->error.len] = '\0';
        d->error.data = p;
    }

    ngx_http_session_webhook_finish(d, 0);
}


static void
ngx_http_session_webhook_close(ngx_http_session_webhook_delivery_t *d)
{
    ngx_connection_t  *c;

    if (d->timer.timer_set) {
        ngx_del_timer(&d->timer);
    }

    ngx_http_session_resolve_done(&d->resolve);

    c = d->peer.connection;

    if (c == NULL) {
        return;
    }

    d->peer.connection = NULL;

    ngx_http_session_webhook_conn_close(c);
}


/* the outcome: the connection goes at once, the dispatcher hears */

static void
ngx_http_session_webhook_finish(ngx_http_session_webhook_delivery_t *d,
    ngx_uint_t delivered)
{
    if (d->finished) {
        return;
    }

    d->finished = 1;

    ngx_http_session_webhook_close(d);

    d->done(d, delivered);
}
