/*
 * session_limit_zone across a binary upgrade (docs/decisions.md (va)).
 *
 * nginx's shared zones are anonymous mappings: a reload keeps them, but
 * the master that kill -USR2 starts is a new program (fork and exec of
 * the old master) and gets new, empty ones.  So the module puts its zone
 * in a memfd instead, opened without close-on-exec: the new master
 * inherits the descriptor, finds it in /proc/self/fd, and maps it at the
 * address the old master uses.  The slab pool, its trees and its mutex
 * hold absolute addresses; at the same address they mean the same in
 * both programs, so the old and the new workers count in one zone while
 * both serve (the overlap between USR2 and the old master's QUIT), and
 * a key at 90 of 100 stays at 90.  Code addresses differ between the two
 * programs: the zone holds none that is called (the trees' insert
 * function is set by each process before each insert, under the mutex).
 *
 * The memfd's first page is a header: the zone's name, size and address,
 * and the layout (nginx's version and the sizes of its slab pool and
 * mutex, this module's layout version and struct sizes).  The new master
 * maps only a zone whose header is its own in everything but the
 * address; a different build of different layout, or an address the new
 * program already uses, starts the zone empty, as a restart would.
 */

#include "ngx_http_session_handover.h"

#include <nginx.h>

#if (NGX_LINUX && NGX_HAVE_ATOMIC_OPS && defined MFD_CLOEXEC)
#define NGX_HTTP_SESSION_HANDOVER  1
#endif


#define NGX_HTTP_SESSION_HANDOVER_MEMFD  "ngx_http_session_zone"
#define NGX_HTTP_SESSION_HANDOVER_NAME   256
/* inherited memfds looked at, at most */
#define NGX_HTTP_SESSION_HANDOVER_MAX    8

#define NGX_HTTP_SESSION_HANDOVER_PREFIX_LEN                                  \
    (sizeof("/memfd:" NGX_HTTP_SESSION_HANDOVER_MEMFD) - 1)


#if (NGX_HTTP_SESSION_HANDOVER)

typedef struct {
    u_char                              magic[8];
    /* nginx's side of the layout */
    uint64_t                            nginx[6];
    ngx_http_session_handover_layout_t  layout;
    uint64_t                            size;
    uint64_t                            name_len;
    u_char                              name[NGX_HTTP_SESSION_HANDOVER_NAME];
    /* where the zone is mapped */
    uint64_t                            addr;
} ngx_http_session_handover_header_t;


static void ngx_http_session_handover_scan(ngx_log_t *log);
static ngx_int_t ngx_http_session_handover_adopt(ngx_shm_zone_t *zone,
    ngx_http_session_handover_header_t *want, ngx_fd_t *fd);
static ngx_int_t ngx_http_session_handover_create(ngx_shm_zone_t *zone,
    ngx_http_session_handover_header_t *want, ngx_fd_t *fd);


/* what readlink() of /proc/self/fd/N says of such a memfd, at first */
static u_char      ngx_http_session_handover_prefix[] =
    "/memfd:" NGX_HTTP_SESSION_HANDOVER_MEMFD;

static ngx_fd_t    ngx_http_session_handover_fds[NGX_HTTP_SESSION_HANDOVER_MAX];
static ngx_uint_t  ngx_http_session_handover_nfds;
static ngx_uint_t  ngx_http_session_handover_scanned;


ngx_int_t
ngx_http_session_handover_attach(ngx_shm_zone_t *zone,
    ngx_http_session_handover_layout_t *layout, ngx_fd_t *fd)
{
    ngx_http_session_handover_header_t  want;

    *fd = NGX_INVALID_FILE;

    ngx_memzero(&want, sizeof(ngx_http_session_handover_header_t));

    ngx_memcpy(want.magic, "ngxsess", 8);
    want.nginx[0] = nginx_version;
    want.nginx[1] = NGX_PTR_SIZE;
    want.nginx[2] = ngx_pagesize;
    want.nginx[3] = sizeof(ngx_slab_pool_t);
    want.nginx[4] = sizeof(ngx_slab_page_t);
    want.nginx[5] = sizeof(ngx_shmtx_t);
    want.layout = *layout;
    want.size = zone->shm.size;
    want.name_len = zone->shm.name.len;
    ngx_memcpy(want.name, zone->shm.name.data,
               ngx_min(zone->shm.name.len, NGX_HTTP_SESSION_HANDOVER_NAME));

    /* only the first configuration of a process has inherited anything */

    if (ngx_is_init_cycle(ngx_cycle)) {
        ngx_http_session_handover_scan(zone->shm.log);

        if (ngx_http_session_handover_adopt(zone, &want, fd) == NGX_OK) {
            return NGX_OK;
        }
    }

    if (ngx_http_session_handover_create(zone, &want, fd) != NGX_OK) {
        return NGX_ERROR;
    }

    return NGX_DECLINED;
}


/* the memfds this process inherited, once */

static void
ngx_http_session_handover_scan(ngx_log_t *log)
{
    int             n;
    DIR            *dir;
    u_char          path[64], link[128];
    ngx_fd_t        fd;
    struct dirent  *de;

    if (ngx_http_session_handover_scanned) {
        return;
    }

    ngx_http_session_handover_scanned = 1;

    dir = opendir("/proc/self/fd");
    if (dir == NULL) {
        ngx_log_error(NGX_LOG_WARN, log, ngx_errno,
                      "session_limit_zone: opendir(\"/proc/self/fd\") "
                      "failed, the previous binary's zone is not looked for");
        return;
    }

    while ((de = readdir(dir)) != NULL) {

        fd = ngx_atoi((u_char *) de->d_name, ngx_strlen(de->d_name));
        if (fd == NGX_ERROR || fd == dirfd(dir)) {
            continue;
        }

        ngx_sprintf(path, "/proc/self/fd/%d%Z", fd);

        n = readlink((char *) path, (char *) link, sizeof(link) - 1);

        if (n < (int) NGX_HTTP_SESSION_HANDOVER_PREFIX_LEN
            || ngx_strncmp(link, ngx_http_session_handover_prefix,
                           NGX_HTTP_SESSION_HANDOVER_PREFIX_LEN) != 0
            || ngx_http_session_handover_nfds
               == NGX_HTTP_SESSION_HANDOVER_MAX)
        {
            continue;
        }

        ngx_http_session_handover_fds[ngx_http_session_handover_nfds++] = fd;
    }

    (void) closedir(dir);
}


/* maps an inherited zone of the same header at its address */

static ngx_int_t
ngx_http_session_handover_adopt(ngx_shm_zone_t *zone,
    ngx_http_session_handover_header_t *want, ngx_fd_t *fd)
{
    int                                  flags;
    u_char                              *addr;
    ngx_fd_t                             cand;
    ngx_uint_t                           i;
    ngx_slab_pool_t                     *sp;
    ngx_http_session_handover_header_t   got;

    for (i = 0; i < ngx_http_session_handover_nfds; i++) {

        cand = ngx_http_session_handover_fds[i];

        if (pread(cand, &got, sizeof(got), 0) != (ssize_t) sizeof(got)
            || got.name_len != want->name_len
            || ngx_memcmp(got.name, want->name, NGX_HTTP_SESSION_HANDOVER_NAME)
               != 0)
        {
            continue;
        }

        want->addr = got.addr;

        if (ngx_memcmp(&got, want, sizeof(got)) != 0) {
            ngx_log_error(NGX_LOG_NOTICE, zone->shm.log, 0,
                          "session_limit_zone \"%V\" starts empty: the "
                          "previous binary's has another size or layout",
                          &zone->shm.name);
            return NGX_DECLINED;
        }

        flags = MAP_SHARED;
#ifdef MAP_FIXED_NOREPLACE
        flags |= MAP_FIXED_NOREPLACE;
#endif

        /* without MAP_FIXED_NOREPLACE the address is a hint: checked */

        addr = mmap((void *) (uintptr_t) got.addr, zone->shm.size,
                    PROT_READ|PROT_WRITE, flags, cand, ngx_pagesize);

        sp = (ngx_slab_pool_t *) addr;

        if (addr == MAP_FAILED
            || (uintptr_t) addr != got.addr
            || sp->addr != addr)
        {
            if (addr != MAP_FAILED) {
                (void) munmap(addr, zone->shm.size);
            }

            ngx_log_error(NGX_LOG_NOTICE, zone->shm.log, 0,
                          "session_limit_zone \"%V\" starts empty: its "
                          "address %p is taken in this binary",
                          &zone->shm.name, (void *) (uintptr_t) got.addr);
            return NGX_DECLINED;
        }

        ngx_shm_free(&zone->shm);
        zone->shm.addr = addr;

        *fd = cand;
        ngx_http_session_handover_fds[i] = NGX_INVALID_FILE;

        ngx_log_error(NGX_LOG_NOTICE, zone->shm.log, 0,
                      "session_limit_zone \"%V\" is the previous binary's: "
                      "counters and cache carry on", &zone->shm.name);
        return NGX_OK;
    }

    return NGX_DECLINED;
}


/* a new, empty zone in a memfd that the next binary can inherit */

static ngx_int_t
ngx_http_session_handover_create(ngx_shm_zone_t *zone,
    ngx_http_session_handover_header_t *want, ngx_fd_t *fd)
{
    u_char           *addr;
    ngx_fd_t          mfd;
    ngx_slab_pool_t  *sp;

    /* not close-on-exec: that is the point */

    mfd = memfd_create(NGX_HTTP_SESSION_HANDOVER_MEMFD, 0);

    if (mfd == -1) {
        ngx_log_error(NGX_LOG_WARN, zone->shm.log, ngx_errno,
                      "session_limit_zone \"%V\": memfd_create() failed, "
                      "a binary upgrade will start it empty",
                      &zone->shm.name);
        return NGX_OK;
    }

    if (ftruncate(mfd, ngx_pagesize + zone->shm.size) == -1) {
        ngx_log_error(NGX_LOG_ALERT, zone->shm.log, ngx_errno,
                      "session_limit_zone \"%V\": ftruncate() failed",
                      &zone->shm.name);
        (void) close(mfd);
        return NGX_ERROR;
    }

    addr = mmap(NULL, zone->shm.size, PROT_READ|PROT_WRITE, MAP_SHARED, mfd,
                ngx_pagesize);

    if (addr == MAP_FAILED) {
        ngx_log_error(NGX_LOG_ALERT, zone->shm.log, ngx_errno,
                      "session_limit_zone \"%V\": mmap(%uz) failed",
                      &zone->shm.name, zone->shm.size);
        (void) close(mfd);
        return NGX_ERROR;
    }

    want->addr = (uintptr_t) addr;

    if (pwrite(mfd, want, sizeof(*want), 0) != (ssize_t) sizeof(*want)) {
        ngx_log_error(NGX_LOG_ALERT, zone->shm.log, ngx_errno,
                      "session_limit_zone \"%V\": pwrite() failed",
                      &zone->shm.name);
        (void) munmap(addr, zone->shm.size);
        (void) close(mfd);
        return NGX_ERROR;
    }

    /* nginx's memory goes; the pool is made again, as nginx makes it */

    ngx_shm_free(&zone->shm);
    zone->shm.addr = addr;

    sp = (ngx_slab_pool_t *) addr;
    sp->end = addr + zone->shm.size;
    sp->min_shift = 3;
    sp->addr = addr;

    if (ngx_shmtx_create(&sp->mutex, &sp->lock, NULL) != NGX_OK) {
        (void) close(mfd);
        return NGX_ERROR;
    }

    ngx_slab_init(sp);

    *fd = mfd;

    return NGX_OK;
}


void
ngx_http_session_handover_close_unused(ngx_cycle_t *cycle)
{
    ngx_uint_t  i;

    if (!ngx_is_init_cycle(cycle->old_cycle)) {
        return;
    }

    ngx_http_session_handover_scan(cycle->log);

    for (i = 0; i < ngx_http_session_handover_nfds; i++) {
        if (ngx_http_session_handover_fds[i] != NGX_INVALID_FILE) {
            (void) close(ngx_http_session_handover_fds[i]);
            ngx_http_session_handover_fds[i] = NGX_INVALID_FILE;
        }
    }
}

#else

ngx_int_t
ngx_http_session_handover_attach(ngx_shm_zone_t *zone,
    ngx_http_session_handover_layout_t *layout, ngx_fd_t *fd)
{
    *fd = NGX_INVALID_FILE;

    return NGX_DECLINED;
}


void
ngx_http_session_handover_close_unused(ngx_cycle_t *cycle)
{
}

#endif
