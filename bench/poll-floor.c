/*
 * The floor of the long-poll benchmark (util/bench-poll.sh):
 * the least a server can do to wake N waiting polls.  No HTTP server, no
 * database: it holds the connections that have sent a poll request and,
 * when a publish request for their id comes, writes to each one prepared
 * answer of the size of the module's, one write per socket.
 *
 *     poll-floor PORT WORKERS ANSWER_BYTES PIDFILE
 *
 * Listens on 127.0.0.1:PORT with WORKERS processes, each an epoll loop
 * with a listening socket of its own (SO_REUSEPORT: the kernel shares the
 * connections out evenly; with one socket for all, the first worker
 * back in epoll_wait takes nearly every connection of a burst, and the
 * floor would be one worker's),
 * writes the parent's pid to PIDFILE (the workers are its children) and
 * runs until SIGTERM or SIGINT.  What it reads, one request a
 * connection (the bytes of the client's requests; nothing else is
 * parsed):
 *
 *   GET .../sessions/ID/poll...  or  GET ...?id=ID    waits for ID
 *   POST .../sessions/ID/...     or  POST ...?id=ID   publishes to ID:
 *       the other workers are told through a pipe each, this one writes
 *       the answer to its own waiters of ID, then answers 201
 *   GET /status      "subscribers: N" (waiting polls of all workers),
 *                    then "worker I: N" for each
 *   anything else    204
 *
 * A request body (Content-Length) is read and dropped.  Every answer but
 * a poll's ends the connection after the client has read it; a poll's
 * connection is closed when the client closes it.  Loopback only.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>


#define FLOOR_MAX_WORKERS  64
#define FLOOR_BUF          4096
#define FLOOR_ID           64
#define FLOOR_BUCKETS      4096


typedef struct floor_conn_s  floor_conn_t;
typedef struct floor_chan_s  floor_chan_t;

struct floor_conn_s {
    int             fd;
    int             waiting;
    floor_conn_t   *next;        /* in its channel's list, while waiting */
    floor_conn_t   *prev;
    floor_chan_t   *chan;
    int             done;        /* its request has been read */
    char           *buf;         /* a request that came in pieces */
    size_t          have;
};

struct floor_chan_s {
    floor_chan_t   *next;        /* in its hash bucket */
    floor_conn_t   *waiters;
    char            id[FLOOR_ID];
};


static const char   *answer;
static size_t        answer_len;
static long         *waiting;    /* shared: the total, then each worker's */
static int           pipes[FLOOR_MAX_WORKERS][2];
static int           nworkers, me, ep;
static floor_chan_t *buckets[FLOOR_BUCKETS];
static pid_t         children[FLOOR_MAX_WORKERS];
static volatile sig_atomic_t  stop;

static const char  created[] = "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n"
                               "Connection: close\r\n\r\n";
static const char  no_content[] = "HTTP/1.1 204 No Content\r\n"
                                  "Connection: close\r\n\r\n";


static void
on_signal(int signo)
{
    (void) signo;
    stop = 1;
}


static floor_chan_t *
chan_get(const char *id, size_t len)
{
    size_t         i;
    uint32_t       h;
    floor_chan_t  *c;

    if (len >= FLOOR_ID) {
        len = FLOOR_ID - 1;
    }

    h = 5381;
    for (i = 0; i < len; i++) {
        h = h * 33 + (unsigned char) id[i];
    }
    h %= FLOOR_BUCKETS;

    for (c = buckets[h]; c; c = c->next) {
        if (strlen(c->id) == len && memcmp(c->id, id, len) == 0) {
            return c;
        }
    }

    c = calloc(1, sizeof(floor_chan_t));
    if (c == NULL) {
        perror("poll-floor: calloc");
        exit(1);
    }

    memcpy(c->id, id, len);
    c->next = buckets[h];
    buckets[h] = c;

    return c;
}


static void
conn_close(floor_conn_t *c)
{
    if (c->waiting) {
        if (c->prev) {
            c->prev->next = c->next;

        } else {
            c->chan->waiters = c->next;
        }

        if (c->next) {
            c->next->prev = c->prev;
        }

        __atomic_sub_fetch(&waiting[0], 1, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&waiting[1 + me], 1, __ATOMIC_RELAXED);
    }

    close(c->fd);
    free(c->buf);
    free(c);
}


/* what is left of a short answer is not worth an event loop: blocking */
static void
write_all(int fd, const char *p, size_t len)
{
    int      flags;
    ssize_t  n;

    n = write(fd, p, len);

    if (n == (ssize_t) len) {
        return;
    }

    flags = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);

    if (n < 0) {
        n = 0;
    }

    while ((size_t) n < len) {
        ssize_t  w = write(fd, p + n, len - n);
        if (w <= 0) {
            if (w < 0 && errno == EINTR) {
                continue;
            }
            break;
        }
        n += w;
    }

    fcntl(fd, F_SETFL, flags);
}


/* the answer to each waiter of the channel, one write a socket */
static void
wake(floor_chan_t *ch)
{
    floor_conn_t  *c, *next;

    for (c = ch->waiters; c; c = next) {
        next = c->next;

        write_all(c->fd, answer, answer_len);

        /* answered: no longer waiting; closed when the client closes */
        c->waiting = 0;
        c->next = NULL;
        c->prev = NULL;
        __atomic_sub_fetch(&waiting[0], 1, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&waiting[1 + me], 1, __ATOMIC_RELAXED);
    }

    ch->waiters = NULL;
}


/* the id of a request: "/sessions/ID/" in its path, or "id=ID" */
static int
request_id(const char *req, const char **id, size_t *len)
{
    const char  *p, *e, *end;

    end = strstr(req, " HTTP/");
    if (end == NULL) {
        return -1;
    }

    p = strstr(req, "/sessions/");
    if (p != NULL && p < end) {
        p += sizeof("/sessions/") - 1;
        for (e = p; e < end && *e != '/' && *e != '?'; e++) {
            /* void */
        }

    } else {
        p = strstr(req, "id=");
        if (p == NULL || p > end) {
            return -1;
        }
        p += 3;
        for (e = p; e < end && *e != '&'; e++) {
            /* void */
        }
    }

    *id = p;
    *len = e - p;

    return *len > 0 ? 0 : -1;
}


static void
publish(const char *id, size_t len)
{
    int            i;
    char           msg[FLOOR_ID + 1];
    floor_chan_t  *ch;

    if (len >= FLOOR_ID) {
        len = FLOOR_ID - 1;
    }

    memcpy(msg, id, len);
    msg[len] = '\n';

    /* the other workers first, then this one's own waiters */
    for (i = 0; i < nworkers; i++) {
        if (i != me) {
            write_all(pipes[i][1], msg, len + 1);
        }
    }

    ch = chan_get(id, len);
    wake(ch);
}


/* a whole request in buf: 1 done with it, 0 wait for more, -1 bad */
static int
on_request(floor_conn_t *c, char *buf)
{
    int           i, n, m;
    char         *end, *cl, text[64 + 32 * FLOOR_MAX_WORKERS];
    char          out[256 + sizeof(text)];
    long          body;
    size_t        head, len;
    const char   *id;

    buf[c->have] = '\0';

    end = strstr(buf, "\r\n\r\n");
    if (end == NULL) {
        return c->have < FLOOR_BUF - 1 ? 0 : -1;
    }

    head = end + 4 - buf;
    body = 0;

    cl = strcasestr(buf, "\r\nContent-Length:");
    if (cl != NULL && cl < end) {
        body = strtol(cl + sizeof("\r\nContent-Length:") - 1, NULL, 10);
    }

    if (c->have < head + body) {
        return c->have < FLOOR_BUF - 1 ? 0 : -1;
    }

    if (strncmp(buf, "GET /status ", 12) == 0) {
        n = snprintf(text, sizeof(text), "subscribers: %ld\n",
                     __atomic_load_n(&waiting[0], __ATOMIC_RELAXED));
        for (i = 0; i < nworkers; i++) {
            n += snprintf(text + n, sizeof(text) - n, "worker %d: %ld\n", i,
                          __atomic_load_n(&waiting[1 + i], __ATOMIC_RELAXED));
        }
        m = snprintf(out, sizeof(out),
                     "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                     "Content-Length: %d\r\nConnection: close\r\n\r\n%s",
                     n, text);
        write_all(c->fd, out, m);
        return 1;
    }

    if (strncmp(buf, "GET ", 4) == 0
        && request_id(buf, &id, &len) == 0)
    {
        c->chan = chan_get(id, len);
        c->waiting = 1;
        c->prev = NULL;
        c->next = c->chan->waiters;
        if (c->next) {
            c->next->prev = c;
        }
        c->chan->waiters = c;
        __atomic_add_fetch(&waiting[0], 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&waiting[1 + me], 1, __ATOMIC_RELAXED);
        return 1;
    }

    if (strncmp(buf, "POST ", 5) == 0
        && request_id(buf, &id, &len) == 0)
    {
        publish(id, len);
        write_all(c->fd, created, sizeof(created) - 1);
        return 1;
    }

    write_all(c->fd, no_content, sizeof(no_content) - 1);

    return 1;
}


/*
 * A request is read into the worker's buffer, and only one that comes in
 * pieces gets a buffer of its own until it is whole: a waiting
 * connection holds no buffer.
 */
static void
on_read(floor_conn_t *c)
{
    int            rc;
    char          *buf;
    ssize_t        n;
    static char    scratch[FLOOR_BUF];

    if (c->done) {
        /* answered or waiting: the client closes, or sends more */
        n = read(c->fd, scratch, sizeof(scratch));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            conn_close(c);
        }
        return;
    }

    for ( ;; ) {
        buf = c->buf ? c->buf : scratch;

        n = read(c->fd, buf + c->have, FLOOR_BUF - 1 - c->have);

        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            break;
        }

        if (n <= 0) {
            conn_close(c);
            return;
        }

        c->have += n;

        rc = on_request(c, buf);

        if (rc < 0) {
            conn_close(c);
            return;
        }

        if (rc == 1) {
            /* one request a connection */
            c->done = 1;
            free(c->buf);
            c->buf = NULL;
            return;
        }
    }

    /* a part of a request: kept until the rest comes */
    if (c->buf == NULL && c->have > 0) {
        c->buf = malloc(FLOOR_BUF);
        if (c->buf == NULL) {
            perror("poll-floor: malloc");
            exit(1);
        }
        memcpy(c->buf, scratch, c->have);
    }
}


static void
on_accept(int lfd)
{
    int                  fd;
    floor_conn_t        *c;
    struct epoll_event   ev;

    for ( ;; ) {
        fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
        if (fd < 0) {
            return;
        }

        c = calloc(1, sizeof(floor_conn_t));
        if (c == NULL) {
            perror("poll-floor: calloc");
            exit(1);
        }

        c->fd = fd;

        ev.events = EPOLLIN | EPOLLRDHUP;
        ev.data.ptr = c;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            perror("poll-floor: epoll_ctl");
            exit(1);
        }
    }
}


static void
on_pipe(void)
{
    static char    buf[65536];
    static size_t  have;
    char          *p, *nl;
    ssize_t        n;

    for ( ;; ) {
        n = read(pipes[me][0], buf + have, sizeof(buf) - have);
        if (n <= 0) {
            return;
        }

        have += n;
        p = buf;

        while ((nl = memchr(p, '\n', buf + have - p)) != NULL) {
            wake(chan_get(p, nl - p));
            p = nl + 1;
        }

        have -= p - buf;
        memmove(buf, p, have);
    }
}


static void
worker(int lfd)
{
    int                  i, n;
    floor_conn_t         lconn, pconn;
    struct epoll_event   ev, events[512];

    ep = epoll_create1(0);
    if (ep < 0) {
        perror("poll-floor: epoll_create1");
        exit(1);
    }

    memset(&lconn, 0, sizeof(lconn));
    lconn.fd = lfd;
    ev.events = EPOLLIN;
    ev.data.ptr = &lconn;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) != 0) {
        perror("poll-floor: epoll_ctl");
        exit(1);
    }

    memset(&pconn, 0, sizeof(pconn));
    pconn.fd = pipes[me][0];
    ev.events = EPOLLIN;
    ev.data.ptr = &pconn;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, pipes[me][0], &ev) != 0) {
        perror("poll-floor: epoll_ctl");
        exit(1);
    }

    while (!stop) {
        n = epoll_wait(ep, events, 512, 1000);

        for (i = 0; i < n; i++) {
            if (events[i].data.ptr == &lconn) {
                on_accept(lfd);

            } else if (events[i].data.ptr == &pconn) {
                on_pipe();

            } else {
                on_read(events[i].data.ptr);
            }
        }
    }

    exit(0);
}


int
main(int argc, char **argv)
{
    int                  i, one, port, size, hlen;
    int                  lfds[FLOOR_MAX_WORKERS];
    char                *buf;
    FILE                *f;
    pid_t                pid;
    struct rlimit        rl;
    struct sigaction     sa;
    struct sockaddr_in   sin;

    if (argc != 5) {
        fprintf(stderr, "usage: poll-floor PORT WORKERS ANSWER_BYTES "
                        "PIDFILE\n");
        return 2;
    }

    port = atoi(argv[1]);
    nworkers = atoi(argv[2]);
    size = atoi(argv[3]);

    if (port <= 0 || nworkers <= 0 || nworkers > FLOOR_MAX_WORKERS
        || size <= 0 || size > 1 << 20)
    {
        fprintf(stderr, "poll-floor: bad arguments\n");
        return 2;
    }

    /* the answer: a JSON body padded so that the whole is ANSWER_BYTES */
    buf = malloc(size + 256);
    if (buf == NULL) {
        return 1;
    }

    /* the header's length depends on the digits of the body's */
    hlen = 0;
    for (i = 0; i < 3; i++) {
        hlen = snprintf(buf, 256, "HTTP/1.1 200 OK\r\n"
                        "Content-Type: application/json\r\n"
                        "Content-Length: %d\r\n\r\n",
                        size - hlen > 2 ? size - hlen : 2);
    }

    if (size < hlen + 2) {
        size = hlen + 2;
    }

    buf[hlen] = '{';
    memset(buf + hlen + 1, ' ', size - hlen - 2);
    buf[size - 1] = '}';
    answer = buf;
    answer_len = size;

    rl.rlim_cur = rl.rlim_max = 65536;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        getrlimit(RLIMIT_NOFILE, &rl);
    }

    waiting = mmap(NULL, (1 + FLOOR_MAX_WORKERS) * sizeof(long),
                   PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (waiting == MAP_FAILED) {
        perror("poll-floor: mmap");
        return 1;
    }

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    for (i = 0; i < nworkers; i++) {
        lfds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        one = 1;

        if (lfds[i] < 0
            || setsockopt(lfds[i], SOL_SOCKET, SO_REUSEADDR, &one,
                          sizeof(one)) != 0
            || setsockopt(lfds[i], SOL_SOCKET, SO_REUSEPORT, &one,
                          sizeof(one)) != 0
            || bind(lfds[i], (struct sockaddr *) &sin, sizeof(sin)) != 0
            || listen(lfds[i], 16384) != 0)
        {
            perror("poll-floor: listen");
            return 1;
        }
    }

    for (i = 0; i < nworkers; i++) {
        if (pipe2(pipes[i], O_NONBLOCK) != 0) {
            perror("poll-floor: pipe2");
            return 1;
        }
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    for (i = 0; i < nworkers; i++) {
        pid = fork();
        if (pid < 0) {
            perror("poll-floor: fork");
            return 1;
        }

        if (pid == 0) {
            me = i;
            worker(lfds[i]);
        }

        children[i] = pid;
    }

    f = fopen(argv[4], "w");
    if (f == NULL || fprintf(f, "%ld\n", (long) getpid()) < 0
        || fclose(f) != 0)
    {
        perror(argv[4]);
        stop = 1;
    }

    while (!stop) {
        pause();
    }

    for (i = 0; i < nworkers; i++) {
        kill(children[i], SIGTERM);
    }

    for (i = 0; i < nworkers; i++) {
        waitpid(children[i], NULL, 0);
    }

    unlink(argv[4]);

    return 0;
}
