/*
 * ngx_http_session_conninfo_check(): the values libpq refuses only when
 * it connects, against the ones it takes (checked by hand against libpq
 * 15's "invalid ... value" messages and a connect to a missing socket).
 */

#include <stddef.h>

#include "check_suites.h"
#include "ngx_http_session_conninfo.h"


typedef struct {
    const char  *keyword;
    const char  *value;
    int          ok;
} ngx_http_session_conninfo_vec_t;


static const ngx_http_session_conninfo_vec_t  conninfo_vecs[] = {

    /* words, compared as libpq compares them */
    { "sslmode", "disable", 1 },
    { "sslmode", "verify-full", 1 },
    { "sslmode", "Require", 0 },
    { "sslmode", "bogus", 0 },
    { "sslmode", "require ", 0 },
    { "gssencmode", "prefer", 1 },
    { "gssencmode", "Prefer", 0 },
    { "channel_binding", "require", 1 },
    { "channel_binding", "required", 0 },
    { "target_session_attrs", "prefer-standby", 1 },
    { "target_session_attrs", "read-write", 1 },
    { "target_session_attrs", "READ-WRITE", 0 },
    { "load_balance_hosts", "random", 1 },
    { "load_balance_hosts", "Random", 0 },
    { "sslcertmode", "allow", 1 },
    { "sslnegotiation", "direct", 1 },
    { "sslnegotiation", "tls", 0 },
    { "ssl_min_protocol_version", "tlsv1.2", 1 },
    { "ssl_max_protocol_version", "TLSv1.3", 1 },
    { "ssl_max_protocol_version", "TLSv1.9", 0 },

    /* integers */
    { "connect_timeout", "10", 1 },
    { "connect_timeout", " 5 ", 1 },
    { "connect_timeout", "-5", 1 },
    { "connect_timeout", "abc", 0 },
    { "connect_timeout", "5s", 0 },
    { "connect_timeout", " ", 0 },
    { "connect_timeout", "99999999999", 0 },
    { "keepalives", "1x", 0 },
    { "keepalives_count", "3", 1 },
    { "tcp_user_timeout", "0", 1 },

    /* ports: a list, each from 1 to 65535 */
    { "port", "5432", 1 },
    { "port", "5432,6432", 1 },
    { "port", "5432,,6432", 1 },
    { "port", " 5432", 1 },
    { "port", "0", 0 },
    { "port", "65536", 0 },
    { "port", "abc", 0 },
    { "port", "5432,x", 0 },
    { "port", "-1", 0 },

    /* numeric addresses, as getaddrinfo() with AI_NUMERICHOST */
    { "hostaddr", "10.0.0.5", 1 },
    { "hostaddr", "10.0.0.5,::1", 1 },
    { "hostaddr", "127.1", 1 },
    { "hostaddr", ",10.0.0.5", 1 },
    { "hostaddr", "fe80::1", 1 },
    { "hostaddr", "notanip", 0 },
    { "hostaddr", "db.example.com", 0 },
    { "hostaddr", "10.0.0.5,x", 0 },
    { "hostaddr", "10.0.0.256", 0 },
    { "hostaddr", "1111:2222:3333:4444:5555:6666:7777:8888:9999:aaaa:bbbb:"
                  "cccc:dddd:eeee:ffff:0000", 0 },

    /* the default, and keywords libpq does not check before connecting */
    { "sslmode", "", 1 },
    { "port", "", 1 },
    { "host", "anything at all", 1 },
    { "password", "sslmode=bogus", 1 },
    { "options", "-c statement_timeout=x", 1 },
};


START_TEST(test_conninfo_check)
{
    const char                             *got;
    const ngx_http_session_conninfo_vec_t  *v;

    v = &conninfo_vecs[_i];

    got = ngx_http_session_conninfo_check(v->keyword, v->value);

    ck_assert_msg((got == NULL) == v->ok,
                  "%s=\"%s\": expected %s, got %s", v->keyword, v->value,
                  v->ok ? "taken" : "refused", got ? got : "taken");
}
END_TEST


START_TEST(test_conninfo_null)
{
    ck_assert_ptr_null(ngx_http_session_conninfo_check("sslmode", NULL));
}
END_TEST


Suite *
make_conninfo_suite(void)
{
    TCase  *tc;
    Suite  *s;

    s = suite_create("conninfo");

    tc = tcase_create("values");
    tcase_add_loop_test(tc, test_conninfo_check, 0,
                        (int) (sizeof(conninfo_vecs)
                               / sizeof(conninfo_vecs[0])));
    tcase_add_test(tc, test_conninfo_null);
    suite_add_tcase(s, tc);

    return s;
}
