# The API over TLS: HTTP/2 and HTTP/1.1.  A second server of
# the block's nginx listens with TLS and HTTP/2 ("listen ... ssl http2"
# on nginx 1.22, "http2 on" from 1.25.1; t/lib/Transport.pm); curl asks
# it.  Every endpoint answers over HTTP/2 as over HTTP/1.1; an image goes
# up and comes back byte for byte; 100 long polls multiplexed on one
# HTTP/2 connection wait (with their requests: an HTTP/2 stream is not
# parked), one upload wakes them all, and a client that goes away with
# its polls leaves nothing waiting; the same for 100 polls over HTTP/1.1
# and TLS, which are parked as plain HTTP/1.1 ones are.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it), curl with HTTP/2
# and openssl (make deps).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Digest::SHA ();
use Session qw(:DEFAULT decode_json);
use SessionTest qw(:DEFAULT status_json check_init db_http_config);
use Transport qw(tls_server https_request https_parallel https_collect);

our $TAG = sprintf 't030-%d-%d', $$, time;

our $KEY = fixture(plan => 'pro', name => "$TAG-main")->{key};

# a PNG signature and filler
sub png { "\x89PNG\r\n\x1a\n" . ('p' x ($_[0] - 8)) }

our $LOCATIONS = <<'EOF';
        location /api/ {
            session_api;
            session_limits create=1000 list=1000 other=1000;
        }
EOF


# --- helpers -------------------------------------------------------------

# h2(METHOD, PATH, BODY, HEADERS): one request over HTTP/2 with the key
sub h2 { https_request('--http2', $_[0], $_[1], $KEY, @_[2, 3]) }

sub long_poll { status_json()->{long_poll} }

# is(), with the answer's status and message when it is not right
sub answer_is {
    my ($r, $status, $name) = @_;

    is($r->{status}, $status, $name)
        or Test::More::diag("got $r->{status} $r->{content}");
    is($r->{version}, '2', "$name: over HTTP/2");
}


# --- the checks -----------------------------------------------------------

my %checks;

# every endpoint, GET and HEAD, over HTTP/2; the same answers as over
# HTTP/1.1 (the other scripts' subject)
$checks{endpoints} = sub {
    my ($name) = @_;

    my $r = h2('POST', '/api/v1/sessions',
               '{"delivery_mode": "long_poll"}',
               { 'Content-Type' => 'application/json' });
    answer_is($r, 201, "$name - create");
    my $sid = $r->{json}{id} // 'none';
    is($r->{headers}{location}, "/api/v1/sessions/$sid",
       "$name - create: Location");

    $r = h2('GET', '/api/v1/sessions?limit=100');
    answer_is($r, 200, "$name - list");
    ok((grep { $_->{id} eq $sid } @{ $r->{json}{data} // [] }),
       "$name - list: the session");

    $r = h2('HEAD', '/api/v1/sessions?limit=100');
    answer_is($r, 200, "$name - HEAD list");
    is($r->{downloaded}, 0, "$name - HEAD list: no body");

    $r = h2('GET', "/api/v1/sessions/$sid");
    answer_is($r, 200, "$name - one session");
    is($r->{json}{id}, $sid, "$name - one session: its id");

    $r = h2('HEAD', "/api/v1/sessions/$sid");
    answer_is($r, 200, "$name - HEAD one session");

    $r = h2('GET', "/api/v1/sessions/$sid/poll?timeout=0");
    answer_is($r, 200, "$name - poll, nothing yet");
    is_deeply($r->{json}{images}, [], "$name - poll: no image");

    my $png = png(1000);
    $r = h2('POST', "/api/v1/sessions/$sid/images", $png,
            { 'Content-Type' => 'image/png' });
    answer_is($r, 201, "$name - upload");
    my $iid = $r->{json}{id} // 'none';

    $r = h2('GET', "/api/v1/sessions/$sid/images");
    answer_is($r, 200, "$name - list images");
    is(scalar @{ $r->{json}{data} // [] }, 1, "$name - list images: one");

    $r = h2('HEAD', "/api/v1/sessions/$sid/images");
    answer_is($r, 200, "$name - HEAD list images");

    $r = h2('GET', "/api/v1/sessions/$sid/images/$iid");
    answer_is($r, 200, "$name - one image");
    is($r->{json}{size_bytes} // length $png, length $png,
       "$name - one image: its size");

    $r = h2('HEAD', "/api/v1/sessions/$sid/images/$iid");
    answer_is($r, 200, "$name - HEAD one image");

    my $etag = '"' . Digest::SHA::sha256_hex($png) . '"';

    $r = h2('GET', "/api/v1/sessions/$sid/images/$iid/content");
    answer_is($r, 200, "$name - content");
    ok($r->{content} eq $png, "$name - content: the bytes");
    is($r->{headers}{etag}, $etag, "$name - content: ETag");
    is($r->{headers}{'content-type'}, 'image/png',
       "$name - content: Content-Type");

    $r = h2('HEAD', "/api/v1/sessions/$sid/images/$iid/content");
    answer_is($r, 200, "$name - HEAD content");
    is($r->{headers}{'content-length'}, length $png,
       "$name - HEAD content: Content-Length");

    $r = h2('GET', "/api/v1/sessions/$sid/images/$iid/content", undef,
            { 'If-None-Match' => $etag });
    answer_is($r, 304, "$name - content, If-None-Match");

    $r = h2('GET', "/api/v1/sessions/$sid/poll?timeout=5");
    answer_is($r, 200, "$name - poll: at once");
    is($r->{json}{images}[0]{id}, $iid, "$name - poll: the image");

    $r = h2('POST', "/api/v1/sessions/$sid/images/$iid/ack");
    answer_is($r, 200, "$name - ack");
    is($r->{json}{acknowledged}, JSON::PP::true, "$name - ack: acknowledged");

    $r = h2('POST', "/api/v1/sessions/$sid/images/$iid/ack");
    answer_is($r, 409, "$name - ack again");

    $r = h2('POST', "/api/v1/sessions/$sid/complete");
    answer_is($r, 200, "$name - complete");

    $r = h2('GET', "/api/v1/sessions/$sid/poll?timeout=5");
    answer_is($r, 410, "$name - poll after complete");
    is($r->{json}{message}, 'all images are acknowledged',
       "$name - poll after complete: message");

    $r = h2('GET', '/api/v1/nope');
    answer_is($r, 404, "$name - an unknown route");

    $r = https_request('--http2', 'GET', '/api/v1/sessions', undef);
    answer_is($r, 401, "$name - no key");

    $r = https_request('--http1.1', 'GET', "/api/v1/sessions/$sid", $KEY);
    is($r->{status}, 200, "$name - HTTP/1.1 over TLS too");
    is($r->{version}, '1.1', "$name - HTTP/1.1 over TLS: its version");
};

# an image of 300 kB (many DATA frames, more than the body buffer) goes
# up and comes back byte for byte
$checks{upload} = sub {
    my ($name) = @_;

    my $sid = h2('POST', '/api/v1/sessions', '{"delivery_mode": "long_poll"}',
                 { 'Content-Type' => 'application/json' })->{json}{id};

    my $png = png(300 * 1024);
    substr($png, 100 + $_ * 997, 1) = chr($_ % 256) for 0 .. 300;

    my $r = h2('POST', "/api/v1/sessions/$sid/images", $png,
               { 'Content-Type' => 'image/png' });
    answer_is($r, 201, "$name - upload");

    $r = h2('GET', "/api/v1/sessions/$sid/images/$r->{json}{id}/content");
    answer_is($r, 200, "$name - content");
    is(length $r->{content}, length $png, "$name - its length");
    ok($r->{content} eq $png, "$name - the same bytes");
};

# 100 polls wait (on one HTTP/2 connection: with their requests, a
# stream cannot be parked; over HTTP/1.1 and TLS: 100 connections,
# parked); one upload wakes them all with the image
sub fanout {
    my ($name, $proto, $version, $parked, $connections) = @_;
    my $n = 100;

    my $sid = h2('POST', '/api/v1/sessions', '{"delivery_mode": "long_poll"}',
                 { 'Content-Type' => 'application/json' })->{json}{id};

    my $p = https_parallel($proto, $n,
                           "/api/v1/sessions/$sid/poll?timeout=30", $KEY);

    my ($lp) = wait_until(20, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == $n && $s->{parked} == $parked ? $s : undef;
    });
    ok($lp, "$name - $n polls wait, $parked parked")
        or Test::More::diag(Session::encode_json(long_poll()));

    my $up = h2('POST', "/api/v1/sessions/$sid/images", png(100),
                { 'Content-Type' => 'image/png' });
    answer_is($up, 201, "$name - the upload");

    my ($r, $connects) = https_collect($p);

    is($connects, $connections, "$name - $connections connections");
    is(scalar(grep { $_->{version} eq $version } @$r), $n,
       "$name - $n over HTTP/$version");
    is(scalar(grep { $_->{status} == 200 } @$r), $n, "$name - $n x 200");
    is(scalar(grep { ($_->{json}{images}[0]{id} // '') eq $up->{json}{id} }
              @$r),
       $n, "$name - each with the image");

    my $after = long_poll();
    is($after->{waiting}, 0, "$name - nobody waits after");
    is($after->{parked}, 0, "$name - nobody parked after");
}

$checks{fanout} = sub { fanout($_[0], '--http2', '2', 0, 1) };
$checks{fanout_tls} = sub { fanout($_[0], '--http1.1', '1.1', 100, 100) };

# the client of 100 polls goes away: they all leave
sub gone {
    my ($name, $proto, $parked) = @_;
    my $n = 100;

    my $sid = h2('POST', '/api/v1/sessions', '{"delivery_mode": "long_poll"}',
                 { 'Content-Type' => 'application/json' })->{json}{id};

    my $p = https_parallel($proto, $n,
                           "/api/v1/sessions/$sid/poll?timeout=30", $KEY);

    my ($lp) = wait_until(20, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == $n && $s->{parked} == $parked;
    });
    ok($lp, "$name - $n polls wait, $parked parked");

    kill 'KILL', $p->{pid};
    https_collect($p);

    my ($gone) = wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == 0 && $s->{parked} == 0;
    });
    ok($gone, "$name - nobody waits once the client is gone");

    my $r = h2('GET', "/api/v1/sessions/$sid/poll?timeout=0");
    answer_is($r, 200, "$name - the session still answers");
}

$checks{gone} = sub { gone($_[0], '--http2', 0) };
$checks{gone_tls} = sub { gone($_[0], '--http1.1', 100) };


# --- blocks -----------------------------------------------------------------

our $CONFIG = <<'EOF';
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
    }
    location = /status {
        session_status;
    }
EOF

# 100 TLS connections at once (Test::Nginx's default is 64)
worker_connections(1024);
no_shuffle();

add_block_preprocessor(sub {
    my $block = shift;

    workers(1);

    db_http_config($block, tls_server($LOCATIONS, 0));

    $block->set_value('config', $CONFIG) unless defined $block->config;

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: every endpoint over HTTP/2
--- check: endpoints
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 2: an image of 300 kB up and back over HTTP/2
--- check: upload
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 3: 100 long polls on one HTTP/2 connection, woken by one upload
--- check: fanout
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 4: the client of 100 multiplexed polls goes away
--- check: gone
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 5: 100 long polls over HTTP/1.1 and TLS, parked, woken by one upload
--- check: fanout_tls
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 6: the client of 100 parked polls over TLS goes away
--- check: gone_tls
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[alert]
