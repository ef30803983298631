/*
 * Reconnection delays of the database connections.
 *
 * Pure C with no nginx types; unit-tested with Check.
 */

#ifndef _NGX_HTTP_SESSION_BACKOFF_H_INCLUDED_
#define _NGX_HTTP_SESSION_BACKOFF_H_INCLUDED_


#include <stdint.h>


/* the base delay of the first retry and its ceiling, in milliseconds */
#define NGX_HTTP_SESSION_BACKOFF_MIN     100
#define NGX_HTTP_SESSION_BACKOFF_MAX     2000

/*
 * A connection that was up this long before it failed starts again from
 * the smallest delay; one that fails sooner (it could not connect, or a
 * query timed out on an overloaded server soon after it connected) keeps
 * doubling it.
 */
#define NGX_HTTP_SESSION_BACKOFF_STABLE  10000

/*
 * The least time between two early tries of a worker, see
 * ngx_http_session_backoff_early().
 */
#define NGX_HTTP_SESSION_BACKOFF_EARLY   250


/*
 * The next base delay after a failure: base is the one before (0 for
 * none yet), up the milliseconds the connection was usable before it
 * failed (0 when it never connected).
 */
uint32_t ngx_http_session_backoff_next(uint32_t base, uint64_t up);

/*
 * The delay to wait: a point of [base / 2, base] picked by rnd (any
 * random number), so that the connections of every worker that lost the
 * server at the same moment do not come back at the same moment.
 */
uint32_t ngx_http_session_backoff_delay(uint32_t base, uint32_t rnd);

/*
 * A request needs a connection and every connection of the worker waits
 * out its backoff: may one of them try at once (the request waits for
 * that attempt instead of getting 503)?  Only one whose last attempt was
 * refused (refused: it failed to connect before its timeout: a server
 * that is down or starting answers so, cheaply), not one that timed out
 * (a host that does not answer would hold the request for the whole
 * timeout) nor one that broke once it was up (a query timeout on an
 * overloaded server: no more connections than the schedule); and at most
 * one early try per worker per BACKOFF_EARLY: since is the milliseconds
 * since the worker's last early try.
 */
int ngx_http_session_backoff_early(uint64_t since, int refused);


#endif /* _NGX_HTTP_SESSION_BACKOFF_H_INCLUDED_ */
