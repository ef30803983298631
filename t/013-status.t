# session_status (docs/api.md §8): the node's counters and the zone's
# figures, as JSON or in Prometheus's text format, no key needed.
#
# Blocks that say "--- check: NAME" run NAME from --- init against the
# nginx Test::Nginx started for the block; the block's own request then
# looks at what the check left behind.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Session;
use SessionTest qw(:DEFAULT error_body status_json listening check_init
                    db_http_config);

our $F = fixture(plan => 'pro');
our $KEY = $F->{key};

master_on();
no_shuffle();
no_long_string();

sub body { return error_body(@_) }

sub api {
    my ($path, $key) = @_;
    my %h;
    $h{Authorization} = "Bearer $key" if defined $key;
    return http_request('GET', $path, \%h, 10);
}

# Each worker empties the auth cache once its LISTEN connection is up
# (revocations missed while it was down): the checks wait for that
# (SessionTest's listening), so that what they count is not undone by it.

my %checks;

# Every answer of a session_api location is counted once by status, on
# whichever worker; the limiter's refusals, the auth cache's hits and
# misses, and database statements have their own counters.
$checks{counters} = sub {
    my ($name) = @_;

    listening();

    my $s0 = status_json();

    for my $k (qw(total by_status)) {
        ok(exists $s0->{requests}{$k}, "$name - requests.$k");
    }

    is($s0->{zone}{name}, 'session_limits', "$name - the zone's name");
    is($s0->{zone}{size}, 10 * 1024 * 1024, "$name - the zone's size");
    ok($s0->{zone}{free} > 0 && $s0->{zone}{free} <= $s0->{zone}{size},
       "$name - the zone's free bytes");
    ok($s0->{counters_since} > 1_700_000_000, "$name - counters_since");

    # 3 x 401 (no key), a 401 for an unknown key, 4 x 404, then 429s
    api('/api/v1/nope') for 1 .. 3;
    api('/api/v1/nope', random_key('sess'));
    my @st = map { api('/api/v1/nope', $KEY)->{status} } 1 .. 6;
    is("@st", '404 404 404 404 429 429', "$name - the key's answers");

    my $s1 = status_json();
    my $d = sub { $s1->{requests}{by_status}{$_[0]}
                  - $s0->{requests}{by_status}{$_[0]} };

    is($d->('401'), 4, "$name - four more 401");
    is($d->('404'), 4, "$name - four more 404");
    is($d->('429'), 2, "$name - two more 429");
    is($s1->{requests}{total} - $s0->{requests}{total}, 10,
       "$name - ten more in all (the status requests are not counted)");
    is($s1->{rate_limited} - $s0->{rate_limited}, 2,
       "$name - two refused by the limiter");
    ok($s1->{auth_cache}{misses} - $s0->{auth_cache}{misses} >= 2,
       "$name - two keys looked up in the database at least");
    ok($s1->{auth_cache}{hits} - $s0->{auth_cache}{hits} >= 4,
       "$name - the valid key from the cache");
    ok($s1->{database}{queries} - $s0->{database}{queries} >= 2,
       "$name - database statements counted");
    is($s1->{database}{failures}, $s0->{database}{failures},
       "$name - no failed statement");
    ok($s1->{zone}{keys} >= 1, "$name - the key has counters");
    ok($s1->{auth_cache}{entries} >= 2, "$name - auth cache entries");
    ok($s1->{auth_cache}{seen_valid} >= 1, "$name - the key seen valid");
    is($s1->{auth_cache}{seen_forgotten}, 0, "$name - none forgotten");
};

my $PROM_LINE = qr/^(?:# (?:HELP|TYPE) session_api_\w+ .+|session_api_\w+(?:\{status="(?:\d{3}|other)"\})? \d+(?:\.\d+)?)$/;

# The text format: HELP and TYPE before each metric, one sample a line.
$checks{prometheus} = sub {
    my ($name) = @_;

    api('/api/v1/nope');

    for my $how (['?format=prometheus', {}],
                 ['', { Accept => 'text/plain;version=0.0.4;q=0.9,*/*;q=0.1' }],
                 ['', { Accept => 'application/openmetrics-text; '
                                  . 'version=1.0.0,text/plain;q=0.5' }])
    {
        my ($q, $h) = @$how;
        my $what = "$name - " . ($q || "Accept: $h->{Accept}");
        my $r = http_request('GET', "/status$q", $h, 10);

        is($r->{status}, 200, "$what - 200");
        is($r->{headers}{'content-type'},
           'text/plain; version=0.0.4; charset=utf-8', "$what - type");

        my @lines = split /\n/, $r->{content};
        my @bad = grep { $_ !~ $PROM_LINE } @lines;
        ok(!@bad, "$what - every line is a comment or a sample")
            or diag(join "\n", @bad);

        like($r->{content},
             qr/^# TYPE session_api_requests_total counter$/m,
             "$what - requests_total is a counter");
        like($r->{content},
             qr/^session_api_requests_total\{status="401"\} [1-9]\d*$/m,
             "$what - the 401 was counted");
        for my $m (qw(rate_limited_total auth_cache_hits_total
                      auth_cache_misses_total auth_cache_entries
                      auth_seen_valid_keys auth_seen_forgotten_total
                      db_queries_total db_failures_total
                      db_batches_total db_batched_total db_waiting
                      db_uploads_waiting
                      polls_waiting poll_reads_total expiry_sweeps_total sessions_expired_total
                      zone_size_bytes zone_free_bytes zone_keys
                      zone_evictions_total counters_start_time_seconds))
        {
            like($r->{content}, qr/^session_api_$m \d+$/m,
                 "$what - session_api_$m");
        }
    }

    # JSON wins when the client asks for it too, or asks for nothing
    for my $h ({}, { Accept => 'application/json, text/plain' },
               { Accept => '*/*' })
    {
        my $r = http_request('GET', '/status', $h, 10);
        is($r->{headers}{'content-type'}, 'application/json',
           "$name - JSON for Accept: " . ($h->{Accept} // 'none'));
    }
};

# Two workers, one zone: every answer is counted once whichever worker
# gave it, and both read the same numbers.
$checks{workers} = sub {
    my ($name) = @_;

    listening();

    my $s0 = status_json();

    api('/api/v1/nope') for 1 .. 40;

    # an answer is counted once it is logged, which may come after the
    # client read it (make asan is slow): wait for the count, then check
    # it is exact
    my $s1;
    wait_until(10, 0.05, sub {
        $s1 = status_json();
        $s1->{requests}{by_status}{401} - $s0->{requests}{by_status}{401}
            >= 40;
    });

    is($s1->{requests}{by_status}{401} - $s0->{requests}{by_status}{401}, 40,
       "$name - 40 answers counted once each");
};

add_block_preprocessor(sub {
    my $block = shift;

    workers(defined $block->workers ? $block->workers : 1);

    db_http_config($block);

    if (!defined $block->config) {
        $block->set_value('config', <<'EOF');
    location /api/ {
        session_api;
        session_limits other=4;
    }

    location = /status {
        session_status;
    }
EOF
    }

    # run from --- init: nginx is up, the block's request comes after
    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: JSON counters: by status, rate-limited, auth cache, database, zone
--- debug_log: the "session listen: listening" lines
--- check: counters
--- request
GET /status
--- error_code: 200
--- response_headers
Content-Type: application/json
Cache-Control: no-store
!X-RateLimit-Limit
--- response_body_like: ^\{"counters_since": \d+, "requests": \{"total": \d+, "by_status": \{"200": \d+, "201": \d+, .*"other": \d+\}\}, "rate_limited": 2, "auth_cache": .*"zone": \{"name": "session_limits", "size": 10485760, .*\}\}$
--- no_error_log
[error]



=== TEST 2: Prometheus text format, by parameter and by Accept
--- check: prometheus
--- request
GET /status?format=prometheus
--- error_code: 200
--- response_headers
Content-Type: text/plain; version=0.0.4; charset=utf-8
--- response_body_like: ^# HELP session_api_requests_total .*\nsession_api_requests_total\{status="401"\} [1-9]
--- no_error_log
[error]



=== TEST 3: two workers count into one zone
--- debug_log: the "session listen: listening" lines
--- workers: 2
--- check: workers
--- request
HEAD /status
--- error_code: 200
--- response_body
--- no_error_log
[error]



=== TEST 4: no key needed, and allow/deny protect it
--- config
    location /api/ {
        session_api;
    }

    location = /status {
        session_status;
        deny all;
    }
--- request
GET /status
--- error_code: 403
--- response_body eval
main::body(403, 'Forbidden', 'forbidden')



=== TEST 5: other methods: 405 with Allow
--- request
POST /status
--- error_code: 405
--- response_headers
Allow: GET, HEAD
Content-Type: application/json
--- response_body eval
main::body(405, 'Method Not Allowed', 'method not allowed')
--- no_error_log
[error]



=== TEST 6: an unknown format
--- request
GET /status?format=xml
--- error_code: 400
--- response_body eval
main::body(400, 'Bad Request', 'format must be json or prometheus')
--- no_error_log
[error]



=== TEST 7: an empty format
--- request
GET /status?format=
--- error_code: 400
--- response_body eval
main::body(400, 'Bad Request', 'format must be json or prometheus')



=== TEST 8: an unknown query parameter
--- request
GET /status?verbose=1
--- error_code: 400
--- response_body eval
main::body(400, 'Bad Request', 'unknown query parameter: verbose')



=== TEST 9: format=json
--- request
GET /status?format=json
--- more_headers
Accept: text/plain
--- error_code: 200
--- response_headers
Content-Type: application/json
--- response_body_like: ^\{"counters_since"



=== TEST 10: session_status with an argument
--- config
    location /api/ {
        session_api;
    }

    location = /status {
        session_status on;
    }
--- must_die
--- error_log
invalid number of arguments in "session_status" directive



=== TEST 11: session_status in server{}
--- config
    session_status;

    location /api/ {
        session_api;
    }
--- must_die
--- error_log
"session_status" directive is not allowed here



=== TEST 12: session_status twice in one location
--- config
    location /api/ {
        session_api;
    }

    location = /status {
        session_status;
        session_status;
    }
--- must_die
--- error_log
"session_status" directive is duplicate



=== TEST 13: session_status in a session_api location
--- config
    location /api/ {
        session_api;
        session_status;
    }
--- must_die
--- error_log
"session_status" directive cannot be used in a "session_api" location



=== TEST 14: session_status without any session_api
--- http_config
--- config
    location = /status {
        session_status;
    }
--- must_die
--- error_log eval
qr/"session_status" in \S+:\d+ needs a "session_api" location in the same http block/
