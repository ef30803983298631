# The long poll at scale (docs/decisions.md, "Long poll at scale"): the polls of
# one session share the worker's reads of it (one statement per wake-up,
# however many wait), a poll ends when its session expires, a burst of
# requests waits for the one database connection instead of being
# refused, and a poll on one nginx is woken by an upload on another.  A
# parked poll (its request freed while it waits) is answered on a request
# made again that keeps the first one's fields: what the access log has
# of it, HTTP/1.0's end of the connection, its location's configuration,
# its HTTP version (blocks 11 and 12), its server's configuration when it
# is not the port's default server (block 13), HEAD's answer without a
# body, in HTTP/1.1 and HTTP/1.0 (blocks 14 and 15).
#
# Blocks whose checks need Perl say "--- check: NAME" (as t/012 does).
# Waiting polls are sent on raw sockets and read later; "it does not
# answer yet" is a bounded select(), never a fixed sleep before acting.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use File::Temp ();
use IO::Handle ();
use IO::Select ();
use IO::Socket::INET ();
use POSIX ();
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json);
use Webhook qw(free_port);
use SessionTest qw(:DEFAULT api_request send_get answered answer status_json
                    access_log error_log check_init db_http_config
                    listen_cut);

our $TAG = sprintf 't022-%d-%d', $$, time;

our (%KEY, %PROJECT);

for my $name (qw(MAIN OTHER)) {
    my $f = fixture(plan => 'pro', name => "$TAG-$name");
    $KEY{$name} = $f->{key};
    $PROJECT{$name} = $f->{project_id};
}

our $PNG = "\x89PNG\r\n\x1a\n" . ('x' x 32);


# --- helpers -------------------------------------------------------------

# api(METHOD, PATH, KEY, BODY, HEADERS, PORT): SessionTest's api_request,
# 30 s, to PORT if given
sub api { return api_request(@_[0 .. 4], { timeout => 30, port => $_[5] }) }

sub create {
    my ($body) = @_;

    my $r = api('POST', '/api/v1/sessions', $KEY{MAIN},
                $body || { delivery_mode => 'long_poll' });

    die "create: $r->{status} $r->{content}\n"
        unless $r->{status} == 201 && ref $r->{json} eq 'HASH';

    return $r;
}

sub upload {
    my ($sid, $port) = @_;

    my $r = api('POST', "/api/v1/sessions/$sid/images", $KEY{MAIN},
                $PNG, { 'Content-Type' => 'image/png' }, $port);

    die "upload: $r->{status} $r->{content}\n" unless $r->{status} == 201;

    return $r->{json};
}

# a long poll sent on its own connection (SessionTest's send_get),
# answered later by answer()
sub poll_send {
    my ($sid, $query, $key, $port) = @_;

    return send_get("/api/v1/sessions/$sid/poll" . ($query // ''),
                    $key // $KEY{MAIN}, $port);
}

sub long_poll { status_json()->{long_poll} }



# --- the checks -----------------------------------------------------------

my %checks;

# 40 polls of one session share one read; the upload's wake-up is one
# more read, and each poll gets the same answer.  A poll of another
# project on the same session is not given that answer: 403.
$checks{shared} = sub {
    my ($name) = @_;
    my $n = 40;

    my $sid = create()->{json}{id};

    # the keys are in the auth cache: the polls' only statements are reads
    api('GET', "/api/v1/sessions/$sid", $KEY{$_}) for qw(MAIN OTHER);

    # the worker's LISTEN connection is up (a poll woken by an upload), so
    # that its first wake-up of every node does not come in between
    my $warm = create()->{json}{id};
    my $wp = poll_send($warm, '?timeout=30');
    ok(!answered($wp, 0.5), "$name - warm-up poll waits");
    upload($warm);
    is(answer($wp, 10)->{status}, 200, "$name - warm-up poll woken");

    my $before = long_poll();
    is($before->{waiting}, 0, "$name - nobody waits before");

    # where the log stands: the node's arm and its read after the arm
    # are looked for from here
    my $mark = length error_log();

    my $other = poll_send($sid, '?timeout=30', $KEY{OTHER});
    my @polls = map { poll_send($sid, '?timeout=30') } 1 .. $n;

    my $o = answer($other, 10);
    is($o->{status}, 403, "$name - another project's poll: 403");

    # a poll is counted as waiting when it joins its node, before the
    # node's first read, its arm and the read after it are done: wait for
    # that read's answer, and for every read sent to be answered.  A
    # wake-up while a read is out reads once more when it is answered
    # (the read may have missed the image), so the upload below must come
    # after, or it would count two.  The log is read before the
    # counters: a read sent and answered between a snapshot of the
    # counters and a later read of the log would be in the log, not in
    # the snapshot, and count as the wake-up's (2 reads, seen in two
    # .ci/run lanes: the read after the arm)
    my ($lp) = wait_until(10, 0.05, sub {
        my $log = substr(error_log(), $mark);
        my $s = long_poll();
        my $sent = () = $log =~ /poll: one read of \d+ /g;
        my $answered = () = $log =~ /poll: the read of \d+ sessions answered/g;
        $s->{waiting} == $n
            && $log =~ /poll: one arm of \d+ sessions.*poll: one read of \d+ /s
            && $answered == $sent
            ? $s : undef;
    });

    ok($lp, "$name - $n polls wait");
    # the other project's poll has a node of its own; its first read may
    # go in the same statement as the $n's (when they come in one turn).
    # The $n's node reads once more after it arms the session (decision
    # (yf)) before they wait
    cmp_ok($lp && $lp->{reads} - $before->{reads}, '<=', 3,
           "$name - one first read for the $n and one after the arm (and "
           . "one for the other project)");

    my $up = upload($sid);
    my @r = map { answer($_, 10) } @polls;

    is(scalar(grep { $_->{status} == 200 } @r), $n, "$name - $n x 200");
    is(scalar(grep { ($_->{json}{images}[0]{id} // '') eq $up->{id} } @r),
       $n, "$name - each with the image");
    is(scalar(grep { ($_->{content} // '') eq $r[0]{content} } @r), $n,
       "$name - the same bytes");

    my $after = long_poll();
    is($after->{reads} - $lp->{reads}, 1, "$name - the wake-up: one read")
        or diag(join "\n", grep { /session (?:poll|listen|relay):/ }
                              split /\n/, substr(error_log(), $mark));
    is($after->{waiting}, 0, "$name - nobody waits after");
};

# expires_in 2: the poll answers 410 when the session expires, not at the
# next sweep (30 s away here) nor at its timeout
$checks{expiry} = sub {
    my ($name) = @_;

    my $c = create({ delivery_mode => 'long_poll', expires_in => 2 });
    my $p = poll_send($c->{json}{id}, '?timeout=30');
    my $r = answer($p, 10);

    is($r->{status}, 410, "$name - 410");
    is($r->{json}{message}, 'session has expired', "$name - message");

    # expires_at is set between the create's send and its answer
    cmp_ok($r->{t1} - $c->{t0}, '>=', 1.99, "$name - not before expires_at");
    cmp_ok($r->{t1} - $c->{t1}, '<', 2.1, "$name - within 100 ms of it");
};

# session_db_connections 1, its statement held by a lock: 400 requests
# (more than the 256 the queue used to take) wait, then all answer
$checks{burst} = sub {
    my ($name) = @_;
    my $n = 400;

    my $sid = create()->{json}{id};
    api('GET', "/api/v1/sessions/$sid", $KEY{MAIN});

    # sessions whose polls' reads wait in the queue beside the requests
    my @psid = map { create()->{json}{id} } 1 .. 5;

    open my $lock, '|-', 'psql', '-X', '-q', '-d', db_conninfo()
        or die "psql: $!";
    $lock->autoflush(1);
    print $lock "BEGIN;\nLOCK TABLE sessions IN ACCESS EXCLUSIVE MODE;\n";

    my $held = q{SELECT count(*) FROM pg_locks l JOIN pg_class c}
               . q{ ON c.oid = l.relation WHERE c.relname = 'sessions'}
               . q{ AND l.mode = 'AccessExclusiveLock' AND l.granted};
    ok((wait_until(10, 0.05, sub { psql($held) == 1 }))[0],
       "$name - the lock is held");

    my @req = map { send_get("/api/v1/sessions/$sid", $KEY{MAIN}) }
              1 .. $n;
    my @polls = map { poll_send($_, '?timeout=0') } @psid;

    # polls of other sessions: their reads take turns with the queue

    my $blocked = q{SELECT count(*) FROM pg_stat_activity}
                  . q{ WHERE wait_event_type = 'Lock'};
    ok((wait_until(10, 0.05, sub { psql($blocked) >= 1 }))[0],
       "$name - a statement waits for the lock");

    my $sel = IO::Select->new(map { $_->{sock} } @req, @polls);
    ok(!$sel->can_read(1), "$name - nobody is answered while it waits");

    print $lock "COMMIT;\n";
    close $lock;

    my @r = map { answer($_, 20) } @req;
    my %by;
    $by{$_->{status}}++ for @r;

    is($by{200} // 0, $n, "$name - $n x 200")
        or diag(explain(\%by));
    ok(!$by{503}, "$name - no 503");

    my @p = map { answer($_, 20) } @polls;
    is(scalar(grep { $_->{status} == 200 } @p), scalar @psid,
       "$name - the polls waiting beside them: 200");
};

# a second nginx on the same database: an upload on either wakes a poll
# on the other
$checks{two_nodes} = sub {
    my ($name) = @_;

    my $dir = File::Temp::tempdir('t022-node-XXXXXX', TMPDIR => 1,
                                  CLEANUP => 1);
    my $port = free_port();
    my $module = $ENV{TEST_NGINX_LOAD_MODULES}
                 // repo_root() . '/build/ngx_http_session_module.so';
    mkdir "$dir/logs";

    open my $fh, '>', "$dir/nginx.conf" or die "$dir/nginx.conf: $!";
    print $fh <<"EOF";
load_module $module;
worker_processes 1;
error_log $dir/logs/error.log info;
pid $dir/logs/nginx.pid;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $dir;
    proxy_temp_path $dir;
    fastcgi_temp_path $dir;
    uwsgi_temp_path $dir;
    scgi_temp_path $dir;
    session_db $ENV{TEST_NGINX_SESSION_DB_CONF};
    server {
        listen 127.0.0.1:$port;
        location /api/ { session_api; }
    }
}
EOF
    close $fh;

    my $pid = fork // die "fork: $!";

    if ($pid == 0) {
        exec($ENV{TEST_NGINX_BINARY} // '/usr/sbin/nginx', '-p', $dir,
             '-c', "$dir/nginx.conf", '-g', 'daemon off;')
            or POSIX::_exit(127);
    }

    my $ok = eval {
        my ($up) = wait_until(10, 0.05, sub {
            my $r = api('GET', '/api/v1/sessions?limit=1', $KEY{MAIN},
                        undef, undef, $port);
            $r->{status} == 200;
        });
        ok($up, "$name - the second nginx answers");

        my $sid = create()->{json}{id};

        # a poll on the second node, the upload on the first
        my $p = poll_send($sid, '?timeout=30', undef, $port);
        ok(!answered($p, 1), "$name - the poll on the second node waits");

        my $img = upload($sid);
        my $r = answer($p, 10);
        is($r->{status}, 200, "$name - woken by the first node's upload");
        is($r->{json}{images}[0]{id}, $img->{id}, "$name - with the image");
        cmp_ok($r->{t1} - $p->{t0}, '<', 10, "$name - before its timeout");

        # and the other way round
        my $sid2 = create()->{json}{id};
        $p = poll_send($sid2, '?timeout=30');
        ok(!answered($p, 1), "$name - the poll on the first node waits");

        $img = upload($sid2, $port);
        $r = answer($p, 10);
        is($r->{status}, 200, "$name - woken by the second node's upload");
        is($r->{json}{images}[0]{id}, $img->{id}, "$name - with its image");
        1;
    };

    my $err = $@;
    kill 'TERM', $pid;
    waitpid $pid, 0;

    die $err unless $ok;

    my $log = do {
        local $/;
        open my $l, '<', "$dir/logs/error.log";
        $l ? <$l> // '' : '';
    };
    unlike($log, qr/\[(?:error|alert|emerg)\]/,
           "$name - no error in the second node's log");
};


# the reads of many sessions go in one statement: 20 sessions with a
# waiting poll each; the LISTEN connection goes away and comes back, so
# every session is read again (a change may have been missed): one
# statement for the 20.  The polls go on waiting, and are woken.
$checks{batch} = sub {
    my ($name) = @_;
    my $n = 20;

    my @sid = map { create()->{json}{id} } 1 .. $n;
    my @polls = map { poll_send($_, '?timeout=30') } @sid;

    my ($lp) = wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == $n && $s->{parked} == $n ? $s : undef;
    });
    ok($lp, "$name - $n polls wait on $n sessions");

    is(listen_cut(), 1, "$name - the LISTEN connection is cut");

    my ($after) = wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{reads} > $lp->{reads} && $s->{parked} == $n ? $s : undef;
    });
    ok($after, "$name - the sessions are read again, the polls wait");
    is($after && $after->{reads} - $lp->{reads}, 1,
       "$name - one statement for the $n sessions");
    ok(!IO::Select->new(map { $_->{sock} } @polls)->can_read(0.2),
       "$name - nobody is answered");

    my @up = map { upload($_) } @sid[0, -1];
    my @r = map { answer($_, 10) } @polls[0, -1];
    is(scalar(grep { $_->{status} == 200 } @r), 2, "$name - woken: 200");
    is_deeply([ map { $_->{json}{images}[0]{id} } @r ],
              [ map { $_->{id} } @up ], "$name - each with its image");
    close $_->{sock} for @polls[1 .. $n - 2];
};

# a waiting plain HTTP/1.x poll is parked (its nginx request freed, only
# the connection kept); its answer comes on a request made again: the
# image, the rate-limit headers, the access-log line, and the connection
# goes on with a request the client sent while it waited.  With
# "session_poll_park off" ($park 0) the polls wait unparked.
sub parked_check {
    my ($name, $park) = @_;
    my $n = 5;

    my $sid = create()->{json}{id};
    my $port = $Test::Nginx::Util::ServerPort;

    # keep-alive: the poll, later a second request on the same connection
    my $ka = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                   PeerPort => $port, Proto => 'tcp')
        or die "connect: $!";
    print $ka "GET /api/v1/sessions/$sid/poll?timeout=30 HTTP/1.1\r\n"
              . "Host: localhost\r\nAuthorization: Bearer $KEY{MAIN}\r\n\r\n";

    # an HTTP/1.0 poll: answered, then closed
    my $old = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                    PeerPort => $port, Proto => 'tcp')
        or die "connect: $!";
    print $old "GET /api/v1/sessions/$sid/poll?timeout=30 HTTP/1.0\r\n"
               . "Authorization: Bearer $KEY{MAIN}\r\n\r\n";

    my @polls = map { poll_send($sid, '?timeout=30') } 1 .. $n - 2;

    my ($lp) = wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == $n && $s->{parked} == ($park ? $n : 0) ? $s : undef;
    });
    ok($lp, "$name - $n polls wait, " . ($park ? $n : 0) . ' parked');

    # a request behind the poll on its connection, sent while it waits
    print $ka "GET /api/v1/sessions/$sid HTTP/1.1\r\nHost: localhost\r\n"
              . "Authorization: Bearer $KEY{MAIN}\r\nConnection: close\r\n\r\n";
    ok(!answered({ sock => $ka }, 0.3), "$name - the poll still waits");

    my $up = upload($sid);
    my @r = map { answer($_, 10) } @polls, { sock => $old };

    is(scalar(grep { $_->{status} == 200
                     && ($_->{json}{images}[0]{id} // '') eq $up->{id} } @r),
       $n - 1, "$name - the polls answer 200 with the image");

    # both answers of the keep-alive connection, then its close
    my $buf = '';
    my $sel = IO::Select->new($ka);
    my $deadline = Time::HiRes::time() + 10;

    while ($sel->can_read($deadline - Time::HiRes::time())) {
        my $got = sysread $ka, my $chunk, 65536;
        last unless $got;
        $buf .= $chunk;
    }
    close $ka;

    my ($head, $rest) = split /\r\n\r\n/, $buf, 2;
    $head //= '';
    my ($len) = $head =~ /^Content-Length: (\d+)/mi;
    my $body = substr $rest // '', 0, $len // 0, '';

    like($head, qr{^HTTP/1\.1 200 }, "$name - keep-alive poll: 200");
    like($head, qr/^X-RateLimit-Limit: 1000\r?$/mi,
         "$name - with its rate-limit headers");
    unlike($head, qr/^Connection: close/mi, "$name - and keep-alive");
    is((eval { decode_json($body) } || {})->{images}[0]{id}, $up->{id},
       "$name - with the image");
    like($rest // '', qr{^HTTP/1\.1 200 .*"id":\s*"\Q$sid\E"}s,
         "$name - then the request sent while it waited");

    my $after = long_poll();
    is($after->{waiting}, 0, "$name - nobody waits after");
    is($after->{parked}, 0, "$name - nobody parked after");

    my ($line) = wait_until(5, 0.05, sub {
        access_log() =~ m{("GET /api/v1/sessions/\Q$sid\E/poll\?timeout=30 HTTP/1\.0" 200 \d+)};
        $1;
    });
    ok($line, "$name - the access log has the poll's line and status");
}

# read_until(SOCK, SECS, DONE): what arrives until DONE(bytes so far) is
# true, the connection closes or SECS seconds pass.  Returns (the bytes,
# whether it closed).
sub read_until {
    my ($sock, $secs, $done) = @_;

    my $sel = IO::Select->new($sock);
    my $deadline = Time::HiRes::time() + $secs;
    my $buf = '';

    for (;;) {
        return ($buf, 0) if $done->($buf);

        my $left = $deadline - Time::HiRes::time();
        return ($buf, 0) if $left <= 0 || !$sel->can_read($left);

        my $got = sysread $sock, my $chunk, 65536;
        return ($buf, 1) unless $got;
        $buf .= $chunk;
    }
}

# read_answer(SOCK, SECS): one answer of a keep-alive connection, its head
# and body up to its Content-Length; the raw bytes ('' when none came)
sub read_answer {
    my ($sock, $secs) = @_;

    my ($buf) = read_until($sock, $secs, sub {
        my ($head, $rest) = split /\r\n\r\n/, $_[0], 2;
        return 0 unless defined $rest;
        my ($len) = $head =~ /^Content-Length: (\d+)/mi;
        return defined $len && length($rest) >= $len;
    });

    return $buf;
}

# the bytes of an answer, but the values that change from one request to
# the next (Date, the rate limit's remaining requests and reset)
sub answer_shape {
    my ($raw) = @_;

    my $vary = qr/Date|X-RateLimit-Remaining|X-RateLimit-Reset/i;

    $raw =~ s/^($vary): [^\r]*\r$/$1: -\r/mg;

    return $raw;
}

# a parked keep-alive poll's connection gets TCP_NODELAY when it parks
# (with tcp_nodelay on, as nginx sets it once a keep-alive answer is out),
# not in the wake-up; with tcp_nodelay off ($on 0) never.  Its answer has
# the bytes of an answer that was never parked (a timeout=0 poll's, sent
# the same way after it).
sub nodelay_check {
    my ($name, $on) = @_;

    # the TCP_NODELAY part reads debug-level lines (the bytes: always)
    my $debug = nginx_debug();
    debug_log_note('TCP_NODELAY when a poll parks') unless $debug;

    my $sid = create()->{json}{id};
    my $port = $Test::Nginx::Util::ServerPort;
    my $req = "GET /api/v1/sessions/$sid/poll?timeout=%d HTTP/1.1\r\n"
              . "Host: localhost\r\nAuthorization: Bearer $KEY{MAIN}\r\n\r\n";

    my $ka = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                   PeerPort => $port, Proto => 'tcp')
        or die "connect: $!";
    print $ka sprintf($req, 30);

    my ($lp) = wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == 1 && $s->{parked} == 1 ? $s : undef;
    });
    ok($lp, "$name - the poll is parked");

    my ($conn) = $debug ? wait_until(5, 0.05, sub {
        error_log() =~ /\*(\d+) session park: parked/ ? $1 : undef;
    }) : ();
    my $count = sub {
        scalar(() = error_log()
                    =~ /\*\Q$conn\E session park: tcp_nodelay(?:,|$)/mg);
    };

    is($count->(), $on ? 1 : 0,
       "$name - TCP_NODELAY " . ($on ? 'set when it parks' : 'not set'))
        if $debug;

    my $up = upload($sid);
    my $woken = read_answer($ka, 10);
    close $ka;

    like($woken, qr{^HTTP/1\.1 200 .*"id":\s*"\Q$up->{id}\E"}s,
         "$name - the woken poll answers 200 with the image");
    is($count->(), $on ? 1 : 0, "$name - once") if $debug;

    my $now = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                    PeerPort => $port, Proto => 'tcp')
        or die "connect: $!";
    print $now sprintf($req, 0);
    my $plain = read_answer($now, 10);
    close $now;

    like($plain, qr{^HTTP/1\.1 200 }, "$name - the timeout=0 poll: 200");
    is(answer_shape($woken), answer_shape($plain),
       "$name - the woken answer's bytes are the unparked answer's");
}

$checks{nodelay} = sub { nodelay_check($_[0], 1) };
$checks{nodelay_off} = sub { nodelay_check($_[0], 0) };

# a worker killed while polls wait: the gauges of session_status are kept
# per worker process (its slot in the master's table), and the worker the
# master starts in its place begins from zero, so the waiting and parked
# counts forget the dead worker's polls instead of keeping them forever
$checks{killed} = sub {
    my ($name) = @_;
    my $n = 3;

    my $sid = create()->{json}{id};
    my @polls = map { poll_send($sid, '?timeout=30') } 1 .. $n;

    my ($lp) = wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == $n && $s->{parked} == $n ? $s : undef;
    });
    ok($lp, "$name - $n polls wait, parked");

    my @old = worker_pids();
    is(scalar @old, 1, "$name - one worker");
    kill 'KILL', @old;

    my ($now) = wait_until(10, 0.05, sub {
        my @w = worker_pids();
        return undef unless @w == 1 && $w[0] != $old[0];
        my $s = eval { long_poll() };
        $s && $s->{waiting} == 0 && $s->{parked} == 0 ? $s : undef;
    });
    ok($now, "$name - after the kill, a new worker and nobody waits")
        or diag(explain(long_poll()), " workers: @{[ worker_pids() ]} old: @old");

    is(answer($polls[0], 5)->{status}, 0,
       "$name - a poll of the dead worker: its connection is gone");
    close $_->{sock} for @polls;

    # the new worker counts its own
    my $p = poll_send($sid, '?timeout=30');
    my ($again) = wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == 1 && $s->{parked} == 1 ? $s : undef;
    });
    ok($again, "$name - a poll on the new worker: 1 waits, 1 parked");
    upload($sid);
    is(answer($p, 10)->{status}, 200, "$name - and is answered");

    my ($after) = wait_until(5, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == 0 && $s->{parked} == 0 ? $s : undef;
    });
    ok($after, "$name - nobody waits after");
};

$checks{parked} = sub { parked_check($_[0], 1) };
$checks{unparked} = sub { parked_check($_[0], 0) };

# --- a parked poll made again keeps its request ---------------------------
#
# The request made again when a parked poll is woken (or ends by its
# timeout) gets the fields of the one that was freed (park.c's table
# ngx_http_session_park_kept): what nginx logs of it, how it ends its
# connection, the location's configuration.  Blocks 11 and 12.

# raw_send(REQ, PORT): the raw bytes REQ on a new connection, its answer
# not awaited.  Returns the request as send_get does (sock, t0) and req.
sub raw_send {
    my ($req, $port) = @_;

    my $s = IO::Socket::INET->new(
                PeerAddr => '127.0.0.1',
                PeerPort => $port // $Test::Nginx::Util::ServerPort,
                Proto => 'tcp')
        or die "connect: $!";

    print $s $req;

    return { sock => $s, req => $req, t0 => Time::HiRes::time() };
}

# poll_request(PATH, VERSION, HEADERS, METHOD): the bytes of a GET (or
# METHOD) of PATH in HTTP/VERSION with the main key and HEADERS (a string
# of whole lines)
sub poll_request {
    my ($path, $version, $headers, $method) = @_;

    return ($method // 'GET') . " $path HTTP/$version\r\n"
           . ($version eq '1.1' ? "Host: localhost\r\n" : '')
           . "Authorization: Bearer $KEY{MAIN}\r\n" . ($headers // '')
           . "\r\n";
}

# read_close(SOCK, SECS): what arrives until the connection closes, at
# most SECS seconds.  Returns (the bytes, whether it closed).
sub read_close { return read_until(@_, sub { 0 }) }

# head_of(RAW): the status line and headers of an answer, as one string
sub head_of { return (split /\r\n\r\n/, $_[0] // '', 2)[0] // '' }

# header_of(RAW, NAME): the value of an answer's header NAME, or undef
sub header_of {
    my ($raw, $name) = @_;

    return head_of($raw) =~ /^\Q$name\E:[ \t]*([^\r\n]*)/mi ? $1 : undef;
}

# unpark_log(REQUEST_LINE): the line of that request in the logs of
# block 11 (log_format unpark), as a hash; its "log": the location's
# (unpark.log) or that of its limit_except (unpark-other.log).  Undef until
# it is there.
sub unpark_log {
    my ($line) = @_;

    for my $log (qw(unpark unpark-other)) {
        my $text = SessionTest::slurp_log(
                       "$Test::Nginx::Util::ServRoot/logs/$log.log");

        for (split /\n/, $text) {
            next unless /^(\S+) (\S+) (\S+) (\d{3}) (\d+) ([\d.]+) "(.*)"$/
                        && $7 eq $line;

            return { log => $log, method => $1, uri => $2, protocol => $3,
                     status => $4, length => $5, time => $6 };
        }
    }

    return undef;
}

# the log line of a poll P (raw_send) that waited at least WAITED seconds
sub unpark_log_check {
    my ($name, $what, $p, $waited) = @_;

    my ($line) = $p->{req} =~ /^([^\r]*)\r\n/;
    my ($method, $uri, $protocol) = $line =~ m{^(\S+) ([^?\s]+)\S* (\S+)$};

    my ($l) = wait_until(5, 0.05, sub { unpark_log($line) });
    ok($l, "$name - $what: its line in the location's logs") or return;
    is($l->{log}, 'unpark',
       "$name - $what: the location's log, not its limit_except's");

    is($l->{method}, $method, "$name - $what: \$request_method");
    is($l->{uri}, $uri, "$name - $what: \$uri");
    is($l->{protocol}, $protocol, "$name - $what: \$server_protocol");
    is($l->{status}, 200, "$name - $what: \$status");
    is($l->{length}, length $p->{req},
       "$name - $what: \$request_length, the bytes sent");
    cmp_ok($l->{time}, '>=', $waited,
           "$name - $what: \$request_time from the request's start");
}

# Parked polls woken by an upload after about a second, and parked polls
# that end by their timeout (1 s), in HTTP/1.1, HTTP/1.0 and HTTP/1.0
# with "Connection: keep-alive":
#  - their access-log lines (the location's access_log, log_format unpark)
#    have their method, URI, protocol, status, the bytes of the request as
#    $request_length and the time since the request came as
#    $request_time;
#  - the location's "limit_except GET POST" block, which nginx picks for a
#    request by its method when the request is made again, has a log of
#    its own that gets no poll's line;
#  - the answers have the location's add_header;
#  - HTTP/1.0 answers end their connection as a plain HTTP/1.0 request
#    does: closed, or kept alive when the request asked for it (and the
#    connection takes another request then).
$checks{unpark_fields} = sub {
    my ($name) = @_;

    my $sid = create()->{json}{id};
    my $idle = create()->{json}{id};
    my $path = "/api/v1/sessions/$sid/poll?timeout=";
    my $ka = "Connection: keep-alive\r\n";

    # plain HTTP/1.0 requests: the Connection each answer has
    my %plain;

    for my $h ('', $ka) {
        my $p = raw_send(poll_request("/api/v1/sessions/$sid", '1.0', $h));
        my ($raw) = $h ? read_answer($p->{sock}, 10) : read_close($p->{sock}, 10);
        close $p->{sock};
        like($raw, qr{^HTTP/1\.1 200 }, "$name - a plain HTTP/1.0 request"
             . ($h ? ' with keep-alive' : '') . ': 200');
        $plain{$h} = header_of($raw, 'Connection');
    }

    is($plain{''}, 'close', "$name - plain HTTP/1.0: Connection: close");
    is($plain{$ka}, 'keep-alive',
       "$name - plain HTTP/1.0 with keep-alive: Connection: keep-alive");

    # woken: timeouts 30, 31, 32 tell their lines apart
    my %woken = (
        '1.1' => raw_send(poll_request("${path}30", '1.1',
                                       "Connection: close\r\n")),
        '1.0' => raw_send(poll_request("${path}31", '1.0')),
        '1.0 keep-alive' => raw_send(poll_request("${path}32", '1.0', $ka)),
    );

    # ended by their timeout, on a session nobody uploads to
    my %timed = (
        '1.1' => raw_send(poll_request("/api/v1/sessions/$idle/poll?timeout=1",
                                       '1.1', "Connection: close\r\n")),
        '1.0' => raw_send(poll_request("/api/v1/sessions/$idle/poll?timeout=1",
                                       '1.0')),
    );

    my ($lp) = wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == 5 && $s->{parked} == 5 ? $s : undef;
    });
    ok($lp, "$name - 5 polls wait, parked");

    # the timeouts: about a second after the woken polls came
    for my $v (sort keys %timed) {
        my ($raw, $closed) = read_close($timed{$v}{sock}, 10);
        close $timed{$v}{sock};

        like($raw, qr{^HTTP/1\.1 200 .*"images":\s*\[\]}s,
             "$name - HTTP/$v poll at its timeout: 200, no image");
        ok($closed, "$name - HTTP/$v poll at its timeout: closed");
        is(header_of($raw, 'X-Poll-Location'), 'api',
           "$name - HTTP/$v poll at its timeout: the location's add_header");
        unpark_log_check($name, "HTTP/$v poll at its timeout", $timed{$v}, 0.9);
    }

    ok(!IO::Select->new(map { $_->{sock} } values %woken)->can_read(0),
       "$name - the other polls still wait");

    my $up = upload($sid);

    for my $v (sort keys %woken) {
        my $p = $woken{$v};
        my ($raw, $closed) = $v =~ /keep-alive/
                             ? (read_answer($p->{sock}, 10), 0)
                             : read_close($p->{sock}, 10);

        like($raw, qr{^HTTP/1\.1 200 .*"id":\s*"\Q$up->{id}\E"}s,
             "$name - woken HTTP/$v poll: 200 with the image");
        is(header_of($raw, 'X-Poll-Location'), 'api',
           "$name - woken HTTP/$v poll: the location's add_header");
        unpark_log_check($name, "woken HTTP/$v poll", $p, 0.9);

        if ($v eq '1.1') {
            ok($closed, "$name - woken HTTP/1.1 poll: closed as it asked");
            close $p->{sock};
            next;
        }

        my $h = $v =~ /keep-alive/ ? $ka : '';

        is(header_of($raw, 'Connection'), $plain{$h},
           "$name - woken HTTP/$v poll: Connection as a plain request's");

        if (!$h) {
            ok($closed, "$name - woken HTTP/1.0 poll: closed");
            close $p->{sock};
            next;
        }

        ok(!answered($p, 0.3), "$name - woken HTTP/$v poll: kept open");

        # the connection takes another request
        print { $p->{sock} } poll_request("/api/v1/sessions/$sid", '1.0');
        my ($next, $end) = read_close($p->{sock}, 10);
        close $p->{sock};

        like($next, qr{^HTTP/1\.1 200 .*"id":\s*"\Q$sid\E"}s,
             "$name - woken HTTP/$v poll: then another request on it");
        ok($end, "$name - which closes it");
    }

    is(SessionTest::slurp_log(
           "$Test::Nginx::Util::ServRoot/logs/unpark-other.log"), '',
       "$name - nothing in the log of limit_except");

    my ($after) = wait_until(5, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == 0 && $s->{parked} == 0 ? $s : undef;
    });
    ok($after, "$name - nobody waits after");
};

# With a filter that drops the answer's Content-Length (ssi), nginx
# sends an HTTP/1.1 answer chunked (an HTTP/1.0 one it would end by
# closing the connection): so does a woken parked HTTP/1.1 poll, and its
# connection goes on with the next request, as for a poll that never
# parked (timeout=0)
$checks{unpark_version} = sub {
    my ($name) = @_;

    my $sid = create()->{json}{id};
    my $path = "/api/v1/sessions/$sid";

    # a poll that never parks, then the request behind it
    my $now = raw_send(poll_request("$path/poll?timeout=0", '1.1')
                       . poll_request($path, '1.1', "Connection: close\r\n"));
    my ($plain) = read_close($now->{sock}, 10);
    close $now->{sock};

    like($plain, qr{^HTTP/1\.1 200 }, "$name - the timeout=0 poll: 200");
    is(header_of($plain, 'Transfer-Encoding'), 'chunked',
       "$name - the timeout=0 poll: chunked");

    my $p = raw_send(poll_request("$path/poll?timeout=30", '1.1'));

    my ($lp) = wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == 1 && $s->{parked} == 1 ? $s : undef;
    });
    ok($lp, "$name - the poll is parked");

    # the request behind it, sent while it waits
    print { $p->{sock} } poll_request($path, '1.1', "Connection: close\r\n");
    ok(!answered($p, 0.3), "$name - the poll still waits");

    my $up = upload($sid);
    my ($raw, $closed) = read_close($p->{sock}, 10);
    close $p->{sock};

    like($raw, qr{^HTTP/1\.1 200 .*"id":\s*"\Q$up->{id}\E"}s,
         "$name - woken: 200 with the image");
    is(header_of($raw, 'Transfer-Encoding'), 'chunked', "$name - chunked");
    is(header_of($raw, 'Connection'), header_of($plain, 'Connection'),
       "$name - Connection as the timeout=0 poll's");
    like($raw, qr{\r\n0\r\n\r\nHTTP/1\.1 200 .*"id":\s*"\Q$sid\E"}s,
         "$name - then the request sent while it waited");
    ok($closed, "$name - which closes the connection");
};


# --- two servers on one listen, HEAD ---------------------------------------
#
# Block 13: the port's default server (the first, in http_config: every
# request without "Host: localhost", SessionTest's included) and the
# test's server "localhost" after it, each with a server-level add_header
# and access_log of its own, the second with a location-level "expires" and
# $server_name in a header: a parked poll of the second server is made again
# on the connection's default server (ngx_http_create_request()) and gets
# the second's configurations back from the park (srv_conf, loc_conf).
# Blocks 14 (HTTP/1.1) and 15 (HTTP/1.0, with and without keep-alive): a
# HEAD of the poll (docs/api.md 10.5: the GET's status and headers,
# Content-Length included, no body), its connection kept or closed as a
# GET's would be.

# vhost_request(PATH, HOST): the bytes of a GET of PATH to the server HOST,
# HTTP/1.1, closing the connection after it
sub vhost_request {
    my ($path, $host) = @_;

    return "GET $path HTTP/1.1\r\nHost: $host\r\n"
           . "Authorization: Bearer $KEY{MAIN}\r\nConnection: close\r\n\r\n";
}

# vhost_log(REQUEST_LINE): the line of that request in the server-level
# logs of block 13 (log_format vhost), as a hash: its log ("default" or
# "second"), server ($server_name), method and status.  Undef until it is
# there.
sub vhost_log {
    my ($line) = @_;

    for my $log (qw(default second)) {
        my $text = SessionTest::slurp_log(
                       "$Test::Nginx::Util::ServRoot/logs/vhost-$log.log");

        for (split /\n/, $text) {
            next unless /^(\S+) (\S+) (\d{3}) "(.*)"$/ && $4 eq $line;

            return { log => $log, server => $1, method => $2, status => $3 };
        }
    }

    return undef;
}

# the answer RAW to a request P (raw_send) of the server SERVER (default
# or second): that server's headers and log line
sub vhost_check {
    my ($name, $what, $p, $raw, $server) = @_;

    my %want = $server eq 'second'
               ? (x => 'second', sn => 'localhost', cc => 'max-age=3600')
               : (x => 'default', sn => 'default.test', cc => undef);

    is(header_of($raw, 'X-Server'), $want{x},
       "$name - $what: the server-level add_header of its server");
    is(header_of($raw, 'X-Server-Name'), $want{sn},
       "$name - $what: its server's \$server_name");
    is(header_of($raw, 'Cache-Control'), $want{cc},
       "$name - $what: its location's expires");

    my ($line) = $p->{req} =~ /^([^\r]*)\r\n/;
    my ($l) = wait_until(5, 0.05, sub { vhost_log($line) });

    ok($l, "$name - $what: its access-log line") or return;
    is($l->{log}, $server, "$name - $what: in its server's access_log");
    is($l->{server}, $want{sn}, "$name - $what: logged \$server_name");
    is($l->{status}, 200, "$name - $what: logged \$status");
}

# Polls of the second server (Host: localhost) woken by an upload, or
# ended by their timeout, while parked: their answers and log lines are
# those of the second server, as its plain requests' are; a poll of the
# default server woken at the same time keeps the default's.
$checks{unpark_vhost} = sub {
    my ($name) = @_;

    my $sid = create()->{json}{id};
    my $idle = create()->{json}{id};
    my $path = "/api/v1/sessions/$sid";

    # plain requests (of two sessions: their lines differ): what each server answers
    for my $s (['second', 'localhost', $sid], ['default', 'default.test',
                                                $idle])
    {
        my $p = raw_send(vhost_request("/api/v1/sessions/$s->[2]", $s->[1]));
        my ($raw) = read_close($p->{sock}, 10);
        close $p->{sock};

        like($raw, qr{^HTTP/1\.1 200 },
             "$name - a plain request of the $s->[0] server: 200");
        vhost_check($name, "a plain request of the $s->[0] server", $p,
                    $raw, $s->[0]);
    }

    my %polls = (
        second => raw_send(vhost_request("$path/poll?timeout=30",
                                         'localhost')),
        default => raw_send(vhost_request("$path/poll?timeout=31",
                                          'default.test')),
        timed => raw_send(vhost_request("/api/v1/sessions/$idle/poll"
                                        . "?timeout=1", 'localhost')),
    );

    my ($lp) = wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == 3 && $s->{parked} == 3 ? $s : undef;
    });
    ok($lp, "$name - 3 polls wait, parked");

    my ($raw) = read_close($polls{timed}{sock}, 10);
    close $polls{timed}{sock};

    like($raw, qr{^HTTP/1\.1 200 .*"images":\s*\[\]}s,
         "$name - the second server's poll at its timeout: 200, no image");
    vhost_check($name, "the second server's poll at its timeout",
                $polls{timed}, $raw, 'second');

    ok(!IO::Select->new(map { $polls{$_}{sock} } qw(second default))
           ->can_read(0),
       "$name - the other polls still wait");

    my $up = upload($sid);

    for my $server (qw(second default)) {
        my ($raw) = read_close($polls{$server}{sock}, 10);
        close $polls{$server}{sock};

        like($raw, qr{^HTTP/1\.1 200 .*"id":\s*"\Q$up->{id}\E"}s,
             "$name - the $server server's woken poll: 200 with the image");
        vhost_check($name, "the $server server's woken poll",
                    $polls{$server}, $raw, $server);
    }

    my ($after) = wait_until(5, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == 0 && $s->{parked} == 0 ? $s : undef;
    });
    ok($after, "$name - nobody waits after");
};

# read_head(SOCK, SECS): what arrives until an answer's header is whole
# (and what came with it), at most SECS seconds
sub read_head {
    return (read_until(@_, sub { $_[0] =~ /\r\n\r\n/ }))[0];
}

# head_check(NAME, WHAT, P, POLL, V): the answer to the HEAD poll P
# (raw_send) of the path POLL in the variant V (head_polls): 200, the
# header alone, its Content-Length that of a GET of the same poll then
# (timeout=0).  Kept alive (HTTP/1.1, or HTTP/1.0 with "Connection:
# keep-alive"): no byte follows the header and the connection takes that
# GET, answered right after it; else the connection closes after the
# header and the GET goes on a new one.
sub head_check {
    my ($name, $what, $p, $poll, $v) = @_;

    my ($raw, $closed) = $v->{kept} ? (read_head($p->{sock}, 10), 0)
                                    : read_close($p->{sock}, 10);

    like($raw, qr{^HTTP/1\.1 200 }, "$name - $what: 200");
    is(substr($raw, length(head_of($raw))), "\r\n\r\n",
       "$name - $what: the header alone");
    is(header_of($raw, 'Connection'), $v->{kept} ? 'keep-alive' : 'close',
       "$name - $what: its Connection");

    my $len = header_of($raw, 'Content-Length');
    ok(defined $len && $len > 0, "$name - $what: a Content-Length");

    my $get = poll_request("$poll?timeout=0", $v->{version},
                           $v->{version} eq '1.1' ? "Connection: close\r\n"
                                                  : '');
    my $g = $p;

    if ($v->{kept}) {
        ok(!answered($p, 0.3), "$name - $what: nothing after it");
        print { $p->{sock} } $get;

    } else {
        ok($closed, "$name - $what: then its connection closed");
        close $p->{sock};
        $g = raw_send($get);
    }

    my ($next, $end) = read_close($g->{sock}, 10);
    close $g->{sock};

    like($next, qr{^HTTP/1\.1 200 }, "$name - $what: then a GET of the poll"
         . ($v->{kept} ? ' on its connection, answered right after the'
                         . ' header' : ''));
    my $body = (split /\r\n\r\n/, $next, 2)[1] // '';
    is($len, length $body,
       "$name - $what: its Content-Length the GET's body's");
    is(header_of($next, 'Content-Length'), $len,
       "$name - $what: the GET's Content-Length");
    ok($end, "$name - $what: the GET closes its connection");
}

# HEAD polls parked, then woken by an upload or ended by their timeout, in
# each variant VARIANTS (HTTP version, and "Connection: keep-alive" for
# HTTP/1.0): each answers a header alone (head_check), as a HEAD that never
# parks (timeout=0) does.
sub head_polls {
    my ($name, @variants) = @_;

    my $sid = create()->{json}{id};
    my $idle = create()->{json}{id};
    my (%woken, %timed);

    # [VERSION, HEADERS] as head_check's variant
    @variants = map {
        +{ version => $_->[0], headers => $_->[1] // '',
           kept => ($_->[0] eq '1.1' || $_->[1]) ? 1 : 0,
           what => "HTTP/$_->[0]" . ($_->[1] ? ' keep-alive' : '') }
    } @variants;

    for my $v (@variants) {
        my $plain = raw_send(poll_request("/api/v1/sessions/$idle/poll"
                                          . '?timeout=0', $v->{version},
                                          $v->{headers}, 'HEAD'));
        head_check($name, "$v->{what}: a HEAD poll that never parks", $plain,
                   "/api/v1/sessions/$idle/poll", $v);
    }

    for my $v (@variants) {
        $woken{$v->{what}} = raw_send(poll_request(
            "/api/v1/sessions/$sid/poll?timeout=30", $v->{version},
            $v->{headers}, 'HEAD'));
        $timed{$v->{what}} = raw_send(poll_request(
            "/api/v1/sessions/$idle/poll?timeout=1", $v->{version},
            $v->{headers}, 'HEAD'));
    }

    my $n = 2 * @variants;
    my ($lp) = wait_until(10, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == $n && $s->{parked} == $n ? $s : undef;
    });
    ok($lp, "$name - $n HEAD polls wait, parked");

    for my $v (@variants) {
        head_check($name, "$v->{what}: a HEAD poll at its timeout",
                   $timed{$v->{what}}, "/api/v1/sessions/$idle/poll", $v);
    }

    ok(!IO::Select->new(map { $_->{sock} } values %woken)->can_read(0),
       "$name - the other HEAD polls still wait");

    upload($sid);

    for my $v (@variants) {
        head_check($name, "$v->{what}: a woken HEAD poll",
                   $woken{$v->{what}}, "/api/v1/sessions/$sid/poll", $v);
    }

    my ($after) = wait_until(5, 0.05, sub {
        my $s = long_poll();
        $s->{waiting} == 0 && $s->{parked} == 0 ? $s : undef;
    });
    ok($after, "$name - nobody waits after");
}

$checks{unpark_head} = sub { head_polls($_[0], ['1.1']) };
$checks{unpark_head_10} = sub {
    head_polls($_[0], ['1.0'], ['1.0', "Connection: keep-alive\r\n"]);
};


# --- blocks -------------------------------------------------------------

master_on();
no_shuffle();
no_long_string();
worker_connections(1024);

my $CONFIG = <<'EOF';
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

    workers(1);

    db_http_config($block, "session_expiry_sweep_interval 30s;\n");

    $block->set_value('config', $CONFIG) unless defined $block->config;
    $block->set_value('more_headers', "Authorization: Bearer $KEY{MAIN}\n");

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: the polls of one session share its reads and one rendering
--- check: shared
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 2: a poll ends with 410 when its session expires
--- check: expiry
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 3: a burst waits for the one database connection, none refused
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_connections 1;
    session_db_timeout 20s;
--- check: burst
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 4: two nginx on one database: an upload on one wakes a poll on the other
--- check: two_nodes
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 5: a waiting poll is parked: only its connection stays, its answer is whole
--- check: parked
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 6: session_poll_park off: the polls wait with their requests
--- config
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
        session_poll_park off;
    }
    location = /status {
        session_status;
    }
--- check: unparked
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 7: the sessions read together go in one statement
--- check: batch
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[alert]



=== TEST 8: a worker killed while polls wait: the gauges forget its polls
--- check: killed
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 9: TCP_NODELAY when a poll parks; the woken answer's bytes as ever
--- check: nodelay
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 10: tcp_nodelay off: a parked poll never gets TCP_NODELAY
--- config
    tcp_nodelay off;
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
    }
    location = /status {
        session_status;
    }
--- check: nodelay_off
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 11: a parked poll made again keeps its request: its log line, HTTP/1.0's Connection, its location
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 30s;
    log_format unpark '$request_method $uri $server_protocol $status '
                      '$request_length $request_time "$request"';
--- config
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
        access_log logs/unpark.log unpark;
        add_header X-Poll-Location api;
        limit_except GET POST {
            access_log logs/unpark-other.log unpark;
        }
    }
    location = /status {
        session_status;
    }
--- check: unpark_fields
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 12: a woken HTTP/1.1 poll is an HTTP/1.1 answer (chunked when its length goes)
--- config
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
        ssi on;
        ssi_types application/json;
    }
    location = /status {
        session_status;
    }
--- check: unpark_version
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]


=== TEST 13: a parked poll of a second server on the port keeps its server's and location's configuration
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 30s;
    log_format vhost '$server_name $request_method $status "$request"';
    server {
        listen $TEST_NGINX_SERVER_PORT;
        server_name default.test;
        add_header X-Server default;
        add_header X-Server-Name $server_name;
        access_log logs/vhost-default.log vhost;
        location /api/ {
            session_api;
            session_limits create=1000 list=1000 other=1000;
        }
        location = /status {
            session_status;
        }
    }
--- config
    add_header X-Server second;
    add_header X-Server-Name $server_name;
    access_log logs/vhost-second.log vhost;
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
        expires 1h;
    }
--- check: unpark_vhost
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 14: a parked HEAD poll answers its header alone, its connection kept
--- check: unpark_head
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 15: a parked HTTP/1.0 HEAD poll answers its header alone, its connection closed or kept as it asked
--- check: unpark_head_10
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]
