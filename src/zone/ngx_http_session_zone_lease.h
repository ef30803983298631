/*
 * session_limit_scope cluster: what this node holds of each key's budget
 * in session_limit_zone (the leases), so that the limits hold across all
 * the nodes that share the database (docs/decisions.md, (qa)).
 */

#ifndef _NGX_HTTP_SESSION_ZONE_LEASE_H_INCLUDED_
#define _NGX_HTTP_SESSION_ZONE_LEASE_H_INCLUDED_


#include "ngx_http_session_common.h"


/* the smallest lease, and the largest as a part of the limit (1/4) */
#define NGX_HTTP_SESSION_LEASE_MIN     10
#define NGX_HTTP_SESSION_LEASE_SHARE   4


/* what a lease statement answered, for ngx_http_session_lease_answer() */
typedef struct {
    u_char                     *hash;
    ngx_uint_t                  cls;
    ngx_uint_t                  limit;
    /* the window asked for, epoch minutes */
    uint32_t                    minute;
    /* leased to this node by the statement */
    uint32_t                    given;
    /* the window's total leased to all nodes after the statement */
    uint32_t                    granted;
    /* the nodes that leased in the window */
    uint32_t                    nodes;
    /* what the row says the node was leased in the window, if known */
    uint32_t                    took;
    unsigned                    known:1;
    /* the mark of a lease asked for ahead of need, 0: none */
    uint32_t                    asked;
    /* the requests of this worker that waited for it */
    uint32_t                    waiters;
    /* no answer: the database is unavailable, or the statement failed */
    unsigned                    failed:1;
} ngx_http_session_lease_answer_t;


/*
 * Adds a lease's answer to what the node holds (or its failure: the mark
 * of a lease in flight is cleared either way); a lease for a window that
 * is over counts as unused.  The database's state for leases is logged
 * once per change for the node.
 */
void ngx_http_session_lease_answer(ngx_shm_zone_t *zone,
    ngx_http_session_lease_answer_t *a);

/* this node's id in the database's lease rows */
uint64_t ngx_http_session_lease_node(ngx_shm_zone_t *zone);

/*
 * The most nodes that a sample of the window's lease rows listed, for
 * the worker's guess (decisions (qn), (qo))
 */
void ngx_http_session_lease_guess_add(ngx_shm_zone_t *zone, uint32_t minute,
    uint32_t nodes);


#endif /* _NGX_HTTP_SESSION_ZONE_LEASE_H_INCLUDED_ */
