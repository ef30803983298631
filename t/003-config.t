# Configuration (docs/api.md §8 and "Configuration" in section 10): a bad
# value in any directive stops nginx with a message naming the directive
# and the file:line; session_db is required only with session_api; nginx -t
# never connects to the database.
#
# A block with "--- directive_line: TEXT" also checks that the file:line of
# its [emerg] message is the line of nginx.conf that holds TEXT (checked
# once the block has run, from the conf and log it left behind).
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it) for the blocks that
# start.

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use File::Spec;
use File::Temp qw(tempdir);
use IO::Socket::INET;
use Session;
use SessionTest qw(:DEFAULT db_http_config api_config todo_block);

our $KEY = fixture(plan => 'pro')->{key};

# a port where nothing listens: bound, then closed
our $CLOSED_PORT = do {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Listen => 1, ReuseAddr => 1)
        or die "listen: $!";
    my $p = $s->sockport;
    close $s;
    $p;
};
$ENV{TEST_NGINX_CLOSED_PORT} = $CLOSED_PORT;

no_shuffle();
no_long_string();

# The file:line check of the block that ran last.
my $pending;

sub check_directive_line {
    my ($block) = @_;

    my $text = $block->directive_line;
    $text =~ s/^\s+|\s+$//g;

    my $name = $block->name;
    my $conf = File::Spec->catfile($Test::Nginx::Util::ServRoot, 'conf',
                                   'nginx.conf');
    my $log = $Test::Nginx::Util::ErrLogFile;

    open my $fh, '<', $conf or return fail("$name - open $conf: $!");
    my ($line, $n) = (undef, 0);
    while (<$fh>) {
        $n++;
        if (index($_, $text) >= 0) {
            $line = $n;
            last;
        }
    }
    close $fh;

    ok(defined $line, "$name - \"$text\" is in nginx.conf")
        or return;

    open $fh, '<', $log or return fail("$name - open $log: $!");
    my @emerg = grep { /\[emerg\]/ } <$fh>;
    close $fh;

    ok((grep { /\Q$conf\E:$line$/ } @emerg),
       "$name - the [emerg] message names nginx.conf:$line")
        or diag("conf line $line; [emerg] lines:\n", @emerg);
}

add_block_preprocessor(sub {
    my $block = shift;

    # the previous block's file:line, under that block's TODO if any
    if ($pending) {
        check_directive_line($pending);
        undef $pending;
    }

    # a block with --- todo_reason runs as a Test::More TODO
    todo_block($block);

    $pending = $block if defined $block->directive_line;

    db_http_config($block);
    api_config($block);

    if (!defined $block->request) {
        $block->set_value('request', "GET /api/v1/nope\n");
    }
});

run_tests();

check_directive_line($pending) if $pending;
todo_block();


# nginx -t (every directive at an extreme but valid value) on a
# configuration whose database is a socket that listens but
# is never accepted from: a connection attempt would sit in its backlog.

SKIP: {
    my $nginx = $ENV{TEST_NGINX_BINARY} || 'nginx';
    my $dir = tempdir(CLEANUP => 1);

    my $db = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                   Listen => 16, ReuseAddr => 1)
        or die "listen: $!";
    my $port = $db->sockport;

    my @modules = map { "load_module $_;\n" }
                  grep { length } split /\s+/,
                  $ENV{TEST_NGINX_LOAD_MODULES} || '';

    skip 'TEST_NGINX_LOAD_MODULES is not set', 3 unless @modules;

    mkdir "$dir/logs";
    open my $fh, '>', "$dir/nginx.conf" or die "$dir/nginx.conf: $!";
    print $fh @modules, <<"EOF";
error_log $dir/logs/error.log debug;
pid $dir/logs/nginx.pid;
events {}
http {
    access_log off;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    session_db "host=127.0.0.1 port=$port dbname=x user=x connect_timeout=1";
    session_db_connections 1024;
    session_db_timeout 1s;
    session_auth_cache_ttl 0;
    session_limit_zone z:32k;
    session_key_prefix ABcd;
    server {
        listen 127.0.0.1:$ENV{TEST_NGINX_CLOSED_PORT};
        location /api/ {
            session_api;
        }
    }
}
EOF
    close $fh;

    my $out = `$nginx -t -p $dir/ -c $dir/nginx.conf -e $dir/logs/error.log 2>&1`;
    my $rc = $? >> 8;

    is($rc, 0, 'nginx -t passes with a database that never answers')
        or diag($out);
    like($out, qr/test is successful/, 'nginx -t says the test is successful');

    $db->blocking(0);
    my $peer = $db->accept;
    ok(!defined $peer, 'nginx -t made no connection to the database');
}

__DATA__

=== TEST 1: session_api without session_db
--- http_config
--- must_die
--- directive_line: session_api;
--- error_log eval
qr/\[emerg\] .*"session_db" is required where "session_api" is used in \S+nginx\.conf:\d+/



=== TEST 2: session_db with a bad conninfo
--- http_config
    session_db "host=x nonsense";
--- must_die
--- directive_line: session_db "host=x nonsense";
--- error_log eval
qr/\[emerg\] .*invalid connection string in "session_db".* in \S+nginx\.conf:\d+$/



=== TEST 3: session_db with an unknown conninfo keyword
--- http_config
    session_db "host=x frobnicate=1";
--- must_die
--- directive_line: session_db "host=x frobnicate=1";
--- error_log eval
qr/\[emerg\] .*invalid connection string in "session_db".* in \S+nginx\.conf:\d+$/



=== TEST 4: session_db without an argument
--- http_config
    session_db;
--- must_die
--- directive_line: session_db;
--- error_log eval
qr/\[emerg\] .*invalid number of arguments in "session_db" directive in \S+nginx\.conf:\d+$/



=== TEST 5: session_db twice
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db "host=127.0.0.1";
--- must_die
--- directive_line: session_db "host=127.0.0.1";
--- error_log eval
qr/\[emerg\] .*"session_db" directive is duplicate in \S+nginx\.conf:\d+$/



=== TEST 6: session_db in a server
--- http_config
--- config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    location /api/ {
        session_api;
    }
--- must_die
--- directive_line: session_db "
--- error_log eval
qr/\[emerg\] .*"session_db" directive is not allowed here in \S+nginx\.conf:\d+$/



=== TEST 7: session_db_connections 0
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_connections 0;
--- must_die
--- directive_line: session_db_connections 0;
--- error_log eval
qr/\[emerg\] .*"session_db_connections" directive .* in \S+nginx\.conf:\d+$/



=== TEST 8: session_db_connections abc
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_connections abc;
--- must_die
--- directive_line: session_db_connections abc;
--- error_log eval
qr/\[emerg\] .*"session_db_connections" directive invalid number in \S+nginx\.conf:\d+$/



=== TEST 9: session_db_connections 2000
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_connections 2000;
--- must_die
--- directive_line: session_db_connections 2000;
--- error_log eval
qr/\[emerg\] .*"session_db_connections" directive .*1024.* in \S+nginx\.conf:\d+$/



=== TEST 10: session_db_connections -1
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_connections -1;
--- must_die
--- directive_line: session_db_connections -1;
--- error_log eval
qr/\[emerg\] .*"session_db_connections" directive .* in \S+nginx\.conf:\d+$/



=== TEST 11: session_db_timeout 0
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout 0;
--- must_die
--- directive_line: session_db_timeout 0;
--- error_log eval
qr/\[emerg\] .*"session_db_timeout" directive .* in \S+nginx\.conf:\d+$/



=== TEST 12: session_db_timeout 0s
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout 0s;
--- must_die
--- directive_line: session_db_timeout 0s;
--- error_log eval
qr/\[emerg\] .*"session_db_timeout" directive .* in \S+nginx\.conf:\d+$/



=== TEST 13: session_db_timeout abc
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout abc;
--- must_die
--- directive_line: session_db_timeout abc;
--- error_log eval
qr/\[emerg\] .*"session_db_timeout" directive invalid value in \S+nginx\.conf:\d+$/



=== TEST 14: session_limit_zone without a colon
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limit_zone nocolon;
--- must_die
--- directive_line: session_limit_zone nocolon;
--- error_log eval
qr/\[emerg\] .*"nocolon".*"session_limit_zone".* in \S+nginx\.conf:\d+$/



=== TEST 15: session_limit_zone without a name
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limit_zone :1m;
--- must_die
--- directive_line: session_limit_zone :1m;
--- error_log eval
qr/\[emerg\] .*"session_limit_zone".* in \S+nginx\.conf:\d+$/



=== TEST 16: session_limit_zone with a bad size
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limit_zone z:abc;
--- must_die
--- directive_line: session_limit_zone z:abc;
--- error_log eval
qr/\[emerg\] .*"z:abc".*"session_limit_zone".* in \S+nginx\.conf:\d+$/



=== TEST 17: session_limit_zone too small
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limit_zone z:1k;
--- must_die
--- directive_line: session_limit_zone z:1k;
--- error_log eval
qr/\[emerg\] .*"z:1k".*too small.*"session_limit_zone".* in \S+nginx\.conf:\d+$/



=== TEST 18: session_limit_zone twice
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limit_zone a:1m;
    session_limit_zone b:1m;
--- must_die
--- directive_line: session_limit_zone b:1m;
--- error_log eval
qr/\[emerg\] .*"session_limit_zone" directive is duplicate in \S+nginx\.conf:\d+$/



=== TEST 19: session_key_prefix abc (too short)
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_key_prefix abc;
--- must_die
--- directive_line: session_key_prefix abc;
--- error_log eval
qr/\[emerg\] .*"abc".*"session_key_prefix".* in \S+nginx\.conf:\d+$/



=== TEST 20: session_key_prefix ab1d (a digit)
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_key_prefix ab1d;
--- must_die
--- directive_line: session_key_prefix ab1d;
--- error_log eval
qr/\[emerg\] .*"ab1d".*"session_key_prefix".* in \S+nginx\.conf:\d+$/



=== TEST 21: session_key_prefix abcde (too long)
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_key_prefix abcde;
--- must_die
--- directive_line: session_key_prefix abcde;
--- error_log eval
qr/\[emerg\] .*"abcde".*"session_key_prefix".* in \S+nginx\.conf:\d+$/



=== TEST 22: session_key_prefix ab_d (not a letter)
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_key_prefix ab_d;
--- must_die
--- directive_line: session_key_prefix ab_d;
--- error_log eval
qr/\[emerg\] .*"ab_d".*"session_key_prefix".* in \S+nginx\.conf:\d+$/



=== TEST 23: session_key_prefix twice
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_key_prefix abcd;
    session_key_prefix wxyz;
--- must_die
--- directive_line: session_key_prefix wxyz;
--- error_log eval
qr/\[emerg\] .*"session_key_prefix" directive is duplicate in \S+nginx\.conf:\d+$/



=== TEST 24: session_auth_cache_ttl abc
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_auth_cache_ttl abc;
--- must_die
--- directive_line: session_auth_cache_ttl abc;
--- error_log eval
qr/\[emerg\] .*"session_auth_cache_ttl" directive invalid value in \S+nginx\.conf:\d+$/



=== TEST 25: session_api twice in one location
--- config
    location /api/ {
        session_api;
        session_api;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_api" directive is duplicate in \S+nginx\.conf:\d+$/



=== TEST 26: session_api in http{}
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_api;
--- must_die
--- directive_line: session_api;
--- error_log eval
qr/\[emerg\] .*"session_api" directive is not allowed here in \S+nginx\.conf:\d+$/



=== TEST 27: session_api in server{}
--- config
    session_api;
--- must_die
--- directive_line: session_api;
--- error_log eval
qr/\[emerg\] .*"session_api" directive is not allowed here in \S+nginx\.conf:\d+$/



=== TEST 28: session_api with an argument
--- config
    location /api/ {
        session_api on;
    }
--- must_die
--- directive_line: session_api on;
--- error_log eval
qr/\[emerg\] .*invalid number of arguments in "session_api" directive in \S+nginx\.conf:\d+$/



=== TEST 29: session_db without session_api starts, the database unused
--- http_config
    session_db "host=127.0.0.1 port=$TEST_NGINX_CLOSED_PORT dbname=x user=x";
--- config
    location = /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- no_error_log
[error]
[emerg]



=== TEST 30: every directive at a valid value
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_connections 8;
    session_db_timeout 3500ms;
    session_limit_zone myzone:32k;
    session_key_prefix sess;
    session_auth_cache_ttl 0;
--- more_headers eval
"Authorization: Bearer $::KEY"
--- error_code: 404
--- response_body chomp
{"statusCode": 404, "error": "Not Found", "message": "route not found"}
--- no_error_log
[error]
[emerg]



=== TEST 31: session_db_connections 1; an upper-case prefix: a sess_ key is malformed
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_connections 1;
    session_key_prefix SESS;
--- more_headers eval
"Authorization: Bearer $::KEY"
--- error_code: 401
--- response_body chomp
{"statusCode": 401, "error": "Unauthorized", "message": "API key is malformed"}
--- no_error_log
[error]
[emerg]



=== TEST 32: session_api in several locations and servers, one session_db
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    server {
        listen 127.0.0.1:$TEST_NGINX_RAND_PORT_1;
        location / {
            session_api;
        }
    }
--- config
    location /api/ {
        session_api;
    }
    location = /api/v1/sessions {
        session_api;
    }
--- more_headers eval
"Authorization: Bearer $::KEY"
--- pipelined_requests eval
["GET /api/v1/nope", "DELETE /api/v1/sessions"]
--- error_code eval
[404, 405]
--- no_error_log
[error]
[emerg]



=== TEST 33: a database that is down does not stop nginx from starting
--- http_config
    session_db "host=127.0.0.1 port=$TEST_NGINX_CLOSED_PORT dbname=x user=x";
    session_db_timeout 1s;
--- request
GET /api/v1/nope
--- more_headers
Authorization: Bearer nope
--- error_code: 401
--- response_body chomp
{"statusCode": 401, "error": "Unauthorized", "message": "API key is malformed"}
--- no_error_log
[emerg]
[alert]



=== TEST 34: session_db with service= and no host=: a warning (docs/decisions.md (kb))
--- http_config
    session_db "service=t003 dbname=x";
--- config
    location = /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- error_log eval
qr/\[warn\] .*"session_db" has service=t003 and no host=: libpq looks a host name of the service file up in the worker/
--- no_error_log
[emerg]
[alert]



=== TEST 35: no host= and "env" passes PGHOST: a warning
--- main_config
    env PGHOST=127.0.0.1;
--- http_config
    session_db "port=$TEST_NGINX_CLOSED_PORT dbname=x user=x";
--- config
    location = /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- error_log eval
qr/\[warn\] .*"session_db" has no host= and "env" passes PGHOST to the workers/
--- no_error_log
[emerg]
[alert]



=== TEST 36: no host=, "env" passes a socket directory: no warning
--- main_config
    env PGHOST=/tmp/t003-nowhere;
--- http_config
    session_db "port=$TEST_NGINX_CLOSED_PORT dbname=x user=x";
--- config
    location = /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- no_error_log
looks a host name
[emerg]
[alert]



=== TEST 37: service= with host=: no warning (host= overrides the service file's)
--- http_config
    session_db "host=127.0.0.1 port=$TEST_NGINX_CLOSED_PORT service=t003 dbname=x user=x";
--- config
    location = /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- no_error_log
looks a host name
[emerg]
[alert]



=== TEST 38: session_db_timeout over what statement_timeout holds (2147483647 ms)
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout 25d;
--- must_die
--- directive_line: session_db_timeout 25d;
--- error_log eval
qr/\[emerg\] .*"session_db_timeout" directive must be between 1ms and 2147483647ms \(24d\) in \S+nginx\.conf:\d+$/



=== TEST 39: session_db_timeout 24d is accepted
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout 24d;
--- config
    location = /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- no_error_log
[emerg]



=== TEST 40: session_db with a value libpq refuses only as it connects: sslmode
--- http_config
    session_db "host=127.0.0.1 dbname=x sslmode=bogus";
--- must_die
--- directive_line: session_db "host=127.0.0.1 dbname=x sslmode=bogus";
--- error_log eval
qr/\[emerg\] .*invalid sslmode "bogus" in "session_db", expected one of disable, allow, prefer, require, verify-ca, verify-full in \S+nginx\.conf:\d+$/



=== TEST 41: session_db with a port that is not one
--- http_config
    session_db "host=127.0.0.1 dbname=x port=abc";
--- must_die
--- directive_line: session_db "host=127.0.0.1 dbname=x port=abc";
--- error_log eval
qr/\[emerg\] .*invalid port "abc" in "session_db", expected integers from 1 to 65535, one a host in \S+nginx\.conf:\d+$/



=== TEST 42: session_db with a hostaddr that is not an address
--- http_config
    session_db "host=db dbname=x hostaddr=notanip";
--- must_die
--- directive_line: session_db "host=db dbname=x hostaddr=notanip";
--- error_log eval
qr/\[emerg\] .*invalid hostaddr "notanip" in "session_db", expected numeric IP addresses, one a host in \S+nginx\.conf:\d+$/



=== TEST 43: session_db_listen with a value libpq refuses only as it connects
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_listen "host=127.0.0.1 dbname=x target_session_attrs=READ-WRITE";
--- must_die
--- directive_line: session_db_listen "host=127.0.0.1 dbname=x target_session_attrs=READ-WRITE";
--- error_log eval
qr/\[emerg\] .*invalid target_session_attrs "READ-WRITE" in "session_db_listen", expected one of any, read-write/



=== TEST 44: session_db with values libpq takes
--- http_config
    session_db "host=127.0.0.1 port=5432 dbname=x sslmode=verify-full connect_timeout=3 keepalives_idle=30 target_session_attrs=read-write ssl_min_protocol_version=tlsv1.2 hostaddr=127.1";
--- config
    location = /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- no_error_log
[emerg]



=== TEST 45: session_ttl 0
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_ttl 0;
--- must_die
--- directive_line: session_ttl 0;
--- error_log eval
qr/\[emerg\] .*"session_ttl" directive must be between 1s and 2147483647s \(68y\) in \S+nginx\.conf:\d+$/



=== TEST 46: session_ttl abc
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_ttl abc;
--- must_die
--- directive_line: session_ttl abc;
--- error_log eval
qr/\[emerg\] .*"session_ttl" directive invalid value in \S+nginx\.conf:\d+$/



=== TEST 47: session_max_ttl over what the database takes, named at its own line
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
--- config
    location /api/ {
        session_api;
        session_max_ttl 69y;
    }
--- must_die
--- directive_line: session_max_ttl 69y;
--- error_log eval
qr/\[emerg\] .*"session_max_ttl" directive must be between 1s and 2147483647s \(68y\) in \S+nginx\.conf:\d+$/



=== TEST 48: session_max_ttl 68y and session_ttl 68y are accepted
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_max_ttl 68y;
    session_ttl 68y;
--- config
    location = /t {
        return 200 "ok\n";
    }
--- request
GET /t
--- response_body
ok
--- no_error_log
[emerg]



=== TEST 49: session_ttl over the session_max_ttl that applies
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
--- config
    location /api/ {
        session_api;
        session_ttl 2h;
        session_max_ttl 1h;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_ttl" 7200 must not be greater than "session_max_ttl" 3600 in \S+nginx\.conf:\d+$/
