package Cluster;

# Several nginx nodes on one database, for t/045-cluster.t and by hand:
# each node is a master of its own (its own prefix under t/, its own port
# on 127.0.0.1, its own error log) that loads the module of the test run
# (TEST_NGINX_LOAD_MODULES) into TEST_NGINX_BINARY and uses the lane's
# database (TEST_NGINX_SESSION_DB), as Test::Nginx's nginx would.
#
#     use Cluster;
#
#     my $c = Cluster->new(nodes => 3, http => 'session_limit_scope cluster;',
#                          location => 'session_limits create=30;');
#     $c->start;                 # every node, each answering within 10 s
#     my $port = $c->port(1);    # node 1 (nodes are 0 .. n-1)
#     $c->kill(1);               # kill -9 of the node's process group
#     $c->start(1);              # that node again (a fresh zone)
#     $c->stop;                  # QUIT to all, each gone within 10 s
#
# Options: nodes (3), workers (2 per node), http and location (text added
# to the configuration, see below), db (the conninfo, by default the
# lane's), port_offset (5), log (the error log's level, info).
# $c->test_conf(0) is "nginx -t" of node 0's
# configuration: (exit code, what it printed).
#
# Ports: TEST_NGINX_PORT (the lane's, default 1984) + 5, + 6, ... so that
# nodes stay inside the block of ports util/test.sh gives the lane.  Every
# node is stopped (KILL of its group, if QUIT did not do it) when the
# script ends.
#
# Each node's configuration: worker_processes (2 by default), the
# session_db, whatever "http" adds at the http level, a server with
# "location /api/v1/ { session_api; LOCATION }" and "location = /status
# { session_status; }".

use strict;
use warnings;

use Carp qw(croak);
use File::Path ();
use File::Spec;
use HTTP::Tiny ();
use POSIX ();
use Time::HiRes ();
use Session ();

my @Live;


sub new {
    my ($class, %opt) = @_;

    my $root = Session::repo_root();
    my $base = ($ENV{TEST_NGINX_PORT} || 1984) + ($opt{port_offset} // 5);

    my $self = bless {
        n        => $opt{nodes} // 3,
        workers  => $opt{workers} // 2,
        http     => $opt{http} // '',
        location => $opt{location} // '',
        log      => $opt{log} // 'info',
        db       => $opt{db},
        base     => $base,
        dir      => File::Spec->catdir($root, 't',
                                       "servroot-cluster-$base"),
        binary   => $ENV{TEST_NGINX_BINARY} || '/usr/sbin/nginx',
        module   => $ENV{TEST_NGINX_LOAD_MODULES}
                    || File::Spec->catfile($root, 'build',
                                           'ngx_http_session_module.so'),
        pids     => {},
    }, $class;

    push @Live, $self;

    return $self;
}


sub nodes { $_[0]{n} }

sub port { $_[0]{base} + $_[1] }

sub prefix { File::Spec->catdir($_[0]{dir}, "node$_[1]") }

sub error_log_file { File::Spec->catfile($_[0]->prefix($_[1]), 'logs',
                                         'error.log') }


# the whole error log of node $i ('' when there is none)
sub error_log {
    my ($self, $i) = @_;

    open my $fh, '<', $self->error_log_file($i) or return '';
    local $/;
    my $s = <$fh>;
    close $fh;

    return $s // '';
}


# the lines of every node's error log that match $re
sub error_lines {
    my ($self, $re) = @_;

    return map { grep { /$re/ } split /\n/, $self->error_log($_) }
               0 .. $self->{n} - 1;
}


sub _quote {
    my ($s) = @_;
    $s =~ s/(["\\])/\\$1/g;
    return qq{"$s"};
}


sub _write_conf {
    my ($self, $i) = @_;

    my $p = $self->prefix($i);

    File::Path::make_path(map { File::Spec->catdir($p, $_) }
                          qw(conf logs tmp));

    my $db = _quote($self->{db} // Session::db_conninfo());
    my $port = $self->port($i);

    open my $fh, '>', File::Spec->catfile($p, 'conf', 'nginx.conf')
        or croak "conf of node $i: $!";

    print $fh <<"EOF";
load_module $self->{module};
worker_processes $self->{workers};
daemon on;
master_process on;
pid $p/logs/nginx.pid;
error_log $p/logs/error.log $self->{log};
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $p/tmp/body;
    proxy_temp_path $p/tmp/proxy;
    fastcgi_temp_path $p/tmp/fastcgi;
    uwsgi_temp_path $p/tmp/uwsgi;
    scgi_temp_path $p/tmp/scgi;
    session_db $db;
    $self->{http}
    server {
        listen 127.0.0.1:$port;
        location /api/v1/ {
            session_api;
            $self->{location}
        }
        location = /status {
            session_status;
        }
    }
}
EOF
    close $fh;
}


sub _master {
    my ($self, $i) = @_;

    my $file = File::Spec->catfile($self->prefix($i), 'logs', 'nginx.pid');

    open my $fh, '<', $file or return undef;
    my $pid = <$fh>;
    close $fh;

    return defined $pid && $pid =~ /^(\d+)/ ? $1 : undef;
}


# start(@nodes): the nodes given (all without), each answering on its
# port within 10 s; dies otherwise
sub start {
    my ($self, @nodes) = @_;

    @nodes = 0 .. $self->{n} - 1 unless @nodes;

    for my $i (@nodes) {
        croak "node $i runs already" if $self->{pids}{$i};

        $self->_write_conf($i);
        unlink $self->error_log_file($i);

        my $p = $self->prefix($i);
        my ($rc, $out) = $self->_nginx($i);
        croak "node $i did not start (exit $rc): $out" if $rc != 0;

        my $t1 = Time::HiRes::time() + 10;
        my $pid;

        until ($pid = $self->_master($i)) {
            croak "node $i wrote no pid within 10 s"
                if Time::HiRes::time() > $t1;
            Time::HiRes::sleep(0.02);
        }

        $self->{pids}{$i} = $pid;

        my $http = HTTP::Tiny->new(timeout => 2);

        for (;;) {
            my $r = $http->get("http://127.0.0.1:" . $self->port($i)
                               . "/status");
            last if $r->{status} == 200;
            croak "node $i does not answer within 10 s"
                if Time::HiRes::time() > $t1;
            Time::HiRes::sleep(0.05);
        }
    }
}


# nginx with node $i's prefix and configuration, and @args; returns (exit
# code, what it wrote on stderr and stdout)
sub _nginx {
    my ($self, $i, @args) = @_;

    my $p = $self->prefix($i);
    my $out = File::Spec->catfile($p, 'logs', 'nginx.out');

    my $pid = fork;
    croak "fork: $!" unless defined $pid;

    if ($pid == 0) {
        open STDIN, '<', File::Spec->devnull or POSIX::_exit(127);
        open STDOUT, '>', $out or POSIX::_exit(127);
        open STDERR, '>&', \*STDOUT or POSIX::_exit(127);
        { exec { $self->{binary} } $self->{binary}, '-p', "$p/", '-c',
                                   "$p/conf/nginx.conf", @args; }
        POSIX::_exit(127);
    }

    waitpid $pid, 0;
    my $rc = $? >> 8;

    open my $fh, '<', $out or return ($rc, '');
    local $/;
    my $s = <$fh> // '';
    close $fh;

    return ($rc, $s);
}


# "nginx -t" of node $i's configuration (written anew): (exit code, output)
sub test_conf {
    my ($self, $i) = @_;

    $self->_write_conf($i);

    return $self->_nginx($i, '-t');
}


# the worker processes of node $i
sub workers {
    my ($self, $i) = @_;

    my $pid = $self->{pids}{$i} or return ();

    return grep { /^\d+$/ } split /\s+/, `pgrep -P $pid`;
}


# kill -9 of node $i: its master and workers at once (its process group)
sub kill {
    my ($self, $i) = @_;

    my $pid = delete $self->{pids}{$i} or return;
    my @w = $self->workers($i);

    CORE::kill('KILL', -$pid) or CORE::kill('KILL', $pid, @w);

    my $t1 = Time::HiRes::time() + 10;

    while (grep { CORE::kill(0, $_) } $pid, @w) {
        last if Time::HiRes::time() > $t1;
        Time::HiRes::sleep(0.02);
    }

    unlink File::Spec->catfile($self->prefix($i), 'logs', 'nginx.pid');
}


# QUIT to the nodes given (all without), each gone within 10 s, else KILL
sub stop {
    my ($self, @nodes) = @_;

    @nodes = sort keys %{ $self->{pids} } unless @nodes;

    for my $i (@nodes) {
        my $pid = $self->{pids}{$i} or next;
        my @w = $self->workers($i);

        CORE::kill('QUIT', $pid);

        my $t1 = Time::HiRes::time() + 10;

        while (grep { CORE::kill(0, $_) } $pid, @w) {
            if (Time::HiRes::time() > $t1) {
                $self->{pids}{$i} = $pid;
                $self->kill($i);
                last;
            }

            Time::HiRes::sleep(0.02);
        }

        delete $self->{pids}{$i};
    }
}


# HUP to node $i: a reload, done once every worker is of the new
# configuration (10 s at the most)
sub reload {
    my ($self, $i) = @_;

    my $pid = $self->{pids}{$i} or croak "node $i does not run";
    my %old = map { $_ => 1 } $self->workers($i);

    $self->_write_conf($i);
    CORE::kill('HUP', $pid);

    my $t1 = Time::HiRes::time() + 10;

    for (;;) {
        my @w = $self->workers($i);
        last if @w == $self->{workers} && !grep { $old{$_} } @w;
        croak "node $i: the reload did not finish within 10 s"
            if Time::HiRes::time() > $t1;
        Time::HiRes::sleep(0.05);
    }
}


# GET /status of node $i, decoded
sub status {
    my ($self, $i) = @_;

    my $r = HTTP::Tiny->new(timeout => 5)
                ->get("http://127.0.0.1:" . $self->port($i) . "/status");

    croak "node $i: GET /status: $r->{status}" unless $r->{status} == 200;

    return Session::decode_json($r->{content});
}


END {
    local $?;

    for my $c (@Live) {
        $c->kill($_) for keys %{ $c->{pids} };
    }
}


1;
