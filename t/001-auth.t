# Stage 1 of the request pipeline (docs/api.md §1, §2, §3): the
# Authorization header, the key syntax, unknown / deleted keys, suspended
# accounts, the configurable key prefix, and that no key reaches the log.
#
# "Auth passed" is shown by the next stage answering: 404 "route not
# found" on /api/v1/nope.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it); the keys come from
# sessionctl, none is written here.

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Session;
use SessionTest qw(:DEFAULT error_body db_http_config api_config
                    add_no_error_log todo_block);

our ($KEY, $HEX, $KEY_ID, $DELETED, $SUSPENDED, $UNKNOWN, $ABCD, $OTHER);

{
    my $f = fixture(plan => 'pro');

    $KEY = $f->{key};
    $KEY_ID = $f->{key_id};
    ($HEX) = $KEY =~ /^sess_([0-9a-f]{32})$/
        or die "unexpected key shape from sessionctl: $KEY";

    # a second key of the same project, deleted before nginx starts
    my $k = sessionctl_ok('key', 'create', $f->{project_id});
    sessionctl_ok('key', 'delete', $k->{key_id});
    $DELETED = $k->{key};

    # a key of a suspended account
    my $s = fixture(plan => 'pro');
    sessionctl_ok('account', 'suspend', $s->{account_id});
    $SUSPENDED = $s->{key};

    # well-formed, but no such key
    do { $UNKNOWN = random_key('sess') } while $UNKNOWN eq $KEY;

    # a key made with another prefix
    $ABCD = fixture(plan => 'pro', prefix => 'abcd')->{key};
    $ABCD =~ /^abcd_[0-9a-f]{32}$/
        or die "unexpected key shape from sessionctl --prefix: $ABCD";

    # a key of another project, to check for key material in the log
    $OTHER = fixture(plan => 'free')->{key};
}

sub body { return error_body(@_) }

our $REQUIRED = body(401, 'Unauthorized', 'API key is required');
our $MALFORMED = body(401, 'Unauthorized', 'API key is malformed');
our $INVALID = body(401, 'Unauthorized', 'API key is invalid');
our $SUSPENDED_BODY = body(403, 'Forbidden', 'account is suspended');
our $NOT_FOUND = body(404, 'Not Found', 'route not found');
our $BAD_REQUEST = body(400, 'Bad Request', 'bad request');

# The secret part (32 hex) of every key of this script: none may show in
# the error log, which Test::Nginx writes at debug level, in any block
# (checked on top of each block's own --- no_error_log).
sub secrets {
    return map { /_([0-9a-fA-F]{32})$/ ? qr/\Q$1\E/i : () }
           $KEY, $DELETED, $SUSPENDED, $UNKNOWN, $ABCD, $OTHER;
}

no_shuffle();
no_long_string();

# the secrets check of every block reads the debug-level lines too
debug_log_note('no key in the error log');

add_block_preprocessor(sub {
    my $block = shift;

    # a block with --- todo_reason runs as a Test::More TODO
    todo_block($block);

    # a block that sends something that is not a key at all, though made
    # from one ("sess-<hex>"), says --- secrets_may_show
    add_no_error_log($block, secrets()) unless defined $block->secrets_may_show;

    db_http_config($block);
    api_config($block);
});

run_tests();

todo_block();

__DATA__

=== TEST 1: no Authorization header
--- request
GET /api/v1/nope
--- error_code: 401
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 401 Unauthorized\r\n
--- response_body eval
$::REQUIRED
--- no_error_log
[error]



=== TEST 2: no key on a known route answers 401, not 405 (stage 1 first)
--- request
DELETE /api/v1/sessions
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::REQUIRED
--- no_error_log
[error]



=== TEST 3: Basic scheme
--- request
GET /api/v1/nope
--- more_headers
Authorization: Basic dXNlcjpwYXNz
--- error_code: 401
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 401 Unauthorized\r\n
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 4: Token scheme with a valid key
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Token $::KEY"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 5: "Bearer" alone
--- request
GET /api/v1/nope
--- more_headers
Authorization: Bearer
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 6: "Bearer" and spaces only
--- raw_request eval
"GET /api/v1/nope HTTP/1.1\r
Host: localhost\r
Authorization: Bearer    \r
Connection: close\r
\r
"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 7: empty value
--- raw_request eval
"GET /api/v1/nope HTTP/1.1\r
Host: localhost\r
Authorization:\r
Connection: close\r
\r
"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 8: 31 hex digits
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer " . substr($::KEY, 0, -1)
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 9: 33 hex digits
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEY" . "0"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 10: a non-hex digit
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer " . substr($::KEY, 0, -1) . "g"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 11: another prefix (the server expects sess)
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer abcd_$::HEX"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 12: the prefix is case-sensitive (SESS_)
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer SESS_$::HEX"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 13: no underscore after the prefix
--- secrets_may_show
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer sess-$::HEX"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 14: a tab instead of a space after the scheme
--- raw_request eval
"GET /api/v1/nope HTTP/1.1\r
Host: localhost\r
Authorization: Bearer\t$::KEY\r
Connection: close\r
\r
"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 15: tabs and spaces around the value are not part of it (RFC 9110 5.5)
--- raw_request eval
"GET /api/v1/nope HTTP/1.1\r
Host: localhost\r
Authorization:\t \tBearer $::KEY\t \t\r
Connection: close\r
\r
"
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 16: a tab after the key
--- raw_request eval
"GET /api/v1/nope HTTP/1.1\r
Host: localhost\r
Authorization: Bearer $::KEY\t\r
Connection: close\r
\r
"
--- error_code: 404
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 17: no space after the scheme
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer$::KEY"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 18: something after the key
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEY x"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 19: the key alone, without a scheme
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: $::KEY"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 20: two Authorization headers: 400 bad request, JSON
--- raw_request eval
"GET /api/v1/nope HTTP/1.1\r
Host: localhost\r
Authorization: Bearer $::KEY\r
Authorization: Bearer $::KEY\r
Connection: close\r
\r
"
--- error_code: 400
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 400 Bad Request\r\n
--- response_body eval
$::BAD_REQUEST



=== TEST 21: two Authorization headers, the first one malformed: still 400
--- raw_request eval
"GET /api/v1/nope HTTP/1.1\r
Host: localhost\r
Authorization: Basic dXNlcjpwYXNz\r
Authorization: Bearer $::KEY\r
Connection: close\r
\r
"
--- error_code: 400
--- response_headers
Content-Type: application/json
--- response_body eval
$::BAD_REQUEST



=== TEST 22: a valid key authenticates (404 from the route stage)
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEY"
--- error_code: 404
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 404 Not Found\r\n
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 23: scheme in lower case
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: bearer $::KEY"
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 24: scheme in upper case
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: BEARER $::KEY"
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 25: scheme in mixed case, several spaces
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: bEaReR     $::KEY"
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 26: hex digits in upper case are the same key
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer sess_" . uc $::HEX
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 27: hex digits in mixed case, asked twice (the cached answer)
--- pipelined_requests eval
["GET /api/v1/nope", "GET /api/v1/nope"]
--- more_headers eval
(my $k = $::HEX) =~ s/([a-f])([0-9a-f])/\U$1\E$2/g; "Authorization: Bearer sess_$k"
--- error_code eval
[404, 404]
--- response_body eval
[$::NOT_FOUND, $::NOT_FOUND]
--- no_error_log
[error]



=== TEST 28: unknown key
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::UNKNOWN"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 401 Unauthorized\r\n
--- response_body eval
$::INVALID
--- no_error_log
[error]



=== TEST 29: unknown key, asked twice (the cached negative answer)
--- pipelined_requests eval
["GET /api/v1/nope", "GET /api/v1/sessions"]
--- more_headers eval
"Authorization: Bearer $::UNKNOWN"
--- error_code eval
[401, 401]
--- response_body eval
[$::INVALID, $::INVALID]
--- no_error_log
[error]



=== TEST 30: deleted key
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::DELETED"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::INVALID
--- no_error_log
[error]



=== TEST 31: a key made with another prefix is malformed here
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::ABCD"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 32: suspended account
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::SUSPENDED"
--- error_code: 403
--- response_headers
Content-Type: application/json
--- raw_response_headers_like: ^HTTP/1\.1 403 Forbidden\r\n
--- response_body eval
$::SUSPENDED_BODY
--- no_error_log
[error]



=== TEST 33: suspended account on a known route with a wrong method: 403 first
--- request
DELETE /api/v1/sessions
--- more_headers eval
"Authorization: Bearer $::SUSPENDED"
--- error_code: 403
--- response_headers
Content-Type: application/json
--- response_body eval
$::SUSPENDED_BODY
--- no_error_log
[error]



=== TEST 34: HEAD without a key: same status and headers, no body
--- request
HEAD /api/v1/sessions
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
""
--- no_error_log
[error]



=== TEST 35: session_key_prefix abcd: an abcd key authenticates
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_key_prefix abcd;
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::ABCD"
--- error_code: 404
--- response_headers
Content-Type: application/json
--- response_body eval
$::NOT_FOUND
--- no_error_log
[error]



=== TEST 36: session_key_prefix abcd: a sess key is malformed
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_key_prefix abcd;
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEY"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 37: session_key_prefix abcd: ABCD_ is malformed (case-sensitive)
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_key_prefix abcd;
--- request
GET /api/v1/nope
--- more_headers eval
(my $k = $::ABCD) =~ s/^abcd/ABCD/; "Authorization: Bearer $k"
--- error_code: 401
--- response_headers
Content-Type: application/json
--- response_body eval
$::MALFORMED
--- no_error_log
[error]



=== TEST 38: no key material anywhere in a debug-level error log
--- debug_log: nginx's debug-level "http header" lines
--- log_level: debug
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::OTHER"
--- error_code: 404
--- error_log eval
qr/http header: "Authorization: Bearer sess_/
--- no_error_log eval
[(map { qr/\Q$_\E/i } $::OTHER, substr($::OTHER, 5)), "[error]"]



=== TEST 39: no key material in the log after 404 and 405 answers
--- debug_log: the debug-level lines a key would be in
--- log_level: debug
--- pipelined_requests eval
["GET /api/v1/nope", "DELETE /api/v1/sessions", "POST /api/v1/sessions/x"]
--- more_headers eval
"Authorization: Bearer $::OTHER"
--- error_code eval
[404, 405, 405]
--- no_error_log
[error]



=== TEST 40: a real key sent with a prefix other than the server's is not logged
--- debug_log: the debug-level lines a key would be in
--- log_level: debug
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::ABCD"
--- error_code: 401
--- response_body eval
$::MALFORMED



=== TEST 41: the same with session_key_prefix abcd and a sess key
--- debug_log: the debug-level lines a key would be in
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_key_prefix abcd;
--- log_level: debug
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEY"
--- error_code: 401
--- response_body eval
$::MALFORMED
