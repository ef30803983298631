/*
 * Nonblocking libpq inside nginx's event loop.
 *
 * Each worker owns session_db_connections connections.  libpq owns every
 * socket: the module wraps it in an nginx connection only to get events,
 * and tears it down with PQfinish() followed by ngx_free_connection(),
 * never ngx_close_connection().  Read interest is level-triggered, so
 * input that libpq leaves in the kernel buffer is never lost to an edge;
 * write interest is added only while libpq has unsent output.
 */

#include "ngx_http_session_db.h"
#include "ngx_http_session_backoff.h"
#include "ngx_http_session_stats.h"


#define NGX_HTTP_SESSION_DB_CLOSED       0
#define NGX_HTTP_SESSION_DB_CONNECTING   1
#define NGX_HTTP_SESSION_DB_IDLE         2
#define NGX_HTTP_SESSION_DB_BUSY         3

/*
 * libpq grows a connection's input and output buffers to the largest
 * message it has read or written and never shrinks them: a connection
 * that has carried a message this large is closed and opened again once
 * the query is over, so that a worker does not keep megabytes per
 * connection after a few large uploads or downloads.
 */
#define NGX_HTTP_SESSION_DB_RECYCLE_SIZE    (4 * 1024 * 1024)


typedef struct {
    /* "PREPARE ngx_session_1 AS ...; ...": sent once per connection */
    char                        *prepare;
    ngx_http_session_db_conn_t  *conns;
    ngx_uint_t                   nconns;
    /*
     * Queries that wait for a connection, each until session_db_timeout
     * at most.  Not capped: an entry is the query object its request (or
     * timer task) holds anyway, linked in place, so the queue is bounded
     * by the worker's connections (a request waits for one query at a
     * time) plus one read per long-polled session.
     */
    ngx_queue_t                  waiting;
    /*
     * Queries with q->first (a long poll's shared read): they and those
     * of "waiting" take turns for a free connection, so that a read that
     * many polls wait for is not held behind a burst of writes, and
     * writes are not held behind reads either.
     */
    ngx_queue_t                  first;
    ngx_uint_t                   turn;
    ngx_uint_t                   nwaiting;
    /* session_db_batch */
    ngx_uint_t                   batch;
    ngx_msec_t                   timeout;
    /* the last early try, see ngx_http_session_db_try_early() */
    ngx_msec_t                   early;
    /*
     * Posted when a read finds a connection idle: the reads of one turn
     * of the event loop go out together when the turn is over
     */
    ngx_event_t                  post;
} ngx_http_session_db_pool_t;


static ngx_int_t ngx_http_session_db_prepare_text(ngx_cycle_t *cycle,
    ngx_http_session_db_pool_t *pool);
static void ngx_http_session_db_resolved(void *data, const char *host,
    const char *hostaddr, const char *port);
static void ngx_http_session_db_conn_start(ngx_http_session_db_conn_t *dc,
    const char *host, const char *hostaddr, const char *port);
static void ngx_http_session_db_connect_poll(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_kick(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_kick_one(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_conn_t *by);
static char *ngx_http_session_db_message(const char *msg);
static ngx_uint_t ngx_http_session_db_failure_level(
    ngx_http_session_db_conn_t *dc);
static ngx_int_t ngx_http_session_db_attach(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_posted(ngx_event_t *ev);
static ngx_uint_t ngx_http_session_db_socket_changed(
    ngx_http_session_db_conn_t *dc, int fd);
static void ngx_http_session_db_detach(ngx_http_session_db_conn_t *dc);
static ngx_int_t ngx_http_session_db_want_write(
    ngx_http_session_db_conn_t *dc, ngx_uint_t on);
static void ngx_http_session_db_event_handler(ngx_event_t *ev);
static void ngx_http_session_db_timer_handler(ngx_event_t *ev);
static void ngx_http_session_db_idle(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_check(ngx_http_session_db_conn_t *dc);
static ngx_int_t ngx_http_session_db_flush(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_read(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_finish_query(ngx_http_session_db_conn_t *dc,
    PGresult *res);
static ngx_int_t ngx_http_session_db_unavailable(PGresult *res);
static void ngx_http_session_db_recycle(ngx_http_session_db_conn_t *dc);
static ngx_uint_t ngx_http_session_db_large(ngx_http_session_db_query_t *q,
    PGresult *res);
static size_t ngx_http_session_db_row_size(PGresult *res);
static ngx_uint_t ngx_http_session_db_batchable(
    ngx_http_session_db_query_t *q);
static ngx_uint_t ngx_http_session_db_gather(ngx_http_session_db_pool_t *pool,
    ngx_http_session_db_query_t *q, ngx_http_session_db_query_t **batch,
    ngx_uint_t n);
static ngx_int_t ngx_http_session_db_send_batch(
    ngx_http_session_db_conn_t *dc, ngx_http_session_db_query_t **batch,
    ngx_uint_t n);
static ngx_int_t ngx_http_session_db_send_one(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q);
static void ngx_http_session_db_read_batch(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_batch_answer(ngx_http_session_db_conn_t *dc,
    PGresult *res);
static void ngx_http_session_db_batch_over(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_deliver(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q, PGresult *res);
static void ngx_http_session_db_batch_fail(ngx_http_session_db_conn_t *dc,
    ngx_uint_t from, ngx_uint_t to);
static void ngx_http_session_db_enqueue(ngx_http_session_db_pool_t *pool,
    ngx_http_session_db_query_t *q, ngx_uint_t head);
static void ngx_http_session_db_dequeue(ngx_http_session_db_pool_t *pool,
    ngx_http_session_db_query_t *q);
static void ngx_http_session_db_detach_query(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q);
static ngx_int_t ngx_http_session_db_send_query(
    ngx_http_session_db_conn_t *dc, ngx_http_session_db_query_t *q);
static void ngx_http_session_db_dispatch(void);
static ngx_uint_t ngx_http_session_db_try_early(
    ngx_http_session_db_pool_t *pool);
static ngx_queue_t *ngx_http_session_db_next(
    ngx_http_session_db_pool_t *pool);
static void ngx_http_session_db_pool_ready(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_query_timeout(ngx_event_t *ev);
static void ngx_http_session_db_query_cleanup(void *data);
static void ngx_http_session_db_complete(ngx_http_session_db_query_t *q,
    PGresult *res);


static ngx_http_session_db_pool_t  *ngx_http_session_db_pool;
/* the LISTEN connection, for ngx_http_session_db_kick() */
static ngx_http_session_db_conn_t  *ngx_http_session_db_other;


/* by ngx_http_session_stmt_e */
static const char  *ngx_http_session_db_stmts[] = {
    NULL,
    NGX_HTTP_SESSION_SQL_AUTH,
    NGX_HTTP_SESSION_SQL_SESSION_CREATE,
    NGX_HTTP_SESSION_SQL_SESSION_GET,
    NGX_HTTP_SESSION_SQL_SESSION_COMPLETE,
    NGX_HTTP_SESSION_SQL_SESSION_LIST,
    NGX_HTTP_SESSION_SQL_SESSION_LIST_AFTER,
    NGX_HTTP_SESSION_SQL_IMAGE_UPLOAD,
    NGX_HTTP_SESSION_SQL_IMAGE_LIST,
    NGX_HTTP_SESSION_SQL_IMAGE_GET,
    NGX_HTTP_SESSION_SQL_IMAGE_ACK,
    NGX_HTTP_SESSION_SQL_IMAGE_CONTENT,
    NGX_HTTP_SESSION_SQL_POLL,
    NGX_HTTP_SESSION_SQL_SESSION_CREATE_KEYED,
    NGX_HTTP_SESSION_SQL_SESSION_COMPLETE_KEYED,
    NGX_HTTP_SESSION_SQL_IMAGE_UPLOAD_KEYED,
    NGX_HTTP_SESSION_SQL_IMAGE_ACK_KEYED,
    NGX_HTTP_SESSION_SQL_WEBHOOK_CLAIM,
    NGX_HTTP_SESSION_SQL_WEBHOOK_RECORD,
    NGX_HTTP_SESSION_SQL_SESSION_CREATE_FREE,
    NGX_HTTP_SESSION_SQL_SESSION_CREATE_COUNTED,
    NGX_HTTP_SESSION_SQL_SESSION_CREATE_FREE_KEYED,
    NGX_HTTP_SESSION_SQL_SESSION_CREATE_COUNTED_KEYED,
    NGX_HTTP_SESSION_SQL_IDEM_STORE,
    NGX_HTTP_SESSION_SQL_IDEM_READ
};

/* the name a statement is prepared under: "ngx_session_<n>" */
static char  ngx_http_session_db_names[NGX_HTTP_SESSION_NSTMTS][
                                           sizeof("ngx_session_") + 4];


ngx_int_t
ngx_http_session_db_init_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                     i;
    const char                    *options;
    ngx_http_session_db_pool_t    *pool;
    ngx_http_session_db_conn_t    *dc;
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_session_module);
    if (smcf == NULL || !smcf->enabled) {
        return NGX_OK;
    }

    pool = ngx_pcalloc(cycle->pool, sizeof(ngx_http_session_db_pool_t));
    if (pool == NULL) {
        return NGX_ERROR;
    }

    pool->nconns = smcf->db_connections;
    pool->conns = ngx_pcalloc(cycle->pool,
                              pool->nconns
                              * sizeof(ngx_http_session_db_conn_t));
    if (pool->conns == NULL) {
        return NGX_ERROR;
    }

    ngx_queue_init(&pool->waiting);
    ngx_queue_init(&pool->first);
    pool->timeout = smcf->db_timeout;
    pool->batch = smcf->db_batch;
    pool->early = ngx_current_msec - NGX_HTTP_SESSION_BACKOFF_EARLY;
    pool->post.handler = ngx_http_session_db_posted;
    pool->post.data = pool;
    pool->post.log = cycle->log;

    if (ngx_http_session_db_prepare_text(cycle, pool) != NGX_OK) {
        return NGX_ERROR;
    }

    ngx_http_session_db_pool = pool;

    options = ngx_http_session_db_options(cycle);
    if (options == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < pool->nconns; i++) {
        dc = &pool->conns[i];

        dc->log = cycle->log;
        dc->conninfo = (const char *) smcf->db_conninfo.data;
        dc->role = "nginx session pool";
        dc->hosts = smcf->db_hosts;
        dc->options = options;
        dc->timeout = smcf->db_timeout;
        dc->check = smcf->db_idle_check;
        dc->ready = ngx_http_session_db_pool_ready;

        if (pool->batch > 1) {
            dc->batch = ngx_pcalloc(cycle->pool, pool->batch
                                    * sizeof(ngx_http_session_db_query_t *));
            if (dc->batch == NULL) {
                return NGX_ERROR;
            }
        }

        ngx_http_session_db_conn_open(dc);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_session_db_prepare_text(ngx_cycle_t *cycle,
    ngx_http_session_db_pool_t *pool)
{
    u_char      *p;
    size_t       len;
    ngx_uint_t   i;

    len = 1;

    for (i = 1; i < NGX_HTTP_SESSION_NSTMTS; i++) {
        ngx_sprintf((u_char *) ngx_http_session_db_names[i],
                    "ngx_session_%ui%Z", i);

        len += sizeof("PREPARE  AS ; ") - 1
               + ngx_strlen(ngx_http_session_db_names[i])
               + ngx_strlen(ngx_http_session_db_stmts[i]);
    }

    p = ngx_pnalloc(cycle->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    pool->prepare = (char *) p;

    for (i = 1; i < NGX_HTTP_SESSION_NSTMTS; i++) {
        p = ngx_sprintf(p, "PREPARE %s AS %s; ", ngx_http_session_db_names[i],
                        ngx_http_session_db_stmts[i]);
    }

    *p = '\0';

    return NGX_OK;
}


const char *
ngx_http_session_db_options(ngx_cycle_t *cycle)
{
    u_char                        *p, *last;
    size_t                         len;
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_session_module);

    len = smcf->db_options.len + sizeof(" -c statement_timeout=") - 1
          + NGX_INT_T_LEN + sizeof(" -c plan_cache_mode=force_generic_plan");

    p = ngx_pnalloc(cycle->pool, len);
    if (p == NULL) {
        return NULL;
    }

    /* the operator's choices stand */

    last = p;

    if (smcf->db_options.len) {
        last = ngx_cpymem(p, smcf->db_options.data, smcf->db_options.len);
    }

    if (smcf->db_options.len == 0
        || ngx_strstr(smcf->db_options.data, "statement_timeout") == NULL)
    {
        last = ngx_sprintf(last, "%s-c statement_timeout=%M",
                           last > p ? " " : "", smcf->db_timeout);
    }

    if (smcf->db_options.len == 0
        || ngx_strstr(smcf->db_options.data, "plan_cache_mode") == NULL)
    {
        last = ngx_sprintf(last, "%s-c plan_cache_mode=force_generic_plan",
                           last > p ? " " : "");
    }

    *last = '\0';

    return (const char *) p;
}


void
ngx_http_session_db_exit_process(ngx_cycle_t *cycle)
{
    ngx_uint_t                   i;
    ngx_http_session_db_pool_t  *pool;

    pool = ngx_http_session_db_pool;
    if (pool == NULL) {
        return;
    }

    if (pool->post.posted) {
        ngx_delete_posted_event(&pool->post);
    }

    for (i = 0; i < pool->nconns; i++) {
        ngx_http_session_db_conn_close(&pool->conns[i]);
    }

    /* the queries still waiting leave with the worker */
    ngx_http_session_gauge(db_waiting, - (ngx_atomic_int_t) pool->nwaiting);

    ngx_http_session_db_pool = NULL;
    ngx_http_session_db_other = NULL;
}


void
ngx_http_session_db_conn_add(ngx_http_session_db_conn_t *dc)
{
    ngx_http_session_db_other = dc;
}


/* connections */

void
ngx_http_session_db_conn_open(ngx_http_session_db_conn_t *dc)
{
    dc->preparing = 0;
    dc->prepared = 0;
    dc->checking = 0;
    dc->connected = 0;
    dc->started = ngx_current_msec;

    dc->timer.handler = ngx_http_session_db_timer_handler;
    dc->timer.data = dc;
    dc->timer.log = dc->log;
    /* a worker that is shutting down must not wait for these */
    dc->timer.cancelable = 1;

    if (dc->hosts == NULL) {
        ngx_http_session_db_conn_start(dc, NULL, NULL, NULL);
        return;
    }

    /* host names: looked up again for every attempt, see dbhost.c */

    dc->state = NGX_HTTP_SESSION_DB_CONNECTING;

    /* session_db_timeout bounds the lookup and the connect together */
    ngx_add_timer(&dc->timer, dc->timeout);

    dc->resolve.hosts = dc->hosts;
    dc->resolve.log = dc->log;
    dc->resolve.level = ngx_http_session_db_failure_level(dc);
    dc->resolve.done = ngx_http_session_db_resolved;
    dc->resolve.data = dc;

    if (ngx_http_session_dbhost_resolve(&dc->resolve) != NGX_OK) {
        ngx_http_session_db_conn_fail(dc);
    }
}


static void
ngx_http_session_db_resolved(void *data, const char *host,
    const char *hostaddr, const char *port)
{
    ngx_http_session_db_conn_t  *dc = data;

    if (host == NULL) {
        ngx_http_session_db_conn_fail(dc);
        return;
    }

    ngx_http_session_db_conn_start(dc, host, hostaddr, port);

    /* libpq has copied the strings */
    ngx_http_session_dbhost_cancel(&dc->resolve);
}


static void
ngx_http_session_db_conn_start(ngx_http_session_db_conn_t *dc,
    const char *host, const char *hostaddr, const char *port)
{
    ngx_uint_t   n;
    const char  *keywords[7], *values[7];

    /* the conninfo is expanded first; the keywords given here follow it */

    n = 0;

    keywords[n] = "dbname";
    values[n++] = dc->conninfo;

    if (dc->options) {
        keywords[n] = "options";
        values[n++] = dc->options;
    }

    if (dc->role) {
        keywords[n] = "fallback_application_name";
        values[n++] = dc->role;
    }

    if (host) {
        keywords[n] = "host";
        values[n++] = host;
        keywords[n] = "hostaddr";
        values[n++] = hostaddr;
    }

    if (port) {
        keywords[n] = "port";
        values[n++] = port;
    }

    keywords[n] = NULL;
    values[n] = NULL;

    dc->pg = PQconnectStartParams(keywords, values, 1);

    if (dc->pg == NULL) {
        ngx_log_error(NGX_LOG_ALERT, dc->log, 0,
                      "session db: PQconnectStart() failed");
        ngx_http_session_db_conn_fail(dc);
        return;
    }

    if (PQstatus(dc->pg) == CONNECTION_BAD) {
        ngx_log_error(ngx_http_session_db_failure_level(dc),
                      dc->log, 0, "session db: cannot connect: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        ngx_http_session_db_conn_fail(dc);
        return;
    }

    if (PQsetnonblocking(dc->pg, 1) != 0) {
        ngx_log_error(NGX_LOG_ALERT, dc->log, 0,
                      "session db: PQsetnonblocking() failed");
        ngx_http_session_db_conn_fail(dc);
        return;
    }

    dc->state = NGX_HTTP_SESSION_DB_CONNECTING;

    if (!dc->timer.timer_set) {
        ngx_add_timer(&dc->timer, dc->timeout);
    }

    ngx_http_session_db_connect_poll(dc);
}


static void
ngx_http_session_db_connect_poll(ngx_http_session_db_conn_t *dc)
{
    PostgresPollingStatusType  st;

    for ( ;; ) {
        st = PQconnectPoll(dc->pg);

        /*
         * libpq may close its socket and open another, for the next host
         * or address, to retry without TLS (sslmode=prefer), to follow
         * target_session_attrs: often under the same descriptor number,
         * which epoll no longer watches.  A socket is known by its inode.
         */

        if (dc->connection
            && ngx_http_session_db_socket_changed(dc, PQsocket(dc->pg)))
        {
            ngx_http_session_db_detach(dc);
        }

        if (st == PGRES_POLLING_FAILED) {
            ngx_log_error(ngx_http_session_db_failure_level(dc),
                          dc->log, 0, "session db: cannot connect: %s",
                          ngx_http_session_db_message(PQerrorMessage(dc->pg)));
            ngx_http_session_db_conn_fail(dc);
            return;
        }

        if (dc->connection == NULL && ngx_http_session_db_attach(dc) != NGX_OK)
        {
            ngx_http_session_db_conn_fail(dc);
            return;
        }

        switch (st) {

        case PGRES_POLLING_READING:
            if (ngx_http_session_db_want_write(dc, 0) != NGX_OK) {
                ngx_http_session_db_conn_fail(dc);
            }

            return;

        case PGRES_POLLING_WRITING:
            if (ngx_http_session_db_want_write(dc, 1) != NGX_OK) {
                ngx_http_session_db_conn_fail(dc);
            }

            return;

        case PGRES_POLLING_OK:
            if (ngx_http_session_db_want_write(dc, 0) != NGX_OK) {
                ngx_http_session_db_conn_fail(dc);
                return;
            }

            if (dc->timer.timer_set) {
                ngx_del_timer(&dc->timer);
            }

            if (dc->failed_before) {
                ngx_log_error(NGX_LOG_NOTICE, dc->log, 0,
                              "session db: connected again");
            }

            dc->failed_before = 0;
            /* the backoff is kept: see ngx_http_session_backoff_next() */
            dc->connected = ngx_current_msec | 1;
            dc->state = NGX_HTTP_SESSION_DB_IDLE;

            ngx_http_session_db_idle(dc);

            ngx_http_session_db_kick(dc);

            if (dc->ready) {
                dc->ready(dc);
            }

            return;

        default:
            /* PGRES_POLLING_ACTIVE is obsolete: poll again */
            break;
        }
    }
}


/*
 * dc has just connected: the server is reachable again.  The worker's
 * other connections that wait for their backoff try now, and those
 * still in an attempt that began well before dc's (likely lost with the
 * link that has just come back: an attempt normally ends in milliseconds)
 * begin a new one, so that the worker is whole again at once instead of
 * one connection at a time, up to the backoff ceiling apart.
 */

static void
ngx_http_session_db_kick(ngx_http_session_db_conn_t *dc)
{
    ngx_uint_t                   i;
    ngx_http_session_db_pool_t  *pool;
    static ngx_uint_t            kicking;

    pool = ngx_http_session_db_pool;

    if (pool == NULL || kicking || ngx_exiting || ngx_terminate
        || ngx_quit)
    {
        return;
    }

    kicking = 1;

    for (i = 0; i < pool->nconns; i++) {
        ngx_http_session_db_kick_one(&pool->conns[i], dc);
    }

    if (ngx_http_session_db_other) {
        ngx_http_session_db_kick_one(ngx_http_session_db_other, dc);
    }

    kicking = 0;
}


static void
ngx_http_session_db_kick_one(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_conn_t *by)
{
    if (dc == by) {
        return;
    }

    if (dc->state == NGX_HTTP_SESSION_DB_CLOSED && dc->timer.timer_set) {
        ngx_del_timer(&dc->timer);
        ngx_http_session_db_conn_open(dc);
        return;
    }

    /* not the attempts made together, at start or after a reload */

    if (dc->state == NGX_HTTP_SESSION_DB_CONNECTING
        && (ngx_msec_int_t) (by->started - dc->started)
           >= NGX_HTTP_SESSION_BACKOFF_MIN)
    {
        ngx_log_error(NGX_LOG_INFO, dc->log, 0,
                      "session db: an older connection attempt is given "
                      "up, another one has connected");
        ngx_http_session_db_conn_close(dc);
        ngx_http_session_db_conn_open(dc);
    }
}


/*
 * libpq's messages span lines ("...failed\n\tIs the server running...\n"):
 * one log line each, with the line breaks folded into spaces.
 */

static char *
ngx_http_session_db_message(const char *msg)
{
    size_t       n;
    static char  line[512];

    for (n = 0; *msg && n < sizeof(line) - 1; msg++) {

        if (*msg == '\n' || *msg == '\t' || *msg == '\r') {
            if (n && line[n - 1] != ' ') {
                line[n++] = ' ';
            }

            continue;
        }

        line[n++] = *msg;
    }

    while (n && line[n - 1] == ' ') {
        n--;
    }

    line[n] = '\0';

    return line;
}


/* an outage is logged once as an error, the retries that follow as info */

static ngx_uint_t
ngx_http_session_db_failure_level(ngx_http_session_db_conn_t *dc)
{
    return dc->failed_before ? NGX_LOG_INFO : NGX_LOG_ERR;
}


static ngx_int_t
ngx_http_session_db_attach(ngx_http_session_db_conn_t *dc)
{
    int                fd;
    struct stat        st;
    ngx_connection_t  *c;

    fd = PQsocket(dc->pg);
    if (fd == -1) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0, "session db: no socket: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        return NGX_ERROR;
    }

    if (fstat(fd, &st) == -1) {
        ngx_log_error(NGX_LOG_ALERT, dc->log, ngx_errno,
                      "session db: fstat() failed");
        return NGX_ERROR;
    }

    c = ngx_get_connection(fd, dc->log);
    if (c == NULL) {
        return NGX_ERROR;
    }

    dc->socket_ino = st.st_ino;

    c->data = dc;
    c->read->handler = ngx_http_session_db_event_handler;
    c->write->handler = ngx_http_session_db_event_handler;
    c->read->log = dc->log;
    c->write->log = dc->log;
    c->log = dc->log;

    dc->connection = c;

    /* level-triggered: see the comment at the top of this file */

    if (ngx_add_event(c->read, NGX_READ_EVENT, NGX_LEVEL_EVENT) != NGX_OK) {
        ngx_http_session_db_detach(dc);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* is fd another socket than the one the nginx connection watches? */

static ngx_uint_t
ngx_http_session_db_socket_changed(ngx_http_session_db_conn_t *dc, int fd)
{
    struct stat  st;

    if (fd != dc->connection->fd) {
        return 1;
    }

    if (fd == -1 || fstat(fd, &st) == -1) {
        return 1;
    }

    return st.st_ino != dc->socket_ino;
}


static void
ngx_http_session_db_detach(ngx_http_session_db_conn_t *dc)
{
    ngx_connection_t  *c;

    c = dc->connection;
    if (c == NULL) {
        return;
    }

    dc->connection = NULL;

    if (c->read->timer_set) {
        ngx_del_timer(c->read);
    }

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }

    /* libpq closes (or has closed) the socket itself */

    if (ngx_del_conn) {
        ngx_del_conn(c, NGX_CLOSE_EVENT);

    } else {
        if (c->read->active) {
            ngx_del_event(c->read, NGX_READ_EVENT, NGX_CLOSE_EVENT);
        }

        if (c->write->active) {
            ngx_del_event(c->write, NGX_WRITE_EVENT, NGX_CLOSE_EVENT);
        }
    }

    ngx_free_connection(c);
    c->fd = (ngx_socket_t) -1;
}


static ngx_int_t
ngx_http_session_db_want_write(ngx_http_session_db_conn_t *dc, ngx_uint_t on)
{
    ngx_event_t  *wev;

    wev = dc->connection->write;

    if (on && !wev->active) {
        return ngx_add_event(wev, NGX_WRITE_EVENT, NGX_LEVEL_EVENT);
    }

    if (!on && wev->active) {
        return ngx_del_event(wev, NGX_WRITE_EVENT, 0);
    }

    return NGX_OK;
}


/* closes the connection and schedules a reconnect with backoff */

void
ngx_http_session_db_conn_fail(ngx_http_session_db_conn_t *dc)
{
    ngx_uint_t                    from, to;
    ngx_msec_t                    up, delay;
    ngx_http_session_db_query_t  *q;

    q = dc->query;
    dc->query = NULL;

    /* the reads of a pipeline that were not answered yet */
    from = dc->nread;
    to = dc->nbatch;

    up = dc->connected ? ngx_current_msec - dc->connected : 0;

    dc->refused = (dc->connected == 0 && !dc->timed_out);
    dc->timed_out = 0;

    ngx_http_session_db_conn_close(dc);

    dc->failed_before = 1;

    /* every failure, a query timeout too: doubled, with jitter */

    dc->backoff = ngx_http_session_backoff_next((uint32_t) dc->backoff, up);
    delay = ngx_http_session_backoff_delay((uint32_t) dc->backoff,
                                           (uint32_t) ngx_random());

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, dc->log, 0,
                   "session db: reconnecting in %M ms (base %M ms)",
                   delay, dc->backoff);

    if (!ngx_exiting && !ngx_terminate && !ngx_quit) {
        ngx_add_timer(&dc->timer, delay);
    }

    if (q) {
        ngx_http_session_db_complete(q, NULL);
    }

    ngx_http_session_db_batch_fail(dc, from, to);

    if (dc->ready == ngx_http_session_db_pool_ready) {
        /* waiting queries may have no connection left to wait for */
        ngx_http_session_db_dispatch();
    }
}


void
ngx_http_session_db_conn_close(ngx_http_session_db_conn_t *dc)
{
    if (dc->timer.timer_set) {
        ngx_del_timer(&dc->timer);
    }

    ngx_http_session_db_detach(dc);
    ngx_http_session_dbhost_cancel(&dc->resolve);

    dc->connected = 0;
    dc->checking = 0;
    dc->nbatch = 0;
    dc->nread = 0;
    dc->recycle = 0;

    if (dc->result) {
        PQclear(dc->result);
        dc->result = NULL;
    }

    if (dc->pg) {
        /* in nonblocking mode PQfinish() does not wait for the server */
        PQfinish(dc->pg);
        dc->pg = NULL;
    }

    dc->state = NGX_HTTP_SESSION_DB_CLOSED;
}


static void
ngx_http_session_db_timer_handler(ngx_event_t *ev)
{
    ngx_http_session_db_conn_t  *dc;

    dc = ev->data;

    if (dc->state == NGX_HTTP_SESSION_DB_CONNECTING) {
        ngx_log_error(ngx_http_session_db_failure_level(dc),
                      dc->log, 0, "session db: connect timed out");
        dc->timed_out = 1;
        ngx_http_session_db_conn_fail(dc);
        return;
    }

    if (dc->state == NGX_HTTP_SESSION_DB_CLOSED) {
        ngx_http_session_db_conn_open(dc);
        return;
    }

    if (dc->state == NGX_HTTP_SESSION_DB_IDLE) {
        ngx_http_session_db_check(dc);
        return;
    }

    if (dc->checking) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                      "session db: no answer to the idle check within "
                      "%M ms%s, connecting again", dc->timeout,
                      dc->notify ? " on the LISTEN connection" : "");
        ngx_http_session_db_conn_fail(dc);
    }
}


/*
 * An idle connection is checked every session_db_idle_check with an empty
 * query that must be answered within session_db_timeout: a link that died
 * without a word (a firewall that forgets the flow, a host gone, a proxy
 * that stopped forwarding) is noticed in seconds, not when TCP gives up.
 * The LISTEN connection is idle all the time, pool connections between
 * queries (a query has its own timeout).
 */

static void
ngx_http_session_db_idle(ngx_http_session_db_conn_t *dc)
{
    if (dc->check && !ngx_exiting && !ngx_terminate && !ngx_quit) {
        ngx_add_timer(&dc->timer, dc->check);
    }
}


static void
ngx_http_session_db_check(ngx_http_session_db_conn_t *dc)
{
    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, dc->log, 0,
                   "session db: idle check");

    if (ngx_http_session_db_conn_send(dc, "") != NGX_OK) {
        ngx_http_session_db_conn_fail(dc);
        return;
    }

    dc->checking = 1;

    ngx_add_timer(&dc->timer, dc->timeout);
}


static void
ngx_http_session_db_event_handler(ngx_event_t *ev)
{
    ngx_connection_t            *c;
    ngx_http_session_db_conn_t  *dc;

    c = ev->data;
    dc = c->data;

    if (dc->state == NGX_HTTP_SESSION_DB_CONNECTING) {
        ngx_http_session_db_connect_poll(dc);
        return;
    }

    if (ev->write) {
        if (ngx_http_session_db_flush(dc) != NGX_OK) {
            ngx_http_session_db_conn_fail(dc);
        }

        return;
    }

    ngx_http_session_db_read(dc);
}


static ngx_int_t
ngx_http_session_db_flush(ngx_http_session_db_conn_t *dc)
{
    int  rc;

    rc = PQflush(dc->pg);

    if (rc == -1) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0, "session db: send failed: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        return NGX_ERROR;
    }

    return ngx_http_session_db_want_write(dc, rc == 1);
}


static void
ngx_http_session_db_read(ngx_http_session_db_conn_t *dc)
{
    PGresult  *res;
    PGnotify  *n;

    if (!PQconsumeInput(dc->pg)) {
        if (!ngx_exiting && !ngx_terminate && !ngx_quit) {
            ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                          "session db: connection lost: %s",
                          ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        }

        ngx_http_session_db_conn_fail(dc);
        return;
    }

    /* libpq may still hold output it could not send before */

    if (dc->state == NGX_HTTP_SESSION_DB_BUSY
        && ngx_http_session_db_flush(dc) != NGX_OK)
    {
        ngx_http_session_db_conn_fail(dc);
        return;
    }

    while ((n = PQnotifies(dc->pg)) != NULL) {
        if (dc->notify) {
            dc->notify(dc, n);
        }

        PQfreemem(n);
    }

    if (dc->state == NGX_HTTP_SESSION_DB_BUSY && dc->nbatch) {
        ngx_http_session_db_read_batch(dc);
        return;
    }

    if (dc->state == NGX_HTTP_SESSION_DB_BUSY) {

        while (!PQisBusy(dc->pg)) {
            res = PQgetResult(dc->pg);

            if (res == NULL) {
                res = dc->result;
                dc->result = NULL;

                ngx_http_session_db_finish_query(dc, res);
                return;
            }

            /* a query gives one result; keep the first, or the error */

            if (dc->result == NULL) {
                dc->result = res;

            } else if (PQresultStatus(res) == PGRES_FATAL_ERROR) {
                PQclear(dc->result);
                dc->result = res;

            } else {
                PQclear(res);
            }
        }
    }

    if (PQstatus(dc->pg) == CONNECTION_BAD) {
        ngx_http_session_db_conn_fail(dc);
    }
}


static void
ngx_http_session_db_finish_query(ngx_http_session_db_conn_t *dc,
    PGresult *res)
{
    ngx_http_session_db_query_t  *q;

    q = dc->query;
    dc->query = NULL;
    dc->state = NGX_HTTP_SESSION_DB_IDLE;

    ngx_http_session_db_idle(dc);

    if (q && res && PQstatus(dc->pg) != CONNECTION_BAD
        && !ngx_http_session_db_unavailable(res)
        && (dc->sent >= NGX_HTTP_SESSION_DB_RECYCLE_SIZE
            || ngx_http_session_db_large(q, res)))
    {
        /* res lives on without the connection */
        ngx_http_session_db_recycle(dc);
    }

    dc->sent = 0;

    if (q == NULL && dc->checking) {
        dc->checking = 0;

        if (res) {
            PQclear(res);
        }

        if (dc->ready == ngx_http_session_db_pool_ready) {
            ngx_http_session_db_dispatch();
        }

        return;
    }

    if (q == NULL) {
        if (dc->preparing) {
            dc->preparing = 0;
            dc->prepared = (res && PQresultStatus(res) == PGRES_COMMAND_OK);

            if (!dc->prepared) {
                ngx_log_error(NGX_LOG_WARN, dc->log, 0,
                              "session db: preparing the statements failed, "
                              "they are sent as text on this connection");
            }
        }

        if (res) {
            if (PQresultStatus(res) == PGRES_FATAL_ERROR) {
                ngx_log_error(NGX_LOG_ERR, dc->log, 0, "session db: %s",
                        ngx_http_session_db_message(PQresultErrorMessage(res)));
            }

            PQclear(res);
        }

        if (dc->drained) {
            dc->drained(dc);
        }

        if (dc->ready == ngx_http_session_db_pool_ready) {
            ngx_http_session_db_dispatch();
        }

        return;
    }

    if ((res == NULL || ngx_http_session_db_unavailable(res))
        && PQstatus(dc->pg) == CONNECTION_BAD)
    {
        /* closed before the handler runs: it may ask for another query */
        ngx_http_session_db_conn_fail(dc);
        ngx_http_session_db_deliver(dc, q, res);
        return;
    }

    ngx_http_session_db_deliver(dc, q, res);

    ngx_http_session_db_dispatch();
}


/*
 * res to q's handler: as it is, or NULL (503) when the database is not
 * there; res is freed unless the handler took it over.  With no q (its
 * request went away) res is only freed.
 */

static void
ngx_http_session_db_deliver(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_uint_t  keep;

    if (q == NULL) {
        if (res) {
            PQclear(res);
        }

        return;
    }

    if (res == NULL || ngx_http_session_db_unavailable(res)) {
        if (res) {
            ngx_log_error(NGX_LOG_ERR, dc->log, 0, "session db: %s",
                          ngx_http_session_db_message(
                                                 PQresultErrorMessage(res)));
            PQclear(res);
        }

        ngx_http_session_db_complete(q, NULL);
        return;
    }

    keep = q->keep_result && !q->done;

    ngx_http_session_db_complete(q, res);

    if (!keep) {
        PQclear(res);
    }
}


/* a connection whose buffers grew past RECYCLE_SIZE: a new one */

static void
ngx_http_session_db_recycle(ngx_http_session_db_conn_t *dc)
{
    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, dc->log, 0,
                   "session db: recycling a connection that sent %uz bytes",
                   dc->sent);

    ngx_http_session_db_conn_close(dc);
    ngx_http_session_db_conn_open(dc);
}


/*
 * Did libpq read a message of RECYCLE_SIZE or more for res?  Only a
 * query whose handler takes its result over (an image's bytes) can get
 * such a row; every other statement returns bounded columns, so its
 * rows are not measured (a list of 100 would cost 1,000 calls).  A
 * result whose query went away is measured: nobody says what it was.
 */

static ngx_uint_t
ngx_http_session_db_large(ngx_http_session_db_query_t *q, PGresult *res)
{
    if (q != NULL && !q->keep_result) {
        return 0;
    }

    return ngx_http_session_db_row_size(res)
           >= NGX_HTTP_SESSION_DB_RECYCLE_SIZE;
}


/* the bytes of the largest row: about the largest message libpq read */

static size_t
ngx_http_session_db_row_size(PGresult *res)
{
    int     i, j, nrows, nfields;
    size_t  size, max;

    nrows = PQntuples(res);
    nfields = PQnfields(res);
    max = 0;

    for (i = 0; i < nrows; i++) {
        size = 0;

        for (j = 0; j < nfields; j++) {
            size += PQgetlength(res, i, j);
        }

        if (size > max) {
            max = size;
        }
    }

    return max;
}


/* errors that mean "the database is not there", not "the query is wrong" */

static ngx_int_t
ngx_http_session_db_unavailable(PGresult *res)
{
    char  *state;

    if (PQresultStatus(res) != PGRES_FATAL_ERROR) {
        return 0;
    }

    state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    if (state == NULL) {
        return 1;
    }

    /* 08 connection, 53 resources, 57 operator intervention, 3D000 no db */

    return ngx_strncmp(state, "08", 2) == 0
           || ngx_strncmp(state, "53", 2) == 0
           || ngx_strncmp(state, "57", 2) == 0
           || ngx_strncmp(state, "3D000", 5) == 0;
}


ngx_int_t
ngx_http_session_db_conn_send(ngx_http_session_db_conn_t *dc, const char *sql)
{
    if (!PQsendQuery(dc->pg, sql)) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0, "session db: send failed: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        return NGX_ERROR;
    }

    if (dc->timer.timer_set) {
        /* the idle check: a query has a timeout of its own */
        ngx_del_timer(&dc->timer);
    }

    dc->state = NGX_HTTP_SESSION_DB_BUSY;

    return ngx_http_session_db_flush(dc);
}


/* queries */

ngx_http_session_db_query_t *
ngx_http_session_db_query_create(ngx_http_request_t *r, const char *sql,
    ngx_http_session_db_handler_pt handler)
{
    ngx_http_session_db_query_t  *q;

    q = ngx_http_session_db_query_create_pool(r->pool, r->connection->log,
                                              sql, handler);
    if (q == NULL) {
        return NULL;
    }

    q->request = r;

    return q;
}


ngx_http_session_db_query_t *
ngx_http_session_db_query_stmt(ngx_http_request_t *r,
    ngx_http_session_stmt_e stmt, ngx_http_session_db_handler_pt handler)
{
    ngx_http_session_db_query_t  *q;

    q = ngx_http_session_db_query_create(r, ngx_http_session_db_stmts[stmt],
                                         handler);
    if (q == NULL) {
        return NULL;
    }

    q->stmt = stmt;
    q->result_format = 1;

    return q;
}


ngx_http_session_db_query_t *
ngx_http_session_db_query_create_pool(ngx_pool_t *pool, ngx_log_t *log,
    const char *sql, ngx_http_session_db_handler_pt handler)
{
    ngx_pool_cleanup_t           *cln;
    ngx_http_session_db_query_t  *q;

    q = ngx_pcalloc(pool, sizeof(ngx_http_session_db_query_t));
    if (q == NULL) {
        return NULL;
    }

    cln = ngx_pool_cleanup_add(pool, 0);
    if (cln == NULL) {
        return NULL;
    }

    cln->handler = ngx_http_session_db_query_cleanup;
    cln->data = q;

    q->sql = sql;
    q->handler = handler;
    q->result_format = 0;
    q->log = log;

    q->timeout.handler = ngx_http_session_db_query_timeout;
    q->timeout.data = q;
    q->timeout.log = log;

    return q;
}


void
ngx_http_session_db_param(ngx_http_session_db_query_t *q, const void *value,
    size_t len, int binary)
{
    if (q->nparams == NGX_HTTP_SESSION_DB_MAX_PARAMS) {
        return;
    }

    q->values[q->nparams] = value;
    q->lengths[q->nparams] = (int) len;
    q->formats[q->nparams] = binary;
    q->nparams++;
}


ngx_int_t
ngx_http_session_db_query_run(ngx_http_session_db_query_t *q)
{
    ngx_uint_t                   i, alive;
    ngx_http_session_db_conn_t  *dc;
    ngx_http_session_db_pool_t  *pool;

    pool = ngx_http_session_db_pool;
    if (pool == NULL) {
        return NGX_DECLINED;
    }

    alive = 0;

    for (i = 0; i < pool->nconns; i++) {
        dc = &pool->conns[i];

        if (dc->state == NGX_HTTP_SESSION_DB_IDLE) {
            ngx_add_timer(&q->timeout, pool->timeout);

            /*
             * A read waits for the end of this turn of the event loop,
             * which may bring more to send along with it
             */

            if (pool->batch > 1 && ngx_http_session_db_batchable(q)) {
                ngx_http_session_db_enqueue(pool, q, 0);

                if (!pool->post.posted) {
                    ngx_post_event(&pool->post, &ngx_posted_events);
                }

                return NGX_OK;
            }

            if (ngx_http_session_db_send_query(dc, q) == NGX_OK) {
                return NGX_OK;
            }

            ngx_del_timer(&q->timeout);
            continue;
        }

        if (dc->state != NGX_HTTP_SESSION_DB_CLOSED) {
            alive++;
        }
    }

    /*
     * No connection that could answer soon: do not make the client wait,
     * unless one may try to connect now.  Otherwise wait, however many
     * wait: a burst is served in turn.
     */

    if (alive == 0 && !ngx_http_session_db_try_early(pool)) {
        ngx_http_session_stat(db_failures, 1);
        return NGX_DECLINED;
    }

    ngx_http_session_db_enqueue(pool, q, 0);

    ngx_add_timer(&q->timeout, pool->timeout);

    return NGX_OK;
}


/*
 * Every connection of the worker waits out its backoff and a query needs
 * one: the backoff's ceiling (2 s) would keep a server that is back
 * unused for up to that long while requests get 503.  One connection
 * whose last attempt was refused tries now, at most one per worker per
 * NGX_HTTP_SESSION_BACKOFF_EARLY (see ngx_http_session_backoff_early()),
 * and the query waits for it.  When it connects, the others follow
 * (ngx_http_session_db_kick()).  Returns whether an attempt is under way.
 */

static ngx_uint_t
ngx_http_session_db_try_early(ngx_http_session_db_pool_t *pool)
{
    ngx_uint_t                   i;
    ngx_http_session_db_conn_t  *dc;

    if (ngx_exiting || ngx_terminate || ngx_quit) {
        return 0;
    }

    for (i = 0; i < pool->nconns; i++) {
        dc = &pool->conns[i];

        if (dc->state != NGX_HTTP_SESSION_DB_CLOSED || !dc->timer.timer_set
            || !ngx_http_session_backoff_early(ngx_current_msec - pool->early,
                                               dc->refused))
        {
            continue;
        }

        pool->early = ngx_current_msec;

        ngx_log_error(NGX_LOG_INFO, dc->log, 0,
                      "session db: a query waits, connecting before the "
                      "backoff is over");

        ngx_del_timer(&dc->timer);
        ngx_http_session_db_conn_open(dc);

        return dc->state != NGX_HTTP_SESSION_DB_CLOSED;
    }

    return 0;
}


static ngx_int_t
ngx_http_session_db_send_query(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q)
{
    if (ngx_http_session_db_send_one(dc, q) != NGX_OK) {
        ngx_http_session_db_conn_fail(dc);
        return NGX_ERROR;
    }

    if (dc->timer.timer_set) {
        /* the idle check: a query has a timeout of its own */
        ngx_del_timer(&dc->timer);
    }

    dc->state = NGX_HTTP_SESSION_DB_BUSY;
    dc->query = q;
    q->conn = dc;

    if (ngx_http_session_db_flush(dc) != NGX_OK) {
        dc->query = NULL;
        q->conn = NULL;
        ngx_http_session_db_conn_fail(dc);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* hands one query to libpq: by name where the statement is prepared */

static ngx_int_t
ngx_http_session_db_send_one(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q)
{
    int  i;

    if (q->stmt != NGX_HTTP_SESSION_STMT_NONE && dc->prepared
        ? !PQsendQueryPrepared(dc->pg, ngx_http_session_db_names[q->stmt],
                               q->nparams, q->values, q->lengths, q->formats,
                               q->result_format)
        : !PQsendQueryParams(dc->pg, q->sql, q->nparams, NULL, q->values,
                             q->lengths, q->formats, q->result_format))
    {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0, "session db: send failed: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        return NGX_ERROR;
    }

    for (i = 0; i < q->nparams; i++) {
        dc->sent += q->lengths[i];
    }

    return NGX_OK;
}


/*
 * Reads that wait for a connection go to PostgreSQL together: pipeline
 * mode, one Bind/Execute per read and one Sync for all, so that a busy
 * server wakes once for many of them instead of once each, and answers
 * them in one stream.  Only the statements that change nothing
 * (NGX_HTTP_SESSION_STMT_READS): between two Syncs the statements share
 * one implicit transaction, and in READ COMMITTED each still reads its
 * own snapshot.  If one fails, PostgreSQL skips the rest up to the Sync
 * ("aborted"); those did not run and wait for a connection again, at
 * the head of the queue.
 */

static ngx_uint_t
ngx_http_session_db_batchable(ngx_http_session_db_query_t *q)
{
    return q->stmt != NGX_HTTP_SESSION_STMT_NONE
           && (NGX_HTTP_SESSION_STMT_READS & (1U << q->stmt)) != 0;
}


/*
 * q (a read, out of the queues already) and up to n - 1 more waiting
 * reads, oldest first, into batch; writes keep their places
 */

static ngx_uint_t
ngx_http_session_db_gather(ngx_http_session_db_pool_t *pool,
    ngx_http_session_db_query_t *q, ngx_http_session_db_query_t **batch,
    ngx_uint_t n)
{
    ngx_uint_t                    k, i;
    ngx_queue_t                  *queues[2], *x, *next;
    ngx_http_session_db_query_t  *w;

    batch[0] = q;
    k = 1;

    queues[0] = &pool->waiting;
    queues[1] = &pool->first;

    for (i = 0; i < 2 && k < n; i++) {

        for (x = ngx_queue_head(queues[i]);
             x != ngx_queue_sentinel(queues[i]) && k < n;
             x = next)
        {
            next = ngx_queue_next(x);
            w = ngx_queue_data(x, ngx_http_session_db_query_t, queue);

            if (!ngx_http_session_db_batchable(w)) {
                continue;
            }

            ngx_http_session_db_dequeue(pool, w);
            batch[k++] = w;
        }
    }

    return k;
}


static ngx_int_t
ngx_http_session_db_send_batch(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t **batch, ngx_uint_t n)
{
    ngx_uint_t  i;

    /* from here on a failure of the connection fails them all */

    for (i = 0; i < n; i++) {
        dc->batch[i] = batch[i];
        batch[i]->conn = dc;
    }

    dc->nbatch = n;
    dc->nread = 0;

    if (!PQenterPipelineMode(dc->pg)) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                      "session db: no pipeline mode: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        goto failed;
    }

    for (i = 0; i < n; i++) {
        if (ngx_http_session_db_send_one(dc, batch[i]) != NGX_OK) {
            goto failed;
        }
    }

    if (!PQpipelineSync(dc->pg)) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0, "session db: send failed: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        goto failed;
    }

    if (dc->timer.timer_set) {
        /* the idle check: the queries have timeouts of their own */
        ngx_del_timer(&dc->timer);
    }

    dc->state = NGX_HTTP_SESSION_DB_BUSY;

    ngx_http_session_stat(db_batches, 1);
    ngx_http_session_stat(db_batched, n);

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, dc->log, 0,
                   "session db: %ui reads in one pipeline", n);

    if (ngx_http_session_db_flush(dc) != NGX_OK) {
        goto failed;
    }

    return NGX_OK;

failed:

    ngx_http_session_db_conn_fail(dc);

    return NGX_ERROR;
}


/*
 * The results of a pipeline, in order: each read's result (or error,
 * or "aborted"), then NULL, then PGRES_PIPELINE_SYNC after the last.
 */

static void
ngx_http_session_db_read_batch(ngx_http_session_db_conn_t *dc)
{
    PGresult        *res;
    ExecStatusType   st;

    while (!PQisBusy(dc->pg)) {
        res = PQgetResult(dc->pg);

        if (res == NULL) {
            if (dc->nread == dc->nbatch) {
                /* nothing is owed: libpq and the pool disagree */
                break;
            }

            res = dc->result;
            dc->result = NULL;

            ngx_http_session_db_batch_answer(dc, res);

            if (dc->state != NGX_HTTP_SESSION_DB_BUSY || dc->nbatch == 0) {
                /* the connection failed meanwhile */
                return;
            }

            continue;
        }

        st = PQresultStatus(res);

        if (st == PGRES_PIPELINE_SYNC) {
            PQclear(res);
            ngx_http_session_db_batch_over(dc);
            return;
        }

        if (dc->result == NULL) {
            dc->result = res;

        } else if (st == PGRES_FATAL_ERROR) {
            PQclear(dc->result);
            dc->result = res;

        } else {
            PQclear(res);
        }
    }

    if (PQstatus(dc->pg) == CONNECTION_BAD) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                      "session db: connection lost: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        ngx_http_session_db_conn_fail(dc);
    }
}


static void
ngx_http_session_db_batch_answer(ngx_http_session_db_conn_t *dc,
    PGresult *res)
{
    ngx_http_session_db_query_t  *q;

    q = dc->batch[dc->nread];
    dc->batch[dc->nread] = NULL;
    dc->nread++;

    if (res && PQresultStatus(res) == PGRES_PIPELINE_ABORTED) {
        /* it did not run: it waits again, first in line */
        PQclear(res);

        if (q) {
            q->conn = NULL;
            ngx_http_session_db_enqueue(ngx_http_session_db_pool, q, 1);
        }

        return;
    }

    if (res && ngx_http_session_db_large(q, res)) {
        dc->recycle = 1;
    }

    ngx_http_session_db_deliver(dc, q, res);
}


static void
ngx_http_session_db_batch_over(ngx_http_session_db_conn_t *dc)
{
    if (!PQexitPipelineMode(dc->pg)) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                      "session db: leaving pipeline mode failed: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        ngx_http_session_db_conn_fail(dc);
        return;
    }

    dc->nbatch = 0;
    dc->nread = 0;
    dc->state = NGX_HTTP_SESSION_DB_IDLE;

    ngx_http_session_db_idle(dc);

    if (dc->recycle || dc->sent >= NGX_HTTP_SESSION_DB_RECYCLE_SIZE) {
        ngx_http_session_db_recycle(dc);
    }

    dc->sent = 0;
    dc->recycle = 0;

    ngx_http_session_db_dispatch();
}


/* the reads from..to of a pipeline get no answer (503) */

static void
ngx_http_session_db_batch_fail(ngx_http_session_db_conn_t *dc,
    ngx_uint_t from, ngx_uint_t to)
{
    ngx_uint_t                    i;
    ngx_http_session_db_query_t  *q;

    for (i = from; i < to; i++) {
        q = dc->batch[i];
        dc->batch[i] = NULL;

        if (q) {
            ngx_http_session_db_complete(q, NULL);
        }
    }
}


static void
ngx_http_session_db_enqueue(ngx_http_session_db_pool_t *pool,
    ngx_http_session_db_query_t *q, ngx_uint_t head)
{
    ngx_queue_t  *queue;

    queue = q->first ? &pool->first : &pool->waiting;

    if (head) {
        ngx_queue_insert_head(queue, &q->queue);

    } else {
        ngx_queue_insert_tail(queue, &q->queue);
    }

    pool->nwaiting++;
    q->queued = 1;

    ngx_http_session_gauge(db_waiting, 1);
}


/* the connection forgets q, whose answer nobody will read */

static void
ngx_http_session_db_detach_query(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_query_t *q)
{
    ngx_uint_t  i;

    if (dc->query == q) {
        dc->query = NULL;
    }

    for (i = dc->nread; i < dc->nbatch; i++) {
        if (dc->batch[i] == q) {
            dc->batch[i] = NULL;
        }
    }

    q->conn = NULL;
}


static void
ngx_http_session_db_dequeue(ngx_http_session_db_pool_t *pool,
    ngx_http_session_db_query_t *q)
{
    ngx_queue_remove(&q->queue);
    pool->nwaiting--;
    q->queued = 0;

    ngx_http_session_gauge(db_waiting, -1);
}


static void
ngx_http_session_db_dispatch(void)
{
    ngx_uint_t                    i, n, alive;
    ngx_queue_t                  *head;
    ngx_http_session_db_query_t  *batch[NGX_HTTP_SESSION_DB_BATCH_MAX];
    ngx_http_session_db_conn_t   *dc;
    ngx_http_session_db_pool_t   *pool;
    ngx_http_session_db_query_t  *q;

    pool = ngx_http_session_db_pool;
    if (pool == NULL) {
        return;
    }

    alive = 0;

    for (i = 0; i < pool->nconns && pool->nwaiting; i++) {
        dc = &pool->conns[i];

        if (dc->state != NGX_HTTP_SESSION_DB_CLOSED) {
            alive++;
        }

        if (dc->state != NGX_HTTP_SESSION_DB_IDLE) {
            continue;
        }

        head = ngx_http_session_db_next(pool);
        q = ngx_queue_data(head, ngx_http_session_db_query_t, queue);

        ngx_http_session_db_dequeue(pool, q);

        /*
         * A read takes the other waiting reads along, up to
         * session_db_batch: a pipeline of n wakes the server and the
         * worker once instead of n times, which is what a loaded machine
         * runs short of (decision (nb)); the next idle connection takes
         * what is left
         */

        n = 1;

        if (pool->batch > 1 && pool->nwaiting
            && ngx_http_session_db_batchable(q))
        {
            n = ngx_min(pool->nwaiting + 1, pool->batch);
        }

        if (n > 1) {
            n = ngx_http_session_db_gather(pool, q, batch, n);
        }

        if (n > 1) {
            (void) ngx_http_session_db_send_batch(dc, batch, n);
            continue;
        }

        if (ngx_http_session_db_send_query(dc, q) != NGX_OK) {
            ngx_http_session_db_complete(q, NULL);
        }
    }

    if (alive || pool->nwaiting == 0) {
        return;
    }

    /* every connection is down: fail the waiting queries now */

    while (pool->nwaiting) {
        head = ngx_http_session_db_next(pool);
        q = ngx_queue_data(head, ngx_http_session_db_query_t, queue);

        ngx_http_session_db_dequeue(pool, q);

        ngx_http_session_db_complete(q, NULL);
    }
}


static void
ngx_http_session_db_posted(ngx_event_t *ev)
{
    ngx_http_session_db_dispatch();
}


/* the next waiting query: the two queues take turns while both wait */

static ngx_queue_t *
ngx_http_session_db_next(ngx_http_session_db_pool_t *pool)
{
    if (ngx_queue_empty(&pool->first)) {
        return ngx_queue_head(&pool->waiting);
    }

    if (ngx_queue_empty(&pool->waiting)) {
        return ngx_queue_head(&pool->first);
    }

    pool->turn ^= 1;

    return ngx_queue_head(pool->turn ? &pool->first : &pool->waiting);
}


static void
ngx_http_session_db_pool_ready(ngx_http_session_db_conn_t *dc)
{
    ngx_http_session_db_pool_t  *pool;

    pool = ngx_http_session_db_pool;

    /* the statements first: queries wait for them like for a busy one */

    if (pool && pool->prepare && !dc->prepared) {
        dc->preparing = 1;

        if (ngx_http_session_db_conn_send(dc, pool->prepare) != NGX_OK) {
            dc->preparing = 0;
            ngx_http_session_db_conn_fail(dc);
        }

        return;
    }

    ngx_http_session_db_dispatch();
}


static void
ngx_http_session_db_query_timeout(ngx_event_t *ev)
{
    ngx_http_session_db_conn_t   *dc;
    ngx_http_session_db_query_t  *q;

    q = ev->data;

    ngx_log_error(NGX_LOG_ERR, ev->log, 0, "session db: query timed out");

    if (q->queued) {
        ngx_http_session_db_dequeue(ngx_http_session_db_pool, q);
    }

    dc = q->conn;

    if (dc) {
        /*
         * The connection is stuck in this query: drop it and connect again
         * after the backoff, as after any failure, so that an overloaded
         * server does not get a storm of new connections.  The other reads
         * of its pipeline, if any, fail with it.
         */
        ngx_http_session_db_detach_query(dc, q);
        ngx_http_session_db_conn_fail(dc);
    }

    ngx_http_session_db_complete(q, NULL);
}


static void
ngx_http_session_db_query_cleanup(void *data)
{
    ngx_http_session_db_query_t  *q = data;

    if (q->timeout.timer_set) {
        ngx_del_timer(&q->timeout);
    }

    if (q->queued) {
        ngx_http_session_db_dequeue(ngx_http_session_db_pool, q);
    }

    /* a running query finishes on its own; its result is dropped */

    if (q->conn) {
        ngx_http_session_db_detach_query(q->conn, q);
    }

    q->done = 1;
}


static void
ngx_http_session_db_complete(ngx_http_session_db_query_t *q, PGresult *res)
{
    ngx_connection_t  *c;

    if (q->done) {
        return;
    }

    q->done = 1;
    q->conn = NULL;

    if (res) {
        ngx_http_session_stat(db_queries, 1);

    } else {
        ngx_http_session_stat(db_failures, 1);
    }

    if (q->timeout.timer_set) {
        ngx_del_timer(&q->timeout);
    }

    if (q->request == NULL) {
        q->handler(q, res);
        return;
    }

    c = q->request->connection;

    q->handler(q, res);

    ngx_http_run_posted_requests(c);
}


ngx_int_t
ngx_http_session_db_result_ok(ngx_http_session_db_query_t *q, PGresult *res)
{
    ExecStatusType  st;

    st = PQresultStatus(res);

    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
        return NGX_OK;
    }

    ngx_log_error(NGX_LOG_ERR, q->log, 0,
                  "session db: query failed: %s",
                  ngx_http_session_db_message(PQresultErrorMessage(res)));

    return NGX_ERROR;
}
