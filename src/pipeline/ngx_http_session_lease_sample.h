/*
 * session_limit_scope cluster: how many nodes lease, read from the lease
 * rows by a worker when it starts (docs/decisions.md (qo)).
 */

#ifndef _NGX_HTTP_SESSION_LEASE_SAMPLE_H_INCLUDED_
#define _NGX_HTTP_SESSION_LEASE_SAMPLE_H_INCLUDED_


#include "ngx_http_session_common.h"


/* sends the statement (cluster scope); nothing waits for its answer */
void ngx_http_session_lease_sample_init_process(
    ngx_http_session_main_conf_t *smcf);

/* a statement not answered yet: its pool goes with the worker */
void ngx_http_session_lease_sample_exit_process(void);


#endif /* _NGX_HTTP_SESSION_LEASE_SAMPLE_H_INCLUDED_ */
