/*
 * The database directives: session_db, session_db_listen and
 * session_db_pooler, parsed here, and what they must agree on, checked
 * at the end of the http block.
 */

#ifndef _NGX_HTTP_SESSION_DB_CONF_H_INCLUDED_
#define _NGX_HTTP_SESSION_DB_CONF_H_INCLUDED_


#include "ngx_http_session_common.h"


/* session_db <conninfo>; */
char *ngx_http_session_db(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

/* session_db_listen <conninfo>; */
char *ngx_http_session_db_listen(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/* session_db_pooler off | session | transaction; */
char *ngx_http_session_db_pooler(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);

/*
 * At the end of the http block, where session_api is used: the host
 * lists to resolve, and NGX_ERROR (said) when a pooler in transaction
 * mode is configured without what it needs
 */
ngx_int_t ngx_http_session_db_init_conf(ngx_conf_t *cf,
    ngx_http_session_main_conf_t *smcf);


#endif /* _NGX_HTTP_SESSION_DB_CONF_H_INCLUDED_ */
