/*
 * Redacting error-log writers.
 *
 * Installed from init_module, after nginx has opened the log files and
 * copied the listening sockets' logs, on: the main error logs, every
 * listening socket's copy, and the error_log of every server and
 * location.  Connections and requests copy writer and wdata from these,
 * so every line passes through ngx_http_session_log_writer().
 */

#include "ngx_http_session_log.h"


typedef struct {
    ngx_log_writer_pt   writer;
    void               *wdata;
} ngx_http_session_log_t;


static ngx_int_t ngx_http_session_log_wrap(ngx_cycle_t *cycle,
    ngx_log_t *log, u_char *prefix);
static void ngx_http_session_log_unwrap(void *data);
static ngx_int_t ngx_http_session_log_wrap_loc(ngx_cycle_t *cycle,
    ngx_http_core_loc_conf_t *clcf, u_char *prefix);
static ngx_int_t ngx_http_session_log_wrap_tree(ngx_cycle_t *cycle,
    ngx_http_location_tree_node_t *node, u_char *prefix);
static void ngx_http_session_log_writer(ngx_log_t *log, ngx_uint_t level,
    u_char *buf, size_t len);


/*
 * Nothing here lives in a cycle's pool: nginx keeps logging through these
 * writers while it destroys that pool.  Plain file logs share one static
 * record; the few logs with a writer of their own (syslog, memory) get a
 * small record from the heap that lives as long as the process.
 */
static ngx_http_session_log_t  ngx_http_session_log_file;
/* the logs of the current cycle that carry the writer */
static ngx_array_t            *ngx_http_session_log_wrapped;
static u_char  ngx_http_session_log_prefix[NGX_HTTP_SESSION_KEY_PREFIX_LEN];


ngx_int_t
ngx_http_session_log_init_module(ngx_cycle_t *cycle)
{
    u_char                        *prefix;
    ngx_uint_t                     i;
    ngx_pool_cleanup_t            *cln;
    ngx_listening_t               *ls;
    ngx_http_core_srv_conf_t     **cscfp;
    ngx_http_core_loc_conf_t      *clcf;
    ngx_http_core_main_conf_t     *cmcf;
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_session_module);
    if (smcf == NULL || !smcf->enabled) {
        return NGX_OK;
    }

    /*
     * The writer lives in this module's .so, which nginx unloads in one
     * of the cycle pool's cleanups; this cleanup, added later, runs
     * before it and gives the logs their own writers back.
     */

    cln = ngx_pool_cleanup_add(cycle->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    ngx_http_session_log_wrapped = ngx_array_create(cycle->pool, 16,
                                                    sizeof(ngx_log_t *));
    if (ngx_http_session_log_wrapped == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_session_log_unwrap;
    cln->data = ngx_http_session_log_wrapped;

    ngx_memcpy(ngx_http_session_log_prefix, smcf->key_prefix.data,
               NGX_HTTP_SESSION_KEY_PREFIX_LEN);
    prefix = ngx_http_session_log_prefix;

    if (ngx_http_session_log_wrap(cycle, &cycle->new_log, prefix) != NGX_OK) {
        return NGX_ERROR;
    }

    ls = cycle->listening.elts;
    for (i = 0; i < cycle->listening.nelts; i++) {
        if (ngx_http_session_log_wrap(cycle, &ls[i].log, prefix) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    cmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_core_module);
    cscfp = cmcf->servers.elts;

    for (i = 0; i < cmcf->servers.nelts; i++) {
        clcf = cscfp[i]->ctx->loc_conf[ngx_http_core_module.ctx_index];

        if (ngx_http_session_log_wrap_loc(cycle, clcf, prefix) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_session_log_wrap(ngx_cycle_t *cycle, ngx_log_t *log, u_char *prefix)
{
    ngx_log_t               **logp;
    ngx_http_session_log_t   *sl;

    for ( /* void */ ; log; log = log->next) {

        if (log->writer == ngx_http_session_log_writer) {
            continue;
        }

        if (log->writer == NULL) {
            sl = &ngx_http_session_log_file;

        } else {
            sl = ngx_alloc(sizeof(ngx_http_session_log_t), cycle->log);
            if (sl == NULL) {
                return NGX_ERROR;
            }

            sl->writer = log->writer;
            sl->wdata = log->wdata;
        }

        logp = ngx_array_push(ngx_http_session_log_wrapped);
        if (logp == NULL) {
            return NGX_ERROR;
        }

        *logp = log;

        log->writer = ngx_http_session_log_writer;
        log->wdata = sl;
    }

    return NGX_OK;
}


static void
ngx_http_session_log_unwrap(void *data)
{
    ngx_array_t  *wrapped = data;

    ngx_uint_t               i;
    ngx_log_t              **logp;
    ngx_http_session_log_t  *sl;

    logp = wrapped->elts;

    for (i = 0; i < wrapped->nelts; i++) {
        if (logp[i]->writer != ngx_http_session_log_writer) {
            continue;
        }

        sl = logp[i]->wdata;
        logp[i]->writer = sl->writer;
        logp[i]->wdata = sl->wdata;

        if (sl != &ngx_http_session_log_file) {
            ngx_free(sl);
        }
    }

    if (ngx_http_session_log_wrapped == wrapped) {
        ngx_http_session_log_wrapped = NULL;
    }
}


static ngx_int_t
ngx_http_session_log_wrap_loc(ngx_cycle_t *cycle,
    ngx_http_core_loc_conf_t *clcf, u_char *prefix)
{
    if (ngx_http_session_log_wrap(cycle, clcf->error_log, prefix) != NGX_OK) {
        return NGX_ERROR;
    }

#if (NGX_PCRE)
    {
    ngx_http_core_loc_conf_t  **clcfp;

    if (clcf->regex_locations) {
        for (clcfp = clcf->regex_locations; *clcfp; clcfp++) {
            if (ngx_http_session_log_wrap_loc(cycle, *clcfp, prefix)
                != NGX_OK)
            {
                return NGX_ERROR;
            }
        }
    }
    }
#endif

    return ngx_http_session_log_wrap_tree(cycle, clcf->static_locations,
                                          prefix);
}


static ngx_int_t
ngx_http_session_log_wrap_tree(ngx_cycle_t *cycle,
    ngx_http_location_tree_node_t *node, u_char *prefix)
{
    if (node == NULL) {
        return NGX_OK;
    }

    if (node->exact
        && ngx_http_session_log_wrap_loc(cycle, node->exact, prefix)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (node->inclusive
        && ngx_http_session_log_wrap_loc(cycle, node->inclusive, prefix)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_http_session_log_wrap_tree(cycle, node->left, prefix) != NGX_OK
        || ngx_http_session_log_wrap_tree(cycle, node->right, prefix)
           != NGX_OK
        || ngx_http_session_log_wrap_tree(cycle, node->tree, prefix)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_session_log_writer(ngx_log_t *log, ngx_uint_t level, u_char *buf,
    size_t len)
{
    ngx_http_session_log_t  *sl = log->wdata;

    /* buf is the logger's own buffer: hide keys for every later log too */
    (void) ngx_http_session_key_redact(buf, len, ngx_http_session_log_prefix);

    if (sl->writer) {
        log->wdata = sl->wdata;
        sl->writer(log, level, buf, len);
        log->wdata = sl;
        return;
    }

    if (ngx_write_fd(log->file->fd, buf, len) == -1
        && ngx_errno == NGX_ENOSPC)
    {
        log->disk_full_time = ngx_time();
    }
}
