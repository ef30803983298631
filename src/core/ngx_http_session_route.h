/*
 * The API's route table: which path is which resource, which methods it
 * takes, and which rate-limit class a request falls in.
 *
 * Pure C with no nginx types; unit-tested with Check.
 */

#ifndef _NGX_HTTP_SESSION_ROUTE_H_INCLUDED_
#define _NGX_HTTP_SESSION_ROUTE_H_INCLUDED_


#include <stddef.h>


#define NGX_HTTP_SESSION_ROUTE_NONE           0
#define NGX_HTTP_SESSION_ROUTE_SESSIONS       1
#define NGX_HTTP_SESSION_ROUTE_SESSION        2
#define NGX_HTTP_SESSION_ROUTE_COMPLETE       3
#define NGX_HTTP_SESSION_ROUTE_IMAGES         4
#define NGX_HTTP_SESSION_ROUTE_IMAGE          5
#define NGX_HTTP_SESSION_ROUTE_IMAGE_CONTENT  6
#define NGX_HTTP_SESSION_ROUTE_IMAGE_ACK      7
#define NGX_HTTP_SESSION_ROUTE_POLL           8

/* methods; HEAD is accepted wherever GET is */
#define NGX_HTTP_SESSION_METHOD_GET           0x01
#define NGX_HTTP_SESSION_METHOD_POST          0x02
#define NGX_HTTP_SESSION_METHOD_OTHER         0x04

/* rate-limit classes (docs/api.md §1, stage 2) */
#define NGX_HTTP_SESSION_CLASS_CREATE         0
#define NGX_HTTP_SESSION_CLASS_LIST           1
#define NGX_HTTP_SESSION_CLASS_OTHER          2
#define NGX_HTTP_SESSION_NCLASSES             3


typedef struct {
    int                   id;
    /* NGX_HTTP_SESSION_METHOD_* the resource answers */
    unsigned              methods;
    const unsigned char  *sid;
    size_t                sid_len;
    const unsigned char  *iid;
    size_t                iid_len;
} ngx_http_session_route_t;


/* matches a normalised URI path (no query string); returns the route id */
int ngx_http_session_route_match(const unsigned char *path, size_t len,
    ngx_http_session_route_t *rt);

/* the value of the Allow header for a method set */
const char *ngx_http_session_route_allow(unsigned methods);

/* the rate-limit class of a request; method is NGX_HTTP_SESSION_METHOD_* */
int ngx_http_session_route_class(const ngx_http_session_route_t *rt,
    unsigned method);


#endif /* _NGX_HTTP_SESSION_ROUTE_H_INCLUDED_ */
