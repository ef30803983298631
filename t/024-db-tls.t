# TLS against a real PostgreSQL (docs/operations.md,
# "Managed and HA PostgreSQL"): the script starts a server of its own
# (initdb and pg_ctl under a temporary directory, on port 9 of its lane,
# stopped and removed when the script ends, whatever happens), with
# ssl = on, a certificate made here by a CA made here, and pg_hba.conf
#
#     local      all  all    trust
#     hostnossl  all  plain  127.0.0.1/32  trust
#     hostssl    all  tls    127.0.0.1/32  trust
#
# so that the role "plain" can only come without TLS and "tls" only with
# it.  t/023 plays such a server with a stand-in; here it is the real one.
#
# TEST 1-3: plain, sslmode=prefer: TLS is refused by the hostnossl rule
# after the handshake and libpq connects again without it, on a new
# socket, from inside PQconnectPoll(): every request answered with one
# connection per worker and two workers, never an epoll_ctl alert.
# TEST 4: tls, sslmode=allow: the other way round, plain refused, then TLS.
# TEST 5-7: sslmode=verify-full with the test's CA and a host NAME that
# only the test's DNS responder knows (nginx's resolver gives libpq
# hostaddr=, a getaddrinfo() in the worker would fail): served; with a
# name the certificate does not carry (same address): refused, which
# shows the check is made against host=, not the address; with a CA that
# did not sign the certificate: 503 "database unavailable" and the reason
# in the error log.  TEST 8: libpq's gssencmode=prefer and
# target_session_attrs=read-write against the one server.  TEST 9: the
# server stops long enough for the reconnect backoff to grow, then starts:
# requests are served again within 0.8 s (an early try, see
# ngx_http_session_backoff_early()).
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it; the database itself
# is not used), initdb, pg_ctl and openssl.

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use File::Path ();
use File::Temp ();
use Time::HiRes ();
use Session qw(:DEFAULT);
use SessionTest;
use Webhook qw(dns_start);

our $Lane = $ENV{TEST_NGINX_PORT} || 1984;
our $PG_PORT = $Lane + 9;

my $Parent = $$;

sub pg_bin {
    my $dir = `pg_config --bindir 2>/dev/null`;
    chomp $dir;
    return $dir if $dir && -x "$dir/initdb";
    ($dir) = reverse sort glob '/usr/lib/postgresql/*/bin';
    return $dir && -x "$dir/initdb" ? $dir : undef;
}

our $BIN = pg_bin();

if (!$BIN || system('openssl version >/dev/null 2>&1') != 0) {
    Test::More->builder->skip_all('no initdb/pg_ctl or no openssl');
}

# initdb and postgres refuse to run as root
sub as_pg {
    my @cmd = @_;
    return $> == 0 ? ('runuser', '-u', 'postgres', '--', @cmd) : @cmd;
}

sub run_quiet {
    my ($log, @cmd) = @_;
    return system("@{[ map { quotemeta } @cmd ]} >>$log 2>&1") == 0;
}

our $Dir = File::Temp::tempdir('t024-XXXXXX', TMPDIR => 1);
chmod 0755, $Dir;

our $Started;

END {
    if ($$ == $Parent) {
        local $?;
        system(join ' ', map { quotemeta } as_pg("$BIN/pg_ctl", '-D',
               "$Dir/data", '-m', 'immediate', '-w', '-t', '20', 'stop'))
            if $Started;
        File::Path::remove_tree($Dir) if $Dir;
    }
}

sub die_with_log {
    my ($what) = @_;
    my $log = '';
    for my $f ("$Dir/setup.log", "$Dir/server.log") {
        next unless open my $fh, '<', $f;
        local $/;
        $log .= <$fh> // '';
    }
    die "024-db-tls.t: $what\n$log";
}

# --- a CA, a server certificate it signs, and a CA that signed nothing

sub openssl {
    run_quiet("$Dir/setup.log", 'openssl', @_)
        or die_with_log("openssl @_[0, 1] failed");
}

for my $ca ('ca', 'other-ca') {
    openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt',
            'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
            '-keyout', "$Dir/$ca.key", '-out', "$Dir/$ca.pem",
            '-subj', "/CN=t024 $ca");
}

openssl('req', '-new', '-newkey', 'ec', '-pkeyopt',
        'ec_paramgen_curve:prime256v1', '-nodes',
        '-keyout', "$Dir/server.key", '-out', "$Dir/server.csr",
        '-subj', '/CN=localhost');

{
    open my $fh, '>', "$Dir/san.cnf" or die "$Dir/san.cnf: $!";
    print $fh "subjectAltName = DNS:localhost, DNS:db.t024.test,"
              . " IP:127.0.0.1\n";
    close $fh;
}

openssl('x509', '-req', '-in', "$Dir/server.csr", '-CA', "$Dir/ca.pem",
        '-CAkey', "$Dir/ca.key", '-CAcreateserial', '-days', '1',
        '-extfile', "$Dir/san.cnf", '-out', "$Dir/server.pem");

# --- the server

if ($> == 0) {
    my ($uid, $gid) = (getpwnam 'postgres')[2, 3];
    defined $uid or die "024-db-tls.t: no postgres user";
    chown $uid, $gid, $Dir, "$Dir/server.key", "$Dir/server.pem";
}
chmod 0600, "$Dir/server.key";

run_quiet("$Dir/setup.log", as_pg("$BIN/initdb", '-D', "$Dir/data",
          '-U', 'postgres', '-A', 'trust', '--no-sync'))
    or die_with_log('initdb failed');

{
    open my $fh, '>>', "$Dir/data/postgresql.conf" or die "conf: $!";
    print $fh <<EOF;
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$Dir'
fsync = off
max_connections = 40
ssl = on
ssl_cert_file = '$Dir/server.pem'
ssl_key_file = '$Dir/server.key'
EOF
    close $fh;

    open $fh, '>', "$Dir/data/pg_hba.conf" or die "hba: $!";
    print $fh <<EOF;
local      all  all    trust
hostnossl  all  plain  127.0.0.1/32  trust
hostssl    all  tls    127.0.0.1/32  trust
EOF
    close $fh;
}

$Started = 1;
run_quiet("$Dir/setup.log", as_pg("$BIN/pg_ctl", '-D', "$Dir/data", '-l',
          "$Dir/server.log", '-w', '-t', '30', 'start'))
    or die_with_log('the server did not start');

# the fixture, the schema and the roles through the socket
$ENV{TEST_NGINX_SESSION_DB} = "host=$Dir port=$PG_PORT dbname=postgres"
                              . " user=postgres";

run_quiet("$Dir/setup.log", Session::sessionctl_path(), '-d',
          $ENV{TEST_NGINX_SESSION_DB}, 'migrate')
    or die_with_log('sessionctl migrate failed');

psql('CREATE ROLE plain LOGIN SUPERUSER; CREATE ROLE tls LOGIN SUPERUSER');

our $F = fixture(plan => 'unlimited', name => 't024');

our ($DNS_PORT) = dns_start('t024.test', $Lane + 8);
$ENV{TEST_NGINX_DNS_PORT} = $DNS_PORT;

my %db = (
    PREFER => "host=127.0.0.1 user=plain sslmode=prefer",
    ALLOW => "host=127.0.0.1 user=tls sslmode=allow",
    VERIFY => "host=db.t024.test user=tls sslmode=verify-full"
              . " sslrootcert=$Dir/ca.pem",
    OTHERNAME => "host=other.t024.test user=tls sslmode=verify-full"
                 . " sslrootcert=$Dir/ca.pem",
    OTHERCA => "host=db.t024.test user=tls sslmode=verify-full"
               . " sslrootcert=$Dir/other-ca.pem",
    DEFAULTS => "host=127.0.0.1 user=plain gssencmode=prefer"
                . " target_session_attrs=read-write",
);

for my $k (keys %db) {
    $ENV{"TEST_NGINX_DB_$k"} = nginx_quote("$db{$k} port=$PG_PORT"
                                           . " dbname=postgres");
}

sub pg_ctl {
    my (@args) = @_;
    return run_quiet("$Dir/setup.log", as_pg("$BIN/pg_ctl", '-D',
                     "$Dir/data", '-l', "$Dir/server.log", '-w', '-t', '30',
                     @args));
}

sub get_status {
    return http_request('GET', '/api/v1/sessions?limit=1',
                        auth_header($F->{key}), 5)->{status};
}

# The server stops (-m fast) until the pool connections of both workers
# wait 0.8-1.6 s or more between attempts, then starts again: under
# requests every 50 ms the first 200 must come within 0.8 s of the
# server accepting connections, by a connection that tried before its
# backoff was over (without that, 0 to 2 s; see
# ngx_http_session_db_try_early()).
sub recovery {
    my ($name) = @_;

    my ($up) = wait_until(10, 0.1, sub { get_status() == 200 });
    ok($up, "$name - served");

    ok(pg_ctl('-m', 'fast', 'stop'), "$name - the server stopped");

    my $re = qr/reconnecting in \d+ ms \(base (?:1600|2000) ms\)/;
    my ($slow) = wait_until(15, 0.1, sub { error_log_count($re) >= 4 });
    ok($slow, "$name - the backoff has grown");

    ok(pg_ctl('start'), "$name - the server started");
    my $t0 = Time::HiRes::time();

    my ($n503, $st) = (0, 0);
    my ($ok, $took) = wait_until(10, 0.05, sub {
        $st = get_status();
        $n503++ if $st == 503;
        return $st == 200;
    });

    ok($ok, "$name - served again");
    Test::More::diag(sprintf "%s: first 200 %.2f s after the server"
                     . " accepted connections (%d answers 503 before)",
                     $name, $took, $n503);
    cmp_ok($took, '<', 0.8, "$name - within 0.8 s");
    cmp_ok(error_log_count(qr/connecting before the backoff is over/), '>', 0,
           "$name - by an early try");

    # the other worker too (its own early try, or its backoff)
    my ($all) = wait_until(5, 0.05, sub {
        !grep { get_status() != 200 } 1 .. 4
    });
    ok($all, "$name - both workers serve");
}

our $UNAVAILABLE = '{"statusCode": 503, "error": "Service Unavailable", '
                   . '"message": "database unavailable"}';

master_on();
workers(2);
no_shuffle();
no_long_string();

add_block_preprocessor(sub {
    my $block = shift;

    my $extra = defined $block->resolver
        ? "resolver 127.0.0.1:\$TEST_NGINX_DNS_PORT ipv6=off;" : '';

    $block->set_value('http_config', <<EOF);
    session_db \$TEST_NGINX_DB_@{[ $block->db =~ s/\s+//gr ]};
    session_db_connections 1;
    session_db_timeout 3s;
    $extra
EOF

    if (defined $block->check) {
        $block->set_value('init', 'main::' . ($block->check =~ s/\s+//gr)
                                  . '($block->name)');
    }

    $block->set_value('config', <<'EOF');
    location /api/ {
        session_api;
    }
EOF

    $block->set_value('more_headers', "Authorization: Bearer $::F->{key}"
                      . (defined $block->more_headers
                         ? "\n" . $block->more_headers : ''));
});

run_tests();

__DATA__

=== TEST 1: sslmode=prefer, TLS refused by hostnossl: every request answered
--- db: PREFER
--- pipelined_requests eval
[map { "GET /api/v1/sessions?limit=1" } 1 .. 12]
--- error_code eval
[map { 200 } 1 .. 12]
--- no_error_log
[alert]
[error]
epoll_ctl



=== TEST 2: sslmode=prefer, TLS refused: fresh connections, a write
--- db: PREFER
--- more_headers
Content-Type: application/json
--- pipelined_requests eval
[map { "POST /api/v1/sessions\n{\"delivery_mode\": \"long_poll\"}" } 1 .. 6]
--- error_code eval
[map { 201 } 1 .. 6]
--- no_error_log
[alert]
[error]
epoll_ctl



=== TEST 3: sslmode=prefer, TLS refused: one request per new connection
--- db: PREFER
--- request eval
[map { "GET /api/v1/sessions?limit=1" } 1 .. 6]
--- error_code eval
[map { 200 } 1 .. 6]
--- no_error_log
[alert]
[error]
epoll_ctl



=== TEST 4: sslmode=allow, plain refused by hostssl: TLS on a new socket
--- db: ALLOW
--- pipelined_requests eval
[map { "GET /api/v1/sessions?limit=1" } 1 .. 12]
--- error_code eval
[map { 200 } 1 .. 12]
--- no_error_log
[alert]
[error]
epoll_ctl



=== TEST 5: verify-full, a name through the resolver: host= checked, hostaddr= used
--- db: VERIFY
--- resolver
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- error_log eval
qr/session db: resolving "db\.t024\.test"/
--- no_error_log
[alert]
[error]
epoll_ctl



=== TEST 6: verify-full, a name the certificate does not carry (same address): 503
--- db: OTHERNAME
--- resolver
--- request
GET /api/v1/sessions?limit=1
--- error_code: 503
--- response_body eval
$::UNAVAILABLE
--- error_log eval
qr/\[error\] .*session db: cannot connect: .*does not match host name "other\.t024\.test"/
--- no_error_log
[alert]
[crit]
epoll_ctl



=== TEST 7: verify-full, a CA that did not sign the certificate: 503, the reason logged
--- db: OTHERCA
--- resolver
--- request
GET /api/v1/sessions?limit=1
--- error_code: 503
--- response_body eval
$::UNAVAILABLE
--- error_log eval
qr/\[error\] .*session db: cannot connect: .*certificate verify failed/
--- no_error_log
[alert]
[crit]
epoll_ctl



=== TEST 8: gssencmode=prefer and target_session_attrs=read-write: served
--- db: DEFAULTS
--- pipelined_requests eval
[map { "GET /api/v1/sessions?limit=1" } 1 .. 12]
--- error_code eval
[map { 200 } 1 .. 12]
--- no_error_log
[alert]
[error]
epoll_ctl



=== TEST 9: the server stops and starts again: served within 0.8 s
--- db: PREFER
--- check: recovery
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[alert]
[crit]
epoll_ctl
--- timeout: 60
