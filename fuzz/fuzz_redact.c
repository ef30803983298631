/*
 * libFuzzer: the redaction of error-log lines
 * (ngx_http_session_key_redact), which sees whatever a client sent.
 * Afterwards no "sess_" is followed by a hex digit, and only hex digits
 * were changed, each to '*'.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ngx_http_session_key.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


static int
ngx_http_session_fuzz_hex(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
           || (c >= 'A' && c <= 'F');
}


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t          i;
    unsigned char  *buf;

    buf = malloc(size ? size : 1);
    if (buf == NULL) {
        return 0;
    }

    memcpy(buf, data, size);

    (void) ngx_http_session_key_redact(buf, size,
                                       (const unsigned char *) "sess");

    for (i = 0; i < size; i++) {
        if (buf[i] != data[i]
            && !(buf[i] == '*' && ngx_http_session_fuzz_hex(data[i])))
        {
            abort();
        }
    }

    for (i = 0; i + 5 < size; i++) {
        if ((buf[i] | 0x20) == 's' && (buf[i + 1] | 0x20) == 'e'
            && (buf[i + 2] | 0x20) == 's' && (buf[i + 3] | 0x20) == 's'
            && buf[i + 4] == '_' && ngx_http_session_fuzz_hex(buf[i + 5]))
        {
            abort();
        }
    }

    free(buf);

    return 0;
}
