/*
 * The long poll's shared reads (the folder's own header, for poll.c and
 * poll_node.c): the worker's table of the sessions that polls wait on, a
 * node per session and project, each read once for all its waiters (see
 * the top of ngx_http_session_poll_node.c).  poll.c owns the waiters: the
 * table hands each answer, and each waiter that is known to wait, back
 * to it through the handlers it gave the table.
 */

#ifndef _NGX_HTTP_SESSION_POLL_NODE_H_INCLUDED_
#define _NGX_HTTP_SESSION_POLL_NODE_H_INCLUDED_


#include "ngx_http_session_common.h"
#include "ngx_http_session_error.h"
#include "ngx_http_session_park.h"


/* a node's key: sid, its NUL and project, which follows it */
#define NGX_HTTP_SESSION_POLL_KEY_LEN  (2 * NGX_HTTP_SESSION_UUID_LEN + 1)


/* the waiters of one session and project */
typedef struct {
    /* CRC32 of the session id's text; str: sid to the end of project */
    ngx_str_node_t                 key;
    /* in the worker's list of every node */
    ngx_queue_t                    all;
    ngx_queue_t                    waiters;
    /* the session's expires_at: answers every waiter 410 */
    ngx_event_t                    expiry;
    /* the statement reading it now (shared by its batch), or NULL */
    void                          *batch;
    /* in the worker's list of nodes whose read waits to be sent */
    ngx_queue_t                    pending;
    /*
     * NUL-terminated: they are the statement's parameters; one after the
     * other (arrays of bytes), they are key.str
     */
    u_char                         sid[NGX_HTTP_SESSION_UUID_LEN + 1];
    u_char                         project[NGX_HTTP_SESSION_UUID_LEN + 1];
    /*
     * By ngx_current_msec: until when the session's arm is known to last
     * (0: not known to be armed), and the latest deadline of a waiter
     * that joined (decision (yf))
     */
    ngx_msec_t                     armed_until;
    ngx_msec_t                     until;
    /* the latest deadline when the last arm was sent */
    ngx_msec_t                     arm_for;

    /* a read is under way (or about to be sent: pending) */
    unsigned                       reading:1;
    unsigned                       queued:1;
    /* something happened after that read was sent: read again */
    unsigned                       again:1;
    /* the last read found nothing to answer and nothing happened since */
    unsigned                       settled:1;
    /* its waiters are being answered: the node stays until that is over */
    unsigned                       busy:1;
    /* the read under way was sent after this node's arm committed */
    unsigned                       armed:1;
} ngx_http_session_poll_node_t;


struct ngx_http_session_poll_s {
    /* in node->waiters */
    ngx_queue_t                    queue;
    /* NULL once the poll no longer waits */
    ngx_http_session_poll_node_t  *node;
    /* NULL while parked: the poll is then the data of park */
    ngx_http_request_t            *request;
    ngx_http_session_park_t       *park;
    ngx_event_t                    timer;
    /* in the worker's list of polls to park after this event */
    ngx_queue_t                    parking;

    /* timed out (or timeout 0, or shutting down): the next read answers */
    unsigned                       final:1;
    /* session_poll_park and a request that can go while it waits */
    unsigned                       parkable:1;
};


/* one rendered answer, sent as it is by every waiter it answers */
typedef struct {
    ngx_pool_t                    *pool;
    ngx_buf_t                     *body;
    /* the waiters still sending it, and the node while it answers */
    ngx_uint_t                     refs;
} ngx_http_session_poll_answer_t;


/* a waiter is answered: err, or a's body when err is ..._ERR_LAST */
typedef void (*ngx_http_session_poll_deliver_pt)(ngx_http_session_poll_t *p,
    ngx_http_session_err_e err, ngx_http_session_poll_answer_t *a);
/* a waiter is known to wait (its node settled); also: one to drop */
typedef void (*ngx_http_session_poll_waiter_pt)(ngx_http_session_poll_t *p);


/* the worker's table; deliver and waits are the waiters' owner's */
ngx_int_t ngx_http_session_poll_table_init(ngx_cycle_t *cycle,
    ngx_http_session_poll_deliver_pt deliver,
    ngx_http_session_poll_waiter_pt waits);
/* the process ends: every waiter leaves its node through drop */
void ngx_http_session_poll_table_exit(ngx_http_session_poll_waiter_pt drop);
ngx_uint_t ngx_http_session_poll_table_ready(void);

/* the node of sid and project, made if there is none; NULL: no memory */
ngx_http_session_poll_node_t *ngx_http_session_poll_node(u_char *sid,
    u_char *project, ngx_log_t *log);
/* a node with no waiter, no read and no answer under way goes */
void ngx_http_session_poll_release(ngx_http_session_poll_node_t *node);

/* a read of the node's session, sent once the event under way is over */
ngx_int_t ngx_http_session_poll_read(ngx_http_session_poll_node_t *node);
/*
 * Something may have changed (final 0), or a waiter must answer now
 * (final 1): read, or read again after the running read
 */
void ngx_http_session_poll_want(ngx_http_session_poll_node_t *node,
    ngx_uint_t final);
/*
 * A waiter that waits up to timeout joins the node: whether the node's
 * arm is known to last past its deadline (if not, the node must read,
 * and arm, before the waiter may wait on it)
 */
ngx_uint_t ngx_http_session_poll_covers(ngx_http_session_poll_node_t *node,
    ngx_msec_t timeout);
/* a session's notification (its id as text): its nodes read again */
void ngx_http_session_poll_node_wake(u_char *sid, size_t len);
/* every node reads again (final 0), or every waiter answers (final 1) */
void ngx_http_session_poll_want_all(ngx_uint_t final);

/* a waiter's hold on a shared answer ends (a pool cleanup handler) */
void ngx_http_session_poll_answer_release(void *data);


#endif /* _NGX_HTTP_SESSION_POLL_NODE_H_INCLUDED_ */
