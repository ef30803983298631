/*
 * session_limit_scope cluster: how many nodes lease, read from the lease
 * rows by a worker when it starts (docs/decisions.md (qo)).
 */

#ifndef _NGX_HTTP_SESSION_LEASE_SAMPLE_H_INCLUDED_
#define _NGX_HTTP_SESSION_LEASE_SAMPLE_H_INCLUDED_


#include "ngx_http_session_common.h"


/* sends the statement; nothing waits for its answer */
void ngx_http_session_lease_sample(ngx_shm_zone_t *zone);


#endif /* _NGX_HTTP_SESSION_LEASE_SAMPLE_H_INCLUDED_ */
