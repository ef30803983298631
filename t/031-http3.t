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
use Session;
use SessionTest qw(:DEFAULT check_init db_http_config);
use Transport qw(tls_server http3_nginx http3_client h3_request h3_parallel
                 h3_collect);
use ApiOver qw(endpoints upload fanout gone);

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

our $LOCATIONS = <<'EOF';
        location /api/ {
            session_api;
            session_limits create=1000 list=1000 other=1000;
        }
EOF

# the requests over HTTP/3, each on a QUIC connection of its own
# (t/lib/ApiOver.pm)
our $H3 = {
    version => '3',
    key     => $KEY,
    request => \&h3_request,
};

# 100 polls on one QUIC connection, each stream a connection of nginx,
# parked as an HTTP/1.1 one is; its client goes away on SIGINT (it
# closes the connection)
our $QUIC = {
    version     => '3',
    parallel    => sub { h3_parallel($_[0], 'GET', @_[1, 2]) },
    collect     => sub { (h3_collect($_[0]), undef) },
    parked      => 100,
    connections => 1,
    stop        => 'INT',
};


# --- the checks -----------------------------------------------------------

my %checks;

# every endpoint, GET and HEAD, over HTTP/3
$checks{endpoints} = sub { endpoints($H3, $_[0]) };

# an image of 300 kB (many QUIC packets) up and back
$checks{upload} = sub { upload($H3, $_[0]) };

# 100 polls on one QUIC connection wait, parked; one upload wakes them
# all with the image
$checks{fanout} = sub { fanout($H3, $QUIC, $_[0]) };

# the client of 100 polls on one QUIC connection goes away: they all
# leave
$checks{gone} = sub { gone($H3, $QUIC, $_[0]) };


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
