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
use Session;
use SessionTest qw(:DEFAULT check_init db_http_config);
use Transport qw(tls_server https_request https_parallel https_collect);
use ApiOver qw(endpoints upload fanout gone);

our $TAG = sprintf 't030-%d-%d', $$, time;

our $KEY = fixture(plan => 'pro', name => "$TAG-main")->{key};

our $LOCATIONS = <<'EOF';
        location /api/ {
            session_api;
            session_limits create=1000 list=1000 other=1000;
        }
EOF

# the requests over HTTP/2 (t/lib/ApiOver.pm)
our $H2 = {
    version => '2',
    key     => $KEY,
    request => sub { https_request('--http2', @_) },
};

# the polls of one client: on one HTTP/2 connection (with their
# requests, a stream cannot be parked), or over HTTP/1.1 and TLS (100
# connections, parked)
sub waiters {
    my ($proto, $version, $parked, $connections) = @_;

    return {
        version     => $version,
        parallel    => sub { https_parallel($proto, @_) },
        collect     => \&https_collect,
        parked      => $parked,
        connections => $connections,
        stop        => 'KILL',
    };
}

our $MUX = waiters('--http2', '2', 0, 1);
our $TLS = waiters('--http1.1', '1.1', 100, 100);


# --- the checks -----------------------------------------------------------

my %checks;

# every endpoint, GET and HEAD, over HTTP/2; and HTTP/1.1 over TLS
$checks{endpoints} = sub {
    my ($name) = @_;

    my $sid = endpoints($H2, $name);

    my $r = https_request('--http1.1', 'GET', "/api/v1/sessions/$sid", $KEY);
    is($r->{status}, 200, "$name - HTTP/1.1 over TLS too");
    is($r->{version}, '1.1', "$name - HTTP/1.1 over TLS: its version");
};

# an image of 300 kB (many DATA frames) up and back
$checks{upload} = sub { upload($H2, $_[0]) };

# 100 polls wait; one upload wakes them all with the image
$checks{fanout} = sub { fanout($H2, $MUX, $_[0]) };
$checks{fanout_tls} = sub { fanout($H2, $TLS, $_[0]) };

# the client of 100 polls goes away: they all leave
$checks{gone} = sub { gone($H2, $MUX, $_[0]) };
$checks{gone_tls} = sub { gone($H2, $TLS, $_[0]) };


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
