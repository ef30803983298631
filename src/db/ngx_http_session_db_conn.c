/*
 * One libpq connection inside nginx's event loop: the pool's and the
 * LISTEN connection alike.  It connects (host names looked up first, see
 * db_hosts.c), reads, flushes, checks itself while idle, and after a
 * failure closes and connects again with backoff.  It knows nothing of
 * queries: what it has to tell goes to the handlers its owner set on it
 * (see ngx_http_session_db_conn.h).
 *
 * libpq owns every socket: the module wraps it in an nginx connection
 * only to get events, and tears it down with PQfinish() followed by
 * ngx_free_connection(), never ngx_close_connection().  Read interest is
 * level-triggered, so input that libpq leaves in the kernel buffer is
 * never lost to an edge; write interest is added only while libpq has
 * unsent output.
 *
 * A little over a thousand lines on purpose: connecting, reading,
 * flushing, the idle check and the reconnect are one connection's state
 * machine, each step handing on to the next.
 */

#include "ngx_http_session_db_conn.h"
#include "ngx_http_session_backoff.h"


/* the worker's connections, for ngx_http_session_db_kick() */
typedef struct {
    /* every connection of the worker: the pool's, then LISTEN */
    ngx_queue_t                  all;
    ngx_uint_t                   kicking;
} ngx_http_session_db_conns_t;


static void ngx_http_session_db_resolved(void *data, const char *host,
    const char *hostaddr, const char *port);
static void ngx_http_session_db_conn_start(ngx_http_session_db_conn_t *dc,
    const char *host, const char *hostaddr, const char *port);
static void ngx_http_session_db_connect_poll(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_notice(void *arg, const PGresult *res);
static void ngx_http_session_db_kick(ngx_http_session_db_conn_t *by,
    ngx_msec_t started);
static void ngx_http_session_db_kick_one(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_conn_t *by, ngx_msec_t started);
static ngx_uint_t ngx_http_session_db_failure_level(
    ngx_http_session_db_conn_t *dc);
static ngx_int_t ngx_http_session_db_attach(ngx_http_session_db_conn_t *dc);
static ngx_uint_t ngx_http_session_db_socket_changed(
    ngx_http_session_db_conn_t *dc, int fd);
static void ngx_http_session_db_detach(ngx_http_session_db_conn_t *dc);
static ngx_int_t ngx_http_session_db_want_write(
    ngx_http_session_db_conn_t *dc, ngx_uint_t on);
static void ngx_http_session_db_event_handler(ngx_event_t *ev);
static void ngx_http_session_db_timer_handler(ngx_event_t *ev);
static void ngx_http_session_db_probe(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_probed(ngx_http_session_db_conn_t *dc,
    PGresult *res);
static void ngx_http_session_db_check(ngx_http_session_db_conn_t *dc);
static ngx_int_t ngx_http_session_db_flush(ngx_http_session_db_conn_t *dc);
static void ngx_http_session_db_read(ngx_http_session_db_conn_t *dc);


static ngx_http_session_db_conns_t  ngx_http_session_db_conns;


const char *
ngx_http_session_db_options(ngx_cycle_t *cycle, ngx_str_t *own)
{
    u_char                        *p, *last;
    size_t                         len;
    ngx_http_session_main_conf_t  *smcf;

    smcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_session_module);

    len = own->len + sizeof(" -c statement_timeout=") - 1
          + NGX_INT_T_LEN + sizeof(" -c plan_cache_mode=force_generic_plan");

    p = ngx_pnalloc(cycle->pool, len);
    if (p == NULL) {
        return NULL;
    }

    /* the operator's choices stand */

    last = p;

    if (own->len) {
        last = ngx_cpymem(p, own->data, own->len);
    }

    if (own->len == 0
        || ngx_strstr(own->data, "statement_timeout") == NULL)
    {
        last = ngx_sprintf(last, "%s-c statement_timeout=%M",
                           last > p ? " " : "", smcf->db_timeout);
    }

    if (own->len == 0 || ngx_strstr(own->data, "plan_cache_mode") == NULL) {
        last = ngx_sprintf(last, "%s-c plan_cache_mode=force_generic_plan",
                           last > p ? " " : "");
    }

    *last = '\0';

    return (const char *) p;
}


ngx_http_session_db_conn_t *
ngx_http_session_db_conn_create(ngx_cycle_t *cycle,
    ngx_http_session_main_conf_t *smcf, ngx_uint_t n, const char *role,
    ngx_http_session_db_conn_pt ready, ngx_http_session_db_answer_pt answer,
    ngx_http_session_db_conn_pt checked, ngx_http_session_db_conn_pt failed)
{
    ngx_uint_t                   i;
    const char                  *options;
    ngx_http_session_db_conn_t  *conns, *dc;

    conns = ngx_pcalloc(cycle->pool, n * sizeof(ngx_http_session_db_conn_t));
    if (conns == NULL) {
        return NULL;
    }

    /* no pooler passes startup options on (PgBouncer refuses them) */

    options = NULL;

    if (smcf->db_pooler == NGX_HTTP_SESSION_POOLER_OFF) {
        options = ngx_http_session_db_options(cycle, &smcf->db_options);
        if (options == NULL) {
            return NULL;
        }
    }

    for (i = 0; i < n; i++) {
        dc = &conns[i];

        dc->log = cycle->log;
        dc->conninfo = (const char *) smcf->db_conninfo.data;
        dc->role = role;
        dc->hosts = smcf->db_hosts;
        dc->options = options;
        dc->timeout = smcf->db_timeout;
        dc->check = smcf->db_idle_check;

        dc->ready = ready;
        dc->answer = answer;
        dc->checked = checked;
        dc->failed = failed;
    }

    return conns;
}


void
ngx_http_session_db_conn_add(ngx_http_session_db_conn_t *dc)
{
    ngx_http_session_db_conns_t  *conns;

    conns = &ngx_http_session_db_conns;

    if (conns->all.next == NULL) {
        ngx_queue_init(&conns->all);
    }

    /* closed at exit, never removed: a closed one is not kicked */
    ngx_queue_insert_tail(&conns->all, &dc->link);
}


void
ngx_http_session_db_conn_open(ngx_http_session_db_conn_t *dc)
{
    dc->preparing = 0;
    dc->prepared = 0;
    dc->checking = 0;
    dc->probing = 0;
    dc->pooled = 0;
    dc->server_timeout = -1;
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

    /* host names: looked up again for every attempt, see db_hosts.c */

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
    const char  *keywords[8], *values[8];

    n = 0;

    /*
     * Before the conninfo, so that a gssencmode in session_db wins: with
     * libpq's default (prefer) every connect would look for Kerberos
     * credentials, reading files in the worker (docs/decisions.md (vb)).
     * GSSAPI only when the operator asks for it: in session_db, or with
     * PGGSSENCMODE in the workers' environment (the env directive).
     */

    if (getenv("PGGSSENCMODE") == NULL) {
        keywords[n] = "gssencmode";
        values[n++] = "disable";
    }

    /* the conninfo is expanded here; the keywords given after it follow */

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

    (void) PQsetNoticeReceiver(dc->pg, ngx_http_session_db_notice, dc);

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
            dc->connected = ngx_http_session_stamp(ngx_current_msec);

            ngx_http_session_db_kick(dc, dc->started);

            ngx_http_session_db_probe(dc);

            return;

        default:
            /* PGRES_POLLING_ACTIVE is obsolete: poll again */
            break;
        }
    }
}


/*
 * by has just connected (its attempt began at started; by is NULL when
 * the news comes from another worker, see below): the server is
 * reachable again.  The worker's other connections that wait for their
 * backoff try now, and those still in an attempt that began well before
 * started (likely lost with the link that has just come back: an attempt
 * normally ends in milliseconds) begin a new one, so that the worker is
 * whole again at once instead of one connection at a time, up to the
 * backoff ceiling apart.
 */

static void
ngx_http_session_db_kick(ngx_http_session_db_conn_t *by, ngx_msec_t started)
{
    ngx_queue_t                  *x;
    ngx_http_session_db_conns_t  *conns;

    conns = &ngx_http_session_db_conns;

    if (conns->kicking || ngx_http_session_stopping()) {
        return;
    }

    conns->kicking = 1;

    for (x = ngx_queue_head(&conns->all);
         x != ngx_queue_sentinel(&conns->all);
         x = ngx_queue_next(x))
    {
        ngx_http_session_db_kick_one(
                ngx_queue_data(x, ngx_http_session_db_conn_t, link), by,
                started);
    }

    conns->kicking = 0;
}


static void
ngx_http_session_db_kick_one(ngx_http_session_db_conn_t *dc,
    ngx_http_session_db_conn_t *by, ngx_msec_t started)
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
        && (ngx_msec_int_t) (started - dc->started)
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
 * Another worker of the node has reached the server (the node's LISTEN
 * connection is in effect again, see db_relay.c): as when one of this
 * worker's own connections gets through.
 */

void
ngx_http_session_db_conn_reachable(void)
{
    ngx_http_session_db_kick(NULL, ngx_current_msec);
}


/*
 * libpq's messages span lines ("...failed\n\tIs the server running...\n"):
 * one log line each, with the line breaks folded into spaces.
 */

char *
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


/*
 * What the server says outside an answer: a NOTICE or WARNING, or the
 * FATAL of a connection it ends (pg_terminate_backend(), a shutdown),
 * which tells why the connection is lost.  One line of the module's in
 * the error log, instead of libpq's default, which writes the bare text
 * to stderr (the error log too, with no time, level or process).
 */

static void
ngx_http_session_db_notice(void *arg, const PGresult *res)
{
    char                        *severity;
    ngx_uint_t                   level;
    ngx_http_session_db_conn_t  *dc = arg;

    severity = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);

    /*
     * LOG and DEBUG (a role with client_min_messages lowered) may carry
     * statements and their parameters: debug, never in an operator's log
     */

    level = NGX_LOG_WARN;

    if (severity == NULL) {
        /* libpq's own notice */

    } else if (ngx_strcmp(severity, "NOTICE") == 0) {
        level = NGX_LOG_NOTICE;

    } else if (ngx_strcmp(severity, "INFO") == 0) {
        level = NGX_LOG_INFO;

    } else if (ngx_strcmp(severity, "LOG") == 0
               || ngx_strncmp(severity, "DEBUG", 5) == 0)
    {
        level = NGX_LOG_DEBUG;
    }

    ngx_log_error(level, dc->log, 0, "session db: the server says: %s",
                  ngx_http_session_db_message(PQresultErrorMessage(res)));
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


/*
 * closes the connection and schedules a reconnect with backoff; the
 * owner hears of it through dc->failed
 */

void
ngx_http_session_db_conn_fail(ngx_http_session_db_conn_t *dc)
{
    ngx_msec_t  up, delay;

    up = dc->connected ? ngx_current_msec - dc->connected : 0;

    dc->refused = (dc->connected == 0 && !dc->timed_out);

    /* up: connected, probed and its statements prepared (or not kept) */
    dc->dropped = (dc->connected != 0 && !dc->probing && !dc->preparing);
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

    if (!ngx_http_session_stopping()) {
        ngx_add_timer(&dc->timer, delay);
    }

    /* what the owner had sent on it gets no answer */

    if (dc->failed) {
        dc->failed(dc);
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
    dc->unsent = 0;
    dc->probing = 0;
    dc->reader = NULL;
    dc->drained = NULL;
    dc->abandoned = NULL;

    ngx_http_session_pq_clear(&dc->result);

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

        /* an exiting worker begins nothing: no check of an idle link */

        if (ngx_http_session_stopping()) {
            return;
        }

        ngx_http_session_db_check(dc);
        return;
    }

    if (dc->abandoned) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                      "session db: no answer to the %s within %M ms, "
                      "connecting again", dc->abandoned, dc->timeout);
        ngx_http_session_db_conn_fail(dc);
        return;
    }

    if (dc->checking || dc->probing || dc->preparing) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                      "session db: no answer to the %s within "
                      "%M ms%s, connecting again",
                      dc->checking ? "idle check"
                      : dc->probing ? "first statement"
                                    : "statements' PREPARE",
                      dc->timeout,
                      dc->notify ? " on the LISTEN connection" : "");
        ngx_http_session_db_conn_fail(dc);
    }
}


/*
 * The first statement of a connection, before its owner hears of it:
 * does the server process that answers it differ from the one the
 * connection started with?  A server always tells a client its own
 * process id (BackendKeyData, for cancel requests); PgBouncer makes one
 * up for each client instead, and runs its statements on whichever
 * server connection is free.  So a difference is a pooler, reliably,
 * whatever it reports of itself (server_version and the other parameters
 * are the server's, passed on); its pool mode it does not tell.
 */

static void
ngx_http_session_db_probe(ngx_http_session_db_conn_t *dc)
{
    if (ngx_http_session_db_conn_send(dc, NGX_HTTP_SESSION_SQL_PROBE)
        != NGX_OK)
    {
        ngx_http_session_db_conn_fail(dc);
        return;
    }

    dc->probing = 1;

    ngx_add_timer(&dc->timer, dc->timeout);
}


static void
ngx_http_session_db_probed(ngx_http_session_db_conn_t *dc, PGresult *res)
{
    ngx_int_t  pid;

    if (res == NULL || PQresultStatus(res) != PGRES_TUPLES_OK
        || PQntuples(res) != 1 || PQnfields(res) != 2)
    {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                      "session db: the first statement failed: %s",
                      ngx_http_session_db_message(
                          res ? PQresultErrorMessage(res) : "no result"));

        if (res) {
            PQclear(res);
        }

        ngx_http_session_db_conn_fail(dc);
        return;
    }

    pid = ngx_atoi((u_char *) PQgetvalue(res, 0, 0), PQgetlength(res, 0, 0));

    dc->pooled = (pid != (ngx_int_t) PQbackendPID(dc->pg));
    dc->server_timeout = ngx_atoi((u_char *) PQgetvalue(res, 0, 1),
                                  PQgetlength(res, 0, 1));

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, dc->log, 0,
                   "session db: server process %i, the connection's %d, "
                   "statement_timeout %i ms%s", pid, PQbackendPID(dc->pg),
                   dc->server_timeout, dc->pooled ? ", through a pooler" : "");

    PQclear(res);

    if (dc->ready) {
        dc->ready(dc);
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

void
ngx_http_session_db_conn_idle(ngx_http_session_db_conn_t *dc)
{
    /*
     * answered: the timer of what was sent (the first statement's, the
     * idle check's, the PREPARE's, or the deadline of what nobody waits
     * for any more, also at the end of a pipeline) is over
     */

    if (dc->timer.timer_set) {
        ngx_del_timer(&dc->timer);
    }

    dc->abandoned = NULL;

    dc->state = NGX_HTTP_SESSION_DB_IDLE;

    if (dc->check && !ngx_http_session_stopping()) {
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
            return;
        }

        if (!dc->unsent && dc->drained
            && dc->state == NGX_HTTP_SESSION_DB_BUSY)
        {
            dc->drained(dc);
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

    dc->unsent = (rc == 1);

    return ngx_http_session_db_want_write(dc, rc == 1);
}


static void
ngx_http_session_db_read(ngx_http_session_db_conn_t *dc)
{
    PGresult  *res;
    PGnotify  *n;

    if (!PQconsumeInput(dc->pg)) {
        if (!ngx_http_session_stopping()) {
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

    if (dc->state == NGX_HTTP_SESSION_DB_BUSY && dc->reader) {
        /* the owner reads what it sent (a pipeline's answers) */
        dc->reader(dc);
        return;
    }

    if (dc->state == NGX_HTTP_SESSION_DB_BUSY) {

        while (!PQisBusy(dc->pg)) {
            res = PQgetResult(dc->pg);

            if (res == NULL) {
                res = dc->result;
                dc->result = NULL;

                ngx_http_session_db_conn_answered(dc, res);
                return;
            }

            ngx_http_session_db_conn_keep(dc, res);
        }
    }

    if (PQstatus(dc->pg) == CONNECTION_BAD) {
        ngx_http_session_db_conn_fail(dc);
    }
}


/* the statement in flight is answered: the connection is idle again */

void
ngx_http_session_db_conn_answered(ngx_http_session_db_conn_t *dc,
    PGresult *res)
{
    /* answered in time: the owner's answer handler frees the connection */
    ngx_http_session_db_conn_idle(dc);

    if (dc->probing) {
        dc->probing = 0;
        ngx_http_session_db_probed(dc, res);
        return;
    }

    if (dc->checking) {
        /* the idle check's empty answer: nothing for the owner */
        dc->checking = 0;

        if (res) {
            PQclear(res);
        }

        if (dc->checked) {
            dc->checked(dc);
        }

        return;
    }

    dc->answer(dc, res);
}


/* a statement gives one result: the first is kept, or the error */

void
ngx_http_session_db_conn_keep(ngx_http_session_db_conn_t *dc, PGresult *res)
{
    ngx_http_session_db_conn_check(dc, res);

    if (dc->result == NULL) {
        dc->result = res;

    } else if (PQresultStatus(res) == PGRES_FATAL_ERROR) {
        PQclear(dc->result);
        dc->result = res;

    } else {
        PQclear(res);
    }
}


/*
 * res, an answer read on dc: a server that does not know the statement
 * that dc sent by name (26000) has lost what dc prepared, as when a
 * pooler that kept them for its clients is told to keep none (PgBouncer
 * reloaded with max_prepared_statements = 0): the statement did not run,
 * and its owner sends it again (ngx_http_session_db_conn_lost()), as
 * text, since dc sends its statements as text from then on
 */

void
ngx_http_session_db_conn_check(ngx_http_session_db_conn_t *dc, PGresult *res)
{
    char  *state;

    if (!dc->prepared || PQresultStatus(res) != PGRES_FATAL_ERROR) {
        return;
    }

    state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

    if (state == NULL || ngx_strcmp(state, "26000") != 0) {
        return;
    }

    dc->prepared = 0;
    dc->lost = 1;

    ngx_log_error(NGX_LOG_ERR, dc->log, 0,
                  "session db: the server does not have the statements "
                  "this connection prepared (a pooler that no longer keeps "
                  "them for its clients?), they are sent as text on it "
                  "from now on: %s",
                  ngx_http_session_db_message(PQresultErrorMessage(res)));
}


ngx_uint_t
ngx_http_session_db_conn_lost(ngx_http_session_db_conn_t *dc, PGresult *res)
{
    if (!dc->lost || PQresultStatus(res) != PGRES_FATAL_ERROR) {
        return 0;
    }

    dc->lost = 0;

    return 1;
}


/*
 * Every connection of a set waits out its backoff and a query (or an
 * upload) needs one: the backoff's ceiling (2 s) would keep a server that
 * is back unused for up to that long while requests get 503.  One
 * connection whose last attempt was refused tries now, at most one per
 * set per NGX_HTTP_SESSION_BACKOFF_EARLY (ngx_http_session_backoff_early()),
 * and what needs it waits.  When it connects, the others follow
 * (ngx_http_session_db_kick()).
 */

ngx_uint_t
ngx_http_session_db_conn_early(ngx_http_session_db_conn_t *conns,
    ngx_uint_t n, ngx_msec_t *early, const char *what)
{
    ngx_uint_t                   i;
    ngx_http_session_db_conn_t  *dc;

    if (ngx_http_session_stopping()) {
        return 0;
    }

    for (i = 0; i < n; i++) {
        dc = &conns[i];

        if (dc->state != NGX_HTTP_SESSION_DB_CLOSED || !dc->timer.timer_set
            || !ngx_http_session_backoff_early(ngx_current_msec - *early,
                                               dc->refused))
        {
            continue;
        }

        *early = ngx_current_msec;

        ngx_log_error(NGX_LOG_INFO, dc->log, 0,
                      "session db: %s waits, connecting before the "
                      "backoff is over", what);

        ngx_del_timer(&dc->timer);
        ngx_http_session_db_conn_open(dc);

        return dc->state != NGX_HTTP_SESSION_DB_CLOSED;
    }

    return 0;
}


/*
 * Nobody waits for the answer of what dc runs, and nobody bounds it: dc's
 * own timer does, as for the idle check, so that a server that never
 * answers (hung, a link that died without a word) does not keep dc busy
 * for good
 */

void
ngx_http_session_db_conn_abandon(ngx_http_session_db_conn_t *dc,
    const char *what, ngx_msec_t deadline)
{
    ngx_msec_int_t  left;

    dc->abandoned = what;

    if (dc->timer.timer_set) {
        ngx_del_timer(&dc->timer);
    }

    left = (ngx_msec_int_t) (deadline - ngx_current_msec);

    ngx_add_timer(&dc->timer, left > 0 ? (ngx_msec_t) left : 0);
}


ngx_int_t
ngx_http_session_db_conn_send(ngx_http_session_db_conn_t *dc, const char *sql)
{
    if (!PQsendQuery(dc->pg, sql)) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0, "session db: send failed: %s",
                      ngx_http_session_db_message(PQerrorMessage(dc->pg)));
        return NGX_ERROR;
    }

    return ngx_http_session_db_conn_busy(dc);
}


ngx_int_t
ngx_http_session_db_conn_busy(ngx_http_session_db_conn_t *dc)
{
    if (dc->timer.timer_set) {
        /* the idle check: a query has a timeout of its own */
        ngx_del_timer(&dc->timer);
    }

    dc->state = NGX_HTTP_SESSION_DB_BUSY;

    /* what goes now has met no lost statement yet */
    dc->lost = 0;

    return ngx_http_session_db_flush(dc);
}


void
ngx_http_session_db_conn_clear(ngx_http_session_db_conn_t *dc, PGresult *res)
{
    if (res == NULL) {
        return;
    }

    if (PQresultStatus(res) == PGRES_FATAL_ERROR) {
        ngx_log_error(NGX_LOG_ERR, dc->log, 0, "session db: %s",
                      ngx_http_session_db_message(PQresultErrorMessage(res)));
    }

    PQclear(res);
}


/* errors that mean "the database is not there", not "the query is wrong" */

ngx_int_t
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

    /*
     * 08 connection, 53 resources, 57 operator intervention, 3D000 no db,
     * 26000 a prepared statement the server lost (the statement did not
     * run; its owner sends it again where it can, see
     * ngx_http_session_db_conn_lost())
     */

    return ngx_strncmp(state, "08", 2) == 0
           || ngx_strncmp(state, "53", 2) == 0
           || ngx_strncmp(state, "57", 2) == 0
           || ngx_strncmp(state, "3D000", 5) == 0
           || ngx_strncmp(state, "26000", 5) == 0;
}
