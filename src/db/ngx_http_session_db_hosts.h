/*
 * Host names of session_db without a blocking lookup in a worker: the
 * host list of the conninfo is parsed at configuration time, every host
 * name in it is resolved through the http block's "resolver" before each
 * connection attempt (or once at configuration time when there is no
 * resolver), and libpq is handed the addresses as hostaddr=, with host=
 * kept for TLS verification.
 */

#ifndef _NGX_HTTP_SESSION_DB_HOSTS_H_INCLUDED_
#define _NGX_HTTP_SESSION_DB_HOSTS_H_INCLUDED_


#include "ngx_http_session_common.h"

#include <libpq-fe.h>



/* what an entry of host= is */
#define NGX_HTTP_SESSION_DBHOST_SOCKET   0
#define NGX_HTTP_SESSION_DBHOST_LITERAL  1
#define NGX_HTTP_SESSION_DBHOST_NAME     2


typedef struct {
    /* as written, null-terminated */
    ngx_str_t                        host;
    /* the entry's own port when port= has one per host, else empty */
    ngx_str_t                        port;
    ngx_uint_t                       kind;
    /*
     * the addresses found at configuration time: without a resolver, and
     * for "localhost" always
     */
    ngx_addr_t                      *addrs;
    ngx_uint_t                       naddrs;
} ngx_http_session_dbhost_t;


struct ngx_http_session_dbhosts_s {
    /* the directive, "session_db" or "session_db_listen", for messages */
    ngx_str_t                        name;
    /* where it is written, for a name that does not resolve */
    ngx_str_t                        file;
    ngx_uint_t                       line;
    /* of ngx_http_session_dbhost_t, in the order of host= */
    ngx_array_t                      hosts;
    /* port= has one entry per host */
    unsigned                         ports:1;
    /* NULL: every name was resolved at configuration time */
    ngx_resolver_t                  *resolver;
    ngx_msec_t                       resolver_timeout;
};


/*
 * Called once per ngx_http_session_dbhost_resolve(): host, hostaddr and
 * port (NULL: the conninfo's own) to give libpq, or host == NULL when no
 * entry has an address.  The strings live until
 * ngx_http_session_dbhost_cancel().
 */
typedef void (*ngx_http_session_dbhost_done_pt)(void *data,
    const char *host, const char *hostaddr, const char *port);


typedef struct {
    ngx_http_session_dbhosts_t      *hosts;
    ngx_log_t                       *log;
    /* of resolver errors: error once per outage, info after */
    ngx_uint_t                       level;
    ngx_http_session_dbhost_done_pt  done;
    void                            *data;

    /* one attempt's */
    ngx_pool_t                      *pool;
    ngx_resolver_ctx_t              *resolving;
    ngx_uint_t                       next;
    ngx_array_t                      targets;
} ngx_http_session_dbhost_ctx_t;


/*
 * From "session_db" or "session_db_listen" (name): the host list of its
 * parsed conninfo into *out, left NULL when there is no host name to
 * resolve: sockets and IP literals only, or a hostaddr= of the
 * operator's.
 */
char *ngx_http_session_dbhost_parse(ngx_conf_t *cf, ngx_str_t *name,
    PQconninfoOption *opts, ngx_http_session_dbhosts_t **out);

/*
 * At the end of the http block: the resolver to use, or, without one,
 * every name resolved now (in the master; a reload resolves again).
 */
ngx_int_t ngx_http_session_dbhost_init_conf(ngx_conf_t *cf,
    ngx_http_session_dbhosts_t *hosts);

/*
 * Starts an attempt: ctx->done is called from the event loop, or before
 * this returns (the resolver's cache).  NGX_ERROR: done will not be
 * called.
 */
ngx_int_t ngx_http_session_dbhost_resolve(ngx_http_session_dbhost_ctx_t *ctx);

/* stops a lookup under way and frees the attempt's strings; idempotent */
void ngx_http_session_dbhost_cancel(ngx_http_session_dbhost_ctx_t *ctx);


#endif /* _NGX_HTTP_SESSION_DB_HOSTS_H_INCLUDED_ */
