package Session;

# Shared helpers for the Test::Nginx scripts of t/:
#
#     use lib 't/lib';
#     use Test::Nginx::Socket 'no_plan';
#     use Session;
#
#     my $f = fixture(plan => 'pro');     # account, project and key
#     $ENV{TEST_NGINX_KEY} = $f->{key};   # then "Bearer $TEST_NGINX_KEY"
#
# util/test.sh runs the suite inside a throw-away PostgreSQL and exports
# TEST_NGINX_SESSION_DB, the libpq conninfo of that database, which the
# scripts put into "session_db" and which every function here uses.
#
# Commands are run without a shell, and the child leaves with _exit so
# that no END block of Test::Nginx (which stops nginx) runs twice.

use strict;
use warnings;

use Carp qw(croak);
use Exporter qw(import);
use File::Basename qw(dirname);
use File::Spec;
use File::Temp ();
use JSON::PP ();
use IO::Select ();
use POSIX ();
use Time::HiRes ();

our @EXPORT = qw(fixture sessionctl sessionctl_ok db_conninfo psql
                 psql_begin psql_end notifications
                 sql_quote);
our @EXPORT_OK = qw(repo_root sessionctl_path decode_json encode_json
                    migrations schema_latest);

my $Root = File::Spec->rel2abs(
    File::Spec->catdir(dirname(File::Spec->rel2abs(__FILE__)),
                       File::Spec->updir, File::Spec->updir));

my $Json = JSON::PP->new->utf8->canonical;
my $Seq = 0;


sub repo_root { $Root }


# The migrations shipped (src/sql/NNN_*.sql), and the highest number among
# them: the schema version "sessionctl migrate" reaches.
sub migrations { glob File::Spec->catfile($Root, 'src', 'sql', '*.sql') }

sub schema_latest {
    my $v = 0;

    for (migrations()) {
        $v = $1 + 0 if m{/0*(\d+)_[^/]*\.sql$} && $1 > $v;
    }

    return $v;
}


sub sessionctl_path {
    $ENV{SESSIONCTL} || File::Spec->catfile($Root, 'build', 'sessionctl');
}


sub decode_json { $Json->decode($_[0]) }


sub encode_json { $Json->encode($_[0]) }


# The libpq conninfo of the test database.
sub db_conninfo {
    my $c = $ENV{TEST_NGINX_SESSION_DB};

    croak "TEST_NGINX_SESSION_DB is not set: run the tests through"
          . " 'make test' or util/test.sh" unless defined $c && $c ne '';

    return $c;
}


# Runs a command; returns (exit code, stdout, stderr).  A command killed
# by a signal gives 128 + the signal number, as a shell would.
sub _run {
    my (@cmd) = @_;

    my $out = File::Temp->new;
    my $err = File::Temp->new;

    my $pid = fork;
    croak "fork: $!" unless defined $pid;

    if ($pid == 0) {
        open STDIN, '<', File::Spec->devnull or POSIX::_exit(127);
        open STDOUT, '>&', $out or POSIX::_exit(127);
        open STDERR, '>&', $err or POSIX::_exit(127);
        { exec { $cmd[0] } @cmd; }
        print STDERR "cannot run $cmd[0]: $!\n";
        POSIX::_exit(127);
    }

    waitpid $pid, 0;
    my $status = $?;
    my $code = $status & 127 ? 128 + ($status & 127) : $status >> 8;

    return ($code, _slurp($out->filename), _slurp($err->filename));
}


sub _slurp {
    my ($file) = @_;

    open my $fh, '<:raw', $file or croak "$file: $!";
    local $/;
    my $s = <$fh>;
    close $fh;

    return defined $s ? $s : '';
}


# sessionctl(@args): runs "sessionctl --json -d <conninfo> @args".
# Returns (exit code, the decoded JSON object) on success and
# (exit code, stderr without its final newline) otherwise; in scalar
# context only the exit code.
sub sessionctl {
    my (@args) = @_;

    my ($code, $out, $err) =
        _run(sessionctl_path(), '--json', '-d', db_conninfo(), @args);

    if ($code != 0) {
        chomp $err;
        return wantarray ? ($code, $err) : $code;
    }

    my $data = eval { $Json->decode($out) };
    croak "sessionctl @args: output is not JSON ($@): $out" unless $data;

    return wantarray ? ($code, $data) : $code;
}


# sessionctl_ok(@args): the decoded JSON, or dies with sessionctl's
# message when it exits non-zero.
sub sessionctl_ok {
    my (@args) = @_;

    my ($code, $res) = sessionctl(@args);

    croak "sessionctl @args: exit $code: $res" if $code != 0;

    return $res;
}


# fixture(plan => 'pro', prefix => 'sess', name => '...'):
# a new account on that plan, a project of it and a key of the project.
# Returns {account_id, project_id, key, key_id, webhook_secret, plan}.
sub fixture {
    my (%opt) = @_;

    my $plan = defined $opt{plan} ? $opt{plan} : 'pro';
    my $name = defined $opt{name} ? $opt{name}
                                  : sprintf('test-%d-%d', $$, ++$Seq);

    my $acct = sessionctl_ok('account', 'create', $name, '--plan', $plan);
    my $proj = sessionctl_ok('project', 'create', $acct->{account_id},
                             "$name-project");
    my $key = sessionctl_ok('key', 'create', $proj->{project_id},
                            defined $opt{prefix}
                                ? ('--prefix', $opt{prefix}) : ());

    return {
        plan           => $plan,
        account_id     => $acct->{account_id},
        project_id     => $proj->{project_id},
        webhook_secret => $proj->{webhook_secret},
        key            => $key->{key},
        key_id         => $key->{key_id},
    };
}


# psql($sql): runs "psql -Atc $sql" against the test database and
# returns its output without the final newline (in list context, one
# element per line).  Dies, with psql's message, when the SQL fails.
sub psql {
    my ($sql) = @_;

    my ($code, $out, $err) =
        _run('psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', db_conninfo(),
             '-Atc', $sql);

    croak "psql: exit $code: $err" if $code != 0;

    chomp $out;

    return wantarray ? split(/\n/, $out) : $out;
}


# psql_begin($sql, $held): a psql of its own that runs "BEGIN; $sql;" and
# keeps the transaction open; returns its handle once psql($held) counts
# more than 0 (the lock is granted, the row changed), dies after 10 s.
# psql_end($fh, $how) ends it: "COMMIT" (the default) or "ROLLBACK".
sub psql_begin {
    my ($sql, $held) = @_;

    open my $fh, '|-', 'psql', '-X', '-q', '-o', '/dev/null',
         '-d', db_conninfo() or croak "psql: $!";
    $fh->autoflush(1);
    print $fh "BEGIN;\n$sql;\n";

    my $t1 = time + 10;
    until (psql($held) > 0) {
        croak "psql_begin: not held after 10 s: $held" if time > $t1;
        select undef, undef, undef, 0.02;
    }

    return $fh;
}

sub psql_end {
    my ($fh, $how) = @_;

    my $end = ($how // 'COMMIT') . ";\n\\q\n";

    print $fh $end;
    close $fh;
}


# notifications($channel, $code, $until): what a psql that LISTENs on
# $channel printed of the notifications that arrived while $code ran
# (once psql listens) and after, until the output matches $until (a
# regexp) or 10 s have passed.  PostgreSQL delivers notifications in
# the order their transactions committed, so a notification awaited
# after others tells that those would have arrived by then.
sub notifications {
    my ($channel, $code, $until) = @_;

    # psql LISTENs, then runs short commands, printing each notification
    # that has arrived when one ends
    pipe my $rd, my $wr or croak "pipe: $!";
    my $pid = fork;
    croak "fork: $!" unless defined $pid;

    if ($pid == 0) {
        close $rd;
        open STDOUT, '>&', $wr or POSIX::_exit(1);
        { exec 'psql', '-X', '-q', '-d', db_conninfo(),
               '-c', "LISTEN $channel", '-c', "SELECT 'listening'",
               map { ('-c', 'SELECT pg_sleep(0.05)') } 1 .. 200; }
        POSIX::_exit(127);
    }

    close $wr;

    my $out = '';
    my $sel = IO::Select->new($rd);
    my $deadline = Time::HiRes::time() + 10;

    while ($out !~ /listening/ && $sel->can_read(5)) {
        sysread($rd, my $c, 4096) or last;
        $out .= $c;
    }

    $code->();

    while ($out !~ $until
           && Time::HiRes::time() < $deadline && $sel->can_read(1))
    {
        sysread($rd, my $c, 4096) or last;
        $out .= $c;
    }

    kill 'TERM', $pid;
    waitpid $pid, 0;

    return $out;
}


# sql_quote($s): $s as an SQL string literal, for psql(); undef is NULL.
sub sql_quote {
    my ($s) = @_;

    return 'NULL' unless defined $s;

    $s =~ s/'/''/g;

    return "'$s'";
}


1;
