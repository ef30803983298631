# The raw-socket bad-input sweep (util/sweep.pl)
# against this nginx: random and malformed request lines, headers,
# methods, paths, query strings, bodies and chunked encodings, truncated
# and oversized requests, slow and stalled clients.  Every answer is a
# JSON error of docs/api.md §2 (or a success where the random request
# happened to be valid), or a closed connection; the error log shows no
# [alert], no [crit], no worker exit.
#
# In make test a short run (SWEEP_COUNT=300 requests or SWEEP_SECONDS=7,
# whichever ends first); make sweep runs a long one.  SWEEP_SEED repeats
# a run; the seed is printed either way.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Session qw(:DEFAULT);
use SessionTest qw(:DEFAULT db_http_config);

require './util/sweep.pl';

our $TAG = sprintf 't024-%d-%d', $$, time;
our ($KEY, $SID);

{
    my $f = fixture(plan => 'pro', name => $TAG);
    $KEY = $f->{key};
    ($SID) = psql('INSERT INTO sessions (project_id, delivery_mode, '
                  . 'expires_at) VALUES (' . sql_quote($f->{project_id})
                  . q{, 'long_poll', now() + interval '1 day') RETURNING id});
}

master_on();
workers(2);
no_shuffle();
no_root_location();
log_level('info');

sub sweep {
    my ($name) = @_;

    my $st = SessionSweep::run(
        port => $Test::Nginx::Util::ServerPort,
        seed => $ENV{SWEEP_SEED},
        count => $ENV{SWEEP_COUNT} // 300,
        seconds => $ENV{SWEEP_SECONDS} // 7,
        stalls => $ENV{SWEEP_STALLS} // 3,
        key => $KEY,
        sid => $SID,
        verbose => $ENV{SWEEP_VERBOSE},
        error_log => $Test::Nginx::Util::ErrLogFile,
        log => sub { diag("sweep: @_") },
    );

    diag('sweep: ' . SessionSweep::summary($st));
    my $least = ($ENV{SWEEP_COUNT} // 20) < 20 ? $ENV{SWEEP_COUNT} : 20;
    ok($st->{sent} >= $least, "$name - requests sent: $st->{sent}");
    ok($st->{answers} > 0, "$name - answers: $st->{answers}");
    is(scalar @{ $st->{bad} }, 0, "$name - every answer as the contract says")
        or diag(join "\n", grep { defined } @{ $st->{bad} }[0 .. 19]);
}

add_block_preprocessor(sub {
    my $block = shift;

    db_http_config($block);
});

run_tests();

__DATA__

=== TEST 1: the sweep
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_limits create=1000000 list=1000000 other=1000000;
    session_poll_timeout 1s;
    session_poll_max_timeout 1s;
    session_image_max_size 1m;
    client_header_timeout 2s;
    client_body_timeout 2s;
--- config
    location / {
        session_api;
    }

    location = /ok {
        return 204;
    }

    location = /status {
        session_status;
    }
--- init
main::sweep('the sweep')
--- request
GET /ok
--- error_code: 204
--- no_error_log
[alert]
[crit]
[emerg]
exited on signal



=== TEST 2: an HTTP version nginx does not speak: 505 as JSON
--- config
    location /api/ {
        session_api;
    }
--- raw_request eval
"GET /api/v1/sessions HTTP/2.0\r\nHost: localhost\r\n\r\n"
--- error_code: 505
--- response_headers
Content-Type: application/json
--- response_body chomp
{"statusCode": 505, "error": "HTTP Version Not Supported", "message": "http version not supported"}
--- no_error_log
[alert]
[crit]



=== TEST 3: a Transfer-Encoding nginx does not know: 501 as JSON
--- config
    location /api/ {
        session_api;
    }
--- raw_request eval
"POST /api/v1/sessions HTTP/1.1\r\nHost: localhost\r\n"
. "Transfer-Encoding: gzip\r\nConnection: close\r\n\r\nxyz"
--- error_code: 501
--- response_headers
Content-Type: application/json
--- response_body chomp
{"statusCode": 501, "error": "Not Implemented", "message": "not implemented"}
--- no_error_log
[alert]
[crit]
