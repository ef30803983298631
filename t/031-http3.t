# The API over HTTP/3, where the nginx under test has it
# (--with-http_v3_module: an nginx built from source, see
# util/test-upstream.sh; Debian 12's nginx 1.22 has not, and the script
# is skipped, saying so).  A second server of the block's nginx listens
# with TLS, HTTP/2 and HTTP/3 on one port (t/lib/Transport.pm); ngtcp2's
# gtlsclient (Debian's ngtcp2-client), with the headers that
# t/lib/h3-headers.c adds, asks it over QUIC.  Every endpoint answers
# over HTTP/3; an image goes up and comes back byte for byte; 100 long
# polls on one QUIC connection wait, parked (each stream of QUIC is a
# connection of nginx, parked as an HTTP/1.1 one is), one upload wakes
# them all, and a client that goes away leaves nothing waiting.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it), gtlsclient,
# libnghttp3-dev and openssl (make deps).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Digest::SHA ();
use Session qw(:DEFAULT decode_json);
use SessionTest qw(:DEFAULT status_json check_init db_http_config);
use Transport qw(tls_server http3_nginx http3_client h3_request h3_parallel
                 h3_collect);

BEGIN {
    my $why = !http3_nginx() ? 'nginx has no --with-http_v3_module'
              : http3_client();

    if ($why) {
        Test::More::diag("skipped: $0: $why");
        Test::More->builder->skip_all($why);
    }
}

our $TAG = sprintf 't031-%d-%d', $$, time;

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

# h3(METHOD, PATH, BODY, HEADERS): one request over HTTP/3 with the key
sub h3 { h3_request($_[0], $_[1], $KEY, @_[2, 3]) }

sub long_poll { status_json()->{long_poll} }

sub create {
    return h3('POST', '/api/v1/sessions', '{"delivery_mode": "long_poll"}',
              { 'Content-Type' => 'application/json' });
}

# is(), with the answer's status and message when it is not right
sub answer_is {
    my ($r, $status, $name) = @_;

    is($r->{status}, $status, $name)
        or Test::More::diag("got $r->{status} $r->{content}");
    is($r->{version}, '3', "$name: over HTTP/3");
}


# --- the checks -----------------------------------------------------------

my %checks;

# every endpoint, GET and HEAD, over HTTP/3
$checks{endpoints} = sub {
    my ($name) = @_;

    my $r = create();
    answer_is($r, 201, "$name - create");
    my $sid = $r->{json}{id} // 'none';
    is($r->{headers}{location}, "/api/v1/sessions/$sid",
       "$name - create: Location");

    $r = h3('GET', '/api/v1/sessions?limit=100');
    answer_is($r, 200, "$name - list");
    ok((grep { $_->{id} eq $sid } @{ $r->{json}{data} // [] }),
       "$name - list: the session");

    $r = h3('HEAD', '/api/v1/sessions?limit=100');
    answer_is($r, 200, "$name - HEAD list");
    is($r->{content}, '', "$name - HEAD list: no body");

    $r = h3('GET', "/api/v1/sessions/$sid");
    answer_is($r, 200, "$name - one session");
    is($r->{json}{id}, $sid, "$name - one session: its id");

    $r = h3('HEAD', "/api/v1/sessions/$sid");
    answer_is($r, 200, "$name - HEAD one session");

    $r = h3('GET', "/api/v1/sessions/$sid/poll?timeout=0");
    answer_is($r, 200, "$name - poll, nothing yet");
    is_deeply($r->{json}{images}, [], "$name - poll: no image");

    my $png = png(1000);
    $r = h3('POST', "/api/v1/sessions/$sid/images", $png,
            { 'Content-Type' => 'image/png' });
    answer_is($r, 201, "$name - upload");
    my $iid = $r->{json}{id} // 'none';

    $r = h3('GET', "/api/v1/sessions/$sid/images");
    answer_is($r, 200, "$name - list images");
    is(scalar @{ $r->{json}{data} // [] }, 1, "$name - list images: one");

    $r = h3('HEAD', "/api/v1/sessions/$sid/images");
    answer_is($r, 200, "$name - HEAD list images");

    $r = h3('GET', "/api/v1/sessions/$sid/images/$iid");
    answer_is($r, 200, "$name - one image");

    $r = h3('HEAD', "/api/v1/sessions/$sid/images/$iid");
    answer_is($r, 200, "$name - HEAD one image");

    my $etag = '"' . Digest::SHA::sha256_hex($png) . '"';

    $r = h3('GET', "/api/v1/sessions/$sid/images/$iid/content");
    answer_is($r, 200, "$name - content");
    ok($r->{content} eq $png, "$name - content: the bytes");
    is($r->{headers}{etag}, $etag, "$name - content: ETag");
    is($r->{headers}{'content-type'}, 'image/png',
       "$name - content: Content-Type");

    $r = h3('HEAD', "/api/v1/sessions/$sid/images/$iid/content");
    answer_is($r, 200, "$name - HEAD content");
    is($r->{headers}{'content-length'}, length $png,
       "$name - HEAD content: Content-Length");

    $r = h3('GET', "/api/v1/sessions/$sid/images/$iid/content", undef,
            { 'If-None-Match' => $etag });
    answer_is($r, 304, "$name - content, If-None-Match");

    $r = h3('GET', "/api/v1/sessions/$sid/poll?timeout=5");
    answer_is($r, 200, "$name - poll: at once");
    is($r->{json}{images}[0]{id}, $iid, "$name - poll: the image");

    $r = h3('POST', "/api/v1/sessions/$sid/images/$iid/ack");
    answer_is($r, 200, "$name - ack");
    is($r->{json}{acknowledged}, JSON::PP::true, "$name - ack: acknowledged");

    $r = h3('POST', "/api/v1/sessions/$sid/images/$iid/ack");
    answer_is($r, 409, "$name - ack again");

    $r = h3('POST', "/api/v1/sessions/$sid/complete");
    answer_is($r, 200, "$name - complete");

    $r = h3('GET', "/api/v1/sessions/$sid/poll?timeout=5");
    answer_is($r, 410, "$name - poll after complete");
    is($r->{json}{message}, 'all images are acknowledged',
       "$name - poll after complete: message");

    $r = h3('GET', '/api/v1/nope');
    answer_is($r, 404, "$name - an unknown route");

    $r = h3_request('GET', '/api/v1/sessions', undef);
    answer_is($r, 401, "$name - no key");
};

# an image of 300 kB (many QUIC packets, more than the body buffer) goes
# up and comes back byte for byte
$checks{upload} = sub {
    my ($name) = @_;

    my $sid = create()->{json}{id};

    my $png = png(300 * 1024);
    substr($png, 100 + $_ * 997, 1) = chr($_ % 256) for 0 .. 300;

    my $r = h3('POST', "/api/v1/sessions/$sid/images", $png,
               { 'Content-Type' => 'image/png' });
    answer_is($r, 201, "$name - upload");

    $r = h3('GET', "/api/v1/sessions/$sid/images/$r->{json}{id}/content");
    answer_is($r, 200, "$name - content");
    is(length $r->{content}, length $png, "$name - its length");
    ok($r->{content} eq $png, "$name - the same bytes");
};

# 100 polls on one QUIC connection wait, parked; one upload wakes them
# all with the image
$checks{fanout} = sub {
    my ($name) = @_;
    my $n = 100;

    my $sid = create()->{json}{id};

    my $p = h3_parallel($n, 'GET', "/api/v1/sessions/$sid/poll?timeout=30",
                        $KEY);

    my ($lp) = wait_until(20, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == $n && $s->{parked} == $n ? $s : undef;
    });
    ok($lp, "$name - $n polls wait, parked")
        or Test::More::diag(Session::encode_json(long_poll()));

    my $up = h3('POST', "/api/v1/sessions/$sid/images", png(100),
                { 'Content-Type' => 'image/png' });
    answer_is($up, 201, "$name - the upload");

    my $r = h3_collect($p);

    is(scalar @$r, $n, "$name - $n answers on the one connection");
    is(scalar(grep { $_->{status} == 200 } @$r), $n, "$name - $n x 200");
    is(scalar(grep { ($_->{json}{images}[0]{id} // '') eq $up->{json}{id} }
              @$r),
       $n, "$name - each with the image");

    my $after = long_poll();
    is($after->{waiting}, 0, "$name - nobody waits after");
    is($after->{parked}, 0, "$name - nobody parked after");
};

# the client of 100 polls on one QUIC connection goes away (it closes
# the connection): they all leave
$checks{gone} = sub {
    my ($name) = @_;
    my $n = 100;

    my $sid = create()->{json}{id};

    my $p = h3_parallel($n, 'GET', "/api/v1/sessions/$sid/poll?timeout=30",
                        $KEY);

    my ($lp) = wait_until(20, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == $n && $s->{parked} == $n;
    });
    ok($lp, "$name - $n polls wait, parked");

    kill 'INT', $p->{pid};
    h3_collect($p);

    my ($gone) = wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == 0 && $s->{parked} == 0;
    });
    ok($gone, "$name - nobody waits once the client is gone");

    my $r = h3('GET', "/api/v1/sessions/$sid/poll?timeout=0");
    answer_is($r, 200, "$name - the session still answers");
};


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

# 100 streams at once, each a connection of nginx (the default is 64)
worker_connections(1024);
no_shuffle();

add_block_preprocessor(sub {
    my $block = shift;

    workers(1);

    db_http_config($block, tls_server($LOCATIONS, 1));

    $block->set_value('config', $CONFIG) unless defined $block->config;

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: every endpoint over HTTP/3
--- check: endpoints
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 2: an image of 300 kB up and back over HTTP/3
--- check: upload
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 3: 100 long polls on one QUIC connection, woken by one upload
--- check: fanout
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 4: the client of 100 polls on one QUIC connection goes away
--- check: gone
--- request
GET /status
--- error_code: 200
--- no_error_log
[error]
[alert]
