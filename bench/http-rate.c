/*
 * An open-loop HTTP client for the fixed-rate runs of util/bench-db.sh:
 * the same kind of run as "pgbench -R RATE", so that the module and the
 * plain statement are timed, and their CPU time counted, at the same
 * load, below what the machine can do, instead of each at full speed
 * (where the p99 is the scheduler's).
 *
 *     http-rate [-m METHOD] [-b BODY] [-t TYPE] [-K KEYS] [-i] [-o]
 *               [-l LOG] PORT RATE SECONDS CONNECTIONS KEY PATHS
 *
 * CONNECTIONS kept-alive connections to 127.0.0.1:PORT; each has its own
 * schedule of requests, RATE / CONNECTIONS a second on average, the
 * gaps drawn from an exponential distribution (as pgbench does for each
 * of its clients).  A request whose time has come while its connection
 * still waits for the previous answer goes as soon as that answer is in,
 * and its latency counts from its scheduled time, so a stall is never
 * hidden (as in pgbench, whose latency under -R includes the lag).
 *
 * The path of each request is a line of the file PATHS, drawn at random
 * (-o: each line once, in order; running out is an error).  KEY goes in
 * "Authorization: Bearer" (-K: a line of the file KEYS, drawn at random
 * for each request; KEY is then ignored).  -m: the method (GET); -b: the
 * bytes of the file BODY as each request's body, with Content-Length;
 * -t: its Content-Type; -i: a new Idempotency-Key on each request.
 * -l: every answer's completion time (seconds since the epoch) and
 * latency (microseconds) written to LOG, one answer a line, in the
 * order of completion (what "pgbench -l" logs, for counting the answers
 * of a stretch of the run).
 *
 * Prints "<answers> <seconds> <p50 ms> <p99 ms> <non-2xx answers>
 * <answers/s>", the last the answers over the time from the start to the
 * last answer: below RATE when the server fell behind.  One thread,
 * epoll and a timerfd; loopback only; stops by itself.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>


#define BUF_SIZE   (1 << 20)


typedef struct {
    int      fd;
    int      busy;
    double   scheduled;     /* of the request in flight, or the next one */
    size_t   have;          /* bytes of the answer read so far */
    char    *buf;
    char    *req;           /* the request being written */
} conn_t;


typedef struct {
    char   **line;
    long     n;
} lines_t;


static lines_t       paths, keys;
static long          next_path;     /* -o: the next line of PATHS */
static int           once;
static int           idempotency;
static const char   *method = "GET";
static const char   *ctype;
static char         *body;
static size_t        body_len;
static size_t        req_size;
static long          sent;

static double       *latencies;
static double       *done_at;       /* CLOCK_REALTIME of each answer */
static long          nlat, maxlat;
static long          bad;


static double
now(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return ts.tv_sec + ts.tv_nsec / 1e9;
}


static double
gap(double rate)
{
    double  u;

    u = (random() + 1.0) / (RAND_MAX + 2.0);

    return -log(u) / rate;
}


static int
cmp(const void *a, const void *b)
{
    double  x = *(const double *) a, y = *(const double *) b;

    return (x > y) - (x < y);
}


/* the non-empty lines of a file, without their ends */
static int
load_lines(const char *file, lines_t *l)
{
    char    line[4096];
    long    cap;
    FILE   *f;
    size_t  n;

    f = fopen(file, "r");
    if (f == NULL) {
        perror(file);
        return -1;
    }

    cap = 0;

    while (fgets(line, sizeof(line), f) != NULL) {
        n = strcspn(line, "\r\n");
        if (n == 0) {
            continue;
        }
        line[n] = '\0';

        if (l->n == cap) {
            cap = cap ? cap * 2 : 1024;
            l->line = realloc(l->line, cap * sizeof(char *));
            if (l->line == NULL) {
                fclose(f);
                return -1;
            }
        }

        l->line[l->n] = strdup(line);
        if (l->line[l->n] == NULL) {
            fclose(f);
            return -1;
        }
        l->n++;
    }

    fclose(f);

    return l->n > 0 ? 0 : -1;
}


static int
load_body(const char *file)
{
    FILE  *f;
    long   n;

    f = fopen(file, "rb");
    if (f == NULL) {
        perror(file);
        return -1;
    }

    n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0) {
        rewind(f);
        body = malloc(n + 1);
        if (body == NULL || fread(body, 1, n, f) != (size_t) n) {
            n = -1;
        }
    }

    fclose(f);

    if (n < 0) {
        perror(file);
        return -1;
    }

    body_len = n;

    return 0;
}


static int
send_request(conn_t *c)
{
    int          n;
    char        *p;
    size_t       len, done;
    ssize_t      w;
    const char  *path, *key;

    if (once) {
        if (next_path == paths.n) {
            fprintf(stderr, "http-rate: out of paths after %ld (-o)\n",
                    next_path);
            return -1;
        }
        path = paths.line[next_path++];

    } else {
        path = paths.line[random() % paths.n];
    }

    key = keys.line[keys.n > 1 ? random() % keys.n : 0];
    sent++;

    p = c->req;
    n = snprintf(p, req_size, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 "Authorization: Bearer %s\r\n", method, path, key);

    if (ctype != NULL) {
        n += snprintf(p + n, req_size - n, "Content-Type: %s\r\n", ctype);
    }

    if (body != NULL) {
        n += snprintf(p + n, req_size - n, "Content-Length: %zu\r\n",
                      body_len);
    }

    if (idempotency) {
        n += snprintf(p + n, req_size - n,
                      "Idempotency-Key: rate-%ld-%ld\r\n",
                      (long) getpid(), sent);
    }

    n += snprintf(p + n, req_size - n, "\r\n");

    if ((size_t) n + body_len >= req_size) {
        fprintf(stderr, "http-rate: a request too long\n");
        return -1;
    }

    if (body != NULL) {
        memcpy(p + n, body, body_len);
    }

    len = n + body_len;
    done = 0;

    /* a request is far smaller than the socket's buffer: one write */
    while (done < len) {
        w = write(c->fd, p + done, len - done);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            perror("http-rate: write");
            return -1;
        }
        done += w;
    }

    c->busy = 1;
    c->have = 0;

    return 0;
}


/* 1: a whole answer is in buf (its status checked), 0: not yet, -1: error */
static int
answer_done(conn_t *c)
{
    char        *end, *cl;
    size_t       head;
    long         len;

    c->buf[c->have] = '\0';

    end = strstr(c->buf, "\r\n\r\n");
    if (end == NULL) {
        return 0;
    }

    head = end + 4 - c->buf;

    cl = strcasestr(c->buf, "\r\nContent-Length:");
    if (cl == NULL || cl > end) {
        fprintf(stderr, "http-rate: an answer without Content-Length\n");
        return -1;
    }

    len = strtol(cl + 17, NULL, 10);
    if (len < 0 || head + len >= BUF_SIZE) {
        fprintf(stderr, "http-rate: an answer too long\n");
        return -1;
    }

    if (c->have < head + (size_t) len) {
        return 0;
    }

    if (c->have > head + (size_t) len) {
        fprintf(stderr, "http-rate: bytes after an answer\n");
        return -1;
    }

    if (strncmp(c->buf, "HTTP/1.1 2", 10) != 0) {
        bad++;
    }

    return 1;
}


static int
arm(int tfd, conn_t *conns, int nconns)
{
    int                i;
    double             next, t;
    struct itimerspec  its;

    next = -1;
    for (i = 0; i < nconns; i++) {
        if (!conns[i].busy && (next < 0 || conns[i].scheduled < next)) {
            next = conns[i].scheduled;
        }
    }

    memset(&its, 0, sizeof(its));

    if (next >= 0) {
        t = next - now();
        if (t < 1e-6) {
            t = 1e-6;
        }
        its.it_value.tv_sec = (time_t) t;
        its.it_value.tv_nsec = (long) ((t - (time_t) t) * 1e9);
    }

    return timerfd_settime(tfd, 0, &its, NULL);
}


int
main(int argc, char **argv)
{
    int                  i, n, ep, tfd, nconns, port, one, rc, opt;
    long                 k;
    FILE                *log;
    double               rate, seconds, start, end, t, each, last, epoch;
    ssize_t              r;
    uint64_t             ticks;
    conn_t              *conns, *c;
    const char          *keys_file, *log_file;
    struct timespec      ts;
    struct sockaddr_in   sin;
    struct epoll_event   ev, events[256];

    keys_file = NULL;
    log_file = NULL;

    while ((opt = getopt(argc, argv, "m:b:t:K:iol:")) != -1) {
        switch (opt) {
        case 'm':
            method = optarg;
            break;
        case 'b':
            if (load_body(optarg) != 0) {
                return 2;
            }
            break;
        case 't':
            ctype = optarg;
            break;
        case 'K':
            keys_file = optarg;
            break;
        case 'i':
            idempotency = 1;
            break;
        case 'o':
            once = 1;
            break;
        case 'l':
            log_file = optarg;
            break;
        default:
            argc = 0;
        }
    }

    argv += optind;
    argc -= optind;

    if (argc != 6) {
        fprintf(stderr, "usage: http-rate [-m METHOD] [-b BODY] [-t TYPE] "
                        "[-K KEYS] [-i] [-o] [-l LOG] PORT RATE SECONDS "
                        "CONNECTIONS KEY PATHS\n");
        return 2;
    }

    port = atoi(argv[0]);
    rate = atof(argv[1]);
    seconds = atof(argv[2]);
    nconns = atoi(argv[3]);

    if (keys_file != NULL) {
        rc = load_lines(keys_file, &keys);

    } else {
        keys.line = &argv[4];
        keys.n = 1;
        rc = 0;
    }

    if (port <= 0 || rate <= 0 || seconds <= 0 || nconns <= 0
        || seconds > 600 || rc != 0 || load_lines(argv[5], &paths) != 0)
    {
        fprintf(stderr, "http-rate: bad arguments, no keys or no paths\n");
        return 2;
    }

    /* the longest request: the head's lines, the longest path and key */
    req_size = body_len + 1024;
    for (k = 0; k < paths.n; k++) {
        if (strlen(paths.line[k]) > req_size / 2) {
            req_size = 2 * strlen(paths.line[k]) + body_len + 1024;
        }
    }
    for (k = 0; k < keys.n; k++) {
        req_size += strlen(keys.line[k]) > 256 ? strlen(keys.line[k]) : 0;
    }

    srandom(getpid());

    maxlat = (long) (rate * seconds * 2) + 1000;
    latencies = malloc(maxlat * sizeof(double));
    done_at = malloc(maxlat * sizeof(double));
    conns = calloc(nconns, sizeof(conn_t));
    ep = epoll_create1(0);
    tfd = timerfd_create(CLOCK_MONOTONIC, 0);

    if (latencies == NULL || done_at == NULL || conns == NULL || ep < 0
        || tfd < 0)
    {
        perror("http-rate");
        return 1;
    }

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    each = rate / nconns;
    clock_gettime(CLOCK_REALTIME, &ts);
    start = now();
    epoch = ts.tv_sec + ts.tv_nsec / 1e9 - start;
    last = start;

    for (i = 0; i < nconns; i++) {
        c = &conns[i];
        c->buf = malloc(BUF_SIZE + 1);
        c->req = malloc(req_size);
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        one = 1;

        if (c->buf == NULL || c->req == NULL || c->fd < 0
            || connect(c->fd, (struct sockaddr *) &sin, sizeof(sin)) != 0
            || setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one,
                          sizeof(one)) != 0)
        {
            perror("http-rate: connect");
            return 1;
        }

        ev.events = EPOLLIN;
        ev.data.ptr = c;
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
            perror("http-rate: epoll_ctl");
            return 1;
        }

        c->scheduled = start + gap(each);
    }

    ev.events = EPOLLIN;
    ev.data.ptr = NULL;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev) != 0 || arm(tfd, conns, nconns))
    {
        perror("http-rate: timer");
        return 1;
    }

    end = start + seconds;

    for ( ;; ) {
        n = epoll_wait(ep, events, 256, 1000);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            perror("http-rate: epoll_wait");
            return 1;
        }

        t = now();

        for (i = 0; i < n; i++) {
            c = events[i].data.ptr;

            if (c == NULL) {
                r = read(tfd, &ticks, sizeof(ticks));
                (void) r;
                continue;
            }

            r = read(c->fd, c->buf + c->have, BUF_SIZE - c->have);
            if (r <= 0) {
                if (r < 0 && errno == EINTR) {
                    continue;
                }
                fprintf(stderr, "http-rate: the server closed a connection "
                                "(%s)\n", r < 0 ? strerror(errno) : "EOF");
                return 1;
            }

            c->have += r;

            rc = answer_done(c);
            if (rc < 0) {
                return 1;
            }

            if (rc == 1) {
                if (nlat < maxlat) {
                    done_at[nlat] = t + epoch;
                    latencies[nlat++] = t - c->scheduled;
                }
                last = t;
                c->busy = 0;
                c->scheduled += gap(each);
            }
        }

        /* every idle connection whose time has come sends */
        for (i = 0; i < nconns; i++) {
            c = &conns[i];
            if (!c->busy && c->scheduled <= t && c->scheduled < end) {
                if (send_request(c) != 0) {
                    return 1;
                }
            }
        }

        if (t >= end) {
            for (i = 0; i < nconns; i++) {
                if (conns[i].busy) {
                    break;
                }
            }
            if (i == nconns || t > end + 10) {
                break;
            }
        }

        if (arm(tfd, conns, nconns) != 0) {
            perror("http-rate: timerfd_settime");
            return 1;
        }
    }

    if (nlat == 0) {
        fprintf(stderr, "http-rate: no answers\n");
        return 1;
    }

    if (log_file != NULL) {
        log = fopen(log_file, "w");
        if (log == NULL) {
            perror(log_file);
            return 1;
        }

        for (k = 0; k < nlat; k++) {
            fprintf(log, "%.6f %.0f\n", done_at[k], latencies[k] * 1e6);
        }

        if (fclose(log) != 0) {
            perror(log_file);
            return 1;
        }
    }

    qsort(latencies, nlat, sizeof(double), cmp);

    k = (long) ceil(nlat * 0.99) - 1;

    printf("%ld %.3f %.3f %.3f %ld %.1f\n", nlat, now() - start,
           latencies[nlat / 2] * 1000, latencies[k] * 1000, bad,
           nlat / (last - start));

    return 0;
}
