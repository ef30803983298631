# Three nginx nodes on one database ("One contract across many
# nodes"; docs/operations.md "Scaling out"; decision (qa)), started by
# t/lib/Cluster.pm, each with two workers and a port of its own, driven
# by a client that spreads one key round-robin over them:
#
#   - with session_limit_scope cluster, exactly the limit of each class
#     (create, list, other) is admitted in a window, and no request is
#     refused before the limit is reached; the 429s cost no statement;
#   - a node killed with kill -9 in the middle of a window costs no
#     over-admission (what it was leased and had not admitted is lost:
#     fewer, never more), nor does a node started again in that window;
#   - a long poll on node 0 is woken by an upload on node 2;
#   - a key deleted is refused by every node within one second;
#   - every webhook event is delivered once, by some node;
#   - the expiry sweep expires each session once, one node at a time (no
#     node sweeps while the sweep's lock is held elsewhere);
#   - with session_limit_scope node (the default) the same client gets
#     three times the limit: the check the cluster scope exists for.
#
# Each rate check waits for a fresh minute when too little of the current
# one is left for its requests (at most once, at most 61 s).
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::More;
use File::Temp ();
use Time::HiRes ();
use Session;
use SessionTest qw(:DEFAULT reset_of fresh_window first_429 api_request
                    send_get answer lease_where);
use Webhook;
use Cluster;

my $TAG = sprintf 't045-%d-%d', $$, time;

my %LIMIT = (create => 30, list => 45, other => 40);

my $LIMITS = "session_limits create=$LIMIT{create} list=$LIMIT{list}"
             . " other=$LIMIT{other};";

my $DIR = File::Temp->newdir('t045-XXXXXX', TMPDIR => 1);
my $LOG = "$DIR/hooks.log";
my ($HOOK) = receiver_start($LOG);

my $HTTP = "session_limit_scope cluster;\n"
           . "    session_webhook_allow_private on;\n"
           . "    session_expiry_sweep_interval 1s;\n"
           . "    session_auth_cache_ttl 30s;";

my $C = Cluster->new(nodes => 3, http => $HTTP, location => $LIMITS);

$C->start;


# --- helpers ---------------------------------------------------------------

# one request of class $cls with $key to node $i
sub call {
    my ($i, $cls, $key) = @_;

    my $port = { port => $C->port($i) };

    return api_request('POST', '/api/v1/sessions', $key,
                       { delivery_mode => 'long_poll' }, undef, $port)
        if $cls eq 'create';

    return api_request('GET', '/api/v1/sessions?limit=1', $key, undef,
                       undef, $port)
        if $cls eq 'list';

    return api_request('GET', '/api/v1/nope', $key, undef, undef, $port);
}

my %OK = (create => 201, list => 200, other => 404);

# $n requests of class $cls, round-robin over the nodes @nodes; returns
# the answers' statuses and the last 429
sub spread {
    my ($cls, $key, $n, @nodes) = @_;

    @nodes = (0 .. $C->nodes - 1) unless @nodes;

    my (@status, $refused);

    for my $k (0 .. $n - 1) {
        my $r = call($nodes[$k % @nodes], $cls, $key);
        push @status, $r->{status};
        $refused = $r if $r->{status} == 429;
    }

    return (\@status, $refused);
}

sub admitted { scalar grep { $_ == $_[1] } @{ $_[0] } }

sub leases {
    my $n = 0;
    $n += $C->status($_)->{rate_limit}{leases} for 0 .. $C->nodes - 1;
    return $n;
}

sub no_errors {
    my ($what) = @_;

    my @e = $C->error_lines(qr/\[(?:error|crit|alert|emerg)\]/);

    ok(!@e, "$what - no [error] in the nodes' logs")
        or diag(join "\n", @e[0 .. ($#e < 4 ? $#e : 4)]);
}


# --- exact limits across the nodes ----------------------------------------

{
    my $key = fixture(plan => 'unlimited', name => "$TAG-rr")->{key};

    my $reset = fresh_window(20);
    my $l0 = leases();

    for my $cls (qw(create list other)) {
        my $limit = $LIMIT{$cls};
        my ($s, $r) = spread($cls, $key, $limit + 9);

        is(admitted($s, $OK{$cls}), $limit,
           "cluster scope: exactly the $cls limit ($limit) admitted over"
           . " three nodes")
            or diag("statuses: @$s");
        is(first_429($s), $limit + 1,
           "cluster scope: no $cls request refused before the limit")
            or diag("statuses: @$s");
        is(scalar(grep { $_ != 429 && $_ != $OK{$cls} } @$s), 0,
           "cluster scope: $cls - nothing but $OK{$cls} and 429");

        ok($r, "$cls - a 429");
        next unless $r;

        is($r->{headers}{'x-ratelimit-remaining'}, 0,
           "$cls - the 429 says Remaining 0");
        is($r->{headers}{'x-ratelimit-limit'}, $limit,
           "$cls - the 429 says the limit");
        is($r->{headers}{'x-ratelimit-reset'}, $reset,
           "$cls - the 429 says the window's end");
        my $ra = $r->{headers}{'retry-after'} // 0;
        ok($ra >= 1 && $ra <= 60, "$cls - Retry-After $ra is 1 to 60");
    }

    my $l1 = leases();

    note("lease statements for "
         . ($LIMIT{create} + $LIMIT{list} + $LIMIT{other})
         . " admitted requests: " . ($l1 - $l0));

    # the windows' budgets are spent: refusals cost no statement

    my ($s) = spread('other', $key, 30);

    is(admitted($s, 429), 30, 'the budget is spent: 429 everywhere');
    is(leases(), $l1, 'the 429s sent no lease statement');

    no_errors('exact limits');
}


# --- a node killed in the middle of a window --------------------------------

{
    my $key = fixture(plan => 'unlimited', name => "$TAG-kill")->{key};
    my $limit = $LIMIT{other};

    my $reset = fresh_window(20);
    my $minute = $reset / 60 - 1;

    # node 1's id in the lease rows: the one node of a key only it served
    my $probe = fixture(plan => 'unlimited', name => "$TAG-probe")->{key};
    is(call(1, 'other', $probe)->{status}, 404, 'kill -9: the probe');

    # half the budget over the three nodes, then node 1 dies with its block

    my ($s1) = spread('other', $key, $limit / 2);
    my $held = $C->status(1)->{rate_limit}{held};

    $C->kill(1);

    my ($s2) = spread('other', $key, $limit, 0, 2);

    # what node 1 was leased: its block, and a lease ahead of need whose
    # answer was on its way (counted by the database, not yet in $held).
    # Read once nodes 0 and 2 have leased the rest: a statement node 1
    # sent before it died has come in before theirs, which lock the row
    my $took = psql("SELECT u.took FROM rate_leases r,"
                    . " unnest(r.nodes, r.took) u(node, took)"
                    . " WHERE " . lease_where($key, $minute)
                    . " AND u.node = (SELECT nodes[1] FROM rate_leases"
                    . " WHERE " . lease_where($probe, $minute) . ")");
    my $lost = $took - scalar grep { $_ % 3 == 1 && $s1->[$_] == 404 }
                                   0 .. $#$s1;

    # node 1 again, with a fresh zone, in the same window

    $C->start(1);

    my ($s3) = spread('other', $key, 9);

    my $admitted = admitted($s1, 404) + admitted($s2, 404)
                   + admitted($s3, 404);

    cmp_ok($admitted, '<=', $limit,
           "kill -9 of a node: at most the limit ($limit) admitted");
    cmp_ok($admitted, '>=', $limit - $lost,
           "kill -9 of a node: at most what it was leased and had not"
           . " admitted ($lost) is lost");
    is(admitted($s3, 429), 9, 'the node started again admits nothing more');

    note("admitted $admitted of $limit, the killed node held $held"
         . " (status) and $lost (database)");
}


# --- a long poll on one node, the upload on another --------------------------

{
    my $key = fixture(plan => 'pro', name => "$TAG-poll")->{key};

    my $s = api_request('POST', '/api/v1/sessions', $key,
                        { delivery_mode => 'long_poll' }, undef,
                        { port => $C->port(0) });
    is($s->{status}, 201, 'poll: session created on node 0');
    my $sid = $s->{json}{id};

    my $p = send_get("/api/v1/sessions/$sid/poll?timeout=10", $key,
                     $C->port(0));

    # the poll waits (it found nothing) before the upload
    Time::HiRes::sleep(0.3);

    my $u = api_request('POST', "/api/v1/sessions/$sid/images", $key,
                        "\x89PNG\r\n\x1a\n" . ('x' x 32),
                        { 'Content-Type' => 'image/png' },
                        { port => $C->port(2), raw => 1 });
    is($u->{status}, 201, 'poll: image uploaded on node 2');

    my $a = answer($p, 5);

    is($a->{status}, 200, 'poll: node 0 answers the poll');
    is(scalar @{ $a->{json}{images} // [] }, 1, 'poll: with the image');
    cmp_ok($a->{t1} - $u->{t1}, '<', 1,
           'poll: within a second of the upload');
}


# --- a key deleted, refused on every node within a second --------------------

{
    my $f = fixture(plan => 'pro', name => "$TAG-revoke");

    # every worker of every node has the key cached
    for my $round (1 .. 4) {
        for my $i (0 .. $C->nodes - 1) {
            api_request('GET', '/api/v1/sessions?limit=1', $f->{key}, undef,
                        undef, { port => $C->port($i) });
        }
    }

    sessionctl_ok('key', 'delete', $f->{key_id});
    my $t0 = Time::HiRes::time();

    my %late;

    for my $i (0 .. $C->nodes - 1) {
        my ($ok) = wait_until(2, 0.02, sub {
            # both workers: four requests on new connections in a row
            for (1 .. 4) {
                my $r = api_request('GET', '/api/v1/sessions?limit=1',
                                    $f->{key}, undef, undef,
                                    { port => $C->port($i) });
                return 0 if $r->{status} != 401;
            }
            return 1;
        });

        $late{$i} = Time::HiRes::time() - $t0;
        ok($ok, "revocation: node $i answers 401");
    }

    my ($worst) = sort { $b <=> $a } values %late;

    cmp_ok($worst, '<', 1, 'revocation: every node within one second');
    note(sprintf 'revocation: the last node refused after %.3f s', $worst);
}


# --- webhook events, each delivered once by some node -------------------------

{
    my $key = fixture(plan => 'pro', name => "$TAG-hooks")->{key};
    my $n = 6;
    my @sid;

    for my $k (0 .. $n - 1) {
        my $r = api_request('POST', '/api/v1/sessions', $key,
                            { delivery_mode => 'webhook',
                              webhook_url =>
                                  "http://127.0.0.1:$HOOK/ok/$TAG/$k" },
                            undef, { port => $C->port($k % 3) });
        push @sid, $r->{json}{id} if $r->{status} == 201;
    }

    is(scalar @sid, $n, "webhooks: $n webhook sessions created");

    for my $k (0 .. $#sid) {
        api_request('POST', "/api/v1/sessions/$sid[$k]/images", $key,
                    "\x89PNG\r\n\x1a\n" . ('x' x 32),
                    { 'Content-Type' => 'image/png' },
                    { port => $C->port(($k + 1) % 3), raw => 1 });
        api_request('POST', "/api/v1/sessions/$sid[$k]/complete", $key,
                    undef, undef, { port => $C->port(($k + 2) % 3) });
    }

    my $want = 2 * $n;

    my ($ok) = wait_until(20, 0.1, sub {
        receiver_requests($LOG, "/ok/$TAG/") >= $want;
    });

    # a moment for a duplicate to show up, if there were one
    Time::HiRes::sleep(1);

    my @got = receiver_requests($LOG, "/ok/$TAG/");
    my %ids;
    $ids{ eval { Session::decode_json($_->{body})->{id} } // '' }++
        for @got;

    ok($ok, "webhooks: all $want events arrived");
    is(scalar keys %ids, $want, "webhooks: $want distinct events");
    is(scalar(grep { $_ > 1 } values %ids), 0, 'webhooks: none twice');

    my $delivered = 0;
    $delivered += $C->status($_)->{webhooks}{delivered}
        for 0 .. $C->nodes - 1;
    cmp_ok($delivered, '>=', $want,
           'webhooks: the nodes count them as delivered');
}


# --- the expiry sweep, one node at a time ------------------------------------

{
    my $key = fixture(plan => 'pro', name => "$TAG-sweep")->{key};
    my $n = 6;
    my %before;

    $before{$_} = $C->status($_)->{expiry_sweep} for 0 .. $C->nodes - 1;

    my @sid;

    for my $k (0 .. $n - 1) {
        my $r = api_request('POST', '/api/v1/sessions', $key,
                            { delivery_mode => 'webhook', expires_in => 1,
                              webhook_url =>
                                  "http://127.0.0.1:$HOOK/ok/$TAG-x/$k" },
                            undef, { port => $C->port($k % 3) });
        push @sid, $r->{json}{id} if $r->{status} == 201;
    }

    is(scalar @sid, $n, "sweep: $n sessions of one second created");

    my $list = join ',', map { "'$_'" } @sid;

    # the sweep's lock held elsewhere: no node sweeps (each tries every
    # second), however long the sessions have been due

    my $locker = psql_begin('SELECT pg_advisory_xact_lock('
                            . '8315179226771058804)',
                            "SELECT count(*) FROM pg_locks"
                            . " WHERE locktype = 'advisory' AND granted");
    my %held;
    $held{$_} = $C->status($_)->{expiry_sweep}{runs} for 0 .. $C->nodes - 1;

    Time::HiRes::sleep(3);

    my $runs = 0;
    $runs += $C->status($_)->{expiry_sweep}{runs} - $held{$_}
        for 0 .. $C->nodes - 1;

    is($runs, 0, 'sweep: no node sweeps while another holds the lock');
    is(psql("SELECT count(*) FROM sessions WHERE id IN ($list)"
            . " AND status = 'expired'"), 0,
       'sweep: nothing marked meanwhile');

    psql_end($locker, 'ROLLBACK');

    my ($ok) = wait_until(20, 0.2, sub {
        psql("SELECT count(*) FROM sessions WHERE id IN ($list)"
             . " AND status = 'expired'") == $n;
    });

    ok($ok, 'sweep: every session is marked expired');

    my ($events) = wait_until(20, 0.1, sub {
        receiver_requests($LOG, "/ok/$TAG-x/") >= $n;
    });
    Time::HiRes::sleep(1);

    my @got = receiver_requests($LOG, "/ok/$TAG-x/");
    my %sessions;
    $sessions{ eval { Session::decode_json($_->{body})->{data}{id} } // '' }++
        for @got;

    is(scalar keys %sessions, $n, 'sweep: a session.expired per session');
    is(scalar(grep { $_ > 1 } values %sessions), 0,
       'sweep: no session.expired twice');

    my ($expired, $runners) = (0, 0);

    for my $i (0 .. $C->nodes - 1) {
        my $s = $C->status($i)->{expiry_sweep};
        my $d = $s->{sessions_expired} - $before{$i}{sessions_expired};
        $expired += $d;
        $runners++ if $s->{runs} > $before{$i}{runs};
    }

    # (other scripts of the lane may have left due sessions: at least)
    cmp_ok($expired, '>=', $n, 'sweep: the nodes count what they expired');
    note("sweep: $runners nodes ran sweeps meanwhile");

    no_errors('poll, revocation, webhooks, sweep');
}


# --- node-local counting (the default) over-admits ----------------------------

{
    $C->stop;
    $C->{http} =~ s/session_limit_scope cluster;/session_limit_scope node;/
        or die 'no session_limit_scope in the configuration';
    $C->start;

    my $key = fixture(plan => 'unlimited', name => "$TAG-node")->{key};
    my $limit = $LIMIT{other};

    fresh_window(10);

    my ($s) = spread('other', $key, 3 * $limit + 6);

    is(admitted($s, 404), 3 * $limit,
       "node scope: three nodes admit three times the limit ($limit)");
    cmp_ok(first_429($s), '>', $limit,
           'node scope: no 429 at the limit');

    $C->stop;
}

done_testing();
