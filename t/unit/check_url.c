/*
 * src/core/ngx_http_session_url.{c,h}: the webhook_url rules of docs/api.md
 * section 5 and the private addresses of section 10.
 *
 * URLs are given with an explicit length and copied to a heap buffer of
 * exactly that many bytes (jansson strings are NUL-terminated, but the
 * delivery code may hand over a slice): under valgrind or
 * -fsanitize=address a read past the end is reported.
 */

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "check_suites.h"
#include "ngx_http_session_url.h"
#include "ngx_http_session_escape.h"


#define U(s)     ((const unsigned char *) (s))
/* a literal and its length without the terminating NUL */
#define S(s)     U(s), (sizeof(s) - 1)

#define OK       NGX_HTTP_SESSION_URL_OK
#define INVALID  NGX_HTTP_SESSION_URL_INVALID
#define PRIVATE  NGX_HTTP_SESSION_URL_PRIVATE

#define L10      "abcdefghij"
#define L60      L10 L10 L10 L10 L10 L10
/* labels of 63 and 64 bytes */
#define L63      L60 "abc"
#define L64      L60 "abcd"


typedef struct {
    const unsigned char  *url;
    size_t                len;
    /* the result without session_webhook_allow_private */
    int                   rc;
} ngx_http_session_url_vec_t;


typedef struct {
    const char           *url;
    int                   host_type;
    const char           *host;
    const char           *authority;
    unsigned              port;
    const char           *path;
    int                   https;
} ngx_http_session_parts_vec_t;


typedef struct {
    int                   family;
    const char           *addr;
    int                   private;
} ngx_http_session_addr_vec_t;


static const ngx_http_session_url_vec_t  url_vecs[] = {

    /* valid and public */
    { S("http://example.com"), OK },
    { S("https://example.com/"), OK },
    { S("HTTP://example.com/hook"), OK },
    { S("HtTpS://Example.COM/hook?x=1&y=2"), OK },
    { S("https://example.com:8443/a/b?c"), OK },
    { S("https://example.com:1/"), OK },
    { S("https://example.com:65535/"), OK },
    { S("https://example.com:00080/"), OK },
    { S("http://example.com./"), OK },
    { S("http://a/"), OK },
    { S("http://intranet:8080"), OK },
    { S("http://xn--bcher-kva.example/"), OK },
    { S("http://a-b.c--d.example/"), OK },
    { S("http://1a.example/"), OK },
    { S("http://example.123a/"), OK },
    { S("http://123.example.com/"), OK },
    { S("http://0x7f.example.com/"), OK },
    { S("http://example.0xg/"), OK },
    { S("http://example.com?x"), OK },
    { S("http://example.com?"), OK },
    { S("http://example.com/"), OK },
    { S("https://example.com/~user/%20x?a=b;c=d&e=[f]"), OK },
    { S("http://example.com/a:b@c"), OK },
    { S("http://example.com/?u=user@host"), OK },
    { S("http://example.com/a\\b"), OK },
    { S("http://" L63 ".example/"), OK },
    { S("http://localhost.example.com/"), OK },
    { S("http://notlocalhost/"), OK },
    { S("http://localhostx/"), OK },
    { S("http://localhost-/"), INVALID },
    { S("http://x-localhost/"), OK },
    { S("http://localhost.com./"), OK },

    /* public IPv4 literals, the neighbours of every private range */
    { S("http://8.8.8.8/"), OK },
    { S("http://1.1.1.1:53/"), OK },
    { S("http://1.0.0.0/"), OK },
    { S("http://9.255.255.255/"), OK },
    { S("http://11.0.0.0/"), OK },
    { S("http://100.63.255.255/"), OK },
    { S("http://100.128.0.0/"), OK },
    { S("http://126.255.255.255/"), OK },
    { S("http://128.0.0.0/"), OK },
    { S("http://169.253.255.255/"), OK },
    { S("http://169.255.0.0/"), OK },
    { S("http://172.15.255.255/"), OK },
    { S("http://172.32.0.0/"), OK },
    { S("http://191.255.255.255/"), OK },
    { S("http://192.0.1.0/"), OK },
    { S("http://192.0.3.0/"), OK },
    { S("http://192.1.0.0/"), OK },
    { S("http://192.167.255.255/"), OK },
    { S("http://192.169.0.0/"), OK },
    { S("http://198.17.255.255/"), OK },
    { S("http://198.20.0.0/"), OK },
    { S("http://198.51.99.255/"), OK },
    { S("http://198.51.101.0/"), OK },
    { S("http://203.0.112.255/"), OK },
    { S("http://203.0.114.0/"), OK },
    { S("http://223.255.255.255/"), OK },

    /* public IPv6 literals */
    { S("http://[2606:4700:4700::1111]/"), OK },
    { S("https://[2606:4700:4700::1111]:443/x"), OK },
    { S("http://[2a00:1450:4001:80e::200e]"), OK },
    { S("http://[::1:0:0:2]/"), OK },
    { S("http://[fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]/"), OK },
    { S("http://[fe00::1]/"), OK },
    { S("http://[fe7f:ffff::1]/"), OK },
    { S("http://[2001:db7:ffff::1]/"), OK },
    { S("http://[2001:db9::1]/"), OK },
    { S("http://[::ffff:8.8.8.8]/"), OK },
    { S("http://[::ffff:808:808]/"), OK },
    { S("http://[::fffe:7f00:1]/"), OK },
    { S("http://[0:0:0:0:0:1:ffff:7f00:1]/"), INVALID },
    { S("http://[1::ffff:7f00:1]/"), OK },

    /* not an absolute http or https URL */
    { S(""), INVALID },
    { U("http://example.com/"), 0, INVALID },
    { S("example.com"), INVALID },
    { S("/hook"), INVALID },
    { S("//example.com/"), INVALID },
    { S("ftp://example.com/"), INVALID },
    { S("file:///etc/passwd"), INVALID },
    { S("ws://example.com/"), INVALID },
    { S("httpx://example.com/"), INVALID },
    { S("https+unix://example.com/"), INVALID },
    { S("http:/example.com/"), INVALID },
    { S("http:example.com/"), INVALID },
    { S("http//example.com/"), INVALID },
    { S("http:\\\\example.com/"), INVALID },
    { S("http:/\\example.com/"), INVALID },
    { S("javascript:alert(1)"), INVALID },
    { S("http"), INVALID },
    { S("http:"), INVALID },
    { S("http:/"), INVALID },

    /* no host */
    { S("http://"), INVALID },
    { S("https://"), INVALID },
    { S("http:///hook"), INVALID },
    { S("http://?x"), INVALID },
    { S("http://:80/"), INVALID },
    { S("http://:80"), INVALID },

    /* user info */
    { S("http://user@example.com/"), INVALID },
    { S("http://user:pass@example.com/"), INVALID },
    { S("http://@example.com/"), INVALID },
    { S("http://example.com@127.0.0.1/"), INVALID },
    { S("http://example.com\\@127.0.0.1/"), INVALID },
    { S("http://a@b@example.com/"), INVALID },

    /* fragments */
    { S("http://example.com/#frag"), INVALID },
    { S("http://example.com#"), INVALID },
    { S("http://example.com/a?b#c"), INVALID },
    { S("http://example.com#@evil.com/"), INVALID },

    /* spaces, control bytes, DEL, non-ASCII */
    { S("http://exa mple.com/"), INVALID },
    { S("http://example.com/a b"), INVALID },
    { S(" http://example.com/"), INVALID },
    { S("http://example.com/ "), INVALID },
    { S("\thttp://example.com/"), INVALID },
    { S("http://example.com/\r\nHost: evil"), INVALID },
    { S("http://example.com/\n"), INVALID },
    { S("http://example.com/\x7f"), INVALID },
    { S("http://example.com/\0"), INVALID },
    { S("http://example.com\0.evil/"), INVALID },
    { S("http://b\xc3\xbc" "cher.example/"), INVALID },
    { S("http://example.com/\xc3\xa9"), INVALID },
    { S("http://example.com/\xff"), INVALID },

    /* ports */
    { S("http://example.com:/"), INVALID },
    { S("http://example.com:"), INVALID },
    { S("http://example.com:0/"), INVALID },
    { S("http://example.com:00/"), INVALID },
    { S("http://example.com:65536/"), INVALID },
    { S("http://example.com:99999/"), INVALID },
    { S("http://example.com:4294967376/"), INVALID },
    { S("http://example.com:99999999999999999999/"), INVALID },
    { S("http://example.com:80a/"), INVALID },
    { S("http://example.com:a80/"), INVALID },
    { S("http://example.com:-1/"), INVALID },
    { S("http://example.com:+80/"), INVALID },
    { S("http://example.com::80/"), INVALID },
    { S("http://example.com:80:80/"), INVALID },
    { S("http://example.com:0x50/"), INVALID },

    /* DNS names */
    { S("http://-example.com/"), INVALID },
    { S("http://example-.com/"), INVALID },
    { S("http://example.-com/"), INVALID },
    { S("http://example.com-/"), INVALID },
    { S("http://exa_mple.com/"), INVALID },
    { S("http://example..com/"), INVALID },
    { S("http://.example.com/"), INVALID },
    { S("http://example.com../"), INVALID },
    { S("http://./"), INVALID },
    { S("http://../"), INVALID },
    { S("http://-/"), INVALID },
    { S("http://" L64 ".example/"), INVALID },
    { S("http://example." L64 "/"), INVALID },
    { S("http://exa%6dple.com/"), INVALID },
    { S("http://evil.com\\.example.com/"), INVALID },
    { S("http://example.com;x/"), INVALID },
    { S("http://example.com,x/"), INVALID },
    { S("http://*.example.com/"), INVALID },
    { S("http://example.com%2F@x/"), INVALID },

    /* names that resolvers read as IPv4 addresses, other IPv4 forms */
    { S("http://2130706433/"), INVALID },
    { S("http://0x7f.1/"), INVALID },
    { S("http://0x7f000001/"), INVALID },
    { S("http://0X7F000001/"), INVALID },
    { S("http://0x/"), INVALID },
    { S("http://example.0x/"), INVALID },
    { S("http://example.0xff/"), INVALID },
    { S("http://127.1/"), INVALID },
    { S("http://127.0.1/"), INVALID },
    { S("http://0/"), INVALID },
    { S("http://123/"), INVALID },
    { S("http://example.123/"), INVALID },
    { S("http://1.2.3.4.5/"), INVALID },
    { S("http://256.0.0.1/"), INVALID },
    { S("http://1.2.3.256/"), INVALID },
    { S("http://1.2.3.1000/"), INVALID },
    { S("http://010.0.0.1/"), INVALID },
    { S("http://127.0.0.01/"), INVALID },
    { S("http://0177.0.0.1/"), INVALID },
    { S("http://00.0.0.0/"), INVALID },
    { S("http://1.2.3.4./"), INVALID },
    { S("http://1.2.3/"), INVALID },
    { S("http://.1.2.3.4/"), INVALID },
    { S("http://1..2.3/"), INVALID },
    { S("http://0x7f.0.0.1/"), INVALID },
    { S("http://1.2.3.0x4/"), INVALID },

    /* IPv6 literals */
    { S("http://[::1/"), INVALID },
    { S("http://[]/"), INVALID },
    { S("http://[::1]x/"), INVALID },
    { S("http://[::1]:/"), INVALID },
    { S("http://[::1]:0/"), INVALID },
    { S("http://[::1]]/"), INVALID },
    { S("http://[[::1]]/"), INVALID },
    { S("http://[fe80::1%25eth0]/"), INVALID },
    { S("http://[fe80::1%eth0]/"), INVALID },
    { S("http://[::g]/"), INVALID },
    { S("http://[1:2:3:4:5:6:7:8:9]/"), INVALID },
    { S("http://[1:2:3:4:5:6:7]/"), INVALID },
    { S("http://[v1.fe]/"), INVALID },
    { S("http://[127.0.0.1]/"), INVALID },
    { S("http://[::ffff:010.0.0.1]/"), INVALID },
    { S("http://[::ffff:1.2.3]/"), INVALID },
    { S("http://[ ::1]/"), INVALID },
    { S("http://::1/"), INVALID },
    { S("http://[::1]:8080:80/"), INVALID },
    { S("http://x[::1]/"), INVALID },
    { S("http://[0000:0000:0000:0000:0000:0000:0000:0000:1]/"), INVALID },

    /* private host names */
    { S("http://localhost/"), PRIVATE },
    { S("http://localhost"), PRIVATE },
    { S("http://LOCALHOST/"), PRIVATE },
    { S("http://LocalHost/"), PRIVATE },
    { S("http://localhost./"), PRIVATE },
    { S("http://localhost:8080/x"), PRIVATE },
    { S("https://localhost?x"), PRIVATE },
    { S("http://foo.localhost/"), PRIVATE },
    { S("http://a.b.LocalHost./"), PRIVATE },
    { S("http://x-y.localhost:1/"), PRIVATE },

    /* private IPv4 literals, the edges of every range */
    { S("http://0.0.0.0/"), PRIVATE },
    { S("http://0.255.255.255/"), PRIVATE },
    { S("http://10.0.0.0/"), PRIVATE },
    { S("http://10.255.255.255/"), PRIVATE },
    { S("http://100.64.0.0/"), PRIVATE },
    { S("http://100.127.255.255/"), PRIVATE },
    { S("http://127.0.0.1/"), PRIVATE },
    { S("http://127.0.0.1:8080/hook"), PRIVATE },
    { S("http://127.255.255.255/"), PRIVATE },
    { S("http://169.254.0.0/"), PRIVATE },
    { S("http://169.254.169.254/latest/meta-data/"), PRIVATE },
    { S("http://169.254.255.255/"), PRIVATE },
    { S("http://172.16.0.0/"), PRIVATE },
    { S("http://172.31.255.255/"), PRIVATE },
    { S("http://192.0.0.0/"), PRIVATE },
    { S("http://192.0.0.255/"), PRIVATE },
    { S("http://192.0.2.0/"), PRIVATE },
    { S("http://192.0.2.255/"), PRIVATE },
    { S("http://192.168.0.0/"), PRIVATE },
    { S("http://192.168.255.255/"), PRIVATE },
    { S("http://198.18.0.0/"), PRIVATE },
    { S("http://198.19.255.255/"), PRIVATE },
    { S("http://198.51.100.0/"), PRIVATE },
    { S("http://198.51.100.255/"), PRIVATE },
    { S("http://203.0.113.0/"), PRIVATE },
    { S("http://203.0.113.255/"), PRIVATE },
    { S("http://224.0.0.0/"), PRIVATE },
    { S("http://239.255.255.255/"), PRIVATE },
    { S("http://240.0.0.0/"), PRIVATE },
    { S("http://255.255.255.255/"), PRIVATE },

    /* private IPv6 literals */
    { S("http://[::]/"), PRIVATE },
    { S("http://[::1]/"), PRIVATE },
    { S("https://[::1]:8443/x"), PRIVATE },
    { S("http://[0:0:0:0:0:0:0:1]/"), PRIVATE },
    { S("http://[0000:0000:0000:0000:0000:0000:0000:0000]/"), PRIVATE },
    { S("http://[fc00::]/"), PRIVATE },
    { S("http://[fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]/"), PRIVATE },
    { S("http://[FD12:3456::1]/"), PRIVATE },
    { S("http://[fe80::]/"), PRIVATE },
    { S("http://[fe80::1]/"), PRIVATE },
    { S("http://[febf:ffff::1]/"), PRIVATE },
    { S("http://[ff00::]/"), PRIVATE },
    { S("http://[ff02::1]/"), PRIVATE },
    { S("http://[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]/"), PRIVATE },
    { S("http://[2001:db8::]/"), PRIVATE },
    { S("http://[2001:db8::1]/"), PRIVATE },
    { S("http://[2001:DB8:ffff:ffff:ffff:ffff:ffff:ffff]/"), PRIVATE },

    /* IPv4-mapped IPv6, judged by the IPv4 address */
    { S("http://[::ffff:127.0.0.1]/"), PRIVATE },
    { S("http://[::ffff:7f00:1]/"), PRIVATE },
    { S("http://[::FFFF:10.1.2.3]/"), PRIVATE },
    { S("http://[0:0:0:0:0:ffff:a9fe:a9fe]/"), PRIVATE },
    { S("http://[::ffff:0.0.0.0]/"), PRIVATE },
    { S("http://[::ffff:192.168.1.1]:8080/"), PRIVATE },
    { S("http://[::ffff:e000:1]/"), PRIVATE },

    /* NAT64: the well-known prefix by its IPv4 address, local use all */
    { S("http://[64:ff9b::127.0.0.1]/"), PRIVATE },
    { S("http://[64:ff9b::7f00:1]/"), PRIVATE },
    { S("http://[64:ff9b::a00:1]/"), PRIVATE },
    { S("http://[64:FF9B::192.168.1.1]:8080/"), PRIVATE },
    { S("http://[64:ff9b::a9fe:a9fe]/"), PRIVATE },
    { S("http://[64:ff9b:1::808:808]/"), PRIVATE },
    { S("http://[64:ff9b:1:ffff::1]/"), PRIVATE },
    { S("http://[64:ff9b::8.8.8.8]/"), OK },
    { S("http://[64:ff9b::808:808]/"), OK },
    { S("http://[64:ff9b:2::7f00:1]/"), OK },
    { S("http://[64:ff9a::7f00:1]/"), OK },

    /* IPv4-translated by its IPv4 address; site-local all (decision (jb)) */
    { S("http://[::ffff:0:7f00:1]/"), PRIVATE },
    { S("http://[::ffff:0:127.0.0.1]/"), PRIVATE },
    { S("http://[0:0:0:0:ffff:0:a00:1]/"), PRIVATE },
    { S("http://[::ffff:0:808:808]/"), OK },
    { S("http://[::127.0.0.1]/"), PRIVATE },
    { S("http://[::a00:1]:8080/"), PRIVATE },
    { S("http://[::8.8.8.8]/"), OK },
    { S("http://[fec0::1]/"), PRIVATE },
    { S("http://[FEFF:ffff::1]:8080/"), PRIVATE },
    { S("http://[feb0::1]/"), PRIVATE },
    { S("http://[fbff::1]/"), OK },

    /* 6to4 and Teredo by their IPv4 addresses (decision (jf)) */
    { S("http://[2002:7f00:1::]/hook"), PRIVATE },
    { S("http://[2002:0a00:0001::]/"), PRIVATE },
    { S("http://[2002:a9fe:a9fe::1]:8080/"), PRIVATE },
    { S("http://[2002:808:808::1]/"), OK },
    { S("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/"), PRIVATE },
    { S("http://[2001:0:a00:1:8000:63bf:f7f7:f7f7]/"), PRIVATE },
    { S("http://[2001:0:4136:e378:8000:63bf:f7f7:f7f7]/"), OK },

    /* not globally reachable: 2001::/23, 100::/64, 3fff::/20, 5f00::/16 */
    { S("http://[2001:2::1]/"), PRIVATE },
    { S("http://[2001:10::1]/"), PRIVATE },
    { S("http://[100::1]/"), PRIVATE },
    { S("http://[3fff::1]/"), PRIVATE },
    { S("http://[5f00::1]/"), PRIVATE },
    { S("http://[2001:200::1]/"), OK },
};


static const ngx_http_session_parts_vec_t  parts_vecs[] = {
    { "http://example.com", NGX_HTTP_SESSION_URL_HOST_NAME,
      "example.com", "example.com", 80, "", 0 },
    { "HTTPS://Example.COM./a/b?c=d", NGX_HTTP_SESSION_URL_HOST_NAME,
      "Example.COM.", "Example.COM.", 443, "/a/b?c=d", 1 },
    { "https://example.com:8443?x", NGX_HTTP_SESSION_URL_HOST_NAME,
      "example.com", "example.com:8443", 8443, "?x", 1 },
    { "http://example.com:0080/", NGX_HTTP_SESSION_URL_HOST_NAME,
      "example.com", "example.com:0080", 80, "/", 0 },
    { "http://8.8.4.4:53/dns", NGX_HTTP_SESSION_URL_HOST_IPV4,
      "8.8.4.4", "8.8.4.4:53", 53, "/dns", 0 },
    { "https://[2606:4700::1111]:444/p", NGX_HTTP_SESSION_URL_HOST_IPV6,
      "2606:4700::1111", "[2606:4700::1111]:444", 444, "/p", 1 },
    { "https://[::1]", NGX_HTTP_SESSION_URL_HOST_IPV6,
      "::1", "[::1]", 443, "", 1 },
};


static const ngx_http_session_addr_vec_t  addr_vecs[] = {
    { AF_INET, "0.0.0.0", 1 },
    { AF_INET, "0.1.2.3", 1 },
    { AF_INET, "1.2.3.4", 0 },
    { AF_INET, "10.20.30.40", 1 },
    { AF_INET, "100.64.0.1", 1 },
    { AF_INET, "100.100.100.100", 1 },
    { AF_INET, "100.63.0.1", 0 },
    { AF_INET, "100.128.0.1", 0 },
    { AF_INET, "127.0.0.1", 1 },
    { AF_INET, "127.1.2.3", 1 },
    { AF_INET, "169.254.1.1", 1 },
    { AF_INET, "169.1.1.1", 0 },
    { AF_INET, "172.16.5.5", 1 },
    { AF_INET, "172.20.0.1", 1 },
    { AF_INET, "172.31.0.1", 1 },
    { AF_INET, "172.15.0.1", 0 },
    { AF_INET, "172.32.0.1", 0 },
    { AF_INET, "192.0.0.8", 1 },
    { AF_INET, "192.0.2.33", 1 },
    { AF_INET, "192.0.1.33", 0 },
    { AF_INET, "192.88.99.1", 0 },
    { AF_INET, "192.168.100.1", 1 },
    { AF_INET, "198.18.1.1", 1 },
    { AF_INET, "198.19.1.1", 1 },
    { AF_INET, "198.17.1.1", 0 },
    { AF_INET, "198.20.1.1", 0 },
    { AF_INET, "198.51.100.1", 1 },
    { AF_INET, "198.51.1.1", 0 },
    { AF_INET, "203.0.113.1", 1 },
    { AF_INET, "203.0.1.1", 0 },
    { AF_INET, "224.1.1.1", 1 },
    { AF_INET, "233.1.1.1", 1 },
    { AF_INET, "240.1.1.1", 1 },
    { AF_INET, "250.1.1.1", 1 },
    { AF_INET, "255.255.255.255", 1 },
    { AF_INET, "223.1.1.1", 0 },
    { AF_INET, "93.184.216.34", 0 },

    { AF_INET6, "::", 1 },
    { AF_INET6, "::1", 1 },
    /* IPv4-compatible, by the IPv4 address (0.0.0.0/8 for these) */
    { AF_INET6, "::2", 1 },
    { AF_INET6, "::100", 1 },
    { AF_INET6, "::127.0.0.1", 1 },
    { AF_INET6, "::7f00:1", 1 },
    { AF_INET6, "::10.1.2.3", 1 },
    { AF_INET6, "::192.168.0.1", 1 },
    { AF_INET6, "::8.8.8.8", 0 },
    { AF_INET6, "::1:0:0:0", 0 },
    { AF_INET6, "1::", 0 },
    { AF_INET6, "fc00::", 1 },
    { AF_INET6, "fd00::1", 1 },
    { AF_INET6, "fbff::1", 0 },
    { AF_INET6, "fe00::1", 0 },
    { AF_INET6, "fe80::1", 1 },
    { AF_INET6, "fe9f::1", 1 },
    { AF_INET6, "febf::1", 1 },
    { AF_INET6, "fe7f::1", 0 },
    { AF_INET6, "ff00::", 1 },
    { AF_INET6, "ff05::2", 1 },
    { AF_INET6, "2001:db8::", 1 },
    { AF_INET6, "2001:db8:1234::5", 1 },
    { AF_INET6, "2001:db9::", 0 },
    { AF_INET6, "2001:d00::", 0 },
    { AF_INET6, "2001:4860:4860::8888", 0 },
    { AF_INET6, "::ffff:127.0.0.1", 1 },
    { AF_INET6, "::ffff:10.0.0.1", 1 },
    { AF_INET6, "::ffff:172.16.0.1", 1 },
    { AF_INET6, "::ffff:192.168.0.1", 1 },
    { AF_INET6, "::ffff:169.254.169.254", 1 },
    { AF_INET6, "::ffff:100.64.0.1", 1 },
    { AF_INET6, "::ffff:224.0.0.1", 1 },
    { AF_INET6, "::ffff:0.0.0.0", 1 },
    { AF_INET6, "::ffff:8.8.8.8", 0 },
    { AF_INET6, "::ffff:93.184.216.34", 0 },
    { AF_INET6, "::fffe:127.0.0.1", 0 },
    { AF_INET6, "1::ffff:127.0.0.1", 0 },
    { AF_INET6, "64:ff9b::127.0.0.1", 1 },
    { AF_INET6, "64:ff9b::10.0.0.1", 1 },
    { AF_INET6, "64:ff9b:1::1", 1 },
    { AF_INET6, "64:ff9b::8.8.8.8", 0 },
    { AF_INET6, "64:ff9b:0:1::7f00:1", 0 },
    { AF_INET6, "::ffff:0:127.0.0.1", 1 },
    { AF_INET6, "::ffff:0:192.168.0.1", 1 },
    { AF_INET6, "::ffff:0:8.8.8.8", 0 },
    { AF_INET6, "::1:ffff:0:7f00:1", 0 },
    { AF_INET6, "fec0::1", 1 },
    { AF_INET6, "feff::1", 1 },
    /* 6to4, by the IPv4 address in bytes 2-5 */
    { AF_INET6, "2002:7f00:1::", 1 },
    { AF_INET6, "2002:a00:1::1", 1 },
    { AF_INET6, "2002:c0a8:101:1::1", 1 },
    { AF_INET6, "2002:a9fe:a9fe::", 1 },
    { AF_INET6, "2002::", 1 },
    { AF_INET6, "2002:808:808::1", 0 },
    { AF_INET6, "2002:5db8:d822:1:2:3:4:5", 0 },
    { AF_INET6, "2003:7f00:1::", 0 },
    /* Teredo: server 65.54.227.120, client bytes inverted */
    { AF_INET6, "2001:0:4136:e378:8000:63bf:f7f7:f7f7", 0 },  /* 8.8.8.8 */
    { AF_INET6, "2001:0:4136:e378:8000:63bf:80ff:fffe", 1 },  /* 127.0.0.1 */
    { AF_INET6, "2001:0:4136:e378:8000:63bf:f5ff:fffe", 1 },  /* 10.0.0.1 */
    { AF_INET6, "2001:0:4136:e378:8000:63bf:3fff:fdd2", 1 },  /* 192.0.2.45 */
    { AF_INET6, "2001:0:4136:e378::", 1 },          /* 255.255.255.255 */
    { AF_INET6, "2001:0:7f00:1:8000:63bf:f7f7:f7f7", 1 },     /* server */
    { AF_INET6, "2001:0:a00:1::f7f7:f7f7", 1 },
    { AF_INET6, "2001::f7f7:f7f7", 1 },             /* server 0.0.0.0 */
    /* the rest of 2001::/23 */
    { AF_INET6, "2001:1::1", 1 },
    { AF_INET6, "2001:2::1", 1 },
    { AF_INET6, "2001:2:0:ffff::1", 1 },
    { AF_INET6, "2001:10::1", 1 },
    { AF_INET6, "2001:1f:ffff::1", 1 },
    { AF_INET6, "2001:1ff:ffff::1", 1 },
    { AF_INET6, "2001:200::1", 0 },
    { AF_INET6, "2000:ffff::1", 0 },
    /* discard-only, documentation, SRv6 segment ids */
    { AF_INET6, "100::", 1 },
    { AF_INET6, "100::ffff:ffff:ffff:ffff", 1 },
    { AF_INET6, "100:0:0:1::", 0 },
    { AF_INET6, "100:1::", 0 },
    { AF_INET6, "101::", 0 },
    { AF_INET6, "3fff::1", 1 },
    { AF_INET6, "3fff:fff:ffff::1", 1 },
    { AF_INET6, "3fff:1000::1", 0 },
    { AF_INET6, "3ffe::1", 0 },
    { AF_INET6, "5f00::1", 1 },
    { AF_INET6, "5f00:ffff::1", 1 },
    { AF_INET6, "5eff:ffff::1", 0 },
    { AF_INET6, "5f01::1", 0 },
};


#define NELTS(a)  ((int) (sizeof(a) / sizeof((a)[0])))


static unsigned char *
copy_exact(const unsigned char *p, size_t len)
{
    unsigned char  *buf;

    buf = malloc(len ? len : 1);
    ck_assert_ptr_nonnull(buf);
    memcpy(buf, p, len);

    return buf;
}


START_TEST(test_url_check)
{
    int                                rc, expected;
    unsigned char                     *url;
    const ngx_http_session_url_vec_t  *v;

    v = &url_vecs[_i];
    url = copy_exact(v->url, v->len);

    rc = ngx_http_session_url_check(url, v->len, 0);
    ck_assert_msg(rc == v->rc, "vector %d (\"%.*s\"): expected %d, got %d",
                  _i, (int) v->len, (const char *) v->url, v->rc, rc);

    /* session_webhook_allow_private on: only the address check goes */

    expected = (v->rc == PRIVATE) ? OK : v->rc;
    rc = ngx_http_session_url_check(url, v->len, 1);
    ck_assert_msg(rc == expected,
                  "vector %d (\"%.*s\", allow_private): expected %d, got %d",
                  _i, (int) v->len, (const char *) v->url, expected, rc);

    free(url);
}
END_TEST


START_TEST(test_url_parts)
{
    size_t                               len;
    unsigned char                       *url;
    ngx_http_session_url_t               u;
    const ngx_http_session_parts_vec_t  *v;

    v = &parts_vecs[_i];
    len = strlen(v->url);
    url = copy_exact(U(v->url), len);

    ck_assert_int_eq(ngx_http_session_url_parse(url, len, &u), OK);

    ck_assert_int_eq(u.host_type, v->host_type);
    ck_assert_int_eq(u.https, v->https);
    ck_assert_uint_eq(u.port, v->port);

    ck_assert_uint_eq(u.host_len, strlen(v->host));
    ck_assert(memcmp(u.host, v->host, u.host_len) == 0);
    ck_assert_uint_eq(u.authority_len, strlen(v->authority));
    ck_assert(memcmp(u.authority, v->authority, u.authority_len) == 0);
    ck_assert_uint_eq(u.path_len, strlen(v->path));
    ck_assert(memcmp(u.path, v->path, u.path_len) == 0);

    free(url);
}
END_TEST


START_TEST(test_url_parts_addr)
{
    unsigned char           a4[4], a6[16];
    ngx_http_session_url_t  u;

    ck_assert_int_eq(ngx_http_session_url_parse(S("http://192.0.2.1/"), &u),
                     OK);
    ck_assert_int_eq(inet_pton(AF_INET, "192.0.2.1", a4), 1);
    ck_assert(memcmp(u.addr, a4, 4) == 0);

    ck_assert_int_eq(ngx_http_session_url_parse(S("http://[::ffff:1.2.3.4]"),
                                                &u),
                     OK);
    ck_assert_int_eq(inet_pton(AF_INET6, "::ffff:1.2.3.4", a6), 1);
    ck_assert(memcmp(u.addr, a6, 16) == 0);
}
END_TEST


/* 2048 bytes are allowed, 2049 are not, whatever the host */

START_TEST(test_url_length)
{
    size_t          len;
    unsigned char  *url;
    const char     *head;

    head = (_i & 1) ? "http://127.0.0.1/" : "https://example.com/";
    len = NGX_HTTP_SESSION_URL_MAX_LEN + (_i >> 1);

    url = malloc(len);
    ck_assert_ptr_nonnull(url);
    memset(url, 'a', len);
    memcpy(url, head, strlen(head));

    if (_i >> 1) {
        ck_assert_int_eq(ngx_http_session_url_check(url, len, 0), INVALID);
        ck_assert_int_eq(ngx_http_session_url_check(url, len, 1), INVALID);

    } else {
        ck_assert_int_eq(ngx_http_session_url_check(url, len, 0),
                         (_i & 1) ? PRIVATE : OK);
        ck_assert_int_eq(ngx_http_session_url_check(url, len, 1), OK);
        ck_assert_int_eq(ngx_http_session_url_check(url, len - 1, 0),
                         (_i & 1) ? PRIVATE : OK);
    }

    free(url);
}
END_TEST


/* 253 bytes of name are allowed (254 with a trailing dot), 254 are not */

START_TEST(test_url_name_length)
{
    size_t          i, n;
    unsigned char   url[300];

    for (n = 250; n <= 256; n++) {
        memcpy(url, "http://", 7);

        /* labels of 9 letters and a dot; the last byte is a letter */

        for (i = 0; i < n; i++) {
            url[7 + i] = (i % 10 == 9) ? '.' : 'a';
        }

        if (url[7 + n - 1] == '.') {
            url[7 + n - 1] = 'b';
        }

        ck_assert_int_eq(ngx_http_session_url_check(url, 7 + n, 0),
                         n <= 253 ? OK : INVALID);

        url[7 + n] = '.';
        ck_assert_int_eq(ngx_http_session_url_check(url, 7 + n + 1, 0),
                         n <= 253 ? OK : INVALID);

        url[7 + n] = '/';
        ck_assert_int_eq(ngx_http_session_url_check(url, 7 + n + 1, 0),
                         n <= 253 ? OK : INVALID);
    }
}
END_TEST


START_TEST(test_addr_private)
{
    unsigned char                       addr[16];
    const ngx_http_session_addr_vec_t  *v;

    v = &addr_vecs[_i];

    ck_assert_int_eq(inet_pton(v->family, v->addr, addr), 1);
    ck_assert_msg(ngx_http_session_addr_private(v->family, addr)
                  == v->private,
                  "vector %d (%s): expected %d", _i, v->addr, v->private);
}
END_TEST


/*
 * Every IPv4 address, whole /8s and /16s at a time, against a reference:
 * alone, IPv4-mapped, in 6to4 and as a Teredo client and server.
 */

static int
reference_private4(unsigned a, unsigned b, unsigned c)
{
    return a == 0 || a == 10 || a == 127 || a >= 224
           || (a == 100 && b >= 64 && b <= 127)
           || (a == 169 && b == 254)
           || (a == 172 && b >= 16 && b <= 31)
           || (a == 192 && b == 0 && (c == 0 || c == 2))
           || (a == 192 && b == 168)
           || (a == 198 && (b == 18 || b == 19))
           || (a == 198 && b == 51 && c == 100)
           || (a == 203 && b == 0 && c == 113);
}


START_TEST(test_addr_private_sweep)
{
    int            expected;
    unsigned       a, b, c, i;
    unsigned char  v4[4], v6[16], v6to4[16], client[16], server[16];

    /* Check records every assertion that passes: assert on failure only */

    memset(v6, 0, sizeof(v6));
    v6[10] = 0xff;
    v6[11] = 0xff;

    /* 6to4: the address in bytes 2-5, a subnet and a host after it */

    memset(v6to4, 0x5d, sizeof(v6to4));
    v6to4[0] = 0x20;
    v6to4[1] = 0x02;

    /*
     * Teredo with the address as its client (inverted) and a public
     * server, then as its server and a public client (8.8.8.8)
     */

    ck_assert_int_eq(inet_pton(AF_INET6, "2001:0:4136:e378:8000:63bf::",
                               client), 1);
    ck_assert_int_eq(inet_pton(AF_INET6, "2001::8000:63bf:f7f7:f7f7",
                               server), 1);

    for (a = 0; a < 256; a++) {
        for (b = 0; b < 256; b++) {
            for (c = 0; c < 256; c += (a == 192 || a == 198 || a == 203)
                                     ? 1 : 255)
            {
                v4[0] = (unsigned char) a;
                v4[1] = (unsigned char) b;
                v4[2] = (unsigned char) c;
                v4[3] = (unsigned char) (a ^ b ^ c);

                memcpy(v6 + 12, v4, 4);
                memcpy(v6to4 + 2, v4, 4);
                memcpy(server + 4, v4, 4);

                for (i = 0; i < 4; i++) {
                    client[12 + i] = (unsigned char) ~v4[i];
                }

                expected = reference_private4(a, b, c);

                if (ngx_http_session_addr_private(AF_INET, v4) != expected
                    || ngx_http_session_addr_private(AF_INET6, v6)
                       != expected
                    || ngx_http_session_addr_private(AF_INET6, v6to4)
                       != expected
                    || ngx_http_session_addr_private(AF_INET6, client)
                       != expected
                    || ngx_http_session_addr_private(AF_INET6, server)
                       != expected)
                {
                    ck_abort_msg("%u.%u.%u.x", a, b, c);
                }
            }
        }
    }

}
END_TEST


START_TEST(test_addr_private_family)
{
    unsigned char  addr[16];

    memset(addr, 0x5d, sizeof(addr));

    ck_assert_int_eq(ngx_http_session_addr_private(AF_INET, addr), 0);
    ck_assert_int_eq(ngx_http_session_addr_private(AF_INET6, addr), 0);
    /* anything else fails closed */
    ck_assert_int_eq(ngx_http_session_addr_private(AF_UNIX, addr), 1);
    ck_assert_int_eq(ngx_http_session_addr_private(AF_UNSPEC, addr), 1);
}
END_TEST


START_TEST(test_host_private)
{
    ck_assert_int_eq(ngx_http_session_host_private(S("localhost")), 1);
    ck_assert_int_eq(ngx_http_session_host_private(S("LOCALHOST.")), 1);
    ck_assert_int_eq(ngx_http_session_host_private(S("a.localhost")), 1);
    ck_assert_int_eq(ngx_http_session_host_private(S("a.localhost.")), 1);
    ck_assert_int_eq(ngx_http_session_host_private(S("alocalhost")), 0);
    ck_assert_int_eq(ngx_http_session_host_private(S("localhost..")), 0);
    ck_assert_int_eq(ngx_http_session_host_private(S("localhos")), 0);
    ck_assert_int_eq(ngx_http_session_host_private(S("localhost.a")), 0);
    ck_assert_int_eq(ngx_http_session_host_private(S("")), 0);
    ck_assert_int_eq(ngx_http_session_host_private(S(".")), 0);
    ck_assert_int_eq(ngx_http_session_host_private(U("localhostx"), 9), 1);
}
END_TEST


/* every byte alone, then a URL that would close its quotes and a line */

#define LOG  NGX_HTTP_SESSION_ESCAPE_LOG

START_TEST(test_url_log_escape)
{
    size_t         n;
    unsigned       b;
    unsigned char  in[1], out[8];
    char           want[8];

    for (b = 0; b < 256; b++) {
        in[0] = (unsigned char) b;

        if (b >= 0x20 && b < 0x7f && b != '"' && b != '\\') {
            want[0] = (char) b;
            want[1] = '\0';

        } else {
            snprintf(want, sizeof(want), "\\x%02X", b);
        }

        ck_assert_uint_eq(ngx_http_session_escape(NULL, in, 1, LOG),
                          strlen(want));

        memset(out, 0, sizeof(out));
        n = ngx_http_session_escape(out, in, 1, LOG);

        ck_assert_msg(n == strlen(want) && memcmp(out, want, n) == 0,
                      "byte 0x%02x: \"%.*s\", expected \"%s\"", b, (int) n,
                      (const char *) out, want);
    }

    ck_assert_uint_eq(ngx_http_session_escape(NULL, U(""), 0, LOG), 0);
}
END_TEST


START_TEST(test_url_log_escape_url)
{
    size_t             n;
    unsigned char      out[256];
    static const char  url[] =
        "http://example.com/a\" failed: forged\n2026/01/01 [warn] \\x";
    static const char  want[] =
        "http://example.com/a\\x22 failed: forged\\x0A2026/01/01 [warn] "
        "\\x5Cx";

    n = ngx_http_session_escape(out, U(url), sizeof(url) - 1, LOG);

    ck_assert_uint_eq(n, sizeof(want) - 1);
    ck_assert(memcmp(out, want, n) == 0);

    n = ngx_http_session_escape(out, S("https://example.com/in?a=b"), LOG);
    ck_assert_uint_eq(n, 26);
    ck_assert(memcmp(out, "https://example.com/in?a=b", 26) == 0);
}
END_TEST


Suite *
make_url_suite(void)
{
    Suite  *s;
    TCase  *tc;

    s = suite_create("url");

    tc = tcase_create("check");
    tcase_add_loop_test(tc, test_url_check, 0, NELTS(url_vecs));
    tcase_add_loop_test(tc, test_url_length, 0, 4);
    tcase_add_test(tc, test_url_name_length);
    suite_add_tcase(s, tc);

    tc = tcase_create("parse");
    tcase_add_loop_test(tc, test_url_parts, 0, NELTS(parts_vecs));
    tcase_add_test(tc, test_url_parts_addr);
    suite_add_tcase(s, tc);

    tc = tcase_create("log");
    tcase_add_test(tc, test_url_log_escape);
    tcase_add_test(tc, test_url_log_escape_url);
    suite_add_tcase(s, tc);

    tc = tcase_create("private");
    tcase_add_loop_test(tc, test_addr_private, 0, NELTS(addr_vecs));
    tcase_add_test(tc, test_addr_private_sweep);
    tcase_add_test(tc, test_addr_private_family);
    tcase_add_test(tc, test_host_private);
    suite_add_tcase(s, tc);

    return s;
}
