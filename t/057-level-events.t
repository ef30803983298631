# The module under a level-triggered event method (events { use poll; },
# docs/operations.md "Event methods"): the whole script runs with poll.
# Under poll or select an event whose handler leaves what made it ready
# (a pipelined request not read yet, a socket that stays writable) fires
# again at every pass of the event loop, and the worker spins at 100 %
# CPU for as long as that lasts; epoll, edge-triggered for client
# connections, hides such a handler.  So each block times the worker's
# CPU (utime + stime of /proc/PID/stat) over a wait of seconds in which
# it has nothing to do, and checks the answers:
#
#   - a parked long poll with a second request pipelined behind it on
#     its connection: the wait costs no CPU, the poll answers at its
#     timeout and the pipelined request is served after it (decision
#     (te));
#   - the same, woken by an upload instead of its timeout;
#   - the flow of a long_poll session: create, an upload gathered in
#     memory and sent in pieces, one streamed through PostgreSQL's COPY,
#     a long poll that gets them, their content in slices, an
#     acknowledgement;
#   - a webhook delivery whose receiver holds its answer, and a delivery
#     whose connection is kept idle afterwards: the worker waits for the
#     answer, and then keeps the idle connection, without spinning.
#
# TEST_NGINX_LEVEL_EVENT=select runs it under select.  Needs an nginx
# built with the method (--with-poll_module, --with-select_module): make
# test-level-events builds one and runs this script against it; the
# script skips against another (Debian's has neither).  Needs
# TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

BEGIN { $ENV{TEST_NGINX_EVENT_TYPE} = $ENV{TEST_NGINX_LEVEL_EVENT} || 'poll' }

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Digest::SHA ();
use File::Temp ();
use IO::Select ();
use IO::Socket::INET ();
use POSIX ();
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json);
use Images qw(png_bytes);
use SessionTest qw(:DEFAULT api_request send_request answer status_json
                    check_init long_poll_session png_upload);
use Webhook;

# Debian's nginx has neither method: util/test-level-events.sh builds one
# that has both, and runs this script against it
{
    my $nginx = $ENV{TEST_NGINX_BINARY} || 'nginx';
    my $ev = $ENV{TEST_NGINX_EVENT_TYPE};

    Test::More->builder->skip_all("$nginx has no $ev module (make"
                                  . ' test-level-events builds one)')
        unless `$nginx -V 2>&1` =~ /--with-\Q$ev\E_module/;
}

our $TAG = sprintf 't057-%d-%d', $$, time;

our $F = fixture(plan => 'pro', name => "$TAG-main");
our $KEY = $F->{key};

our $DIR = File::Temp->newdir('t057-XXXXXX', TMPDIR => 1);
our $LOG = "$DIR/requests.log";
our ($HOOK) = receiver_start($LOG);

# what a worker may burn over a wait of 2 s or more that asks nothing of
# it (the spins this script exists for burn the whole wait)
our $CPU_MAX = 0.5;


# --- helpers -------------------------------------------------------------

# the CPU seconds (user and system) the single worker has used so far
sub worker_cpu {
    my @pids = worker_pids();
    die "workers: @pids\n" unless @pids == 1;

    open my $fh, '<', "/proc/$pids[0]/stat" or die "/proc/$pids[0]/stat: $!";
    my $stat = <$fh>;
    close $fh;

    # the fields after the command's name, which is in parentheses
    $stat =~ s/^.*\)\s+//s;
    my @f = split /\s+/, $stat;

    # utime and stime, fields 14 and 15 of proc(5): 12 and 13 here
    return ($f[11] + $f[12]) / POSIX::sysconf(POSIX::_SC_CLK_TCK());
}

sub parked { status_json()->{long_poll}{parked} }

# a connection with a keepalive poll of SID on it, once it is parked
sub parked_poll {
    my ($sid, $timeout) = @_;

    my $before = parked();

    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $Test::Nginx::Util::ServerPort,
                                  Proto => 'tcp')
        or die "connect: $!";

    print $s "GET /api/v1/sessions/$sid/poll?timeout=$timeout HTTP/1.1\r\n"
             . "Host: localhost\r\nAuthorization: Bearer $KEY\r\n\r\n";

    my ($ok) = wait_until(10, 0.02, sub { parked() > $before });
    die "the poll was not parked\n" unless $ok;

    return $s;
}

# the answers on S until it closes (30 s at most): a list of hashes
# (status, json)
sub answers {
    my ($s) = @_;

    my $sel = IO::Select->new($s);
    my $deadline = Time::HiRes::time() + 30;
    my $buf = '';

    for (;;) {
        my $left = $deadline - Time::HiRes::time();
        last if $left <= 0 || !$sel->can_read($left);
        my $n = sysread $s, my $chunk, 65536;
        last unless $n;
        $buf .= $chunk;
    }

    close $s;

    my @res;

    while ($buf =~ s{\AHTTP/1\.1 (\d{3})[^\r]*\r\n(.*?)\r\n\r\n}{}s) {
        my ($status, $head) = ($1, $2);
        my $len = $head =~ /^Content-Length: (\d+)/mi ? $1 : 0;
        my $body = substr $buf, 0, $len, '';
        push @res, { status => $status,
                     json => eval { decode_json($body) } };
    }

    return @res;
}

sub cpu_ok {
    my ($cpu, $secs, $name) = @_;

    cmp_ok($cpu, '<', $CPU_MAX, sprintf '%s - the worker used %.2f s of CPU'
           . ' over %.1f s of waiting', $name, $cpu, $secs);
}


# --- the checks -----------------------------------------------------------

my %checks;

# a parked poll answered at its timeout, a request pipelined behind it
$checks{pipelined_timeout} = sub {
    my ($name) = @_;

    my $sid = long_poll_session($KEY);
    my $s = parked_poll($sid, 2);

    my $t0 = Time::HiRes::time();
    my $cpu0 = worker_cpu();

    print $s "GET /api/v1/sessions/$sid HTTP/1.1\r\nHost: localhost\r\n"
             . "Authorization: Bearer $KEY\r\nConnection: close\r\n\r\n";

    my @res = answers($s);
    my $cpu = worker_cpu() - $cpu0;
    my $secs = Time::HiRes::time() - $t0;

    is(scalar @res, 2, "$name - two answers on the connection");
    is($res[0]{status}, 200, "$name - the poll answers 200");
    is_deeply($res[0]{json}{images}, [], "$name - with no image");
    cmp_ok($secs, '>', 1.5, "$name - at its timeout");
    is($res[1]{status}, 200, "$name - then the pipelined request 200");
    is($res[1]{json}{id}, $sid, "$name - with the session");
    cpu_ok($cpu, $secs, $name);
};

# a parked poll woken by an upload, a request pipelined behind it
$checks{pipelined_woken} = sub {
    my ($name) = @_;

    my $sid = long_poll_session($KEY);
    my $s = parked_poll($sid, 30);

    my $cpu0 = worker_cpu();

    print $s "GET /api/v1/sessions/$sid/images HTTP/1.1\r\n"
             . "Host: localhost\r\nAuthorization: Bearer $KEY\r\n"
             . "Connection: close\r\n\r\n";

    # the pipelined request waits behind the poll: nothing comes meanwhile
    ok(!IO::Select->new($s)->can_read(2), "$name - no answer yet");

    my $cpu = worker_cpu() - $cpu0;
    cpu_ok($cpu, 2, $name);

    my $img = png_upload($KEY, $sid);

    my @res = answers($s);

    is(scalar @res, 2, "$name - two answers on the connection");
    is($res[0]{status}, 200, "$name - the poll answers 200");
    is_deeply([map { $_->{id} } @{ $res[0]{json}{images} || [] }],
              [$img->{id}], "$name - with the image");
    is($res[1]{status}, 200, "$name - then the pipelined request 200");
    is_deeply([map { $_->{id} } @{ $res[1]{json}{data} || [] }],
              [$img->{id}], "$name - the image list");
};

# create, uploads of every kind, a poll that gets them, their content,
# an acknowledgement
$checks{flow} = sub {
    my ($name) = @_;

    my $sid = long_poll_session($KEY);

    # a poll that waits for the first upload
    my $p = send_request('GET', "/api/v1/sessions/$sid/poll?timeout=30",
                         $KEY);

    my ($waiting) = wait_until(10, 0.02, sub {
        status_json()->{long_poll}{waiting} >= 1
    });
    ok($waiting, "$name - the poll waits");

    my $cpu0 = worker_cpu();

    # 100 KB, gathered in memory, sent in four pieces 0.3 s apart
    my $small = png_bytes(100_000);
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $Test::Nginx::Util::ServerPort,
                                  Proto => 'tcp')
        or die "connect: $!";

    print $s "POST /api/v1/sessions/$sid/images HTTP/1.1\r\n"
             . "Host: localhost\r\nAuthorization: Bearer $KEY\r\n"
             . "Content-Type: image/png\r\nConnection: close\r\n"
             . 'Content-Length: ' . length($small) . "\r\n\r\n";
    $s->autoflush(1);

    for my $i (0 .. 3) {
        Time::HiRes::sleep(0.3);
        print $s substr $small, $i * 25_000, 25_000;
    }

    my @up = answers($s);
    is($up[0]{status}, 201, "$name - the upload in pieces 201");

    my $cpu = worker_cpu() - $cpu0;
    cpu_ok($cpu, 1.2, "$name - a body in pieces");

    my $r = answer($p, 10);
    is($r->{status}, 200, "$name - the poll answers 200");
    is(scalar @{ $r->{json}{images} || [] }, 1, "$name - with the image");

    # 300 KB: over session_body_buffer_size, streamed through COPY
    my $big = png_bytes(300_000);
    my $u = api_request('POST', "/api/v1/sessions/$sid/images", $KEY, $big,
                        { 'Content-Type' => 'image/png' }, { timeout => 30 });
    is($u->{status}, 201, "$name - the streamed upload 201");

    $r = api_request('GET', "/api/v1/sessions/$sid/poll?timeout=5", $KEY,
                     undef, undef, { timeout => 30 });
    is($r->{status}, 200, "$name - a second poll 200");

    my @ids = map { $_->{id} } @{ $r->{json}{images} || [] };
    is(scalar @ids, 2, "$name - with both images");

    my %want = (0 => $small, 1 => $big);

    for my $i (0 .. $#ids) {
        my $c = api_request('GET', "/api/v1/sessions/$sid/images/$ids[$i]"
                            . '/content', $KEY, undef, undef,
                            { timeout => 30 });
        is($c->{status}, 200, "$name - content $i 200");
        ok(defined $c->{content} && $c->{content} eq $want{$i},
           "$name - content $i the bytes uploaded");
    }

    for my $id (@ids) {
        my $a = api_request('POST', "/api/v1/sessions/$sid/images/$id/ack",
                            $KEY, undef, undef, { timeout => 30 });
        is($a->{status}, 200, "$name - acknowledged");
    }

    $r = api_request('GET', "/api/v1/sessions/$sid/poll?timeout=0", $KEY);
    is($r->{status}, 200, "$name - a poll after the acknowledgements 200");
    is_deeply($r->{json}{images}, [], "$name - with no image");
};

# a webhook receiver that holds its answer, then one that keeps the
# connection
$checks{webhook} = sub {
    my ($name) = @_;

    for my $case (['hold', 'waiting for the answer'],
                  ['keep', 'the connection kept idle'])
    {
        my ($kind, $what) = @$case;
        my $path = "/$kind/$TAG/$kind";

        my $r = api_request('POST', '/api/v1/sessions', $KEY,
                            { delivery_mode => 'webhook',
                              webhook_url => "http://127.0.0.1:$HOOK$path" },
                            undef, { timeout => 30 });
        is($r->{status}, 201, "$name - $kind: a webhook session");

        my $c = api_request('POST', "/api/v1/sessions/$r->{json}{id}"
                            . '/complete', $KEY, undef, undef,
                            { timeout => 30 });
        is($c->{status}, 200, "$name - $kind: completed");

        my ($sent) = wait_until(10, 0.02, sub {
            receiver_requests($LOG, $path) >= 1
        });
        ok($sent, "$name - $kind: the event reaches the receiver");

        if ($kind eq 'keep') {
            # the delivery recorded: the connection is idle now
            wait_until(10, 0.05, sub {
                psql('SELECT count(*) FROM webhook_outbox WHERE session_id'
                     . ' = ' . sql_quote($r->{json}{id})
                     . ' AND delivered_at IS NOT NULL') > 0
            });
        }

        my $cpu0 = worker_cpu();
        Time::HiRes::sleep(2);
        cpu_ok(worker_cpu() - $cpu0, 2, "$name - $kind: $what");
    }
};


# --- blocks -------------------------------------------------------------

master_on();
workers(1);
no_shuffle();
no_long_string();

our $CONFIG = <<'EOF';
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
    }

    location = /status {
        session_status;
    }
EOF

add_block_preprocessor(sub {
    my $block = shift;

    $block->set_value('http_config',
                      "    session_db \$TEST_NGINX_SESSION_DB_CONF;\n"
                      . "    session_webhook_allow_private on;\n"
                      . "    session_webhook_timeout 10s;\n")
        unless defined $block->http_config;
    $block->set_value('config', $CONFIG) unless defined $block->config;
    $block->set_value('more_headers', "Authorization: Bearer $KEY\n");

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: a parked poll, a request pipelined behind it: no spin, both answered
--- check: pipelined_timeout
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 2: the same, the poll woken by an upload
--- check: pipelined_woken
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 3: a session's flow: uploads in memory and streamed, poll, content, ack
--- check: flow
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]
[alert]



=== TEST 4: webhooks: an answer held, a connection kept idle
--- check: webhook
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]
[alert]
