# One LISTEN connection per node (docs/decisions.md (ye)): with two
# workers, worker 0 alone listens and passes each session's events to
# the other worker when it holds polls (src/db/ngx_http_session_db_relay.c).
#
# The polls are sent to a second server of the same nginx that listens
# with "reuseport", so that the kernel spreads their connections over
# both workers; its access log names the worker ($pid) that answered.
# A block's checks:
#   - one LISTEN backend for the node, not one per worker;
#   - polls on sessions in both workers, each woken by its upload, well
#     before its timeout;
#   - the LISTEN connection cut: every worker with polls reads its
#     sessions again (one statement each), nobody is answered, then
#     uploads wake them all;
#   - the other worker stopped (SIGSTOP) while more wake-ups come than
#     its socket queues: once it runs again it says so and reads every
#     session again, and each poll gets its image;
#   - webhooks queued while the dispatcher of either worker may be the
#     one to send them: each is delivered;
#   - a reload whose relay cannot be made (the master out of
#     descriptors): nginx runs on without it (decisions.md (yi)).
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use IO::Select ();
use IO::Socket::INET ();
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json);
use Webhook qw(free_port);
use SessionTest qw(:DEFAULT api_request send_get answered answer status_json
                    long_poll_session png_upload
                    error_log check_init worker_pids need_debug_log
                    listening master_pid listen_cut);

our $TAG = sprintf 't052-%d-%d', $$, time;

our $F = fixture(plan => 'pro', name => "$TAG-main");
our $KEY = $F->{key};

# the polls' server: reuseport spreads connections over the workers
$ENV{TEST_NGINX_SPREAD_PORT} = free_port();
our $SPREAD = $ENV{TEST_NGINX_SPREAD_PORT};


# --- helpers -------------------------------------------------------------

sub api { return api_request(@_[0 .. 4], { timeout => 30, port => $_[5] }) }

sub create { return long_poll_session($KEY) }

sub upload { return png_upload($KEY, $_[0]) }

# a poll on the spreading server, on its own connection
sub poll_send {
    my ($sid) = @_;
    return send_get("/api/v1/sessions/$sid/poll?timeout=30", $KEY, $SPREAD);
}

sub long_poll { status_json()->{long_poll} }

sub listen_backends {
    return psql(q{SELECT count(*) FROM pg_stat_activity}
                . q{ WHERE application_name = 'nginx session listen'});
}

# the workers' pids that answered the polls of @sid (the spread log)
sub answering_pids {
    my (@sid) = @_;

    my %want = map { $_ => 1 } @sid;
    my %pids;

    open my $fh, '<', "$Test::Nginx::Util::ServRoot/logs/spread.log"
        or return ();

    while (my $line = <$fh>) {
        my ($pid, $sid) = $line =~ m{^(\d+) /api/v1/sessions/([^/]+)/poll}
            or next;
        $pids{$pid}++ if $want{$sid};
    }

    return keys %pids;
}

# $n polls on $n sessions, waiting in both workers (the connections are
# spread by the kernel; an unlucky draw is drawn again, 5 times at most)
sub spread_polls {
    my ($name, $n) = @_;

    my @sid = map { create() } 1 .. $n;

    # the keys are in the auth cache, the LISTEN connection is up
    listening();

    my @polls = map { poll_send($_) } @sid;

    my ($lp) = wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} >= $n ? $s : undef;
    });
    ok($lp, "$name - $n polls wait");

    return (\@sid, \@polls, $lp);
}


# --- the checks -----------------------------------------------------------

my %checks;

$checks{one_listener} = sub {
    my ($name) = @_;

    listening();

    my ($up) = wait_until(10, 0.05, sub { listen_backends() >= 1 });
    ok($up, "$name - the node listens");

    is(scalar(worker_pids()), 2, "$name - two workers");
    is(listen_backends(), 1, "$name - one LISTEN connection for both");
};


$checks{wake} = sub {
    my ($name) = @_;
    my $n = 16;

    my ($sid, $polls) = spread_polls($name, $n);

    ok(!IO::Select->new(map { $_->{sock} } @$polls)->can_read(0.3),
       "$name - nobody is answered before the uploads");

    my @img = map { upload($_) } @$sid;

    my $woken = 0;

    for my $i (0 .. $n - 1) {
        my $r = answer($polls->[$i], 10);

        $woken++ if $r->{status} == 200
                    && ($r->{json}{images}[0]{id} // '') eq $img[$i]{id}
                    && $r->{elapsed} < 10;
    }

    is($woken, $n, "$name - each poll woken with its image, before its "
                   . "timeout");

    my @pids = answering_pids(@$sid);
    is(scalar @pids, 2, "$name - the polls were in both workers");
};


$checks{lost} = sub {
    my ($name) = @_;
    my $n = 16;

    my ($sid, $polls, $lp) = spread_polls($name, $n);

    is(listen_cut(), 1, "$name - the LISTEN connection is cut");

    # each worker with polls reads its sessions again: one statement each
    my ($after) = wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{reads} >= $lp->{reads} + 2 ? $s : undef;
    });
    ok($after, "$name - both workers read their sessions again");

    ok(!IO::Select->new(map { $_->{sock} } @$polls)->can_read(0.3),
       "$name - nobody is answered");

    my @img = map { upload($_) } @$sid;
    my $woken = grep { answer($_, 10)->{status} == 200 } @$polls;
    is($woken, $n, "$name - then each is woken by its upload");

    is(scalar(answering_pids(@$sid)), 2,
       "$name - the polls were in both workers");
};


# the worker that does not listen is stopped; more wake-ups come for it
# than its socket takes (a few hundred datagrams: its send buffer).  The
# uploads are made in the database by the module's own function, with
# its NOTIFY, each committed on its own a few milliseconds apart, so that
# each reaches worker 0 alone and leaves as a datagram of its own (an
# upload over HTTP could be given to the stopped worker).
sub sql_uploads {
    my ($sids, $n) = @_;

    my $array = 'ARRAY[' . join(', ', map { sql_quote($_) } @$sids)
                . ']::uuid[]';

    psql(qq{DO \$\$ DECLARE s uuid[] := $array; o text; BEGIN}
         . qq{ FOR i IN 0 .. $n - 1 LOOP}
         . qq{ SELECT outcome INTO o FROM image_upload(}
         . sql_quote($F->{project_id}) . q{, s[i % array_length(s, 1) + 1],}
         . q{ 'image/png', sha256('\x00'::bytea), '\x00'::bytea);}
         . q{ IF o <> 'ok' THEN RAISE 'upload: %', o; END IF;}
         . q{ COMMIT; PERFORM pg_sleep(0.003); END LOOP; END $$});
}

$checks{behind} = sub {
    my ($name) = @_;
    my $n = 24;

    need_debug_log('the "session listen: listening" line') or return;

    my ($sid, $polls) = spread_polls($name, $n);

    my ($listener) = error_log() =~ /(\d+)#\d+: .*session listen: listening/;
    my ($other) = grep { $_ != $listener } worker_pids();
    ok($listener && $other, "$name - the listener and the other worker");

    kill 'STOP', $other;

    my $ok = eval { sql_uploads($sid, 800); 1 };
    my $err = $@;

    kill 'CONT', $other;
    die $err unless $ok;

    my $woken = grep { answer($_, 10)->{status} == 200 } @$polls;
    is($woken, $n, "$name - every poll woken once the worker runs");

    my ($said) = wait_until(5, 0.05, sub {
        error_log() =~ /$other#\d+: .*session relay: worker 0's wake-ups were not all taken/;
    });
    ok($said, "$name - the worker says it fell behind");
};


# pids whose "session listen: listening" line is in the error log
sub listener_pids {
    my $log = error_log();
    my %pids;
    $pids{$1}++ while $log =~ /(\d+)#\d+: [^\n]*session listen: listening/g;
    return keys %pids;
}


# a reload: the new configuration's workers get sockets of their own,
# its worker 0 listens, the old workers' LISTEN connection goes
$checks{reload} = sub {
    my ($name) = @_;

    need_debug_log('the "session listen: listening" lines') or return;
    listening();

    my %old = map { $_ => 1 } worker_pids();
    kill 'HUP', master_pid();

    my ($new) = wait_until(15, 0.05, sub {
        my @w = worker_pids();
        @w == 2 && !grep { $old{$_} } @w;
    });
    ok($new, "$name - two new workers, the old ones gone");

    my ($heard) = wait_until(10, 0.05, sub {
        grep { !$old{$_} } listener_pids();
    });
    ok($heard, "$name - a new worker listens");

    my ($one) = wait_until(10, 0.05, sub { listen_backends() == 1 });
    ok($one, "$name - one LISTEN connection again");

    my ($sid, $polls) = spread_polls($name, 16);
    my @img = map { upload($_) } @$sid;
    my $woken = grep { answer($_, 10)->{status} == 200 } @$polls;
    is($woken, 16, "$name - polls in both new workers woken");
    is(scalar(grep { !$old{$_} } answering_pids(@$sid)), 2,
       "$name - by both new workers");
};


# worker 0 killed: its replacement listens, and the other worker's polls
# (told "LISTEN in effect again", they read again) are woken through it
$checks{respawn} = sub {
    my ($name) = @_;
    my $n = 16;

    need_debug_log('the "session listen: listening" lines') or return;

    my ($sid, $polls) = spread_polls($name, $n);

    my ($listener) = listener_pids();
    ok($listener, "$name - worker 0 listens");
    kill 'KILL', $listener;

    my ($again) = wait_until(15, 0.05, sub {
        grep { $_ != $listener } listener_pids();
    });
    ok($again, "$name - its replacement listens");

    my @img = map { upload($_) } @$sid;
    my @st = map { answer($_, 10) } @$polls;

    # the killed worker's polls lose their connection (status 0)
    my @woken = grep { $_->{status} == 200 && $_->{elapsed} < 10 } @st;
    my @other = grep { $_->{status} != 200 && $_->{status} != 0 } @st;
    cmp_ok(scalar @woken, '>=', 1, "$name - the other worker's polls woken");
    is(scalar(@woken) + scalar(grep { $_->{status} == 0 } @st), $n,
       "$name - every poll woken or gone with its worker");
    is(scalar @other, 0, "$name - no other answer");
};


$checks{webhooks} = sub {
    my ($name) = @_;

    # both workers' dispatchers are woken: every event is delivered once
    # (the receiver side is t/015's; here: the outbox rows)
    my $n = 10;
    my @sid;

    for (1 .. $n) {
        my $r = api('POST', '/api/v1/sessions', $KEY,
                    { delivery_mode => 'webhook',
                      webhook_url => "http://127.0.0.1:$SPREAD/hook/$TAG" });
        die "create: $r->{status} $r->{content}\n" unless $r->{status} == 201;
        push @sid, $r->{json}{id};
    }

    upload($_) for @sid;

    my $list = join ', ', map { "'$_'" } @sid;
    my ($done) = wait_until(15, 0.1, sub {
        psql(qq{SELECT count(*) FROM webhook_outbox}
             . qq{ WHERE session_id IN ($list) AND delivered_at IS NOT NULL})
            == $n;
    });
    ok($done, "$name - $n events delivered");
};


# A reload whose relay cannot be made (socketpair() fails: the master is
# out of descriptors) goes on without it, every worker with a LISTEN
# connection of its own: nginx exits when a module's init fails, on a
# reload too, so the relay's failure must not be one.  (What nginx itself
# then does short of descriptors, workers it cannot start, is its own.)
sub set_workers {
    my ($n) = @_;
    my $conf = $Test::Nginx::Util::ConfFile;
    open my $in, '<', $conf or die "$conf: $!";
    my $text = do { local $/; <$in> };
    close $in;
    $text =~ s/\bworker_processes\s+\d+;/worker_processes $n;/
        or die "no worker_processes in $conf";
    open my $out, '>', $conf or die "$conf: $!";
    print $out $text;
    close $out;
}

sub master_state {
    my ($master) = @_;
    open my $fh, '<', "/proc/$master/stat" or return 'gone';
    my $stat = <$fh>;
    close $fh;
    return $stat =~ /^\d+ \(.*\) (\S)/ ? $1 : '?';
}

$checks{relay_unmade} = sub {
    my ($name) = @_;

    my $master = master_pid();
    opendir my $d, "/proc/$master/fd" or die "/proc/$master/fd: $!";
    my $fds = grep { /^\d+$/ } readdir $d;
    closedir $d;
    my $limits = `prlimit --pid=$master --nofile --noheadings --raw --output=SOFT,HARD`;
    my ($soft, $hard) = $limits =~ /(\d+)\s+(\d+)/
        or die "prlimit: '$limits'";

    # 12 workers: the spreading server's reuseport takes a socket for
    # each (10 more), before the modules' init; then room for 5 of the
    # relay's 12 pairs.  The soft limit only: it is raised back below
    # without a capability.
    my $limit = $fds + 20;
    system('prlimit', "--pid=$master", "--nofile=$limit:$hard") == 0
        or die "prlimit: $?";
    set_workers(12);
    my %old = map { $_ => 1 } worker_pids();
    kill 'HUP', $master;

    my ($unmade) = wait_until(10, 0.05, sub {
        error_log() =~ /session relay: not made, every worker has a LISTEN/;
    });
    ok($unmade, "$name - the relay is not made");
    like(error_log(), qr/session relay: socketpair\(\) failed/,
         "$name - for want of descriptors");

    system('prlimit', "--pid=$master", "--nofile=$soft:$hard") == 0
        or die "prlimit: $?";

    # the master has taken the configuration (the reload is not refused)
    # and runs on
    my ($took) = wait_until(10, 0.05, sub {
        grep { !$old{$_} } worker_pids();
    });
    ok($took, "$name - workers of the new configuration start");
    like(master_state($master), qr/^[RS]$/, "$name - the master runs on");
};


our $CONFIG = <<'EOF';
    location /api/ {
        session_api;
    }

    location = /status {
        session_status;
    }
EOF

our $HTTP = <<'EOF';
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_webhook_allow_private on;
    log_format spread '$pid $request_uri $status';

    server {
        listen 127.0.0.1:$TEST_NGINX_SPREAD_PORT reuseport;
        access_log logs/spread.log spread;

        location /api/ {
            session_api;
        }

        location /hook/ {
            return 204;
        }
    }
EOF

master_on();

add_block_preprocessor(sub {
    my $block = shift;

    workers(2);

    $block->set_value('http_config', $HTTP) unless defined $block->http_config;
    $block->set_value('config', $CONFIG) unless defined $block->config;
    $block->set_value('more_headers', "Authorization: Bearer $KEY\n");

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: two workers, one LISTEN connection
--- check: one_listener
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 2: polls in both workers are woken by their uploads
--- check: wake
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 3: the LISTEN connection cut: both workers read their sessions again
--- check: lost
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[alert]



=== TEST 4: a worker behind its wake-ups reads every session again
--- check: behind
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 5: webhooks are delivered with either worker's dispatcher
--- check: webhooks
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 6: a reload: the new workers pass wake-ups between them
--- check: reload
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[alert]



=== TEST 7: worker 0 killed: its replacement listens for the node
--- check: respawn
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[emerg]



=== TEST 8: a reload that cannot make the relay goes on without it
--- check: relay_unmade
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log eval
# (nginx's own [emerg] and [alert] lines of the workers started with too
# few descriptors are expected)
qr/exited on signal (?!9\b)/
