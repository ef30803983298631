# A binary upgrade (kill -USR2, then QUIT of the old master;
# docs/operations.md "Upgrading", decision (va)): the new master maps the
# old one's session_limit_zone (a memfd it inherits), so the counters
# carry on, and while both binaries serve they count in one zone.  A zone
# of another size (or another layout) starts empty, as a restart would.
# The gauges of session_status count the polls of both binaries' workers
# (their slot numbers overlap), and the old binary's waiting polls answer
# at its QUIT.
#
# The slow side (two versions of the module on one database, a reload and
# a binary upgrade under load with 1,000 polls) is make upgrade-test
# (util/upgrade.sh).  Counters across a reload: t/006 TEST 10.
#
# Blocks whose checks need Perl say "--- check: NAME" (as t/006 does);
# the old master is always sent QUIT at the end of a check, whatever
# happened, so that a failing check leaves one nginx behind, not two.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use IO::Socket::INET ();
use Time::HiRes ();
use Session;
use SessionTest qw(:DEFAULT api_request send_get answered answer burst
                    status_json error_log check_init db_http_config
                    reset_of fresh_window);

our $TAG = sprintf 't037-%d-%d', $$, time;

our @KEYS = map { fixture(plan => 'pro', name => "$TAG-$_")->{key} } 1 .. 7;

our $PNG = "\x89PNG\r\n\x1a\n" . ('x' x 32);


# --- helpers -------------------------------------------------------------

sub nope {
    my ($key) = @_;
    return api_request('GET', '/api/v1/nope', $key);
}

sub remaining { $_[0]{headers}{'x-ratelimit-remaining'} // 'none' }

sub edit_conf {
    my ($from, $to) = @_;

    my $file = $Test::Nginx::Util::ConfFile;

    open my $fh, '<', $file or die "open $file: $!";
    my $conf = do { local $/; <$fh> };
    close $fh;

    $conf =~ s/\Q$from\E/$to/g or die "\"$from\" is not in $file";

    open $fh, '>', $file or die "open $file: $!";
    print $fh $conf;
    close $fh;
}

sub children {
    my ($pid) = @_;
    return grep { /^\d+$/ } split /\s+/, `pgrep -P $pid`;
}

sub listening_count {
    my $n = () = error_log() =~ /session listen: listening/g;
    return $n;
}

# upgrade(NAME, CODE): kill -USR2 to the master; once the new master's
# node listens (its worker 0), CODE->(OLD, NEW) runs while both
# binaries serve; then QUIT to the old master, which must be gone within 10 s.  The
# QUIT is sent whatever CODE did.  Returns (OLD, NEW).
sub upgrade {
    my ($name, $code) = @_;

    my $old = master_pid();
    my $heard = listening_count();

    kill 'USR2', $old or die "kill USR2 $old: $!";

    # the old master renames its pid file, then the new one writes its own
    my ($new) = wait_until(10, 0.05, sub {
        return undef unless -e "$Test::Nginx::Util::PidFile.oldbin";
        my $p = eval { master_pid() };
        return $p && $p =~ /^\d+$/ && $p ne $old ? $p : undef;
    });

    my $ok = eval {
        die "no new master within 10 s\n" unless $new;

        my ($up) = wait_until(10, 0.05, sub {
            children($new) == 2 && listening_count() >= $heard + 1;
        });
        die "the new master's node does not listen within 10 s\n"
            unless $up;

        $code->($old, $new);
        1;
    };
    my $err = $@;

    kill 'QUIT', $old;
    my ($gone) = wait_until(10, 0.05, sub { !kill 0, $old });

    die $err unless $ok;
    ok($gone, "$name - the old master is gone within 10 s of its QUIT");

    return ($old, $new);
}


# --- the checks -----------------------------------------------------------

my %checks;

# other=100: 90 used, USR2, QUIT of the old master: the new binary's
# workers go on from 90 (the block's own request then finds 92 used).
# Another key's first request after the upgrade inserts into trees that
# the old binary made (they hold two keys, so nginx's rbtree calls the
# tree's insert function, which must be the new program's).
$checks{counters} = sub {
    my ($name) = @_;
    my $k = $KEYS[0];

    fresh_window(10);

    is(nope($KEYS[4])->{status}, 404, "$name - another key before");

    my @r = map { nope($k) } 1 .. 90;
    is(scalar(grep { $_->{status} == 404 } @r), 90,
       "$name - 90 requests admitted before the upgrade");
    is(remaining($r[-1]), 10, "$name - 10 left before the upgrade");

    my (undef, $new) = upgrade($name, sub {});

    like(error_log(),
         qr/\[notice\] .*session_limit_zone "z" is the previous binary's/,
         "$name - the new master took the old zone over");

    my $r = nope($k);
    is($r->{status}, 404, "$name - admitted after the upgrade");
    is(remaining($r), 9, "$name - the count went on: 9 left");
    ok((grep { $_ eq ($r->{headers}{'x-worker'} // '') } children($new)),
       "$name - answered by a worker of the new master");

    for my $i (1 .. 2) {
        $r = nope($KEYS[6]);
        is($r->{status}, 404, "$name - a new key after the upgrade, $i");
        is(remaining($r), 100 - $i, "$name - its own count, $i");
    }
};

# other=60: while both binaries serve, bursts of 40 requests at once on
# 40 connections (at least two, until both binaries' workers have
# answered, five at most): exactly 60 admitted over the workers of both.
$checks{overlap} = sub {
    my ($name) = @_;
    my $k = $KEYS[1];

    fresh_window(15);

    upgrade($name, sub {
        my ($old, $new) = @_;

        my $req = "GET /api/v1/nope HTTP/1.1\r\nHost: localhost\r\n"
                  . "Authorization: Bearer $k\r\nConnection: close\r\n\r\n";

        my (%status, %by, $sent);
        my %gen = ((map { $_ => 'old' } children($old)),
                   (map { $_ => 'new' } children($new)));

        for my $n (1 .. 5) {
            my ($raws, $left) = burst(40, $req, undef);
            is($left, 0, "$name - every answer of burst $n within 30 s");
            $sent += 40;

            for my $raw (@$raws) {
                my ($st) = $raw =~ m{^HTTP/1\.1 (\d{3}) };
                my ($pid) = $raw =~ m{\r\nX-Worker: (\d+)\r\n}i;
                $status{$st // 'none'}++;
                $by{$gen{$pid // ''} // 'unknown'}++;
            }

            last if $n >= 2 && $by{old} && $by{new};
        }

        is(join(' ', map { "$_: $status{$_}" } sort keys %status),
           '404: 60 429: ' . ($sent - 60),
           "$name - 60 admitted, the rest refused");
        ok($by{old} && $by{new},
           "$name - both binaries' workers answered")
            or diag(Test::More::explain(\%by));
    });
};

# two polls wait in the old binary's workers; after USR2 the new
# workers (same slot numbers in their master) count them too in
# long_poll.waiting; at the old master's QUIT they answer 200 at once.
$checks{polls} = sub {
    my ($name) = @_;
    my $k = $KEYS[2];

    my $c = api_request('POST', '/api/v1/sessions', $k,
                        { delivery_mode => 'long_poll' });
    die "create: $c->{status}\n" unless $c->{status} == 201;
    my $sid = $c->{json}{id};

    my @polls = map { send_get("/api/v1/sessions/$sid/poll?timeout=60", $k) }
                1 .. 2;

    my ($waiting) = wait_until(10, 0.05, sub {
        status_json()->{long_poll}{waiting} == 2;
    });
    ok($waiting, "$name - two polls wait before the upgrade");

    my $t0;

    upgrade($name, sub {
        my ($old, $new) = @_;

        # every worker of both answers /status the same
        my @w = map { status_json()->{long_poll}{waiting} } 1 .. 8;
        is("@w", '2 2 2 2 2 2 2 2',
           "$name - long_poll.waiting is 2 while both binaries serve");

        ok(!answered($_, 0), "$name - the poll still waits") for @polls;

        $t0 = Time::HiRes::time();
    });

    for my $p (@polls) {
        my $a = answer($p, 10);
        is($a->{status}, 200, "$name - the poll answers 200 at the QUIT");
        cmp_ok($a->{t1} - $t0, '<', 3, "$name - within 3 s of the QUIT");
        is_deeply($a->{json} && $a->{json}{images}, [],
                  "$name - with no images");
    }

    my ($zero) = wait_until(10, 0.05, sub {
        status_json()->{long_poll}{waiting} == 0;
    });
    ok($zero, "$name - no poll waits after the QUIT");
};

# the new binary's zone is twice as large: it starts empty, with a
# notice; the old binary kept its own counts
$checks{resized} = sub {
    my ($name) = @_;
    my $k = $KEYS[3];

    fresh_window(10);

    nope($k) for 1 .. 30;

    edit_conf('session_limit_zone z:1m;', 'session_limit_zone z:2m;');

    upgrade($name, sub {});

    my $text = 'session_limit_zone "z" starts empty: the previous binary\'s'
               . ' has another size or layout';
    like(error_log(), qr/\[notice\] .*\Q$text\E/, "$name - the notice");

    my $r = nope($k);
    is(remaining($r), 99, "$name - the new zone counts from 0: 99 left");
};


# a reload that fails after the zones are made (a listen on a port in
# use: the sockets come after the shared memory) hands nothing on; the
# running configuration keeps the zone's memfd, and a USR2 after it still
# carries the counters on
$checks{failed_reload} = sub {
    my ($name) = @_;
    my $k = $KEYS[5];

    fresh_window(15);

    my $busy = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                     LocalPort => 0, Listen => 1)
        or die "listen: $!";
    my $port = $busy->sockport;

    is(remaining(nope($k)), 99 - $_, "$name - request $_") for 0 .. 4;

    my $mark = '# another listen';
    edit_conf($mark, "listen 127.0.0.1:$port;");
    kill 'HUP', master_pid() or die "kill HUP: $!";

    my ($refused) = wait_until(15, 0.1, sub {
        error_log() =~ /\[emerg\] .*still could not bind/;
    });
    ok($refused, "$name - the reload failed: the port is taken");

    edit_conf("listen 127.0.0.1:$port;", $mark);
    close $busy;

    upgrade($name, sub {});

    like(error_log(),
         qr/\[notice\] .*session_limit_zone "z" is the previous binary's/,
         "$name - the new master took the old zone over");
    is(remaining(nope($k)), 94, "$name - the count went on: 94 left");
};


# --- blocks -------------------------------------------------------------

master_on();
workers(2);
worker_connections(1024);
no_shuffle();
no_long_string();

add_block_preprocessor(sub {
    my $block = shift;

    db_http_config($block, "session_limit_zone z:1m;\n");

    $block->set_value('config', <<'EOF') unless defined $block->config;
    # another listen
    location /api/ {
        session_api;
        session_limits other=100;
        add_header X-Worker $pid always;
    }
    location = /status {
        session_status;
    }
EOF

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: USR2 and QUIT of the old master: a key at 90 of 100 goes on from 90
--- check: counters
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEYS[0]\n"
--- error_code: 404
--- response_headers
X-RateLimit-Limit: 100
X-RateLimit-Remaining: 8
--- no_error_log
[error]
[alert]
[crit]



=== TEST 2: while both binaries serve they count in one zone: exactly the limit is admitted
--- config
    location /api/ {
        session_api;
        session_limits other=60;
        add_header X-Worker $pid always;
    }
--- check: overlap
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEYS[1]\n"
--- error_code: 429
--- response_headers
X-RateLimit-Remaining: 0
--- no_error_log
[error]
[alert]
[crit]



=== TEST 3: polls of the old binary count in session_status while both serve and answer at its QUIT
--- check: polls
--- request
GET /status
--- error_code: 200
--- response_body_like: "long_poll": \{"waiting": 0,
--- no_error_log
[error]
[alert]
[crit]



=== TEST 4: a zone of another size starts empty after the upgrade
--- check: resized
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEYS[3]\n"
--- error_code: 404
--- response_headers
X-RateLimit-Remaining: 98
--- no_error_log
[error]
[alert]
[crit]



=== TEST 5: a reload that fails keeps the memfd: a USR2 after it still carries the counters on
--- check: failed_reload
--- request
GET /api/v1/nope
--- more_headers eval
"Authorization: Bearer $::KEYS[5]\n"
--- error_code: 404
--- response_headers
X-RateLimit-Remaining: 93
--- no_error_log
[error]
[alert]
[crit]
