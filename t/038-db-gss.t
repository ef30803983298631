# GSSAPI only when asked for (decision (vb)): with libpq's
# default gssencmode=prefer, every connect looks for Kerberos credentials
# and reads files in the worker (/etc/krb5.conf, /etc/gss/mech.d, the
# credential cache).  The module passes gssencmode=disable unless
# session_db names a gssencmode, or the workers' environment has
# PGGSSENCMODE (the env directive).
#
# What shows it: MIT Kerberos opens the file named by KRB5_TRACE (the
# workers get it through "env") when libpq makes a Kerberos context.
# TEST 1: no gssencmode anywhere: the requests are served and the file is
# never made.  TEST 2: gssencmode=prefer in session_db, TEST 3:
# PGGSSENCMODE=prefer in the workers' environment: served, and the file
# is made (so the check would see a worker that looks).
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it; its host is a name
# nginx resolves, a TCP connect, for which libpq would try GSSAPI).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use File::Temp ();
use Session;
use SessionTest qw(:DEFAULT api_request check_init);

our $TAG = sprintf 't038-%d-%d', $$, time;

our $KEY = fixture(plan => 'pro', name => $TAG)->{key};

# the workers may run as another user: a directory anyone may write to
our $DIR = File::Temp::tempdir("t038-XXXXXX", TMPDIR => 1, CLEANUP => 1);
chmod 0777, $DIR or die "chmod $DIR: $!";

our $DB = $ENV{TEST_NGINX_SESSION_DB};


my %checks;

sub served_ok {
    my ($name) = @_;

    for my $i (1 .. 3) {
        my $r = api_request('GET', '/api/v1/sessions?limit=1', $KEY);
        is($r->{status}, 200, "$name - served, $i");
    }
}

$checks{untouched} = sub {
    my ($name) = @_;

    served_ok($name);
    ok(!-e "$DIR/trace-1", "$name - no Kerberos context in the worker");
};

$checks{asked} = sub {
    my ($name) = @_;
    my ($n) = $name =~ /TEST (\d+)/;

    served_ok($name);
    ok(-e "$DIR/trace-$n",
       "$name - the worker made a Kerberos context, as asked");
};


master_on();
workers(2);
no_shuffle();

add_block_preprocessor(sub {
    my $block = shift;

    my ($n) = $block->name =~ /TEST (\d+)/;

    $block->set_value('main_config',
                      "env KRB5_TRACE=$DIR/trace-$n;\n"
                      . ($block->main_config // ''));

    my $db = $DB;
    $db = "gssencmode=prefer $db" if $block->gss_in_conninfo;

    $block->set_value('http_config',
                      'session_db ' . nginx_quote($db) . ";\n");

    $block->set_value('config', <<'EOF');
    location /api/ {
        session_api;
    }
EOF

    $block->set_value('request', "GET /api/v1/sessions?limit=1\n");
    $block->set_value('more_headers', "Authorization: Bearer $KEY\n");
    $block->set_value('error_code', 200);
    $block->set_value('no_error_log', "[error]\n[alert]\n[crit]\n");

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: no gssencmode asked for: no Kerberos in the worker
--- check: untouched



=== TEST 2: gssencmode=prefer in session_db: libpq tries GSSAPI
--- gss_in_conninfo: 1
--- check: asked



=== TEST 3: PGGSSENCMODE=prefer in the workers' environment: libpq tries GSSAPI
--- main_config
env PGGSSENCMODE=prefer;
--- check: asked
