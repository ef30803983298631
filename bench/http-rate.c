/*
 * An open-loop HTTP client for the latency runs of util/bench-db.sh: the
 * same kind of run as "pgbench -R RATE", so that the module and the
 * plain statement are timed at the same load, below what the machine can
 * do, instead of each at full speed (where the p99 is the scheduler's).
 *
 *     http-rate PORT RATE SECONDS CONNECTIONS KEY PATHS
 *
 * CONNECTIONS kept-alive connections to 127.0.0.1:PORT; each has its own
 * schedule of GET requests, RATE / CONNECTIONS a second on average, the
 * gaps drawn from an exponential distribution (as pgbench does for each
 * of its clients).  A request whose time has come while its connection
 * still waits for the previous answer goes as soon as that answer is in,
 * and its latency counts from its scheduled time, so a stall is never
 * hidden (as in pgbench, whose latency under -R includes the lag).  The
 * path of each request is a line of the file PATHS, drawn at random;
 * KEY goes in "Authorization: Bearer".
 *
 * Prints "<answers> <seconds> <p50 ms> <p99 ms> <non-200 answers>".
 * One thread, epoll and a timerfd; loopback only; stops by itself.
 */

#define _GNU_SOURCE

#include <errno.h>
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


#define MAX_PATHS  100000
#define BUF_SIZE   (1 << 20)


typedef struct {
    int      fd;
    int      busy;
    double   scheduled;     /* of the request in flight, or the next one */
    size_t   have;          /* bytes of the answer read so far */
    char    *buf;
} conn_t;


static char   **requests;
static size_t  *request_lens;
static int      nrequests;

static double  *latencies;
static long     nlat, maxlat;
static long     bad;


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


static int
load_paths(const char *file, const char *key)
{
    char    line[4096];
    FILE   *f;
    size_t  n;

    f = fopen(file, "r");
    if (f == NULL) {
        perror(file);
        return -1;
    }

    requests = calloc(MAX_PATHS, sizeof(char *));
    request_lens = calloc(MAX_PATHS, sizeof(size_t));
    if (requests == NULL || request_lens == NULL) {
        return -1;
    }

    while (nrequests < MAX_PATHS && fgets(line, sizeof(line), f) != NULL) {
        n = strcspn(line, "\r\n");
        if (n == 0) {
            continue;
        }
        line[n] = '\0';

        requests[nrequests] = malloc(n + strlen(key) + 128);
        if (requests[nrequests] == NULL) {
            return -1;
        }

        request_lens[nrequests] = sprintf(requests[nrequests],
            "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Authorization: Bearer %s\r\n\r\n", line, key);
        nrequests++;
    }

    fclose(f);

    return nrequests > 0 ? 0 : -1;
}


static int
send_request(conn_t *c)
{
    int      i;
    ssize_t  n;
    size_t   done;

    i = random() % nrequests;
    done = 0;

    /* a request is far smaller than the socket's buffer: one write */
    while (done < request_lens[i]) {
        n = write(c->fd, requests[i] + done, request_lens[i] - done);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            perror("http-rate: write");
            return -1;
        }
        done += n;
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

    if (strncmp(c->buf, "HTTP/1.1 200 ", 13) != 0) {
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
    int                  i, n, ep, tfd, nconns, port, one, rc;
    long                 k;
    double               rate, seconds, start, end, t, each;
    ssize_t              r;
    uint64_t             ticks;
    conn_t              *conns, *c;
    struct sockaddr_in   sin;
    struct epoll_event   ev, events[256];

    if (argc != 7) {
        fprintf(stderr, "usage: http-rate PORT RATE SECONDS CONNECTIONS "
                        "KEY PATHS\n");
        return 2;
    }

    port = atoi(argv[1]);
    rate = atof(argv[2]);
    seconds = atof(argv[3]);
    nconns = atoi(argv[4]);

    if (port <= 0 || rate <= 0 || seconds <= 0 || nconns <= 0
        || seconds > 600 || load_paths(argv[6], argv[5]) != 0)
    {
        fprintf(stderr, "http-rate: bad arguments or no paths\n");
        return 2;
    }

    srandom(getpid());

    maxlat = (long) (rate * seconds * 2) + 1000;
    latencies = malloc(maxlat * sizeof(double));
    conns = calloc(nconns, sizeof(conn_t));
    ep = epoll_create1(0);
    tfd = timerfd_create(CLOCK_MONOTONIC, 0);

    if (latencies == NULL || conns == NULL || ep < 0 || tfd < 0) {
        perror("http-rate");
        return 1;
    }

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    each = rate / nconns;
    start = now();

    for (i = 0; i < nconns; i++) {
        c = &conns[i];
        c->buf = malloc(BUF_SIZE + 1);
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        one = 1;

        if (c->buf == NULL || c->fd < 0
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
                    latencies[nlat++] = t - c->scheduled;
                }
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

    qsort(latencies, nlat, sizeof(double), cmp);

    k = (long) ceil(nlat * 0.99) - 1;

    printf("%ld %.3f %.3f %.3f %ld\n", nlat, now() - start,
           latencies[nlat / 2] * 1000, latencies[k] * 1000, bad);

    return 0;
}
