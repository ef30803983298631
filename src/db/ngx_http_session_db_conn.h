/*
 * One libpq connection in the worker's event loop (db_conn.c), the
 * folder's own: the query pool (db_query.c) and the LISTEN connection
 * (db_listen.c) each own some.  The connection knows nothing of what its
 * owner does with it; it tells its owner what happens through the
 * handlers the owner sets, as an nginx event calls its handler:
 *
 *   ready    connected and probed (dc->pooled, dc->server_timeout),
 *            idle for the first time since (re)connecting
 *   answer   the answer to the statement the owner sent (conn_send, or
 *            its own PQsend...() and conn_busy), the connection idle
 *            again; the handler owns res (NULL: no result came)
 *   checked  the idle check was answered: idle again, nothing to read
 *   failed   it failed and is closed (a reconnect is scheduled): what
 *            the owner sent on it gets no answer
 *   notify   a NOTIFY arrived
 *   reader   while set and the connection is busy, reads in its place
 *            (the answers of a pipeline, a COPY); cleared when it closes
 *   drained  while set, libpq has just sent all the output it held (a
 *            COPY's owner hands it the next piece then)
 */

#ifndef _NGX_HTTP_SESSION_DB_CONN_H_INCLUDED_
#define _NGX_HTTP_SESSION_DB_CONN_H_INCLUDED_


#include "ngx_http_session_common.h"

#include <libpq-fe.h>

#include "ngx_http_session_db.h"
#include "ngx_http_session_db_hosts.h"


#define NGX_HTTP_SESSION_DB_CLOSED       0
#define NGX_HTTP_SESSION_DB_CONNECTING   1
#define NGX_HTTP_SESSION_DB_IDLE         2
#define NGX_HTTP_SESSION_DB_BUSY         3


typedef void (*ngx_http_session_db_conn_pt)(ngx_http_session_db_conn_t *dc);
typedef void (*ngx_http_session_db_answer_pt)(ngx_http_session_db_conn_t *dc,
    PGresult *res);
typedef void (*ngx_http_session_db_notify_pt)(ngx_http_session_db_conn_t *dc,
    PGnotify *n);


struct ngx_http_session_db_conn_s {
    PGconn                          *pg;
    ngx_connection_t                *connection;
    /* the inode of the socket that connection watches */
    ino_t                            socket_ino;
    ngx_log_t                       *log;
    const char                      *conninfo;
    /*
     * fallback_application_name: what the connection is for, as
     * pg_stat_activity shows it unless the conninfo names one
     */
    const char                      *role;
    /* host names to resolve before each attempt, or NULL */
    ngx_http_session_dbhosts_t      *hosts;
    ngx_http_session_dbhost_ctx_t    resolve;
    /*
     * server options: the conninfo's own and statement_timeout; NULL:
     * none (through a pooler in transaction mode)
     */
    const char                      *options;
    ngx_msec_t                       timeout;

    /*
     * connect timeout while connecting, backoff while closed, the idle
     * check while idle, the check's timeout while it runs
     */
    ngx_event_t                      timer;
    /* the base delay of the next reconnect, see core/..._backoff.h */
    ngx_msec_t                       backoff;
    /* when the connection got usable, 0 while it is not */
    ngx_msec_t                       connected;
    /* when the current (or last) connection attempt began */
    ngx_msec_t                       started;
    /* session_db_idle_check: an idle connection is checked this often */
    ngx_msec_t                       check;

    ngx_uint_t                       state;
    /*
     * the server's statement_timeout in milliseconds (0: none), as the
     * probe found it; -1 before
     */
    ngx_int_t                        server_timeout;
    /* the first result of the statement being read, or its error */
    PGresult                        *result;
    /* in the worker's list of connections, see db_conn.c */
    ngx_queue_t                      link;

    /* the owner's, see the top of this file */
    ngx_http_session_db_conn_pt      ready;
    ngx_http_session_db_answer_pt    answer;
    ngx_http_session_db_conn_pt      checked;
    ngx_http_session_db_conn_pt      failed;
    ngx_http_session_db_notify_pt    notify;
    ngx_http_session_db_conn_pt      reader;
    ngx_http_session_db_conn_pt      drained;
    void                            *data;

    /*
     * The pool's (db_query.c, db_batch.c, db_stmt.c), unused on the
     * LISTEN connection: the query running alone, or the reads sent
     * together in pipeline mode under one Sync, in the order of their
     * results (a slot is NULL once its query went away; nbatch is 0
     * outside a pipeline, nread counts the answered)
     */
    ngx_http_session_db_query_t     *query;
    ngx_http_session_db_query_t    **batch;
    /*
     * by slot of batch: when the read that went away from it is due,
     * see ngx_http_session_db_conn_abandon()
     */
    ngx_msec_t                      *deadlines;
    ngx_uint_t                       nbatch;
    ngx_uint_t                       nread;
    /* parameter bytes of the running query, see RECYCLE_SIZE */
    size_t                           sent;
    /*
     * what was sent last is nobody's any more (its owner went away, see
     * ngx_http_session_db_conn_abandon()): what it is, for the log
     */
    const char                      *abandoned;

    unsigned                         failed_before:1;
    /* the last attempt failed to connect before its timeout */
    unsigned                         refused:1;
    /*
     * the last failure closed a connection that was up (lost, a
     * statement that timed out): its next attempt is the one after
     */
    unsigned                         dropped:1;
    unsigned                         timed_out:1;
    /* the idle check (an empty query) waits for its answer */
    unsigned                         checking:1;
    /* the probe, the first statement after connecting, waits for it */
    unsigned                         probing:1;
    /*
     * the probe ran on another server process than the one the
     * connection started with: a pooler stands in between, and the next
     * statement may run on yet another one
     */
    unsigned                         pooled:1;
    /*
     * the pool's statements are being prepared, or are: they live on
     * the server's side, so a new connection has none
     */
    unsigned                         preparing:1;
    unsigned                         prepared:1;
    /*
     * behind a transaction pooler, the PREPARE asks the server whether
     * the pooler renamed the statements (it keeps them for its clients):
     * only then do they count as prepared
     */
    unsigned                         asking:1;
    unsigned                         renamed:1;
    /*
     * a result of what was sent last found the statements lost and made
     * the connection send text (ngx_http_session_db_conn_check()): its
     * statement goes again (ngx_http_session_db_conn_lost())
     */
    unsigned                         lost:1;
    /* a result of the pipeline was large: reconnect once it is over */
    unsigned                         recycle:1;
    /* libpq holds output that the socket did not take yet */
    unsigned                         unsent:1;
};


/*
 * The server options a connection starts with: own (the "options" of its
 * conninfo, may be empty), then statement_timeout = session_db_timeout
 * unless they set one, so that a statement the module gave up on is also
 * given up by the server (its transaction rolls back) instead of
 * finishing unseen, and plan_cache_mode = force_generic_plan unless they
 * set one, so that a prepared statement is planned once per connection,
 * not per request (decision (nb)).
 */
const char *ngx_http_session_db_options(ngx_cycle_t *cycle, ngx_str_t *own);

/*
 * n connections to session_db (of the pool, of the uploads, LISTEN) for
 * role, with session_db's hosts, timeout and idle check, its server
 * options unless session_db_pooler names a pooler, and the owner's
 * handlers; NULL without memory
 */
ngx_http_session_db_conn_t *ngx_http_session_db_conn_create(
    ngx_cycle_t *cycle, ngx_http_session_main_conf_t *smcf, ngx_uint_t n,
    const char *role, ngx_http_session_db_conn_pt ready,
    ngx_http_session_db_answer_pt answer, ngx_http_session_db_conn_pt checked,
    ngx_http_session_db_conn_pt failed);

/*
 * Every connection of the worker is added once, before it is opened: when
 * one gets through, the others are kicked (see ngx_http_session_db_kick())
 */
void ngx_http_session_db_conn_add(ngx_http_session_db_conn_t *dc);
/* another worker of the node reached the server: kick as above */
void ngx_http_session_db_conn_reachable(void);
void ngx_http_session_db_conn_open(ngx_http_session_db_conn_t *dc);
void ngx_http_session_db_conn_fail(ngx_http_session_db_conn_t *dc);
void ngx_http_session_db_conn_close(ngx_http_session_db_conn_t *dc);

/*
 * What was sent on dc (what, for the log) lost its owner: its answer goes
 * to dc->answer with dc->data as the owner left it, but dc connects again,
 * as after a query that timed out, unless the answer comes by deadline
 * (an ngx_current_msec; one already past closes it at the next turn)
 */
void ngx_http_session_db_conn_abandon(ngx_http_session_db_conn_t *dc,
    const char *what, ngx_msec_t deadline);

/*
 * Of the n connections conns, every one waiting out its backoff: the
 * first whose last attempt was refused tries now, at most once per
 * NGX_HTTP_SESSION_BACKOFF_EARLY since *early (what waits, for the log:
 * "a query", "an upload").  Returns whether an attempt is under way.
 */
ngx_uint_t ngx_http_session_db_conn_early(ngx_http_session_db_conn_t *conns,
    ngx_uint_t n, ngx_msec_t *early, const char *what);

/* a statement as text; its results go to dc->answer */
ngx_int_t ngx_http_session_db_conn_send(ngx_http_session_db_conn_t *dc,
    const char *sql);

/*
 * The owner has handed libpq what to send (PQsendQueryParams(), a
 * pipeline): the connection is busy until it is answered
 */
ngx_int_t ngx_http_session_db_conn_busy(ngx_http_session_db_conn_t *dc);

/* answered: the connection is idle, and checks itself from now on */
void ngx_http_session_db_conn_idle(ngx_http_session_db_conn_t *dc);

/*
 * the statement in flight is answered with res (kept, or NULL): idle
 * again, and res goes to the first statement's, the idle check's or the
 * owner's reader (for a reader of a pipeline, at its Sync)
 */
void ngx_http_session_db_conn_answered(ngx_http_session_db_conn_t *dc,
    PGresult *res);

/* a result of the statement being read (dc->result: the one kept) */
void ngx_http_session_db_conn_keep(ngx_http_session_db_conn_t *dc,
    PGresult *res);

/* a result nobody reads: its error is logged, and it is freed */
void ngx_http_session_db_conn_clear(ngx_http_session_db_conn_t *dc,
    PGresult *res);

/*
 * an answer read on dc: a prepared statement the server does not have
 * (26000) makes dc send its statements as text from then on
 */
void ngx_http_session_db_conn_check(ngx_http_session_db_conn_t *dc,
    PGresult *res);

/*
 * Did res, read on dc, make dc send text (ngx_http_session_db_conn_check())?
 * Its statement did not run: its owner sends it again, as text.  Yes once
 * for each such result, so that nothing goes again for ever.
 */
ngx_uint_t ngx_http_session_db_conn_lost(ngx_http_session_db_conn_t *dc,
    PGresult *res);

/*
 * Does res (an error) mean "the database is not there", not "the
 * statement is wrong"?  Its requests answer 503 then.
 */
ngx_int_t ngx_http_session_db_unavailable(PGresult *res);

/* a libpq message on one log line (in a static buffer) */
char *ngx_http_session_db_message(const char *msg);


#endif /* _NGX_HTTP_SESSION_DB_CONN_H_INCLUDED_ */
