/*
 * The load of make upgrade-test's reload and binary-upgrade run
 * (util/upgrade.sh).
 *
 *   upgrade-load PORT KEY IDS POLLS CONNS RATE SECONDS POLL_TIMEOUT
 *
 * Against 127.0.0.1:PORT with the API key KEY, for SECONDS seconds:
 *
 *   - POLLS long polls (?timeout=POLL_TIMEOUT) on the sessions of the file
 *     IDS (one id a line, round robin), each on a keep-alive connection
 *     of its own; a poll that is answered is sent again at once;
 *   - CONNS keep-alive connections that together send RATE requests a
 *     second, each in turn: a create, an upload into that session, the
 *     image's ack (the three with an Idempotency-Key of their own), a
 *     list.
 *
 * A request that meets a closed connection before any byte of its answer,
 * on a connection that has answered before (the race of every keep-alive
 * client with a server that closes an idle connection: a worker that
 * shuts down does), is sent again once on a new connection, as HTTP
 * clients do; it is safe here, the POSTs carry their Idempotency-Key.
 * Anything else is a failure: a connect refused, a connection closed on a
 * fresh connection or in the middle of an answer, a poll not answered
 * within POLL_TIMEOUT + 10 s (the client's own timeout), a status other
 * than the expected one.
 *
 * Then it stops sending, and waits for the polls and requests out (at most
 * POLL_TIMEOUT + 10 s).  Prints "key value" lines: answers by kind and
 * status ("poll 200 3012", "create 201 410"), "retried", "failed",
 * "client_timeouts", "unanswered"; a line a second on standard error.
 */

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>


enum { POLL, CREATE, UPLOAD, ACK, LIST, NKINDS };

static const char  *kind_name[NKINDS] = {
    "poll", "create", "upload", "ack", "list"
};

static const int    kind_want[NKINDS] = { 200, 201, 201, 200, 200 };


typedef struct {
    int      fd;
    int      poll;        /* a poll connection, else a request one */
    int      kind;        /* of the request out */
    int      busy;        /* a request is out */
    int      reused;      /* the connection has answered before */
    int      retried;     /* the request out was sent again once */
    int      close;       /* the answer said Connection: close */
    int      id;          /* POLL: the session's index */
    char     req[1024];
    size_t   len;
    size_t   sent;
    char     in[16384];
    size_t   inlen;
    double   sent_at;
    double   due;         /* requests: when the next may go */
    char     sid[40];
    char     iid[40];
} conn_t;


static int       port, ep, poll_timeout, running;
static char     *key;
static char    **ids;
static int       nids;
static long      seq;

static long      answers[NKINDS][600];
static long      retried, failed, client_timeouts, sent_total;

static const char  png[] = "\x89PNG\r\n\x1a\n0123456789abcdef";


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec + ts.tv_nsec / 1e9;
}


static void
fail(conn_t *c, const char *why)
{
    failed++;
    fprintf(stderr, "upgrade-load: %s %s: %s\n",
            c->poll ? "poll" : kind_name[c->kind], c->sid, why);
}


static void
conn_close(conn_t *c)
{
    if (c->fd != -1) {
        epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }

    c->reused = 0;
    c->close = 0;
    c->inlen = 0;
}


static int
conn_open(conn_t *c)
{
    int                 one;
    struct sockaddr_in  sin;
    struct epoll_event  ev;

    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c->fd == -1) {
        perror("socket");
        exit(1);
    }

    one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    if (connect(c->fd, (struct sockaddr *) &sin, sizeof(sin)) == -1
        && errno != EINPROGRESS)
    {
        close(c->fd);
        c->fd = -1;
        return -1;
    }

    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
    ev.data.ptr = c;
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);

    c->reused = 0;
    c->inlen = 0;

    return 0;
}


/* writes what is left of the request */
static int
conn_write(conn_t *c)
{
    ssize_t             n;
    struct epoll_event  ev;

    while (c->sent < c->len) {
        n = write(c->fd, c->req + c->sent, c->len - c->sent);

        if (n == -1) {
            return (errno == EAGAIN || errno == ENOTCONN) ? 0 : -1;
        }

        c->sent += n;
    }

    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.ptr = c;
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);

    return 0;
}


static void
send_req(conn_t *c)
{
    struct epoll_event  ev;

    if (c->fd == -1 && conn_open(c) == -1) {
        fail(c, "connect refused");
        c->busy = 0;
        c->due = now() + 0.1;
        return;
    }

    c->busy = 1;
    c->sent = 0;
    c->inlen = 0;
    c->sent_at = now();
    sent_total++;

    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
    ev.data.ptr = c;
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);

    if (conn_write(c) == -1) {
        /* handled as a close by the next read */
        c->sent = c->len;
    }
}


static void
build(conn_t *c)
{
    int          n, blen;
    const char  *ctype, *body;
    char         path[160];

    if (c->poll) {
        c->kind = POLL;
        n = snprintf(c->req, sizeof(c->req),
                     "GET /api/v1/sessions/%s/poll?timeout=%d HTTP/1.1\r\n"
                     "Host: localhost\r\nAuthorization: Bearer %s\r\n\r\n",
                     ids[c->id], poll_timeout, key);
        c->len = n;
        snprintf(c->sid, sizeof(c->sid), "%s", ids[c->id]);
        return;
    }

    if (c->kind == LIST) {
        n = snprintf(c->req, sizeof(c->req),
                     "GET /api/v1/sessions?limit=5 HTTP/1.1\r\n"
                     "Host: localhost\r\nAuthorization: Bearer %s\r\n\r\n",
                     key);
        c->len = n;
        return;
    }

    if (c->kind == CREATE) {
        snprintf(path, sizeof(path), "/api/v1/sessions");
        ctype = "application/json";
        body = "{\"delivery_mode\": \"long_poll\"}";
        blen = strlen(body);

    } else if (c->kind == UPLOAD) {
        snprintf(path, sizeof(path), "/api/v1/sessions/%s/images", c->sid);
        ctype = "image/png";
        body = png;
        blen = sizeof(png) - 1;

    } else {
        snprintf(path, sizeof(path), "/api/v1/sessions/%s/images/%s/ack",
                 c->sid, c->iid);
        ctype = "application/json";
        body = "";
        blen = 0;
    }

    n = snprintf(c->req, sizeof(c->req),
                 "POST %s HTTP/1.1\r\nHost: localhost\r\n"
                 "Authorization: Bearer %s\r\nContent-Type: %s\r\n"
                 "Idempotency-Key: ul-%d-%ld\r\nContent-Length: %d\r\n\r\n",
                 path, key, ctype, (int) getpid(), ++seq, blen);

    memcpy(c->req + n, body, blen);
    c->len = n + blen;
}


/* the "id" of a JSON answer (the first one: the resource's) */
static void
json_id(const char *body, char *out)
{
    const char  *p;

    p = strstr(body, "\"id\": \"");
    out[0] = '\0';

    if (p && strlen(p + 7) >= 36) {
        memcpy(out, p + 7, 36);
        out[36] = '\0';
    }
}


/* an answer is complete: count it, send what comes next */
static void
answered(conn_t *c, int status, const char *body)
{
    answers[c->kind][status < 600 ? status : 599]++;

    if (status != kind_want[c->kind]) {
        fail(c, "unexpected status");
    }

    c->busy = 0;
    c->retried = 0;
    c->reused = 1;

    if (c->close) {
        conn_close(c);
    }

    if (c->poll) {
        if (running) {
            build(c);
            send_req(c);
        }

        return;
    }

    /* create, upload, ack, list, and again */

    if (c->kind == CREATE && status == 201) {
        json_id(body, c->sid);
        c->kind = UPLOAD;

    } else if (c->kind == UPLOAD && status == 201) {
        json_id(body, c->iid);
        c->kind = ACK;

    } else if (c->kind == ACK || c->kind == UPLOAD) {
        c->kind = LIST;

    } else {
        c->kind = CREATE;
    }
}


/* the connection closed or broke with the request out */
static void
broken(conn_t *c)
{
    int  reused;

    reused = c->reused;
    conn_close(c);

    if (!c->busy) {
        return;
    }

    if (c->inlen == 0 && reused && !c->retried) {
        /* never read: sent again, once, on a new connection */
        retried++;
        c->retried = 1;
        sent_total--;
        send_req(c);
        return;
    }

    fail(c, c->inlen ? "closed in the middle of the answer"
                     : "closed before any answer");
    c->busy = 0;
    c->retried = 0;

    if (c->poll && running) {
        build(c);
        send_req(c);
    }
}


static void
on_read(conn_t *c)
{
    int       status;
    char     *end, *p;
    size_t    hlen, clen;
    ssize_t   n;

    for ( ;; ) {
        if (c->inlen == sizeof(c->in) - 1) {
            fail(c, "answer too large");
            conn_close(c);
            c->busy = 0;
            return;
        }

        n = read(c->fd, c->in + c->inlen, sizeof(c->in) - 1 - c->inlen);

        if (n == -1 && errno == EAGAIN) {
            return;
        }

        if (n <= 0) {
            broken(c);
            return;
        }

        c->inlen += n;
        c->in[c->inlen] = '\0';

        end = strstr(c->in, "\r\n\r\n");
        if (end == NULL) {
            continue;
        }

        hlen = end + 4 - c->in;
        clen = 0;

        /* the header lines after the status line */

        for (p = strstr(c->in, "\r\n"); p && p < end;
             p = strstr(p, "\r\n"))
        {
            p += 2;

            if (strncasecmp(p, "Content-Length:", 15) == 0) {
                clen = strtoul(p + 15, NULL, 10);

            } else if (strncasecmp(p, "Connection: close", 17) == 0) {
                c->close = 1;
            }
        }

        if (c->inlen < hlen + clen) {
            continue;
        }

        status = (c->inlen > 12 && strncmp(c->in, "HTTP/1.1 ", 9) == 0)
                 ? atoi(c->in + 9) : 0;

        /* one request at a time: nothing may follow the answer */
        c->inlen = 0;
        answered(c, status, end + 4);

        return;
    }
}


int
main(int argc, char **argv)
{
    int                  npolls, nconns, i, k, out, seconds;
    char                *buf, *line;
    long                 size;
    FILE                *f;
    double               rate, start, end, t, last, gap;
    conn_t              *conns, *c;
    struct rlimit        rl;
    struct epoll_event   events[512];

    if (argc != 9) {
        fprintf(stderr, "usage: upgrade-load PORT KEY IDS POLLS CONNS RATE "
                        "SECONDS POLL_TIMEOUT\n");
        return 2;
    }

    /* a write to a connection the server closed is handled, not fatal */
    signal(SIGPIPE, SIG_IGN);

    port = atoi(argv[1]);
    key = argv[2];
    npolls = atoi(argv[4]);
    nconns = atoi(argv[5]);
    rate = atof(argv[6]);
    seconds = atoi(argv[7]);
    poll_timeout = atoi(argv[8]);

    rl.rlim_cur = rl.rlim_max = npolls + nconns + 1024;
    if (setrlimit(RLIMIT_NOFILE, &rl) == -1) {
        perror("setrlimit");
        return 1;
    }

    f = fopen(argv[3], "r");
    if (f == NULL) {
        perror(argv[3]);
        return 1;
    }

    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = calloc(1, size + 1);
    if (fread(buf, 1, size, f) != (size_t) size) {
        perror(argv[3]);
        return 1;
    }
    fclose(f);

    ids = calloc(size / 2 + 1, sizeof(char *));
    for (line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        ids[nids++] = line;
    }

    if (nids == 0) {
        fprintf(stderr, "upgrade-load: no ids in %s\n", argv[3]);
        return 1;
    }

    ep = epoll_create1(0);
    conns = calloc(npolls + nconns, sizeof(conn_t));

    start = now();
    end = start + seconds;
    gap = nconns / rate;
    running = 1;

    for (i = 0; i < npolls + nconns; i++) {
        c = &conns[i];
        c->fd = -1;
        c->poll = (i < npolls);
        c->id = i % nids;
        c->kind = c->poll ? POLL : CREATE;
        c->due = start + gap * (i - npolls) / nconns;

        if (c->poll) {
            build(c);
            send_req(c);
        }
    }

    last = start;

    for ( ;; ) {
        t = now();

        if (running && t >= end) {
            running = 0;
            end = t + poll_timeout + 10;
        }

        /* requests that are due; everything past the client's timeout */

        out = 0;

        for (i = 0; i < npolls + nconns; i++) {
            c = &conns[i];

            if (!c->busy) {
                if (!c->poll && running && t >= c->due) {
                    c->due += gap;
                    if (c->due < t) {
                        c->due = t;
                    }

                    build(c);
                    send_req(c);
                }

                continue;
            }

            out++;

            if (t - c->sent_at > poll_timeout + 10) {
                client_timeouts++;
                fail(c, "no answer: the client's timeout");
                conn_close(c);
                c->busy = 0;

                if (c->poll && running) {
                    build(c);
                    send_req(c);
                }
            }
        }

        if (!running && out == 0) {
            break;
        }

        if (!running && t > end) {
            break;
        }

        if (t - last >= 1) {
            last = t;
            fprintf(stderr, "upgrade-load: %.0f s: out %d, polls answered "
                    "%ld, retried %ld, failed %ld\n", t - start, out,
                    answers[POLL][200], retried, failed);
        }

        k = epoll_wait(ep, events, 512, 10);

        for (i = 0; i < k; i++) {
            c = events[i].data.ptr;

            if (c->fd == -1) {
                continue;
            }

            if ((events[i].events & EPOLLOUT) && c->busy
                && c->sent < c->len && conn_write(c) == -1)
            {
                broken(c);
                continue;
            }

            if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP
                                    | EPOLLERR))
            {
                on_read(c);
            }
        }
    }

    /* the figures */

    for (k = 0; k < NKINDS; k++) {
        for (i = 0; i < 600; i++) {
            if (answers[k][i]) {
                printf("%s %d %ld\n", kind_name[k], i, answers[k][i]);
            }
        }
    }

    out = 0;
    for (i = 0; i < npolls + nconns; i++) {
        out += conns[i].busy;
    }

    printf("sent %ld\n", sent_total);
    printf("retried %ld\n", retried);
    printf("failed %ld\n", failed);
    printf("client_timeouts %ld\n", client_timeouts);
    printf("unanswered %d\n", out);

    return 0;
}
