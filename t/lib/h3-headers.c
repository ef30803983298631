/*
 * A preload for ngtcp2's example HTTP/3 client (gtlsclient, Debian's
 * ngtcp2-client), which sends no request header of its caller: every
 * request it submits gets the headers of the environment's H3_HEADERS
 * too, lines of "name: value" (names lower-cased, as HTTP/3 wants them).
 * Used by t/lib/Transport.pm and util/bench-poll-proto.sh:
 *
 *     cc -shared -fPIC -o h3-headers.so t/lib/h3-headers.c -ldl
 *     H3_HEADERS="authorization: Bearer KEY" \
 *         LD_PRELOAD=./h3-headers.so gtlsclient -q 127.0.0.1 8443 URI
 */

#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <nghttp3/nghttp3.h>


#define H3_HEADERS_MAX  16
#define H3_FIELDS_MAX   64


typedef int (*h3_submit_pt)(nghttp3_conn *conn, int64_t stream_id,
    const nghttp3_nv *nva, size_t nvlen, const nghttp3_data_reader *dr,
    void *stream_user_data);


static nghttp3_nv  h3_extra[H3_HEADERS_MAX];
static size_t      h3_nextra;


/* H3_HEADERS into h3_extra, once (its strings stay for the process) */

static void
h3_headers_parse(void)
{
    char    *s, *line, *colon, *value, *save;
    size_t   i;

    s = getenv("H3_HEADERS");
    if (s == NULL || (s = strdup(s)) == NULL) {
        return;
    }

    for (line = strtok_r(s, "\n", &save);
         line != NULL && h3_nextra < H3_HEADERS_MAX;
         line = strtok_r(NULL, "\n", &save))
    {
        colon = strchr(line, ':');
        if (colon == NULL || colon == line) {
            continue;
        }

        *colon = '\0';

        for (i = 0; line[i]; i++) {
            line[i] = (char) tolower((unsigned char) line[i]);
        }

        for (value = colon + 1; *value == ' '; value++) { /* void */ }

        h3_extra[h3_nextra].name = (uint8_t *) line;
        h3_extra[h3_nextra].namelen = strlen(line);
        h3_extra[h3_nextra].value = (uint8_t *) value;
        h3_extra[h3_nextra].valuelen = strlen(value);
        h3_extra[h3_nextra].flags = NGHTTP3_NV_FLAG_NONE;
        h3_nextra++;
    }
}


int
nghttp3_conn_submit_request(nghttp3_conn *conn, int64_t stream_id,
    const nghttp3_nv *nva, size_t nvlen, const nghttp3_data_reader *dr,
    void *stream_user_data)
{
    size_t               n, i;
    nghttp3_nv           nv[H3_FIELDS_MAX];
    static int           parsed;
    static h3_submit_pt  next;

    if (next == NULL) {
        next = (h3_submit_pt) dlsym(RTLD_NEXT, "nghttp3_conn_submit_request");
        if (next == NULL) {
            return NGHTTP3_ERR_NOMEM;
        }
    }

    if (!parsed) {
        h3_headers_parse();
        parsed = 1;
    }

    if (nvlen + h3_nextra > H3_FIELDS_MAX) {
        return next(conn, stream_id, nva, nvlen, dr, stream_user_data);
    }

    n = 0;

    for (i = 0; i < nvlen; i++) {
        nv[n++] = nva[i];
    }

    for (i = 0; i < h3_nextra; i++) {
        nv[n++] = h3_extra[i];
    }

    return next(conn, stream_id, nv, n, dr, stream_user_data);
}
