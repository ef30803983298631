# How the pool connects (docs/operations.md, "Managed and HA
# PostgreSQL"): libpq may close its socket in the middle of PQconnectPoll() and
# open another, often under the same descriptor number: for the next
# entry of a host list, the next address of a name, a retry without TLS
# (sslmode=prefer against a hostnossl rule), target_session_attrs.  The
# module must watch the new socket, not the old number.
#
# TEST 1 and 2: nothing listens on the first host of a list, so every
# connection is refused there and made on the second entry.  TEST 3 and 4
# are the case operators meet most: a server with TLS on and a hostnossl
# rule, and libpq's default sslmode=prefer.  A stand-in server here
# accepts the TLS request, completes the handshake, refuses the startup
# as such a rule does ("no pg_hba.conf entry ... SSL encryption"), and
# relays a plain connection to the real PostgreSQL: libpq gives up on TLS
# and connects again on a new socket, from inside PQconnectPoll(), after
# the module has put the first one in the event loop.  With one
# connection per worker and two workers, every request must be answered,
# and epoll must never be asked about a socket it does not know.
#
# TEST 5: a relay that stops forwarding without closing (a dead link):
# the idle check notices on every connection, LISTEN comes back, a
# waiting poll catches up with what happened meanwhile.  TEST 6-10: host
# names, through the resolver (a name only the test's DNS responder
# knows: a getaddrinfo() in a worker would fail) and without one.
# TEST 13: the statements' PREPARE of a new connection waits for a lock
# (a migration's ACCESS EXCLUSIVE) with the server's statement_timeout
# off: given up after session_db_timeout, the connection made again,
# requests answered 503 meanwhile, served once the lock is gone.
# TEST 14: a connection that has connected and waits for its first
# statement's answer is not taken for an attempt lost with the link when
# another one connects (ngx_http_session_db_kick_one() gives up only
# connections still CONNECTING; the first statement runs BUSY).
# TEST 15-17: the statements are prepared in one pipeline, a Parse each
# (docs/decisions.md (nj)): one refused by lock_timeout sends them as
# text; a stream libpq cannot follow, met in that pipeline or in an
# upload's first statements, fails the connection with 503 at once and
# leaves the worker serving.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use File::Temp ();
use IO::Select ();
use IO::Socket::INET ();
use IO::Socket::SSL ();
use POSIX ();
use Time::HiRes ();
use Session qw(:DEFAULT);
use SessionTest;
use Webhook qw(dns_start);

our $F = fixture(plan => 'unlimited', name => sprintf('t023-%d', $$));

# a port where nothing listens (bound, then closed): the refusal comes
# back once libpq has its socket in the event loop, and it moves on to the
# next host on a new socket
sub dead_port {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Proto => 'tcp', Listen => 1)
        or die "dead_port: $!";
    my $port = $s->sockport;
    close $s;
    return $port;
}

# the silent block's spreading server (see the block preprocessor)
$ENV{TEST_NGINX_SPREAD_PORT} = dead_port();
our $SPREAD = $ENV{TEST_NGINX_SPREAD_PORT};

# the test database's conninfo without its host and port
our ($LIVE, $REST) = do {
    my $c = $ENV{TEST_NGINX_SESSION_DB};
    my $live = conninfo_port($c);
    $c =~ s/(?:^|\s)host\s*=\s*('[^']*'|\S+)//;
    $c =~ s/(?:^|\s)port\s*=\s*('[^']*'|\S+)//;
    ($live, $c);
};

$ENV{TEST_NGINX_SESSION_DB_LIST} = nginx_quote(
    "host=127.0.0.1,127.0.0.1 port=" . dead_port() . ",$LIVE $REST");


# --- a server with TLS on and a hostnossl rule, in front of the real one

my @Kids;
END { kill 'KILL', @Kids if @Kids }

my $Dir = File::Temp::tempdir(CLEANUP => 1);

system('openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes',
       '-keyout', "$Dir/key.pem", '-out', "$Dir/cert.pem", '-days', '1',
       '-subj', '/CN=localhost', '-loglevel', 'error') == 0
    or system('openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes',
              '-keyout', "$Dir/key.pem", '-out', "$Dir/cert.pem",
              '-days', '1', '-subj', '/CN=localhost') == 0
    or die "openssl req failed";

sub read_n {
    my ($s, $n) = @_;
    my $buf = '';
    while (length $buf < $n) {
        my $got = sysread $s, $buf, $n - length $buf, length $buf;
        return undef unless $got;
    }
    return $buf;
}

# relay(A, B, SEEN): bytes both ways until either side closes; SEEN, when
# given, sees each read from A first and ends the relay by returning true
# (what it read then is not passed on)
sub relay {
    my ($a, $b, $seen) = @_;
    my $sel = IO::Select->new($a, $b);
    while (1) {
        for my $from ($sel->can_read(30)) {
            my $got = sysread $from, my $buf, 65536;
            return unless $got;
            return if $seen && $from == $a && $seen->($buf);
            my $to = $from == $a ? $b : $a;
            my $off = 0;
            while ($off < length $buf) {
                my $w = syswrite $to, $buf, length($buf) - $off, $off;
                return unless $w;
                $off += $w;
            }
        }
    }
}

sub serve {
    my ($c) = @_;

    my $head = read_n($c, 8) // return;
    my ($len, $code) = unpack 'NN', $head;

    if ($code == 80877103) {
        # SSLRequest: yes, then the refusal of a hostnossl rule
        syswrite $c, 'S';
        IO::Socket::SSL->start_SSL($c, SSL_server => 1,
                                   SSL_cert_file => "$Dir/cert.pem",
                                   SSL_key_file => "$Dir/key.pem")
            or return;
        my $l = read_n($c, 4) // return;
        read_n($c, unpack('N', $l) - 4) // return;
        my $f = "SFATAL\0VFATAL\0C28000\0Mno pg_hba.conf entry for host"
                . " \"127.0.0.1\", user \"x\", database \"x\","
                . " SSL encryption\0\0";
        syswrite $c, 'E' . pack('N', 4 + length $f) . $f;
        return;
    }

    # a plain startup: to the real server, as it is
    my $pg = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                   PeerPort => $LIVE, Proto => 'tcp')
        or return;
    syswrite $pg, $head;
    relay($c, $pg);
}

# stand_in(CODE): a server on 127.0.0.1 that hands each connection to
# CODE in a process of its own; returns its port
sub stand_in {
    my ($code) = @_;

    my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Proto => 'tcp', Listen => 64,
                                  ReuseAddr => 1)
        or die "listen: $!";
    my $port = $l->sockport;

    my $pid = fork;
    die "fork: $!" unless defined $pid;

    if ($pid == 0) {
        $SIG{CHLD} = 'IGNORE';
        while (my $c = $l->accept) {
            my $kid = fork;
            if (defined $kid && $kid == 0) {
                $code->($c);
                POSIX::_exit(0);
            }
            close $c;
        }
        POSIX::_exit(0);
    }

    close $l;
    push @Kids, $pid;

    return $port;
}

sub tls_refusing_port { return stand_in(\&serve) }

$ENV{TEST_NGINX_SESSION_DB_TLS} = nginx_quote(
    "host=127.0.0.1 port=" . tls_refusing_port()
    . " sslmode=prefer gssencmode=disable $REST");


# --- the server options a connection starts with

# recording_port(): a stand-in that refuses TLS and GSS encryption,
# writes each startup packet's parameters ("name=value" lines) to a file
# of $Dir/startup, and relays the connection to the real server
mkdir "$Dir/startup" or die "mkdir: $!";

# startup(C): a client's startup packet, TLS and GSS encryption refused
# before it; (the packet, its parameters), or () when the client goes
sub startup {
    my ($c) = @_;

    my $head = read_n($c, 8) // return;

    while ((unpack 'NN', $head)[1] == 80877103
           || (unpack 'NN', $head)[1] == 80877104)
    {
        syswrite $c, 'N';
        $head = read_n($c, 8) // return;
    }

    my $rest = read_n($c, (unpack 'N', $head) - 8) // return;

    return ($head . $rest, { split /\0/, $rest });
}

# to_live(PACKET): a connection to the real server, PACKET sent on it
sub to_live {
    my ($packet) = @_;

    my $pg = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                   PeerPort => $LIVE, Proto => 'tcp')
        or return;
    syswrite $pg, $packet;

    return $pg;
}

sub record {
    my ($c) = @_;

    my ($packet, $p) = startup($c) or return;

    open my $fh, '>', "$Dir/startup/$$.tmp" or return;
    print $fh map { "$_=$p->{$_}\n" } sort keys %$p;
    close $fh;
    rename "$Dir/startup/$$.tmp", "$Dir/startup/$$";

    my $pg = to_live($packet) or return;
    relay($c, $pg);
}

sub recording_port { return stand_in(\&record) }

our $REC = recording_port();

$ENV{TEST_NGINX_SESSION_DB_REC} = nginx_quote(
    "host=127.0.0.1 port=$REC $REST");
$ENV{TEST_NGINX_SESSION_DB_RECOPT} = nginx_quote(
    "host=127.0.0.1 port=$REC options='-c plan_cache_mode=auto"
    . " -c statement_timeout=7000' $REST");

# the operator turned the server's statement_timeout off
$ENV{TEST_NGINX_SESSION_DB_NOTIMEOUT} = nginx_quote(
    "$ENV{TEST_NGINX_SESSION_DB} options='-c statement_timeout=0'");

# a lock waited for is given up after 200 ms: a PREPARE too
$ENV{TEST_NGINX_SESSION_DB_LOCKTIMEOUT} = nginx_quote(
    "$ENV{TEST_NGINX_SESSION_DB} options='-c lock_timeout=200'");

# desync_on(RE): a stand-in that relays to the real server until the
# client sends what RE matches (the Parse that prepares the pool's
# statements, the BEGIN of an upload's first statements), then answers it
# with one ParseComplete and a message whose length (2) cannot be: libpq
# loses the stream and gives up on the connection, and from then on has
# nothing but NULL to give, never the pipeline's Sync
sub desync_on {
    my ($re) = @_;

    return sub {
        my ($c) = @_;

        my ($packet) = startup($c) or return;
        my $pg = to_live($packet) or return;

        my $tail = '';

        relay($c, $pg, sub {
            my ($buf) = @_;

            # with the client's last bytes: a message may come in two
            my $seen = $tail . $buf;
            $tail = substr($seen, -64);

            return 0 unless $seen =~ $re;

            syswrite $c, '1' . pack('N', 4) . 'C' . pack('N', 2);
            sleep 5;
            return 1;
        });
    };
}

$ENV{TEST_NGINX_SESSION_DB_DESYNC} = nginx_quote(
    "host=127.0.0.1 port="
    . stand_in(desync_on(qr/P....ngx_session_1\0/s)) . " $REST");

$ENV{TEST_NGINX_SESSION_DB_DESYNCUPLOAD} = nginx_quote(
    "host=127.0.0.1 port="
    . stand_in(desync_on(qr/P....\0BEGIN\0/s)) . " $REST");

# the options of the pool connections that the stand-in has seen (one
# per worker, and one more for a worker that connected again, as one did
# once under make asan), once there are two; the records are removed
sub pool_options {
    my ($skip) = @_;

    my ($got) = wait_until(10, 0.05, sub {
        my @o;
        for my $f (glob "$Dir/startup/*") {
            next if $f =~ /\.tmp$/;
            open my $fh, '<', $f or next;
            my %p = map { chomp; split /=/, $_, 2 } <$fh>;
            next if ($p{application_name} // '') ne 'nginx session pool';
            next if defined $skip && ($p{options} // '') eq $skip;
            push @o, $p{options} // '';
        }
        @o >= 2 ? \@o : undef;
    });

    unlink glob "$Dir/startup/*";

    return @{ $got // [] };
}

# the module's own: statement_timeout = session_db_timeout (5 s by
# default) and plan_cache_mode = force_generic_plan (decision (nb))
sub own_options {
    my ($name) = @_;

    my @o = pool_options();
    cmp_ok(scalar @o, '>=', 2, "$name - both workers' pool connections seen");

    for my $o (@o) {
        like($o, qr/(?:^| )-c statement_timeout=5000(?: |$)/,
             "$name - statement_timeout");
        like($o, qr/(?:^| )-c plan_cache_mode=force_generic_plan(?: |$)/,
             "$name - plan_cache_mode");
    }
}

# the operator's choices stand, each once.  A connection with the
# module's own options is passed over: the nginx of the block before
# connected once more after its records were removed (seen in a CI lane);
# one of this block with those options would leave fewer than two here
sub operator_options {
    my ($name) = @_;

    my @o = pool_options('-c statement_timeout=5000'
                         . ' -c plan_cache_mode=force_generic_plan');
    cmp_ok(scalar @o, '>=', 2, "$name - both workers' pool connections seen");

    for my $o (@o) {
        is($o, '-c plan_cache_mode=auto -c statement_timeout=7000',
           "$name - the options as the operator wrote them");
    }
}


# --- a link that goes silent: a relay that stops forwarding, open

# hole_relay(PORT): a relay on 127.0.0.1:PORT to the real server.  After
# SIGUSR1 it forwards nothing on any connection it has, and new ones are
# accepted and never answered, as behind a firewall that forgot the flow
# or a host gone from the network: no FIN, no RST.  After SIGUSR2 new
# connections are relayed again; the silent ones stay silent.
sub hole_relay {
    my ($port) = @_;

    my $ls = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                   LocalPort => $port, Proto => 'tcp',
                                   Listen => 64, ReuseAddr => 1)
        or die "hole_relay: listen: $!";

    my $pid = fork;
    die "fork: $!" unless defined $pid;

    if ($pid == 0) {
        my ($hole, %peer, %fh, %dead) = (0);

        $SIG{USR1} = sub { $hole = 1; $dead{$_} = 1 for keys %fh };
        $SIG{USR2} = sub { $hole = 0 };
        $SIG{TERM} = sub { POSIX::_exit(0) };

        my $sel = IO::Select->new($ls);
        my $parent = getppid;

        # never the END blocks of the test (they stop nginx)
        $SIG{__DIE__} = sub { warn "hole_relay: @_"; POSIX::_exit(1) };

        for (;;) {
            POSIX::_exit(0) if getppid != $parent;

            for my $s ($sel->can_read(0.5)) {
                if ($s == $ls) {
                    my $c = $ls->accept or next;
                    $fh{"$c"} = $c;
                    $sel->add($c);

                    if ($hole) {
                        $dead{"$c"} = 1;
                        next;
                    }

                    my $u = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                                  PeerPort => $LIVE,
                                                  Proto => 'tcp');
                    if (!$u) {
                        $sel->remove($c);
                        delete $fh{"$c"};
                        close $c;
                        next;
                    }

                    $fh{"$u"} = $u;
                    @peer{"$c", "$u"} = ($u, $c);
                    $sel->add($u);
                    next;
                }

                my $n = sysread $s, my $buf, 65536;

                if (!$n) {
                    my @pair = grep { defined } $s, $peer{"$s"};

                    for my $x (@pair) {
                        $sel->remove($x);
                        delete $fh{"$x"};
                        delete $dead{"$x"};
                        delete $peer{"$x"};
                        close $x;
                    }

                    next;
                }

                next if $dead{"$s"} || !$peer{"$s"};

                my $to = $peer{"$s"};

                for (my $off = 0; $off < $n; ) {
                    my $w = syswrite $to, $buf, $n - $off, $off;
                    last unless $w;
                    $off += $w;
                }
            }
        }
    }

    close $ls;
    push @Kids, $pid;

    return $pid;
}

# in the 10 ports of this lane (util/test.sh), beside Test::Nginx's
our $HOLE_PORT = ($ENV{TEST_NGINX_PORT} || 2400) + 7;
our $HOLE_PID = hole_relay($HOLE_PORT);

$ENV{TEST_NGINX_SESSION_DB_HOLE} = nginx_quote(
    "host=127.0.0.1 port=$HOLE_PORT $REST");

# a session of the fixture's project, and an image in it, by SQL
sub sql_session {
    return scalar psql('SELECT id FROM session_create('
                       . sql_quote($F->{project_id})
                       . ", 'long_poll', NULL, 3600)");
}

sub sql_upload {
    my ($sid) = @_;
    return scalar psql('SELECT id FROM image_upload('
                       . sql_quote($F->{project_id}) . ', '
                       . sql_quote($sid)
                       . ", 'image/png', sha256('x'::bytea), 'x'::bytea)");
}

# a poll on its own connection, to the port of the block's server or
# PORT (the spreading server of the silent block)
sub poll_send {
    my ($sid, $timeout, $port) = @_;

    my $s = IO::Socket::INET->new(
                PeerAddr => '127.0.0.1',
                PeerPort => $port // $Test::Nginx::Util::ServerPort,
                Proto => 'tcp')
        or die "poll_send: $!";

    print $s "GET /api/v1/sessions/$sid/poll?timeout=$timeout HTTP/1.1\r\n"
             . "Host: localhost\r\nAuthorization: Bearer $F->{key}\r\n"
             . "Connection: close\r\n\r\n";

    return { sock => $s, t0 => Time::HiRes::time() };
}

# (status, seconds since poll_send) once the answer is in, within $secs
sub poll_status {
    my ($p, $secs) = @_;

    my $sel = IO::Select->new($p->{sock});
    my $buf = '';

    while ($sel->can_read($secs)) {
        my $n = sysread $p->{sock}, $buf, 65536, length $buf;
        last unless $n;
    }

    close $p->{sock};

    return ($buf =~ m{^HTTP/1\.\d (\d{3})} ? $1 : 0,
            Time::HiRes::time() - $p->{t0});
}

# a poll waits, an upload into its session by SQL wakes it within 5 s:
# the node's LISTEN connection is in effect
sub woken_by_upload {
    my ($name, $woken, $soon) = @_;

    my $sid = sql_session();
    my $p = poll_send($sid, 20);
    Time::HiRes::sleep(0.5);
    sql_upload($sid);
    my ($st, $t) = poll_status($p, 20);
    is($st, 200, "$name - $woken");
    cmp_ok($t, '<', 5, "$name - $soon");
}

sub get_status {
    return http_request('GET', '/api/v1/sessions?limit=1',
                        auth_header($F->{key}), 5)->{status};
}

# The relay goes silent under a waiting long poll: every connection
# notices within session_db_idle_check + session_db_timeout (1 s + 1 s
# here), an upload made meanwhile is not lost to the poll (the node's
# LISTEN connection comes back and the workers read their polls again),
# and once the relay forwards again requests are answered without 503s.
sub black_hole {
    my ($name) = @_;

    # the LISTEN connection is up: a poll is woken by an upload
    my ($up) = wait_until(10, 0.1, sub { get_status() == 200 });
    ok($up, "$name - nginx serves");

    woken_by_upload($name, 'woken before the silence', 'by the notification');

    # polls in both workers (the spreading server's reuseport): the one
    # that does not listen hears from worker 0 that the database is back,
    # and must not read before its own connections are
    my @sids = map { sql_session() } 1 .. 8;
    my @polls = map { poll_send($_, 30, $SPREAD) } @sids;
    Time::HiRes::sleep(0.5);

    # the node's LISTEN connection, which only the idle check can tell (a
    # pool connection may be in a query then, which times out)
    my $re = qr/no answer to the idle check .* on the LISTEN connection/;
    my $before = error_log_count($re);

    kill 'USR1', $HOLE_PID;

    my ($seen, $took) = wait_until(15, 0.1, sub {
        error_log_count($re) - $before >= 1
    });
    ok($seen, "$name - the LISTEN connection noticed the silence");
    Test::More::diag(sprintf "%s: silence noticed by the LISTEN "
                     . "connection in %.1f s (idle check 1 s, timeout 1 s)",
                     $name, $took);
    cmp_ok($took, '<=', 6, "$name - within the bound");

    # made unheard: their notifications are lost
    sql_upload($_) for @sids;

    my $again = qr/session db: connected again/;
    my $again_before = error_log_count($again);

    # where the log stands when the silence is lifted (for the diag below)
    my $lifted = length SessionTest::error_log();

    kill 'USR2', $HOLE_PID;

    my @st = map { [ poll_status($_, 30) ] } @polls;
    is(scalar(grep { $_->[0] == 200 } @st), scalar @polls,
       "$name - the waiting polls get the uploads made unheard");
    my ($slowest) = sort { $b <=> $a } map { $_->[1] } @st;
    Test::More::diag(sprintf "%s: the last poll answered %.1f s after it "
                     . "was sent (timeout 30 s)", $name, $slowest);
    cmp_ok($slowest, '<', 20, "$name - long before their timeout");

    # every connection of both workers is back at once: the first that
    # gets through brings the others (see ngx_http_session_db_kick()).
    # Wait for the three (a pool connection per worker, the node's LISTEN
    # connection) to say so: a slow build (make asan) may still be
    # connecting them.
    my ($back, $back_in) = wait_until(15, 0.05, sub {
        error_log_count($again) - $again_before >= 3
    });
    Test::More::diag(sprintf "%s: %s connections back %.1f s after the "
                     . "poll's answer", $name, $back ? 'all three' : 'not all',
                     $back_in);
    my @gets = map { get_status() } 1 .. 10;
    my @lines = grep { /session (?:db|listen|relay)|\[(?:error|warn)\]/ }
                split /\n/, substr(SessionTest::error_log(), $lifted);
    is_deeply(\@gets, [ (200) x 10 ], "$name - no 503 after the reconnect")
        or Test::More::diag(join "\n",
               "the workers' database lines since the silence was lifted"
               . " (the last 300):", @lines[-(@lines < 300 ? @lines : 300)
                                            .. -1]);

    # a new upload wakes a new poll: LISTEN is in effect again
    woken_by_upload($name, 'wake-ups resume', 'at once');
}


# --- host names: through nginx's resolver, never getaddrinfo() in a worker

# A name only the test's DNS responder knows: the system resolver (that
# getaddrinfo() asks) cannot find it, so a connection made at all proves
# that libpq was handed the address and looked nothing up.
our ($DNS_PORT) = dns_start('t023.test',
                            ($ENV{TEST_NGINX_PORT} || 2400) + 8);

$ENV{TEST_NGINX_DNS_PORT} = $DNS_PORT;

# two entries, a name and an IP literal, with a port each: the name is
# refused on the dead port, the literal is the live server
$ENV{TEST_NGINX_SESSION_DB_NAME} = nginx_quote(
    "host=db.t023.test port=$LIVE application_name=t023dns $REST");
$ENV{TEST_NGINX_SESSION_DB_NAMES} = nginx_quote(
    "host=db.t023.test,127.0.0.1 port=" . dead_port() . ",$LIVE $REST");
$ENV{TEST_NGINX_SESSION_DB_LOCALHOST} = nginx_quote(
    "host=localhost port=$LIVE $REST");
$ENV{TEST_NGINX_SESSION_DB_UNKNOWN} = nginx_quote(
    "host=nowhere.t023.invalid port=$LIVE $REST");

our $RESOLVING = qr/session db: resolving "db\.t023\.test"/;

# every connection (2 workers x 1, and the node's LISTEN) looks the name up
sub resolved {
    my ($name) = @_;

    need_debug_log('the "session db: resolving" lines') or return;

    my ($up) = wait_until(10, 0.1, sub {
        get_status() == 200 && error_log_count($RESOLVING) >= 3
    });
    ok($up, "$name - every connection looked the name up");
}

# no lookup in a worker: the names were resolved in the master
sub not_resolved {
    my ($name) = @_;

    need_debug_log('the "session db: resolving" lines') or return;

    my ($up) = wait_until(10, 0.1, sub { get_status() == 200 });
    ok($up, "$name - nginx serves");
    is(error_log_count(qr/session db: resolving/), 0,
       "$name - no lookup in a worker");
}

# ... and again when it connects again
sub resolved_again {
    my ($name) = @_;

    my $re = $RESOLVING;

    resolved($name);

    my $before = error_log_count($re);

    psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
         . " WHERE application_name = 't023dns'");

    # the three connections: a pool connection per worker, the LISTEN one
    my ($again) = wait_until(15, 0.1, sub {
        error_log_count($re) >= $before + 3
    });
    ok($again, "$name - and again on reconnecting");

    # why each was lost, in a line of the module's; none of libpq's own
    my $said = qr/\[warn\] .*session db: the server says: FATAL: +/
               . qr/terminating connection due to administrator command/;
    cmp_ok(error_log_count($said), '>=', 3,
           "$name - the server's FATAL logged by the module");
    is(error_log_count(qr/^FATAL:/m), 0, "$name - no bare line of libpq's");

    my ($back) = wait_until(10, 0.1, sub { get_status() == 200 });
    ok($back, "$name - requests are answered after the reconnect");
}

# reconnect_under_lock(NAME): once nginx serves, sessions locked (ACCESS
# EXCLUSIVE, by a psql of its own) and the pool connections cut, so that
# they connect again and prepare their statements under the lock;
# returns the psql, for psql_end()
sub reconnect_under_lock {
    my ($name) = @_;

    my ($up) = wait_until(10, 0.05, sub { get_status() == 200 });
    ok($up, "$name - served before");

    my $held = psql_begin('LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE;'
                          . " SET application_name = 't023-lock'",
                          q{SELECT count(*) FROM pg_stat_activity}
                          . q{ WHERE application_name = 't023-lock'});

    psql(q{SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity}
         . q{ WHERE application_name = 'nginx session pool'});

    return $held;
}

# A PREPARE held by a lock on sessions, which every pool connection's
# statements name: the connections made again under the lock wait in it
# until session_db_timeout, say so, and connect again; requests meanwhile
# get 503 (the query's own timeout), and all is served once it is gone
sub prepare_held {
    my ($name) = @_;

    my $held = reconnect_under_lock($name);

    my $re = qr/no answer to the statements' PREPARE within 1000 ms,/;
    my ($gave_up) = wait_until(10, 0.05, sub { error_log_count($re) >= 2 });
    ok($gave_up, "$name - the PREPARE given up on, on both workers");

    my $t0 = Time::HiRes::time();
    my $status = get_status();
    my $took = Time::HiRes::time() - $t0;
    is($status, 503, "$name - a request meanwhile: 503");
    cmp_ok($took, '<', 3, "$name - within session_db_timeout");

    my ($again) = wait_until(10, 0.05, sub { error_log_count($re) >= 4 });
    ok($again, "$name - connected again and given up again");

    psql_end($held, 'ROLLBACK');

    # by both workers: one may still wait out its backoff when the other
    # answers (the block's own request then met it, once, with a 503)
    my $streak = 0;
    my ($back) = wait_until(15, 0.05, sub {
        $streak = get_status() == 200 ? $streak + 1 : 0;
        return $streak >= 6;
    });
    ok($back, "$name - served once the lock is gone");
}

# The pool's statements are prepared each in a Parse of its own, in one
# pipeline.  One refused (lock_timeout, under a lock on sessions) makes
# the server skip the rest: the connection says once that they go as
# text, and its requests are served so, unnamed, once the lock is gone
sub prepare_refused {
    my ($name) = @_;

    my $held = reconnect_under_lock($name);

    my $re = qr/preparing the statements failed, they are sent as text/;
    my ($refused) = wait_until(10, 0.05, sub { error_log_count($re) >= 2 });
    ok($refused, "$name - the PREPARE refused, said on both workers");

    psql_end($held, 'ROLLBACK');

    my ($back) = wait_until(10, 0.05, sub { get_status() == 200 });
    ok($back, "$name - served as text once the lock is gone");

    my $r = SessionTest::api_request('POST', '/api/v1/sessions', $F->{key},
                                     { delivery_mode => 'long_poll' });
    is($r->{status}, 201, "$name - a session created as text");

    my $id = $r->{json}{id} // 'none';
    is(http_request('GET', "/api/v1/sessions/$id", auth_header($F->{key}),
                    5)->{status}, 200, "$name - and read as text");
}

# The stream lost in the middle of the statements' PREPARE: the worker
# gives the connection up and answers 503 at once, as for a connection
# lost any other way (a reader that waited for the pipeline's Sync
# would have spun, the worker answering nothing again)
sub prepare_desync {
    my ($name) = @_;

    my $re = qr/session db: connection lost: lost synchronization/;
    my ($met) = wait_until(10, 0.05, sub { error_log_count($re) >= 2 });
    ok($met, "$name - the stream lost in the PREPARE, on both workers");

    for my $i (1 .. 4) {
        my $r = http_request('GET', '/api/v1/sessions?limit=1',
                             auth_header($F->{key}), 5);
        is($r->{status}, 503, "$name - request $i: 503");
        cmp_ok($r->{elapsed}, '<', 2, "$name - request $i: at once");
    }
}

# The same in an upload's first statements (BEGIN and the session's
# row, a pipeline on an upload connection): the upload answers 503 at
# once and the worker serves on
sub upload_desync {
    my ($name) = @_;

    my ($up) = wait_until(10, 0.05, sub { get_status() == 200 });
    ok($up, "$name - served before");

    my $s = SessionTest::api_request('POST', '/api/v1/sessions', $F->{key},
                                     { delivery_mode => 'long_poll' });
    is($s->{status}, 201, "$name - a session");

    my $r = SessionTest::api_request(
        'POST', "/api/v1/sessions/" . ($s->{json}{id} // 'none') . '/images',
        $F->{key}, "\x89PNG\r\n\x1a\n" . ('x' x 64),
        { 'Content-Type' => 'image/png' }, { raw => 1, timeout => 5 });
    is($r->{status}, 503, "$name - the streamed upload: 503");
    cmp_ok($r->{elapsed}, '<', 2, "$name - at once");

    my $re = qr/session db: .*lost synchronization/;
    ok(error_log_count($re) >= 1, "$name - the stream lost in its pair")
        or Test::More::diag(grep { /session db|upload/ }
                            split /^/, SessionTest::error_log());

    my @st = map { get_status() } 1 .. 4;
    is("@st", '200 200 200 200', "$name - the worker serves on");
}

# --- a connection in its first statement is not given up by another's

# held(): a stand-in that relays to the real server, but the first
# attempt of the LISTEN connection has the first message after its
# authentication (the probe) held for 2 s, and the pool's first attempts
# (one per worker) are closed after 0.3 s without an answer.  Each
# accept's role goes into $Dir/held/accepts.
mkdir "$Dir/held" or die "mkdir: $!";

sub held_first {
    my ($kind, $n) = @_;
    for my $i (1 .. $n) {
        my $fh;
        return 1 if sysopen $fh, "$Dir/held/$kind-$i",
                            POSIX::O_WRONLY | POSIX::O_CREAT | POSIX::O_EXCL;
    }
    return 0;
}

sub held {
    my ($c) = @_;

    my ($packet, $p) = startup($c) or return;
    my $listen = ($p->{application_name} // '') =~ /listen/ ? 1 : 0;

    open my $log, '>>', "$Dir/held/accepts" or return;
    syswrite $log, ($listen ? "listen\n" : "pool\n");
    close $log;

    if (!$listen && held_first('pool', 2)) {
        Time::HiRes::sleep(0.3);
        return;
    }

    my $pg = to_live($packet) or return;

    return relay($c, $pg) unless $listen && held_first('listen', 1);

    # the client's messages, one at a time, until the first that is not a
    # password message ('p'): held, then sent on
    my $sel = IO::Select->new($c, $pg);
    my $in = '';

    while (1) {
        for my $from ($sel->can_read(30)) {
            my $got = sysread $from, my $buf, 65536;
            return unless $got;

            if ($from == $pg) {
                syswrite $c, $buf;
                next;
            }

            $in .= $buf;

            while (length $in >= 5) {
                my ($type, $len) = unpack 'a N', $in;
                last if length $in < 1 + $len;

                my $msg = substr $in, 0, 1 + $len, '';

                if ($type ne 'p') {
                    Time::HiRes::sleep(2);
                    my $fh;
                    open $fh, '>', "$Dir/held/released" and close $fh;
                    syswrite $pg, $msg . $in;
                    return relay($c, $pg);
                }

                syswrite $pg, $msg;
            }
        }
    }
}

our $HELD = stand_in(\&held);

$ENV{TEST_NGINX_SESSION_DB_HELD} = nginx_quote(
    "host=127.0.0.1 port=$HELD $REST");

# The LISTEN connection has connected and waits 2 s for its probe's
# answer; its worker's pool connection, refused once, connects 0.3 s
# later and tells the worker that the server is back.  The LISTEN
# connection is not an attempt lost with a link: it must stay, and be the
# only LISTEN connection the server ever sees.  (A build that also gives
# up connections in their probe failed both checks: two LISTEN
# connections, and the "given up" line.)
sub probe_held {
    my ($name) = @_;

    my ($released) = wait_until(10, 0.05, sub { -e "$Dir/held/released" });
    ok($released, "$name - the LISTEN connection's probe was held");

    # LISTEN is in effect: an upload wakes a poll
    my ($up) = wait_until(10, 0.05, sub { get_status() == 200 });
    ok($up, "$name - nginx serves");

    woken_by_upload($name, 'a poll is woken', 'by the notification');

    open my $fh, '<', "$Dir/held/accepts" or die "accepts: $!";
    my @roles = map { chomp; $_ } <$fh>;
    is(scalar(grep { $_ eq 'listen' } @roles), 1,
       "$name - one LISTEN connection, never given up")
        or Test::More::diag("accepts: @roles");
    cmp_ok(scalar(grep { $_ eq 'pool' } @roles), '>=', 4,
           "$name - the pool's first attempts were refused and made again");
}

master_on();
workers(2);
no_shuffle();

add_block_preprocessor(sub {
    my $block = shift;

    my $silent = $block->name =~ /silent/;

    my $db = $block->name =~ /TLS/ ? '$TEST_NGINX_SESSION_DB_TLS'
           : $silent ? '$TEST_NGINX_SESSION_DB_HOLE'
           : defined $block->db
             ? '$TEST_NGINX_SESSION_DB_' . ($block->db =~ s/\s+//gr)
           : '$TEST_NGINX_SESSION_DB_LIST';

    my $extra = $block->name =~ /PREPARE/ ? "session_db_timeout 1s;\n"
              : $silent ? "session_db_timeout 1s;\n"
                          . "    session_db_idle_check 1s;\n"
              : defined $block->resolver
                ? "resolver 127.0.0.1:\$TEST_NGINX_DNS_PORT ipv6=off;\n"
              : '';

    # the silent block's polls: a server whose reuseport spreads their
    # connections over the two workers
    $extra .= <<'EOF' if $silent;
    server {
        listen 127.0.0.1:$TEST_NGINX_SPREAD_PORT reuseport;
        location /api/ {
            session_api;
        }
    }
EOF

    $extra .= "    session_image_chunk_size " . $block->chunk . ";\n"
        if defined $block->chunk;

    $block->set_value('http_config', <<EOF);
    session_db $db;
    session_db_connections 1;
    $extra
EOF

    if ($silent) {
        $block->set_value('init', 'main::black_hole($block->name)');
    }

    if (defined $block->check) {
        $block->set_value('init', 'main::' . ($block->check =~ s/\s+//gr)
                                  . '($block->name)');
    }

    $block->set_value('config', <<'EOF');
    location /api/ {
        session_api;
    }
EOF
});

run_tests();

__DATA__

=== TEST 1: a host list whose first entry refuses: every request answered
--- more_headers eval
"Authorization: Bearer $::F->{key}"
--- pipelined_requests eval
[map { "GET /api/v1/sessions?limit=1" } 1 .. 12]
--- error_code eval
[map { 200 } 1 .. 12]
--- no_error_log
[alert]
[error]
epoll_ctl



=== TEST 2: fresh connections again (a new nginx), and a write
--- more_headers eval
"Authorization: Bearer $::F->{key}\r\nContent-Type: application/json"
--- pipelined_requests eval
[map { "POST /api/v1/sessions\n{\"delivery_mode\": \"long_poll\"}" } 1 .. 6]
--- error_code eval
[map { 201 } 1 .. 6]
--- no_error_log
[alert]
[error]
epoll_ctl



=== TEST 3: TLS refused by a hostnossl rule, sslmode=prefer: every request answered
--- more_headers eval
"Authorization: Bearer $::F->{key}"
--- pipelined_requests eval
[map { "GET /api/v1/sessions?limit=1" } 1 .. 12]
--- error_code eval
[map { 200 } 1 .. 12]
--- no_error_log
[alert]
[error]
epoll_ctl



=== TEST 4: TLS refused by a hostnossl rule: a write
--- more_headers eval
"Authorization: Bearer $::F->{key}\r\nContent-Type: application/json"
--- pipelined_requests eval
[map { "POST /api/v1/sessions\n{\"delivery_mode\": \"long_poll\"}" } 1 .. 6]
--- error_code eval
[map { 201 } 1 .. 6]
--- no_error_log
[alert]
[error]
epoll_ctl



=== TEST 5: a link that goes silent: noticed, LISTEN again, polls catch up
--- request
GET /api/v1/sessions?limit=1
--- more_headers eval
"Authorization: Bearer $::F->{key}"
--- error_code: 200
--- no_error_log
[alert]
[crit]
epoll_ctl
--- timeout: 60



=== TEST 6: a host name through the resolver: every request answered
--- debug_log: the "session db: resolving" lines
--- db: NAME
--- resolver
--- check: resolved
--- more_headers eval
"Authorization: Bearer $::F->{key}"
--- pipelined_requests eval
[map { "GET /api/v1/sessions?limit=1" } 1 .. 12]
--- error_code eval
[map { 200 } 1 .. 12]
--- no_error_log
[alert]
[error]
[warn]
epoll_ctl



=== TEST 7: a host name through the resolver, looked up again on every reconnect
--- debug_log: the "session db: resolving" lines
--- db: NAME
--- resolver
--- check: resolved_again
--- request
GET /api/v1/sessions?limit=1
--- more_headers eval
"Authorization: Bearer $::F->{key}"
--- error_code: 200
--- no_error_log
[alert]
epoll_ctl
--- timeout: 30



=== TEST 8: a name and a literal with a port each: the name's server is down
--- debug_log: the "session db: resolving" lines
--- db: NAMES
--- resolver
--- check: resolved
--- more_headers eval
"Authorization: Bearer $::F->{key}"
--- pipelined_requests eval
[map { "GET /api/v1/sessions?limit=1" } 1 .. 6]
--- error_code eval
[map { 200 } 1 .. 6]
--- no_error_log
[alert]
[error]
epoll_ctl



=== TEST 9: a host name without a resolver: resolved at configuration time
--- debug_log: the "session db: resolving" lines (none must be there)
--- db: LOCALHOST
--- check: not_resolved
--- more_headers eval
"Authorization: Bearer $::F->{key}"
--- pipelined_requests eval
[map { "GET /api/v1/sessions?limit=1" } 1 .. 6]
--- error_code eval
[map { 200 } 1 .. 6]
--- no_error_log
[alert]
[error]
epoll_ctl



=== TEST 10: the server options: statement_timeout, plan_cache_mode
--- db: REC
--- check: own_options
--- request
GET /api/v1/sessions?limit=1
--- more_headers eval
"Authorization: Bearer $::F->{key}"
--- error_code: 200
--- no_error_log
[alert]
[error]



=== TEST 11: the server options: the operator's own stand
--- db: RECOPT
--- check: operator_options
--- request
GET /api/v1/sessions?limit=1
--- more_headers eval
"Authorization: Bearer $::F->{key}"
--- error_code: 200
--- no_error_log
[alert]
[error]



=== TEST 12: an unknown host name without a resolver: nginx does not start
--- db: UNKNOWN
--- must_die
--- error_log eval
qr/\[emerg\] .*host not found in "session_db": "nowhere\.t023\.invalid" in \S+nginx\.conf:\d+$/



=== TEST 13: a PREPARE held by a lock, statement_timeout off: connected again
--- db: NOTIMEOUT
--- check: prepare_held
--- request
GET /api/v1/sessions?limit=1
--- more_headers eval
"Authorization: Bearer $::F->{key}"
--- error_code: 200
--- error_log eval
qr/no answer to the statements' PREPARE within 1000 ms, connecting again/
--- no_error_log
[alert]



=== TEST 14: a connection in its first statement is not given up when another connects
--- db: HELD
--- check: probe_held
--- request
GET /api/v1/sessions?limit=1
--- more_headers eval
"Authorization: Bearer $::F->{key}"
--- error_code: 200
--- no_error_log
[alert]
an older connection attempt is given up



=== TEST 15: a PREPARE refused by lock_timeout: the statements go as text
--- db: LOCKTIMEOUT
--- check: prepare_refused
--- request
GET /api/v1/sessions?limit=1
--- more_headers eval
"Authorization: Bearer $::F->{key}"
--- error_code: 200
--- error_log eval
qr/preparing the statements failed, they are sent as text/
--- no_error_log
[alert]
does not exist



=== TEST 16: the stream lost in the statements' PREPARE: 503, the worker free
--- db: DESYNC
--- check: prepare_desync
--- request
GET /api/v1/sessions?limit=1
--- more_headers eval
"Authorization: Bearer $::F->{key}"
--- error_code: 503
--- no_error_log
[alert]



=== TEST 17: the stream lost in an upload's first statements: 503, the worker free
--- db: DESYNCUPLOAD
--- chunk: 16
--- check: upload_desync
--- request
GET /api/v1/sessions?limit=1
--- more_headers eval
"Authorization: Bearer $::F->{key}"
--- error_code: 200
--- no_error_log
[alert]
