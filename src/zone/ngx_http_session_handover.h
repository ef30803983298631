/*
 * session_limit_zone across a binary upgrade (kill -USR2): the zone
 * lives in a memfd that the new master inherits and maps at the same
 * address, so that both binaries' workers count in one zone.
 */

#ifndef _NGX_HTTP_SESSION_HANDOVER_H_INCLUDED_
#define _NGX_HTTP_SESSION_HANDOVER_H_INCLUDED_


#include "ngx_http_session_common.h"


/* what must be equal in two binaries that share a zone */
#define NGX_HTTP_SESSION_HANDOVER_LAYOUT_MAX  16

typedef struct {
    uint64_t                    v[NGX_HTTP_SESSION_HANDOVER_LAYOUT_MAX];
} ngx_http_session_handover_layout_t;


/*
 * Called by a zone's init when nginx gave it fresh memory.  NGX_OK: in
 * the first configuration of a new binary, the previous binary's zone of
 * the same name, size and layout was found among the inherited
 * descriptors and mapped at its address instead (zone->shm.addr now
 * points there; the slab pool and its contents are the previous
 * binary's).  NGX_DECLINED: the zone starts empty, in a new memfd when
 * one can be made (zone->shm.addr changed, the slab pool initialised
 * again), else in nginx's memory.  *fd is the memfd, or -1.
 */
ngx_int_t ngx_http_session_handover_attach(ngx_shm_zone_t *zone,
    ngx_http_session_handover_layout_t *layout, ngx_fd_t *fd);

/*
 * In the first configuration of a process: closes the inherited memfds
 * that no zone took (the memory goes once the previous binary exits).
 */
void ngx_http_session_handover_close_unused(ngx_cycle_t *cycle);


#endif /* _NGX_HTTP_SESSION_HANDOVER_H_INCLUDED_ */
