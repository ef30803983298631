/*
 * The long-poll fan-out client of util/bench-poll.sh.
 *
 *   poll-fanout PORT N IDS SUB PUB READY TIMEOUT
 *
 * Opens N connections to 127.0.0.1:PORT and sends on each the request of
 * the file SUB with "@ID@" replaced by an id of the file IDS (one a line,
 * round robin).  Then runs the shell command READY until it exits 0 (the
 * server says all N wait), at most TIMEOUT seconds; connects one more
 * connection per id and sends on each the request of the file PUB (its
 * "@ID@" replaced), each send time taken just before its write.  Every
 * answer's latency is the kernel's receive timestamp (SO_TIMESTAMPNS) of
 * its first bytes minus the send time of its id's publish request.
 *
 * Prints "key value" lines: answers by status ("status 200 9998"),
 * answers that came before the publish ("early 503 12"), "unanswered",
 * "p50_ms", "p99_ms", "max_ms", "publish 201 1000".  Everything is
 * bounded by TIMEOUT; it exits 1 on a setup failure.
 */

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>


typedef struct {
    int      fd;
    int      id;          /* index into the ids */
    int      pub;         /* a publish connection */
    size_t   sent;        /* bytes of the request written */
    char    *req;
    size_t   len;
    int      status;      /* 0 until answered */
    int      early;       /* answered before the publish */
    double   at;          /* kernel receive time of the answer */
} conn_t;


static char    **ids;
static int       nids;
static double   *pub_sent;   /* by id: when its publish was written */


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_REALTIME, &ts);

    return ts.tv_sec + ts.tv_nsec / 1e9;
}


static char *
slurp(const char *path, size_t *len)
{
    FILE    *f;
    char    *buf;
    long     n;

    f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        exit(1);
    }

    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);

    buf = malloc(n + 1);
    if (buf == NULL || fread(buf, 1, n, f) != (size_t) n) {
        perror(path);
        exit(1);
    }

    buf[n] = '\0';
    fclose(f);
    *len = n;

    return buf;
}


/* the template with every "@ID@" replaced by id */
static char *
expand(const char *tpl, size_t tlen, const char *id, size_t *len)
{
    char        *out, *p;
    size_t       idlen, n;
    const char  *s, *hit;

    idlen = strlen(id);
    out = malloc(tlen * (idlen + 4) / 4 + 1);
    if (out == NULL) {
        exit(1);
    }

    p = out;
    s = tpl;

    while ((hit = strstr(s, "@ID@")) != NULL) {
        n = hit - s;
        memcpy(p, s, n);
        p += n;
        memcpy(p, id, idlen);
        p += idlen;
        s = hit + 4;
    }

    n = tlen - (s - tpl);
    memcpy(p, s, n);
    p += n;
    *len = p - out;

    return out;
}


static int
open_conn(int port)
{
    int                 fd, one;
    struct sockaddr_in  sin;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd == -1) {
        perror("socket");
        exit(1);
    }

    one = 1;
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    if (connect(fd, (struct sockaddr *) &sin, sizeof(sin)) == -1
        && errno != EINPROGRESS)
    {
        perror("connect");
        exit(1);
    }

    return fd;
}


/* reads what came; returns 1 once the connection is answered */
static int
on_read(conn_t *c)
{
    char             buf[4096], ctl[256];
    ssize_t          n;
    struct iovec     iov;
    struct msghdr    msg;
    struct cmsghdr  *cm;
    struct timespec  ts;
    double           at;

    iov.iov_base = buf;
    iov.iov_len = sizeof(buf) - 1;

    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl;
    msg.msg_controllen = sizeof(ctl);

    n = recvmsg(c->fd, &msg, 0);

    if (n == -1 && (errno == EAGAIN || errno == EINTR)) {
        return 0;
    }

    at = now();

    for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
            memcpy(&ts, CMSG_DATA(cm), sizeof(ts));
            at = ts.tv_sec + ts.tv_nsec / 1e9;
        }
    }

    if (n <= 0) {
        /* closed with no answer: status 1 means "connection closed" */
        c->status = 1;
        c->at = at;
        return 1;
    }

    buf[n] = '\0';

    if (n < 12 || strncmp(buf, "HTTP/1.", 7) != 0) {
        c->status = 2;

    } else {
        c->status = atoi(buf + 9);
    }

    c->at = at;

    return 1;
}


static void
on_write(conn_t *c)
{
    ssize_t  n;

    while (c->sent < c->len) {
        if (c->pub && c->sent == 0) {
            pub_sent[c->id] = now();
        }

        n = write(c->fd, c->req + c->sent, c->len - c->sent);

        if (n == -1) {
            return;
        }

        c->sent += n;
    }
}


static int
cmp_double(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}


int
main(int argc, char **argv)
{
    int                  port, n, i, k, ep, left, npub, rc;
    char                *idbuf, *sub, *pub, *line, *ready;
    size_t               len, sublen, publen;
    double               deadline, *lat, t;
    conn_t              *conns, *c;
    struct rlimit        rl;
    struct epoll_event   ev, events[512];
    int                  counts[1000], early[1000], pcounts[1000];

    if (argc != 8) {
        fprintf(stderr, "usage: poll-fanout PORT N IDS SUB PUB READY "
                        "TIMEOUT\n");
        return 2;
    }

    port = atoi(argv[1]);
    n = atoi(argv[2]);
    ready = argv[6];
    deadline = now() + atof(argv[7]);

    rl.rlim_cur = rl.rlim_max = n + 4096;
    if (setrlimit(RLIMIT_NOFILE, &rl) == -1) {
        getrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < (rlim_t) n + 64) {
            fprintf(stderr, "poll-fanout: open files limit %lu < %d\n",
                    (unsigned long) rl.rlim_cur, n + 64);
            return 1;
        }
    }

    idbuf = slurp(argv[3], &len);
    ids = malloc(sizeof(char *) * (len / 2 + 1));
    nids = 0;

    for (line = strtok(idbuf, "\n"); line; line = strtok(NULL, "\n")) {
        ids[nids++] = line;
    }

    if (nids == 0) {
        fprintf(stderr, "poll-fanout: no ids\n");
        return 1;
    }

    sub = slurp(argv[4], &sublen);
    pub = slurp(argv[5], &publen);

    npub = nids < n ? nids : n;
    pub_sent = calloc(nids, sizeof(double));
    conns = calloc(n + npub, sizeof(conn_t));
    lat = calloc(n, sizeof(double));

    memset(counts, 0, sizeof(counts));
    memset(early, 0, sizeof(early));
    memset(pcounts, 0, sizeof(pcounts));

    ep = epoll_create1(0);

    /* the subscribers: connect and send, all of them */

    for (i = 0; i < n; i++) {
        c = &conns[i];
        c->id = i % nids;
        c->req = expand(sub, sublen, ids[c->id], &c->len);
        c->fd = open_conn(port);

        ev.events = EPOLLIN | EPOLLOUT;
        ev.data.ptr = c;
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    }

    left = n;
    rc = 1;

    while (rc) {
        /* until every request is written, and READY says they wait */

        k = epoll_wait(ep, events, 512, 100);

        for (i = 0; i < k; i++) {
            c = events[i].data.ptr;

            if ((events[i].events & EPOLLOUT) && c->sent < c->len) {
                on_write(c);

                if (c->sent == c->len) {
                    ev.events = EPOLLIN;
                    ev.data.ptr = c;
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                }
            }

            if ((events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                && c->status == 0 && on_read(c))
            {
                c->early = 1;
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                left--;
            }
        }

        for (i = 0; i < n && conns[i].sent == conns[i].len; i++) {
            /* void */
        }

        if (i == n && k == 0) {
            rc = system(ready);
        }

        if (now() > deadline) {
            fprintf(stderr, "poll-fanout: not ready in time\n");
            break;
        }
    }

    /* the publishers: connected first, then written in one burst */

    for (i = 0; i < npub; i++) {
        c = &conns[n + i];
        c->pub = 1;
        c->id = i;
        c->req = expand(pub, publen, ids[i], &c->len);
        c->fd = open_conn(port);
    }

    for (i = 0; i < npub; i++) {
        c = &conns[n + i];

        ev.events = EPOLLIN | EPOLLOUT;
        ev.data.ptr = c;
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    }

    left += npub;

    while (left > 0 && now() < deadline) {
        k = epoll_wait(ep, events, 512, 100);

        for (i = 0; i < k; i++) {
            c = events[i].data.ptr;

            if ((events[i].events & EPOLLOUT) && c->sent < c->len) {
                on_write(c);

                if (c->sent == c->len) {
                    ev.events = EPOLLIN;
                    ev.data.ptr = c;
                    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                }
            }

            if ((events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                && c->status == 0 && on_read(c))
            {
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                left--;
            }
        }
    }

    /* the figures */

    k = 0;

    for (i = 0; i < n; i++) {
        c = &conns[i];

        if (c->status == 0) {
            continue;
        }

        if (c->early) {
            early[c->status % 1000]++;
            continue;
        }

        counts[c->status % 1000]++;
        lat[k++] = (c->at - pub_sent[c->id]) * 1000;
    }

    for (i = 0; i < npub; i++) {
        pcounts[conns[n + i].status % 1000]++;
    }

    /* the publish requests' own answers: the upload's commit, say */

    for (i = 0, t = 0; i < npub; i++) {
        if (conns[n + i].status) {
            lat[i] = (conns[n + i].at - pub_sent[i]) * 1000;

        } else {
            lat[i] = 0;
        }
    }

    if (npub && npub <= n) {
        qsort(lat, npub, sizeof(double), cmp_double);
        printf("publish_p50_ms %.2f\n", lat[(npub - 1) / 2]);
        printf("publish_max_ms %.2f\n", lat[npub - 1]);
    }

    k = 0;

    for (i = 0; i < n; i++) {
        c = &conns[i];

        if (c->status == 0 || c->early) {
            continue;
        }

        lat[k++] = (c->at - pub_sent[c->id]) * 1000;
    }

    for (i = 0; i < 1000; i++) {
        if (counts[i]) {
            printf("status %d %d\n", i, counts[i]);
        }

        if (early[i]) {
            printf("early %d %d\n", i, early[i]);
        }

        if (pcounts[i]) {
            printf("publish %d %d\n", i, pcounts[i]);
        }
    }

    for (i = 0, t = 0; i < n; i++) {
        t += (conns[i].status == 0);
    }

    printf("unanswered %d\n", (int) t);

    if (k) {
        qsort(lat, k, sizeof(double), cmp_double);
        printf("p50_ms %.2f\n", lat[(k - 1) / 2]);
        printf("p99_ms %.2f\n", lat[(int) ((k - 1) * 0.99)]);
        printf("max_ms %.2f\n", lat[k - 1]);
    }

    return 0;
}
