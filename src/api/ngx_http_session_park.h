/*
 * A parked request: while the answer of a request waits (a long poll),
 * nginx's request is freed, with its header buffer, and only the client
 * connection and a small record stay; the answer is sent on a request
 * made again from the record.  HTTP/1.x, plain or over TLS, and HTTP/3;
 * not HTTP/2 (see ngx_http_session_parkable()).
 */

#ifndef _NGX_HTTP_SESSION_PARK_H_INCLUDED_
#define _NGX_HTTP_SESSION_PARK_H_INCLUDED_


#include "ngx_http_session_common.h"


typedef struct ngx_http_session_park_s  ngx_http_session_park_t;

/*
 * The client of a parked request went away: its owner lets go of the
 * park's data; the request is then made again and ends with 499.
 */
typedef void (*ngx_http_session_park_gone_pt)(ngx_http_session_park_t *pk);


/* can r go while it waits: HTTP/1.x or HTTP/3, no body, nothing beyond */
ngx_uint_t ngx_http_session_parkable(ngx_http_request_t *r);

/*
 * The record of r (its request line, the headers set for its answer,
 * the module's context, its location), with size zeroed bytes for the
 * caller at ngx_http_session_park_data(): NULL when r cannot go now.
 * Nothing is freed yet: the caller moves what it keeps in r's pool into
 * the data, then calls ngx_http_session_park_request().
 */
ngx_http_session_park_t *ngx_http_session_park_prepare(
    ngx_http_request_t *r, size_t size, ngx_http_session_park_gone_pt gone);

void *ngx_http_session_park_data(ngx_http_session_park_t *pk);

/* frees r and its header buffer: from now on only the connection stays */
void ngx_http_session_park_request(ngx_http_session_park_t *pk,
    ngx_http_request_t *r);

/*
 * A request again on the connection, for the answer; pk and its data
 * are freed.  NULL: it could not be made, the connection is closed.
 */
ngx_http_request_t *ngx_http_session_unpark(ngx_http_session_park_t *pk);

/* at the process's exit: the record goes, its connection with the process */
void ngx_http_session_park_free(ngx_http_session_park_t *pk);

ngx_int_t ngx_http_session_park_init_process(ngx_cycle_t *cycle);
void ngx_http_session_park_exit_process(ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_SESSION_PARK_H_INCLUDED_ */
