package SessionTest;

# Helpers for the Test::Nginx scripts t/*.t (on top of t/lib/Session.pm,
# which creates the fixtures):
#
#     use lib 't/lib';
#     use Test::Nginx::Socket 'no_plan';
#     use Session;
#     use SessionTest qw(:DEFAULT api_request check_init);
#
# The functions of @EXPORT come with a plain "use SessionTest"; those of
# @EXPORT_OK (the requests, the block preprocessing) only by name, so that
# a script may keep a function of its own under one of those names.
#
# Loading this module sets $ENV{TEST_NGINX_SESSION_DB_CONF}: the conninfo
# of TEST_NGINX_SESSION_DB as a double-quoted nginx string, so that a
# script writes
#
#     --- http_config
#         session_db $TEST_NGINX_SESSION_DB_CONF;
#
# whatever characters the conninfo (its password, say) holds.  Without
# TEST_NGINX_SESSION_DB the whole script is skipped.
#
# The functions here drive the nginx that Test::Nginx started for the
# current block, from Perl, for what a block cannot express: polling until
# something happens, timing an answer, stopping the database in between.
# Those at the end serve a script's add_block_preprocessor: a block's
# "--- check: NAME" run from its --- init (check_init), the sections most
# blocks leave out (db_http_config, api_config, key_headers, ...).

use strict;
use warnings;

use Digest::SHA ();
use Exporter qw(import);
use HTTP::Tiny ();
use IO::Select ();
use IO::Socket::INET ();
use IO::Socket::UNIX ();
use POSIX ();
use Socket qw(SOCK_STREAM);
use Session ();
use Test::More ();
use Time::HiRes ();

our @EXPORT = qw(nginx_quote http_request auth_header wait_until
                 random_key hang_listener conninfo_port
                 relay_start relay_stop relay_db master_pid worker_pids
                 error_log_count nginx_debug need_debug_log debug_log_note);

our @EXPORT_OK = qw(error_body api_request send_get send_request answered
                    answer raw_http
                    burst status_json listening listen_cut error_log
                    access_log long_poll_session png_upload
                    check_init run_check run_action db_http_config api_config
                    ping_request key_headers add_no_error_log todo_block
                    reset_of fresh_window first_429 key_hash_hex
                    lease_where pipelined_ok);


sub nginx_quote {
    my ($s) = @_;

    $s =~ s/(["\\])/\\$1/g;

    return qq{"$s"};
}


if (!defined $ENV{TEST_NGINX_SESSION_DB} || $ENV{TEST_NGINX_SESSION_DB} eq '')
{
    # Test::Nginx::Socket may have planned already ('no_plan')
    require Test::More;
    Test::More->builder->skip_all('TEST_NGINX_SESSION_DB is not set (run'
                                  . ' the suite through util/test.sh)');
}

$ENV{TEST_NGINX_SESSION_DB_CONF} = nginx_quote($ENV{TEST_NGINX_SESSION_DB});


# --- debug-level lines -----------------------------------------------------
#
# Only an nginx built --with-debug writes debug-level lines (the error log
# of a block is at debug level): Debian's is, an nginx built from source
# may not be.  What a block learns from such lines (a line that must be
# there, or a key that must not) it cannot learn from another nginx, so
# a block that needs them says so:
#
#     --- debug_log: the "session db: resolving" lines
#
# and is skipped, with that reason, where nginx has no debug log: "ok N
# # skip NAME - needs <what>: nginx without --with-debug", said on
# stderr too ("# skipped: ...").  Where nginx has it nothing changes.  The
# helpers that read such lines (listening(), need_debug_log()) fail when
# they have none, so that a block that forgot the section fails rather
# than passing on nothing.

my $NginxDebug;

# nginx_debug(): whether the nginx under test (TEST_NGINX_BINARY) was
# built --with-debug (nginx -V)
sub nginx_debug {
    if (!defined $NginxDebug) {
        my $nginx = $Test::Nginx::Util::NginxBinary || 'nginx';
        my $v = `$nginx -V 2>&1`;
        $NginxDebug = $v =~ /\s--with-debug(?:\s|$)/ ? 1 : 0;
    }

    return $NginxDebug;
}

sub debug_skip {
    my ($why) = @_;

    $why .= ": nginx without --with-debug";
    Test::More->builder->skip($why);
    Test::More::diag("skipped: $why");
}

# the preprocessing of every block (a script's own comes first); a
# script without Test::Nginx's blocks (Test::More alone) has none
Test::Nginx::Util::add_block_preprocessor(sub {
    my ($block) = @_;

    return if !defined $block->debug_log || nginx_debug();

    (my $what = $block->debug_log) =~ s/\s+$//;
    debug_skip("$0 " . $block->name . " - needs $what");
    $block->set_value('SKIP', 1);
}) if defined &Test::Nginx::Util::add_block_preprocessor;

# need_debug_log(WHAT): true when nginx writes debug-level lines; else a
# failing test "needs WHAT, which nginx without --with-debug does not
# write (a --- debug_log block?)" and false.  For a check about to read
# such lines.
sub need_debug_log {
    my ($what) = @_;

    return 1 if nginx_debug();

    Test::More::fail("needs $what, which nginx without --with-debug does"
                     . " not write (a --- debug_log block?)");

    return 0;
}

# debug_log_note(WHAT): where nginx writes no debug-level lines, one
# skipped test that says that WHAT (a check of every block) sees only the
# lines of the other levels
sub debug_log_note {
    my ($what) = @_;

    debug_skip("$0: $what: checked in the lines of other levels only")
        unless nginx_debug();
}


# "Authorization: Bearer <key>"
sub auth_header {
    my ($key) = @_;

    return { Authorization => "Bearer $key" };
}


# http_request(METHOD, PATH, {headers}, timeout): one request, on a new
# connection, to the nginx of the test (PATH may also be a whole
# http://host:port/... URL).  Returns a hash: status, reason,
# headers (lower-case names), content, elapsed (seconds).  A failure to
# connect or a timeout is status 599 (HTTP::Tiny's convention).
sub http_request {
    my ($method, $path, $headers, $timeout) = @_;

    my $port = $Test::Nginx::Util::ServerPort || $ENV{TEST_NGINX_SERVER_PORT};

    my $http = HTTP::Tiny->new(keep_alive => 0,
                               timeout => defined $timeout ? $timeout : 10);

    my $t0 = Time::HiRes::time();
    my $url = $path =~ m{^https?://} ? $path : "http://127.0.0.1:$port$path";

    my $res = $http->request($method, $url, { headers => $headers || {} });
    $res->{elapsed} = Time::HiRes::time() - $t0;

    return $res;
}


# wait_until(TIMEOUT, INTERVAL, CODE): calls CODE until it returns true or
# TIMEOUT seconds have passed, sleeping INTERVAL seconds between calls.
# Returns (the last result of CODE, the seconds waited).
sub wait_until {
    my ($timeout, $interval, $code) = @_;

    my $t0 = Time::HiRes::time();
    my $deadline = $t0 + $timeout;
    my $r;

    for (;;) {
        $r = $code->();
        last if $r;

        my $now = Time::HiRes::time();
        last if $now >= $deadline;

        my $nap = $interval;
        $nap = $deadline - $now if $nap > $deadline - $now;
        Time::HiRes::sleep($nap);
    }

    return ($r, Time::HiRes::time() - $t0);
}


# The number of lines of the current block's error log that match $re.
sub error_log_count {
    my ($re) = @_;

    open my $fh, '<', $Test::Nginx::Util::ErrLogFile or return 0;
    my $n = grep { /$re/ } <$fh>;

    return $n;
}


# pipelined_ok(BEFORE, AFTER, BATCHES, READS, MARK, NAME): two tests, that
# the node sent BATCHES pipelines holding READS reads between the
# session_status database parts BEFORE and AFTER.  Those counters are the
# node's: a key lookup is a read too, and one sent meanwhile (the auth
# cache emptied by the LISTEN connection coming up again) may go alone
# or join a pipeline.  So each lookup that the debug log shows after its
# length MARK allows one more of each; with none (or no debug log) the
# counts are exact.  On a failure the module's lines since MARK are
# printed.
sub pipelined_ok {
    my ($before, $after, $batches, $reads, $mark, $name) = @_;

    my $log = nginx_debug() ? substr(error_log(), $mark) : '';
    my $lookups = () = $log =~ /session auth: cache miss, asking the database/g;

    my $nb = $after->{batches} - $before->{batches};
    my $nr = $after->{batched} - $before->{batched};
    my $why = $lookups ? " (or up to $lookups more: key lookups)" : '';

    my $ok = Test::More::ok($nb >= $batches && $nb <= $batches + $lookups,
                            "$name - $batches pipeline(s)$why");
    $ok &= Test::More::ok($nr >= $reads && $nr <= $reads + $lookups,
                          "$name - $reads reads in them$why");

    Test::More::diag("$nb pipelines, $nr reads, $lookups key lookups;"
                     . " the module's lines:\n"
                     . join '', grep { /session (?:db|auth|listen|relay):/ }
                                     split /^/, $log)
        unless $ok;

    return $ok;
}


# The pid of the nginx master of the current block, and its workers'.
sub master_pid {
    open my $fh, '<', $Test::Nginx::Util::PidFile
        or die "open $Test::Nginx::Util::PidFile: $!";
    my $pid = <$fh>;
    close $fh;
    chomp $pid;
    return $pid;
}

sub worker_pids {
    my $master = master_pid();
    return grep { /^\d+$/ } split /\s+/, `pgrep -P $master`;
}


# The X-RateLimit-Reset of an instant: the next UTC minute boundary.
sub reset_of {
    my ($t) = @_;
    return (POSIX::floor($t / 60) + 1) * 60;
}

# The position (from 1) of the first 429 in a list of statuses (an array
# reference), 0 when there is none.
sub first_429 {
    my ($s) = @_;

    for my $k (0 .. $#$s) {
        return $k + 1 if $s->[$k] == 429;
    }

    return 0;
}

# A key's SHA-256 in hex, as the database keeps it.
sub key_hash_hex {
    return Digest::SHA::sha256_hex(lc $_[0]);
}

# The WHERE of $key's lease row (session_limit_scope cluster) of class
# "other" in window $minute.
sub lease_where {
    my ($key, $minute) = @_;
    return "minute = $minute AND key_hash = '\\x" . key_hash_hex($key)
           . "'::bytea AND class = 2";
}

# Waits, when fewer than $need seconds of the current minute are left,
# until just after the next minute starts (bounded by 61 s); returns the
# reset of the window it is in then.
sub fresh_window {
    my ($need) = @_;

    my $now = Time::HiRes::time();
    my $left = reset_of($now) - $now;

    if ($left < $need) {
        Test::More::note(sprintf 'waiting %.1f s for the next minute', $left);
        Time::HiRes::sleep($left + 0.05);
    }

    return reset_of(Time::HiRes::time());
}


# A well-formed key that no fixture has: <prefix>_<32 random hex>.
sub random_key {
    my ($prefix) = @_;

    $prefix = 'sess' unless defined $prefix;

    return $prefix . '_' . join '', map { sprintf '%04x', int rand 65536 }
                                    1 .. 8;
}


# The port of a libpq conninfo ("port=N"), else PGPORT, else 5432.
sub conninfo_port {
    my ($conninfo) = @_;

    return $1 if $conninfo =~ /(?:^|\s)port\s*=\s*'?(\d+)/;
    return $ENV{PGPORT} if defined $ENV{PGPORT} && $ENV{PGPORT} =~ /^\d+$/;
    return 5432;
}


# hang_listener(): a "database" on 127.0.0.1 that accepts connections and
# reads what it is sent but never answers.  Returns (port, pid); the
# process is killed when the script ends.
my @Children;

sub hang_listener {
    my $sock = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                     LocalPort => 0, Listen => 64,
                                     ReuseAddr => 1, Proto => 'tcp')
        or die "hang_listener: listen: $!";

    my $port = $sock->sockport;

    my $pid = fork;
    die "hang_listener: fork: $!" unless defined $pid;

    if ($pid == 0) {
        # no END block of Test::Nginx in here: leave with _exit
        local $SIG{TERM} = sub { POSIX::_exit(0) };

        my $sel = IO::Select->new($sock);
        my $parent = getppid;

        for (;;) {
            POSIX::_exit(0) if getppid != $parent;

            for my $fh ($sel->can_read(1)) {
                if ($fh == $sock) {
                    my $c = $sock->accept or next;
                    $sel->add($c);
                    next;
                }

                my $buf;
                my $n = sysread $fh, $buf, 65536;

                if (!$n) {
                    $sel->remove($fh);
                    close $fh;
                }
            }
        }
    }

    close $sock;
    push @Children, $pid;

    return ($port, $pid);
}


END {
    local $?;    # keep the script's exit status

    for my $pid (@Children) {
        kill 'TERM', $pid;
        waitpid $pid, 0;
    }
}


# A TCP relay on 127.0.0.1 to the database of TEST_NGINX_SESSION_DB
# (unix socket or TCP): the database "goes away" for nginx when the relay
# process is killed (and every relayed connection with it) and comes back
# when a relay listens on the same port again.  relay_start([PORT])
# returns (port, pid), or nothing when the database is not reachable that
# way; relay_stop(PID) kills it.  A relay still running when the script
# ends is stopped then.
#
# relay_start(PORT, FILTER) passes what clients send through FILTER, a
# code reference called in the relay's process with (BYTES, STATE) for
# each read of a client's connection (STATE: a hash reference of its own
# for that connection); it returns (BYTES', DELAY): the bytes passed on
# instead, DELAY seconds later (0 or undef: now; the later bytes of the
# connection wait behind them, so the order is kept).  What the server
# sends goes as it is.
my %Relays;

# the bytes of a relayed connection: all of them, as the socket takes them
sub _relay_write {
    my ($fh, $buf) = @_;

    for (my $off = 0; $off < length $buf; ) {
        my $w = syswrite $fh, $buf, length($buf) - $off, $off;
        last unless defined $w;
        $off += $w;
    }
}

sub upstream_addr {
    my $c = Session::db_conninfo();

    return () if $c =~ m{^\w+://};

    my $host = $c =~ /(?:^|\s)host\s*=\s*'?([^'\s]+)/ ? $1
               : $ENV{PGHOST} // '/var/run/postgresql';

    return () if $host =~ /,/;

    return ($host, conninfo_port($c));
}

sub relay_start {
    my ($port, $filter) = @_;

    my ($host, $pgport) = upstream_addr() or return;

    my $ls = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                   LocalPort => $port // 0, Listen => 64,
                                   ReuseAddr => 1, Proto => 'tcp')
        or die "relay: listen: $!";

    $port = $ls->sockport;

    my $pid = fork;
    die "relay: fork: $!" unless defined $pid;

    if ($pid == 0) {
        local $SIG{TERM} = sub { POSIX::_exit(0) };

        my $sel = IO::Select->new($ls);
        my $parent = getppid;
        my (%peer, %client, %later);

        for (;;) {
            POSIX::_exit(0) if getppid != $parent;

            # bytes held back by the filter whose time has come
            my $now = Time::HiRes::time();

            for my $key (keys %later) {
                my $q = $later{$key};

                while (@$q && $q->[0][1] <= $now) {
                    my $item = shift @$q;
                    _relay_write($item->[0], $item->[2]);
                }

                delete $later{$key} unless @$q;
            }

            for my $fh ($sel->can_read(%later ? 0.02 : 1)) {
                if ($fh == $ls) {
                    my $c = $ls->accept or next;
                    my $u = $host =~ m{^/}
                        ? IO::Socket::UNIX->new(
                              Peer => "$host/.s.PGSQL.$pgport",
                              Type => SOCK_STREAM)
                        : IO::Socket::INET->new(PeerAddr => $host,
                                                PeerPort => $pgport,
                                                Proto => 'tcp');
                    if (!$u) {
                        close $c;
                        next;
                    }

                    $peer{"$c"} = $u;
                    $peer{"$u"} = $c;
                    $client{"$c"} = {};
                    $sel->add($c, $u);
                    next;
                }

                my $other = $peer{"$fh"} or next;
                my $n = sysread $fh, my $buf, 65536;

                if (!$n) {
                    $sel->remove($fh, $other);
                    delete @peer{"$fh", "$other"};
                    delete @client{"$fh", "$other"};
                    delete @later{"$fh", "$other"};
                    close $fh;
                    close $other;
                    next;
                }

                my $delay = 0;

                ($buf, $delay) = $filter->($buf, $client{"$fh"})
                    if $filter && $client{"$fh"};

                if ($delay || $later{"$fh"}) {
                    push @{ $later{"$fh"} },
                         [$other, Time::HiRes::time() + ($delay || 0),
                          $buf];
                    next;
                }

                _relay_write($other, $buf);
            }
        }
    }

    close $ls;
    $Relays{$pid} = 1;

    return ($port, $pid);
}

sub relay_stop {
    my ($pid) = @_;

    kill 'KILL', $pid;
    waitpid $pid, 0;
    delete $Relays{$pid};
}

END {
    local $?;    # keep the script's exit status

    relay_stop($_) for keys %Relays;
}


# relay_db([FILTER]): a relay (relay_start, with FILTER if given) and the
# conninfo of the database through it: TEST_NGINX_SESSION_DB's, its host
# and port replaced with host=127.0.0.1 port=<the relay's> (and, with a
# FILTER, sslmode=disable); TEST_NGINX_SESSION_DB's as it is when the
# database cannot be relayed.  Sets
# $ENV{TEST_NGINX_RELAY_DB_CONF} to that conninfo as an nginx string
# (nginx_quote).  Returns (port, pid, conninfo) of the relay, port and pid
# undef without one.
sub relay_db {
    my ($filter) = @_;

    my ($port, $pid) = relay_start(undef, $filter);
    my $conninfo = Session::db_conninfo();

    if (defined $port) {
        $conninfo =~ s/(?:^|\s)(?:host|hostaddr|port)\s*=\s*('[^']*'|\S+)//g;
        $conninfo .= " host=127.0.0.1 port=$port";

        # a filter reads the protocol: not under TLS, which libpq asks
        # for first (sslmode=prefer) where the server has it (Debian 13)
        if ($filter) {
            $conninfo =~ s/(?:^|\s)sslmode\s*=\s*('[^']*'|\S+)//g;
            $conninfo .= ' sslmode=disable';
        }
    }

    $ENV{TEST_NGINX_RELAY_DB_CONF} = nginx_quote($conninfo);

    return ($port, $pid, $conninfo);
}


# error_body(STATUS, REASON, MESSAGE): the JSON error body of the module,
# as it writes it: {"statusCode": STATUS, "error": "REASON", "message":
# "MESSAGE"}.
sub error_body {
    my ($status, $reason, $message) = @_;

    return sprintf '{"statusCode": %d, "error": "%s", "message": "%s"}',
                   $status, $reason, $message;
}


# --- requests of the checks ----------------------------------------------

# api_request(METHOD, PATH, KEY, BODY, HEADERS, OPTIONS): one API request,
# on a new connection, to the nginx of the current block.
#   KEY      the API key, sent as "Authorization: Bearer KEY"; undef: none
#   BODY     undef: no body; a reference: sent as JSON (encode_json); a
#            string: sent as it is.  A body goes with "Content-Type:
#            application/json" unless HEADERS name a Content-Type.
#   HEADERS  more request headers (a hash reference; optional)
#   OPTIONS  a hash reference, every field optional:
#            timeout    seconds (default 10)
#            port       another port of 127.0.0.1 (default the block's)
#            raw        a string BODY goes without a Content-Type of its
#                       own (HEADERS name it, if anything does)
#            json_type  decode an answer as JSON only when its
#                       Content-Type is application/json
# Returns HTTP::Tiny's hash (status, reason, headers with lower-case
# names, content; 599 for a failure to connect or a timeout) and:
#   json     the decoded answer, undef when it is not JSON (the field is
#            absent for an empty answer)
#   t0, t1   Time::HiRes::time() before and after the request
#   elapsed  t1 - t0
sub api_request {
    my ($method, $path, $key, $body, $headers, $opt) = @_;

    $opt ||= {};

    my %h = %{ $headers || {} };
    $h{Authorization} = "Bearer $key" if defined $key;

    my %req = (headers => \%h);

    if (defined $body) {
        $h{'Content-Type'} //= 'application/json'
            if ref $body || !$opt->{raw};
        $req{content} = ref $body ? Session::encode_json($body) : $body;
    }

    my $port = $opt->{port} // $Test::Nginx::Util::ServerPort;
    my $http = HTTP::Tiny->new(keep_alive => 0,
                               timeout => $opt->{timeout} // 10);

    my $t0 = Time::HiRes::time();
    my $res = $http->request($method, "http://127.0.0.1:$port$path", \%req);
    $res->{t0} = $t0;
    $res->{t1} = Time::HiRes::time();
    $res->{elapsed} = $res->{t1} - $t0;

    my $json = !$opt->{json_type}
               || ($res->{headers}{'content-type'} // '')
                  eq 'application/json';

    $res->{json} = eval { Session::decode_json($res->{content}) }
        if $json && defined $res->{content} && length $res->{content};

    return $res;
}


# send_get(PATH, KEY, PORT): "GET PATH HTTP/1.1" with "Authorization:
# Bearer KEY" and "Connection: close", sent on a new connection to the
# nginx of the current block (or to PORT of 127.0.0.1), not waiting for
# the answer (answered, answer).  Returns the request: a hash of sock
# (the connection), path and t0 (Time::HiRes::time() once sent).
# long_poll_session(KEY): a new long_poll session of KEY's project, its
# id; dies unless the answer is 201 with a JSON object.
sub long_poll_session {
    my ($key) = @_;

    my $r = api_request('POST', '/api/v1/sessions', $key,
                        { delivery_mode => 'long_poll' }, undef,
                        { timeout => 30 });

    die "create: $r->{status} $r->{content}\n"
        unless $r->{status} == 201 && ref $r->{json} eq 'HASH';

    return $r->{json}{id};
}


# png_upload(KEY, SID): a small PNG uploaded into the session SID, the
# image object of the answer; dies unless the answer is 201.
sub png_upload {
    my ($key, $sid) = @_;

    my $r = api_request('POST', "/api/v1/sessions/$sid/images", $key,
                        "\x89PNG\r\n\x1a\n" . ('x' x 32),
                        { 'Content-Type' => 'image/png' }, { timeout => 30 });

    die "upload: $r->{status} $r->{content}\n" unless $r->{status} == 201;

    return $r->{json};
}


sub send_get {
    my ($path, $key, $port) = @_;

    return send_request('GET', $path, $key, undef, undef, $port);
}


# send_request(METHOD, PATH, KEY, HEADERS, BODY, PORT): the same for any
# method, with the headers of the hash HEADERS and, when BODY is
# defined, BODY with its Content-Length.
sub send_request {
    my ($method, $path, $key, $headers, $body, $port) = @_;

    my $s = IO::Socket::INET->new(
                PeerAddr => '127.0.0.1',
                PeerPort => $port // $Test::Nginx::Util::ServerPort,
                Proto => 'tcp')
        or die "send_request: connect: $!";

    my $head = "$method $path HTTP/1.1\r\nHost: localhost\r\n"
               . "Authorization: Bearer $key\r\n"
               . "Connection: close\r\n";

    $head .= "$_: $headers->{$_}\r\n" for sort keys %{ $headers || {} };
    $head .= 'Content-Length: ' . length($body) . "\r\n" if defined $body;

    print $s $head . "\r\n" . ($body // '');

    return { sock => $s, path => $path, t0 => Time::HiRes::time() };
}


# answered(REQUEST, SECS): whether the answer to REQUEST (of send_get)
# starts to arrive within SECS seconds (without reading it).
sub answered {
    my ($p, $secs) = @_;

    return scalar IO::Select->new($p->{sock})->can_read($secs);
}


# answer(REQUEST, SECS): the whole answer to REQUEST (of send_get): what
# arrives until the connection closes, at most SECS seconds (default 30)
# away; the connection is closed.  Returns a hash: status (0 when nothing
# came), headers (lower-case names), content, json (the decoded content,
# when there is one), t1 (Time::HiRes::time() at the end), elapsed (since
# the request was sent, when REQUEST has its t0).
sub answer {
    my ($p, $secs) = @_;

    my $sel = IO::Select->new($p->{sock});
    my $deadline = Time::HiRes::time() + ($secs // 30);
    my $buf = '';

    for (;;) {
        my $left = $deadline - Time::HiRes::time();
        last if $left <= 0 || !$sel->can_read($left);

        my $n = sysread $p->{sock}, my $chunk, 65536;
        last unless $n;
        $buf .= $chunk;
    }

    my %res = (status => 0, headers => {}, t1 => Time::HiRes::time());
    $res{elapsed} = $res{t1} - $p->{t0} if defined $p->{t0};

    close $p->{sock};

    my ($head, $body) = split /\r\n\r\n/, $buf, 2;
    return \%res unless defined $head;

    my ($line, @lines) = split /\r\n/, $head;
    $res{status} = $1 if $line =~ m{^HTTP/1\.\d (\d{3})};

    for (@lines) {
        $res{headers}{lc $1} = $2 if /^([^:]+):\s*(.*)$/;
    }

    $res{content} = $body;
    $res{json} = eval { Session::decode_json($body) }
        if defined $body && length $body;

    return \%res;
}


# raw_http(REQUEST, TIMEOUT): writes REQUEST (the raw bytes of one or more
# requests, written as the connection takes them) on a new connection to
# the nginx of the current block and reads one answer: until the end of
# its Content-Length body, the connection's close or TIMEOUT seconds
# (default 10).  Returns a hash: status (undef without a whole answer),
# headers (lower-case names), content, elapsed (seconds).
sub raw_http {
    my ($req, $timeout) = @_;

    my $t0 = Time::HiRes::time();
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $Test::Nginx::Util::ServerPort,
                                  Proto => 'tcp', Timeout => 5)
        or die "connect: $!";

    $s->blocking(0);

    my ($buf, $off, %res) = ('', 0);
    my $sel = IO::Select->new($s);
    my $deadline = $t0 + ($timeout // 10);

    while (Time::HiRes::time() < $deadline) {
        if ($off < length $req) {
            my $n = syswrite $s, $req, 65536, $off;
            $off += $n if $n;
        }

        last if $buf =~ /\A(.*?)\r\n\r\n/s
                && $1 =~ /\r\nContent-Length: (\d+)/i
                && length($buf) >= length($&) + $1;

        next unless $sel->can_read(0.05);

        my $n = sysread $s, my $chunk, 65536;
        next if !defined $n && $!{EAGAIN};
        last unless $n;

        $buf .= $chunk;
    }

    close $s;

    $res{elapsed} = Time::HiRes::time() - $t0;

    if ($buf =~ m{\AHTTP/1\.1 (\d{3}) [^\r]*\r\n(.*?)\r\n\r\n(.*)\z}s) {
        my $head = $2;

        $res{status} = $1;
        $res{content} = $3;

        for (split /\r\n/, $head) {
            $res{headers}{lc $1} = $2 if /^([^:]+):\s*(.*)$/;
        }
    }

    return \%res;
}


# burst(N, REQUEST, PORT): N connections at once to the nginx of the
# current block (or to PORT of 127.0.0.1), every one open before REQUEST
# (raw bytes, with "Connection: close") is written on each; then reads
# the answers until every connection is closed, at most 30 s.  Returns
# (a reference to the N raw answers in the order of the connections, ''
# for a connection that sent nothing, the number of connections still
# open at the end).
sub burst {
    my ($n, $req, $port) = @_;

    my @socks;
    for (1 .. $n) {
        my $s = IO::Socket::INET->new(
                    PeerAddr => '127.0.0.1',
                    PeerPort => $port // $Test::Nginx::Util::ServerPort,
                    Proto => 'tcp', Timeout => 5)
            or die "connect: $!";
        push @socks, $s;
    }

    $_->blocking(0) for @socks;
    syswrite($_, $req) == length $req or die "write: $!" for @socks;

    my %buf;
    my $sel = IO::Select->new(@socks);
    my $deadline = Time::HiRes::time() + 30;

    while ($sel->count && Time::HiRes::time() < $deadline) {
        for my $s ($sel->can_read(1)) {
            my $got = sysread $s, my $chunk, 65536;
            next if !defined $got && $!{EAGAIN};

            if ($got) {
                $buf{$s} .= $chunk;
                next;
            }

            $sel->remove($s);
            close $s;
        }
    }

    return ([map { $buf{$_} // '' } @socks], $sel->count);
}

# status_json(): GET /status of the nginx of the current block (a
# location with session_status).  Returns the decoded JSON; dies unless
# the answer is 200.
sub status_json {
    my $r = http_request('GET', '/status', {}, 10);

    die "GET /status: $r->{status} $r->{content}\n"
        unless $r->{status} == 200;

    return Session::decode_json($r->{content});
}


# listening(): waits (10 s at the most) until the node's LISTEN
# connection (worker 0's, however many workers) has logged "session
# listen: listening" in the current block's error log: the auth cache,
# shared by the workers, is emptied.  One test: "the node listens (the
# auth cache was emptied)".
sub listening {
    # a debug-level line
    need_debug_log('"session listen: listening" lines') or return;

    my ($ok) = wait_until(10, 0.05, sub {
        return error_log() =~ /session listen: listening/;
    });

    Test::More::ok($ok, "the node listens (the auth cache was emptied)");
}


# listen_cut(): the node's LISTEN connection cut from PostgreSQL's side
# (its backend terminated).  Returns how many backends were terminated.
sub listen_cut {
    return scalar Session::psql(
        q{SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity}
        . q{ WHERE application_name = 'nginx session listen'});
}


# error_log(), access_log(): the whole error log, access log of the
# current block ('' when there is none).
sub error_log {
    return slurp_log($Test::Nginx::Util::ErrLogFile);
}

sub access_log {
    return slurp_log("$Test::Nginx::Util::ServRoot/logs/access.log");
}

sub slurp_log {
    my ($file) = @_;

    open my $fh, '<', $file or return '';
    local $/;

    return <$fh> // '';
}


# --- the blocks' preprocessing (add_block_preprocessor) -------------------

my $Checks = {};

# check_init(BLOCK, CHECKS): a block with "--- check: NAME" runs
# CHECKS->{NAME} (CHECKS: a hash reference of NAME => code, called with
# the block's name) from its --- init, that is once nginx is up and
# before the block's request, through run_check.  Dies when CHECKS has no
# NAME.  Returns nothing.
sub check_init {
    my ($block, $checks) = @_;

    return unless defined $block->check;

    # a block skipped by "--- skip_eval: N: CODE" runs no check either
    if (defined $block->skip_eval
        && $block->skip_eval =~ /^\s*\d+\s*:\s*(.*?)\s*$/s)
    {
        my $skip = eval "package main; $1";
        return if $skip;
    }

    (my $check = $block->check) =~ s/\s+//g;
    die "no check $check" unless $checks->{$check};

    $Checks = $checks;
    $block->set_value('init',
                      "SessionTest::run_check('$check', \$block->name)");
}


# run_check(CHECK, NAME): runs the check CHECK of the block NAME (see
# check_init); when it dies, a failing test "NAME - check CHECK died:
# <why>".  Returns nothing.
sub run_check {
    my ($check, $name) = @_;

    eval { $Checks->{$check}->($name); 1 }
        or Test::More::fail("$name - check $check died: $@");
}


# run_action(BLOCK, ACTIONS): a block with "--- action: NAME" runs
# ACTIONS->{NAME} (a hash reference of NAME => code, called with the
# block's name) now, while its preprocessing; when it dies, a failing
# test "<block name> - action NAME: <why>".  Dies when ACTIONS has no
# NAME.  Returns nothing.
sub run_action {
    my ($block, $actions) = @_;

    return unless defined $block->action;

    # skipped (see --- debug_log): its action would fail
    return if defined $block->debug_log && !nginx_debug();

    (my $action = $block->action) =~ s/\s+//g;
    my $code = $actions->{$action} or die "no action $action";

    eval { $code->($block->name); 1 }
        or Test::More::fail($block->name . " - action $action: $@");
}


# db_http_config(BLOCK, LINES): a block without --- http_config gets
# "session_db $TEST_NGINX_SESSION_DB_CONF;" and LINES (more directives,
# each ending in "\n"; optional).  Returns nothing.
sub db_http_config {
    my ($block, $lines) = @_;

    # TEST_NGINX_SESSION_IMAGE_CHUNK: a script run again with images
    # streamed in pieces of that size (t/042, t/043, t/050), its blocks
    # with an http_config of their own too
    my $chunk = $ENV{TEST_NGINX_SESSION_IMAGE_CHUNK};

    if (defined $block->http_config) {
        my $conf = $block->http_config;

        if ($chunk && $conf =~ /^\s*session_db\s/m
            && $conf !~ /session_image_chunk_size/)
        {
            $block->set_value('http_config',
                              "$conf\n    session_image_chunk_size $chunk;\n");
        }

        return;
    }

    $block->set_value('http_config',
                      "session_db \$TEST_NGINX_SESSION_DB_CONF;\n"
                      . ($chunk ? "session_image_chunk_size $chunk;\n" : '')
                      . ($lines // ''));
}


# api_config(BLOCK): a block without --- config gets the one location
# "location /api/ { session_api; }".  Returns nothing.
sub api_config {
    my ($block) = @_;

    return if defined $block->config;

    $block->set_value('config', <<'EOF');
    location /api/ {
        session_api;
    }
EOF
}


# ping_request(BLOCK): a block with neither --- request nor --- must_die
# asks "GET /ping" and expects "pong\n" (a location of the script's
# configuration).  Returns nothing.
sub ping_request {
    my ($block) = @_;

    return if defined $block->request || defined $block->must_die;

    $block->set_value('request', "GET /ping\n");
    $block->set_value('response_body', "pong\n");
}


# key_headers(BLOCK, KEYS, WHO, TYPE): unless the block has a raw request
# (--- raw_request), its request headers start with "Authorization:
# Bearer <key>", the key KEYS->{<its --- api_key, else WHO>} (KEYS: a
# hash reference of fixture name => key), and "Content-Type: <the
# block's --- content_type, else TYPE>" (no Content-Type for "none"),
# before its own --- more_headers.  Dies when KEYS has no such fixture.
# Returns nothing.
sub key_headers {
    my ($block, $keys, $who, $type) = @_;

    return if defined $block->raw_request;

    ($who = $block->api_key // $who) =~ s/\s+//g;
    die "no fixture $who" unless $keys->{$who};

    my $h = "Authorization: Bearer $keys->{$who}\n";

    my $ct = $block->content_type // $type;
    $ct =~ s/^\s+|\s+$//g;
    $h .= "Content-Type: $ct\n" unless $ct eq 'none';

    $h .= $block->more_headers if defined $block->more_headers;
    $block->set_value('more_headers', $h);
}


# add_no_error_log(BLOCK, PATTERNS...): PATTERNS (strings or qr//) join
# the block's --- no_error_log (lines of a string, or a list).  Returns
# nothing.
sub add_no_error_log {
    my ($block, @more) = @_;

    my $pats = $block->no_error_log;
    $pats = [] unless defined $pats;
    $pats = [grep { length } split /\n/, $pats] unless ref $pats;
    $block->set_value('no_error_log', [@$pats, @more]);
}


# todo_block(BLOCK): a block with "--- todo_reason: WHY" runs as a
# Test::More TODO (WHY), which ends when the next block is preprocessed;
# todo_block() (no block, after run_tests) ends the last one.  Returns
# nothing.
my $InTodo;

sub todo_block {
    my ($block) = @_;

    my $tb = Test::More->builder;

    if ($InTodo) {
        $tb->todo_end;
        undef $InTodo;
    }

    if (defined $block && defined $block->todo_reason) {
        (my $reason = $block->todo_reason) =~ s/\s+$//;
        $tb->todo_start($reason);
        $InTodo = 1;
    }
}


1;
