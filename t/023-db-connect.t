# How the pool connects (docs/operations.md, "PostgreSQL as operators run
# it"): libpq may close its socket in the middle of PQconnectPoll() and
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
use Session qw(:DEFAULT);
use SessionTest;

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

sub relay {
    my ($a, $b) = @_;
    my $sel = IO::Select->new($a, $b);
    while (1) {
        for my $from ($sel->can_read(30)) {
            my $got = sysread $from, my $buf, 65536;
            return unless $got;
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

sub tls_refusing_port {
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
                serve($c);
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

$ENV{TEST_NGINX_SESSION_DB_TLS} = nginx_quote(
    "host=127.0.0.1 port=" . tls_refusing_port()
    . " sslmode=prefer gssencmode=disable $REST");

master_on();
workers(2);
no_shuffle();

add_block_preprocessor(sub {
    my $block = shift;

    my $db = $block->name =~ /TLS/ ? '$TEST_NGINX_SESSION_DB_TLS'
                                   : '$TEST_NGINX_SESSION_DB_LIST';

    $block->set_value('http_config', <<EOF);
    session_db $db;
    session_db_connections 1;
EOF

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
