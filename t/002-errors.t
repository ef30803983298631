# Error answers (docs/api.md §1 and §2, routing rules of section 10):
# 404 on unknown routes, 405 with the exact Allow of each route shape,
# HEAD, and the errors nginx raises itself (400, 494, 413, 414), which are
# JSON in a server with a session_api location and nginx's HTML elsewhere.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Session;
use SessionTest qw(:DEFAULT error_body db_http_config api_config todo_block);

our $KEY = fixture(plan => 'pro')->{key};

sub body { return error_body(@_) }

our $NOT_FOUND = body(404, 'Not Found', 'route not found');
our $NOT_ALLOWED = body(405, 'Method Not Allowed', 'method not allowed');
our $BAD_REQUEST = body(400, 'Bad Request', 'bad request');
our $HEADER_TOO_LARGE = body(400, 'Bad Request', 'request header is too large');
our $BODY_TOO_LARGE = body(413, 'Payload Too Large',
                           'request body is too large');
our $URI_TOO_LONG = body(414, 'URI Too Long', 'request URI is too long');

no_shuffle();
no_long_string();

# A block with --- todo_reason runs as a Test::More TODO.
add_block_preprocessor(sub {
    my $block = shift;

    todo_block($block);
});

# Unless a block says otherwise: the key in every request, the API under
# /api/, and the database in http{}.
add_block_preprocessor(sub {
    my $block = shift;

    db_http_config($block);
    api_config($block);

    if (!defined $block->more_headers && !defined $block->raw_request) {
        $block->set_value('more_headers', "Authorization: Bearer $KEY\n");
    }
});

run_tests();

todo_block();

__DATA__

=== TEST 1: unknown route
--- request
GET /api/v1/nope
--- error_code: 404
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 404 Not Found\r\n
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 2: a trailing slash is another, unknown route
--- request
GET /api/v1/sessions/
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 3: trailing slash after a session id
--- request
POST /api/v1/sessions/x/
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 4: another API version
--- request
GET /api/v2/x
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 5: /api/v1 itself
--- request
GET /api/v1
--- config
    location /api {
        session_api;
    }
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 6: unknown sub-resource of a session
--- request
GET /api/v1/sessions/x/nope
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 7: too deep below an image
--- request
GET /api/v1/sessions/x/images/y/content/z
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 8: something below poll
--- request
GET /api/v1/sessions/x/poll/y
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 9: a route name in another case is unknown
--- request
GET /api/v1/Sessions
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 10: /api/v1/sessions DELETE -> 405, Allow: GET, HEAD, POST
--- request
DELETE /api/v1/sessions
--- error_code: 405
--- response_headers
Allow: GET, HEAD, POST
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 405 Method Not Allowed\r\n
--- response_body eval
$::NOT_ALLOWED
--- no_error_log
[error]



=== TEST 11: /api/v1/sessions PUT
--- request
PUT /api/v1/sessions
--- error_code: 405
--- response_headers
Allow: GET, HEAD, POST
Content-Type: application/json
--- response_body eval
$::NOT_ALLOWED
--- no_error_log
[error]



=== TEST 12: /api/v1/sessions OPTIONS
--- request
OPTIONS /api/v1/sessions
--- error_code: 405
--- response_headers
Allow: GET, HEAD, POST
Content-Type: application/json
--- response_body eval
$::NOT_ALLOWED
--- no_error_log
[error]



=== TEST 13: /api/v1/sessions/{sid} POST -> Allow: GET, HEAD
--- request
POST /api/v1/sessions/x
--- error_code: 405
--- response_headers
Allow: GET, HEAD
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 405 Method Not Allowed\r\n
--- response_body eval
$::NOT_ALLOWED
--- no_error_log
[error]



=== TEST 14: /api/v1/sessions/{sid} DELETE
--- request
DELETE /api/v1/sessions/x
--- error_code: 405
--- response_headers
Allow: GET, HEAD
Content-Type: application/json
--- response_body eval
$::NOT_ALLOWED
--- no_error_log
[error]



=== TEST 15: /api/v1/sessions/{sid}/complete GET -> Allow: POST
--- request
GET /api/v1/sessions/x/complete
--- error_code: 405
--- response_headers
Allow: POST
Content-Type: application/json
--- response_body eval
$::NOT_ALLOWED
--- no_error_log
[error]



=== TEST 16: /api/v1/sessions/{sid}/images PUT -> Allow: GET, HEAD, POST
--- request
PUT /api/v1/sessions/x/images
--- error_code: 405
--- response_headers
Allow: GET, HEAD, POST
Content-Type: application/json
--- response_body eval
$::NOT_ALLOWED
--- no_error_log
[error]



=== TEST 17: /api/v1/sessions/{sid}/images/{iid} POST -> Allow: GET, HEAD
--- request
POST /api/v1/sessions/x/images/y
--- error_code: 405
--- response_headers
Allow: GET, HEAD
Content-Type: application/json
--- response_body eval
$::NOT_ALLOWED
--- no_error_log
[error]



=== TEST 18: /api/v1/sessions/{sid}/images/{iid}/content POST -> Allow: GET, HEAD
--- request
POST /api/v1/sessions/x/images/y/content
--- error_code: 405
--- response_headers
Allow: GET, HEAD
Content-Type: application/json
--- response_body eval
$::NOT_ALLOWED
--- no_error_log
[error]



=== TEST 19: /api/v1/sessions/{sid}/images/{iid}/ack GET -> Allow: POST
--- request
GET /api/v1/sessions/x/images/y/ack
--- error_code: 405
--- response_headers
Allow: POST
Content-Type: application/json
--- response_body eval
$::NOT_ALLOWED
--- no_error_log
[error]



=== TEST 20: /api/v1/sessions/{sid}/poll POST -> Allow: GET, HEAD
--- request
POST /api/v1/sessions/x/poll
--- error_code: 405
--- response_headers
Allow: GET, HEAD
Content-Type: application/json
--- response_body eval
$::NOT_ALLOWED
--- no_error_log
[error]



=== TEST 21: routes match the normalised URI: merged slashes
--- request
POST /api//v1///sessions/x
--- error_code: 405
--- response_headers
Allow: GET, HEAD
Content-Type: application/json
--- response_body eval
$::NOT_ALLOWED
--- no_error_log
[error]



=== TEST 22: routes match the normalised URI: decoded %2F
--- request
POST /api/v1/sessions%2Fx%2Fcomplete%2F..%2Fpoll
--- error_code: 405
--- response_headers
Allow: GET, HEAD
Content-Type: application/json
--- response_body eval
$::NOT_ALLOWED
--- no_error_log
[error]



=== TEST 23: GET of a 405 route: Content-Length of the JSON body
--- request
GET /api/v1/sessions/x/complete
--- error_code: 405
--- response_headers eval
"Allow: POST
Content-Type: application/json
Content-Length: " . length($::NOT_ALLOWED) . "\n"
--- response_body eval
$::NOT_ALLOWED
--- no_error_log
[error]



=== TEST 24: HEAD of the same: same status and headers, no body
--- request
HEAD /api/v1/sessions/x/complete
--- error_code: 405
--- response_headers eval
"Allow: POST
Content-Type: application/json
Content-Length: " . length($::NOT_ALLOWED) . "\n"
--- raw_response_headers_like: ^HTTP/1\.1 405 Method Not Allowed\r\n
--- response_body eval
""
--- no_error_log
[error]



=== TEST 25: HEAD of an unknown route: 404, same headers as GET, no body
--- request
HEAD /api/v1/nope
--- error_code: 404
--- response_headers eval
"Content-Type: application/json
Content-Length: " . length($::NOT_FOUND) . "\n"
--- raw_response_headers_like: ^HTTP/1\.1 404 Not Found\r\n
--- response_body eval
""
--- no_error_log
[error]



=== TEST 26: HEAD is accepted where GET is: /api/v1/sessions (no 405)
--- request
HEAD /api/v1/sessions
--- error_code_like: ^(?!405$)[1-5][0-9][0-9]$
--- response_headers
Allow:
Content-Type: application/json
--- response_body eval
""
--- no_error_log
[error]



=== TEST 27: HEAD is accepted where GET is: /api/v1/sessions/x/images/y/content (no 405)
--- request
HEAD /api/v1/sessions/x/images/y/content
--- error_code_like: ^(?!405$)[1-5][0-9][0-9]$
--- response_headers
Allow:
Content-Type: application/json
--- response_body eval
""
--- no_error_log
[error]



=== TEST 28: HEAD is accepted where GET is: /api/v1/sessions/x/poll (no 405)
--- request
HEAD /api/v1/sessions/x/poll
--- error_code_like: ^(?!405$)[1-5][0-9][0-9]$
--- response_headers
Allow:
Content-Type: application/json
--- response_body eval
""
--- no_error_log
[error]



=== TEST 29: HEAD on a POST-only route: 405 Allow: POST, no body
--- request
HEAD /api/v1/sessions/x/images/y/ack
--- error_code: 405
--- response_headers
Allow: POST
Content-Type: application/json
--- response_body eval
""
--- no_error_log
[error]



=== TEST 30: TRACE, which nginx refuses itself before any location: 405 JSON
--- raw_request eval
"TRACE /api/v1/sessions HTTP/1.1\r
Host: localhost\r
Authorization: Bearer $::KEY\r
Connection: close\r
\r
"
--- error_code: 405
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 405 Method Not Allowed\r\n
--- response_body eval
$::NOT_ALLOWED



=== TEST 31: garbage request line: 400 bad request, JSON
--- raw_request eval
"GARBAGE\r\n\r\n"
--- error_code: 400
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 400 Bad Request\r\n
--- response_body eval
$::BAD_REQUEST



=== TEST 32: bad header line: 400 bad request, JSON
--- raw_request eval
"GET /api/v1/nope HTTP/1.1\r
Host: localhost\r
Bad\x01Header: x\r
Connection: close\r
\r
"
--- error_code: 400
--- response_headers
Content-Type: application/json
--- response_body eval
$::BAD_REQUEST



=== TEST 33: HTTP/1.1 without Host: 400 bad request, JSON
--- raw_request eval
"GET /api/v1/nope HTTP/1.1\r
Connection: close\r
\r
"
--- error_code: 400
--- response_headers
Content-Type: application/json
--- response_body eval
$::BAD_REQUEST



=== TEST 34: a 10 KB header line: nginx's 494, sent as 400, JSON
--- raw_request eval
"GET /api/v1/nope HTTP/1.1\r
Host: localhost\r
X-Big: " . ("a" x 10240) . "\r
Connection: close\r
\r
"
--- error_code: 400
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 400 Bad Request\r\n
--- response_body eval
$::HEADER_TOO_LARGE



=== TEST 35: a 10 KB header line with a key: still 400 request header is too large
--- raw_request eval
"GET /api/v1/nope HTTP/1.1\r
Host: localhost\r
Authorization: Bearer $::KEY\r
X-Big: " . ("a" x 10240) . "\r
Connection: close\r
\r
"
--- error_code: 400
--- response_headers
Content-Type: application/json
--- response_body eval
$::HEADER_TOO_LARGE



=== TEST 36: too long URI: 414 request URI is too long, JSON
--- config
    large_client_header_buffers 4 1k;
    location /api/ {
        session_api;
    }
--- raw_request eval
"GET /api/v1/" . ("x" x 2048) . " HTTP/1.1\r
Host: localhost\r
Connection: close\r
\r
"
--- error_code: 414
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 414 URI Too Long\r\n
--- response_body eval
$::URI_TOO_LONG



=== TEST 37: body over client_max_body_size in a server with session_api: 413 JSON
(In the session_api location itself the module raises the limit to
session_image_max_size, docs/api.md §10, so the limit is set on another
location of the same server.)
--- config
    location /api/ {
        session_api;
    }
    location /small/ {
        client_max_body_size 1k;
        return 204;
    }
--- raw_request eval
"POST /small/x HTTP/1.1\r
Host: localhost\r
Content-Type: application/octet-stream\r
Content-Length: 2048\r
Connection: close\r
\r
" . ("z" x 2048)
--- error_code: 413
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 413 Payload Too Large\r\n
--- response_body eval
$::BODY_TOO_LARGE



=== TEST 38: a server without session_api keeps nginx's HTML pages (400)
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        location /api/ {
            session_api;
        }
    }
--- config
    location /small/ {
        client_max_body_size 1k;
        return 204;
    }
--- raw_request eval
"GARBAGE\r\n\r\n"
--- error_code: 400
--- response_headers
Content-Type: text/html
--- response_body_like: <title>400 Bad Request</title>
--- no_error_log
[alert]



=== TEST 39: a server without session_api keeps nginx's HTML pages (413)
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        location /api/ {
            session_api;
        }
    }
--- config
    location /small/ {
        client_max_body_size 1k;
        return 204;
    }
--- raw_request eval
"POST /small/x HTTP/1.1\r
Host: localhost\r
Content-Length: 2048\r
Connection: close\r
\r
" . ("z" x 2048)
--- error_code: 413
--- response_headers
Content-Type: text/html
--- response_body_like: <title>413 Request Entity Too Large</title>
--- no_error_log
[alert]



=== TEST 40: a server without session_api keeps nginx's HTML pages (414)
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        location /api/ {
            session_api;
        }
    }
--- config
    large_client_header_buffers 4 1k;
--- raw_request eval
"GET /" . ("x" x 2048) . " HTTP/1.1\r
Host: localhost\r
Connection: close\r
\r
"
--- error_code: 414
--- response_headers
Content-Type: text/html
--- response_body_like: <title>414 Request-URI Too Large</title>
--- no_error_log
[alert]



=== TEST 41: a server without session_api keeps nginx's HTML pages (494)
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        location /api/ {
            session_api;
        }
    }
--- config
--- raw_request eval
"GET / HTTP/1.1\r
Host: localhost\r
X-Big: " . ("a" x 10240) . "\r
Connection: close\r
\r
"
--- error_code: 400
--- response_headers
Content-Type: text/html
--- response_body_like: <title>400 Request Header Or Cookie Too Large</title>
--- no_error_log
[alert]



=== TEST 42: a server without session_api keeps nginx's HTML pages (404)
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        location /api/ {
            session_api;
        }
    }
--- config
--- request
GET /api/v1/nope
--- error_code: 404
--- response_headers
Content-Type: text/html
--- response_body_like: <title>404 Not Found</title>
