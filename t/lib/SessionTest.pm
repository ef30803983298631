package SessionTest;

# Helpers for the Test::Nginx scripts t/001 ... t/005 (on top of
# t/lib/Session.pm, which creates the fixtures):
#
#     use lib 't/lib';
#     use Test::Nginx::Socket 'no_plan';
#     use Session;
#     use SessionTest;
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

use strict;
use warnings;

use Exporter qw(import);
use HTTP::Tiny ();
use IO::Select ();
use IO::Socket::INET ();
use IO::Socket::UNIX ();
use POSIX ();
use Socket qw(SOCK_STREAM);
use Session ();
use Time::HiRes ();

our @EXPORT = qw(nginx_quote http_request auth_header wait_until
                 random_key hang_listener conninfo_port
                 relay_start relay_stop master_pid worker_pids
                 error_log_count);


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
# way; relay_stop(PID) kills it.
sub upstream_addr {
    my $c = Session::db_conninfo();

    return () if $c =~ m{^\w+://};

    my $host = $c =~ /(?:^|\s)host\s*=\s*'?([^'\s]+)/ ? $1
               : $ENV{PGHOST} // '/var/run/postgresql';

    return () if $host =~ /,/;

    return ($host, conninfo_port($c));
}

sub relay_start {
    my ($port) = @_;

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
        my %peer;

        for (;;) {
            POSIX::_exit(0) if getppid != $parent;

            for my $fh ($sel->can_read(1)) {
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
                    $sel->add($c, $u);
                    next;
                }

                my $other = $peer{"$fh"} or next;
                my $n = sysread $fh, my $buf, 65536;

                if (!$n) {
                    $sel->remove($fh, $other);
                    delete @peer{"$fh", "$other"};
                    close $fh;
                    close $other;
                    next;
                }

                for (my $off = 0; $off < $n; ) {
                    my $w = syswrite $other, $buf, $n - $off, $off;
                    last unless defined $w;
                    $off += $w;
                }
            }
        }
    }

    close $ls;

    return ($port, $pid);
}

sub relay_stop {
    my ($pid) = @_;

    kill 'KILL', $pid;
    waitpid $pid, 0;
}


1;
