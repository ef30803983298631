package Pgbouncer;

# A PgBouncer of the test script's own, on 127.0.0.1, in front of the
# PostgreSQL of TEST_NGINX_SESSION_DB (t/048, t/049):
#
#   my $b = pgbouncer_start(pool_mode => 'transaction', pool_size => 1);
#   $b->{conninfo}      libpq conninfo of the database through it
#   $b->{port}, $b->{pid}, $b->{dir} (its configuration and log)
#
# Options (all optional):
#   pool_mode      'transaction' (default), 'session' or 'statement'
#   pool_size      server connections per database and user (default 1)
#   ignore         ignore_startup_parameters (default: none, so that a
#                  client that sends "options" is refused, as by default)
#   connect_query  run on every server connection it opens (PgBouncer's
#                  per-database connect_query), e.g. a SET
#   prepared       max_prepared_statements: how many protocol-level
#                  statements it keeps for its clients on each server
#                  connection (PgBouncer 1.21 and later; 0: none, it
#                  passes them on as they are, as older ones do).  Not
#                  written where not given (PgBouncer's own default then
#                  holds: pgbouncer_keeps() tells), nor to a PgBouncer
#                  that has no such setting
#   port           default TEST_NGINX_PORT + 5 (inside the lane's ten
#                  ports, see util/test.sh), else any free port
#
# It authenticates clients against a userlist file with the password of
# TEST_NGINX_SESSION_DB (auth_type md5), and logs in to PostgreSQL with
# the same user and password.  Run as root, it runs as the user
# "postgres" (PgBouncer refuses root).  It is killed when the script
# ends, or with pgbouncer_stop($b).  pgbouncer_admin($b, SQL) runs a
# command on its admin console (SHOW POOLS, SHOW SERVERS...) and returns
# its rows, each a hash of the columns; pgbouncer_psql($b, SQL) runs SQL
# through it.  pgbouncer_keeps($b): does it keep prepared statements for
# its clients (its max_prepared_statements)?  pgbouncer_set($b, KEY,
# VALUE) changes a setting and reloads it.

use strict;
use warnings;

use Exporter qw(import);
use File::Temp ();
use IO::Socket::INET ();
use POSIX ();
use Session ();
use SessionTest ();

our @EXPORT = qw(pgbouncer_path pgbouncer_version pgbouncer_start
                 pgbouncer_stop pgbouncer_admin pgbouncer_keeps
                 pgbouncer_psql pgbouncer_set);

my %Running;


# the binary (Debian's package pgbouncer), or undef
sub pgbouncer_path {
    for my $p ('/usr/sbin/pgbouncer', '/usr/bin/pgbouncer') {
        return $p if -x $p;
    }

    return undef;
}


# its version, as [major, minor, patch] ("PgBouncer 1.18.0"), or undef
sub pgbouncer_version {
    my $bin = pgbouncer_path() or return undef;

    my ($code, $out) = Session::_run($bin, '--version');

    return undef unless $code == 0
                        && $out =~ /PgBouncer\s+(\d+)\.(\d+)(?:\.(\d+))?/;

    return [$1, $2, $3 // 0];
}


# KEY = VALUE in the [pgbouncer] section of B's configuration (the last
# one), in place of what was there, then RELOAD
sub pgbouncer_set {
    my ($b, $key, $value) = @_;

    my $ini = "$b->{dir}/pgbouncer.ini";

    open my $in, '<', $ini or die "$ini: $!";
    my @lines = grep { !/^\Q$key\E\s*=/ } <$in>;
    close $in;

    open my $out, '>', $ini or die "$ini: $!";
    print $out @lines, "$key = $value\n";
    close $out;

    pgbouncer_admin($b, 'RELOAD');
}


# SQL run through PgBouncer B (psql, unaligned, no header): its output,
# without the last newline
sub pgbouncer_psql {
    my ($b, $sql) = @_;

    my ($code, $out, $err) =
        Session::_run('psql', '-X', '-q', '-A', '-t', '-v',
                      'ON_ERROR_STOP=1', '-d', $b->{conninfo}, '-c', $sql);

    die "pgbouncer_psql $sql: exit $code: $err" if $code != 0;

    chomp $out;

    return $out;
}


# does the running PgBouncer B keep protocol-level prepared statements
# for its clients?  Its own word: max_prepared_statements over 0 in SHOW
# CONFIG (1.21 and later; older ones have no such setting)
sub pgbouncer_keeps {
    my ($b) = @_;

    my ($row) = grep { ($_->{key} // '') eq 'max_prepared_statements' }
                pgbouncer_admin($b, 'SHOW CONFIG');

    return $row && ($row->{value} // 0) =~ /^\d+$/ && $row->{value} > 0;
}


# the value of KEYWORD in a key=value conninfo (bare or single-quoted)
sub _conninfo_value {
    my ($conninfo, $keyword) = @_;

    return undef
        unless $conninfo =~ /(?:^|\s)\Q$keyword\E\s*=\s*('(?:[^'\\]|\\.)*'|\S+)/;

    my $v = $1;

    if ($v =~ s/^'(.*)'$/$1/s) {
        $v =~ s/\\(.)/$1/g;
    }

    return $v;
}


# is PORT of 127.0.0.1 free?  With 0: a port that is (its number)
sub _port_free {
    my ($port) = @_;

    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
                                  LocalPort => $port, Listen => 1,
                                  ReuseAddr => 1) or return 0;
    my $n = $s->sockport;
    close $s;

    return $n;
}


sub pgbouncer_start {
    my (%opt) = @_;

    my $bin = pgbouncer_path() or die "pgbouncer is not installed\n";
    my $db = Session::db_conninfo();

    my %c = map { $_ => _conninfo_value($db, $_) }
            qw(host port dbname user password);

    $c{host} //= $ENV{PGHOST} // 'localhost';
    $c{port} //= SessionTest::conninfo_port($db);
    $c{dbname} //= $ENV{PGDATABASE} // 'postgres';
    $c{user} //= $ENV{PGUSER} // 'postgres';

    defined $c{password}
        or die "pgbouncer_start: TEST_NGINX_SESSION_DB has no password\n";

    my $port = $opt{port};

    if (!defined $port) {
        $port = ($ENV{TEST_NGINX_PORT} || 1984) + 5;
        $port = _port_free(0) if !_port_free($port);
    }

    my $dir = File::Temp->newdir('pgbouncer-XXXXXX', TMPDIR => 1);
    my $runas = $> == 0 ? 'postgres' : undef;

    my $dbline = "pooled = host=$c{host} port=$c{port} dbname=$c{dbname}";
    $dbline .= " connect_query='$opt{connect_query}'"
        if defined $opt{connect_query};

    my %ini = (
        listen_addr         => '127.0.0.1',
        listen_port         => $port,
        unix_socket_dir     => '',
        auth_type           => 'md5',
        auth_file           => "$dir/userlist.txt",
        admin_users         => $c{user},
        pool_mode           => $opt{pool_mode} // 'transaction',
        default_pool_size   => $opt{pool_size} // 1,
        min_pool_size       => 0,
        reserve_pool_size   => 0,
        max_client_conn     => 200,
        logfile             => "$dir/pgbouncer.log",
        pidfile             => "$dir/pgbouncer.pid",
        # bounded: a client waits at most this long for a server
        query_wait_timeout  => 20,
    );

    $ini{ignore_startup_parameters} = $opt{ignore} if defined $opt{ignore};

    my $v = pgbouncer_version();

    if (defined $opt{prepared} && $v && $v->[0] * 1000 + $v->[1] >= 1021) {
        $ini{max_prepared_statements} = $opt{prepared};
    }

    open my $fh, '>', "$dir/pgbouncer.ini" or die "$dir: $!";
    print $fh "[databases]\n$dbline\n\n[pgbouncer]\n";
    print $fh "$_ = $ini{$_}\n" for sort keys %ini;
    close $fh;

    open $fh, '>', "$dir/userlist.txt" or die "$dir: $!";
    print $fh qq{"$c{user}" "$c{password}"\n};
    close $fh;

    if (defined $runas) {
        my (undef, undef, $uid, $gid) = getpwnam $runas
            or die "pgbouncer_start: no user $runas\n";
        chown $uid, $gid, $dir, map { "$dir/$_" }
                                    qw(pgbouncer.ini userlist.txt);
    }

    my $pid = fork;
    die "pgbouncer_start: fork: $!" unless defined $pid;

    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>>', "$dir/stdout.log";
        open STDERR, '>&', \*STDOUT;
        my @cmd = ($bin, defined $runas ? ('-u', $runas) : (),
                   "$dir/pgbouncer.ini");
        { exec { $cmd[0] } @cmd; }
        POSIX::_exit(127);
    }

    my $b = {
        pid => $pid,
        port => $port,
        dir => $dir,
        user => $c{user},
        password => $c{password},
        conninfo => "host=127.0.0.1 port=$port dbname=pooled"
                    . " user=$c{user} password=$c{password}",
    };

    $Running{$pid} = $b;

    my ($up) = SessionTest::wait_until(10, 0.05, sub {
        return 0 if waitpid($pid, POSIX::WNOHANG()) == $pid;
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                      PeerPort => $port, Proto => 'tcp')
            or return 0;
        close $s;
        return 1;
    });

    if (!$up) {
        my $log = SessionTest::slurp_log("$dir/pgbouncer.log")
                  . SessionTest::slurp_log("$dir/stdout.log");
        pgbouncer_stop($b);
        die "pgbouncer did not start on port $port:\n$log\n";
    }

    return $b;
}


sub pgbouncer_stop {
    my ($b) = @_;

    local $?;

    return unless delete $Running{ $b->{pid} };

    kill 'TERM', $b->{pid};

    my ($gone) = SessionTest::wait_until(5, 0.05, sub {
        waitpid($b->{pid}, POSIX::WNOHANG()) == $b->{pid};
    });

    if (!$gone) {
        kill 'KILL', $b->{pid};
        waitpid $b->{pid}, 0;
    }
}


sub pgbouncer_admin {
    my ($b, $sql) = @_;

    my $admin = "host=127.0.0.1 port=$b->{port} dbname=pgbouncer"
                . " user=$b->{user} password=$b->{password}";

    # unaligned, with the header line and no footer
    my ($code, $out, $err) =
        Session::_run('psql', '-X', '-q', '-A', '-P', 'footer=off',
                      '-d', $admin, '-c', $sql);

    die "pgbouncer_admin $sql: exit $code: $err" if $code != 0;

    my @lines = split /\n/, $out;
    my @cols = split /\|/, shift(@lines) // '', -1;

    return map {
        my @v = split /\|/, $_, -1;
        my %row;
        @row{@cols} = @v;
        \%row;
    } @lines;
}


END {
    local $?;

    pgbouncer_stop($_) for values %Running;
}


1;
