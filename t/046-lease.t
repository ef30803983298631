# session_limit_scope cluster on one node (decision (qa); docs/api.md
# sections 1.4 and 10.7; the three-node checks are t/045): the directive
# and its errors, the X-RateLimit figures of a node that holds the whole
# budget, what session_status shows, a reload that keeps the node's
# lease, and the database slow (a lease row locked past
# session_db_timeout) or gone (its connections cut): requests the node
# holds budget for are admitted, the others get 503 "database
# unavailable" and are not counted, the failure is logged once, and the
# node leases again by itself once the database answers.  A lease that
# timed out on the node can still commit in the database when the lock
# goes: its block is lost to the window (fewer requests, never more).
# Near the end of a window, busy keys lease their next window's first
# blocks together, fewer statements than keys (decision (qh)), a block
# from the key's rate then (decision (qi)), each once, pipelined requests
# (one millisecond for nginx) too, and are admitted at the turn of the
# minute with no statement and no wait.
#
# The node is t/lib/Cluster.pm's, with one worker (so that the order of
# leases is the test's); each check waits for a fresh minute when too
# little of the current one is left.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::More;
use POSIX ();
use Time::HiRes ();
use Session;
use SessionTest qw(:DEFAULT api_request reset_of fresh_window first_429
                    key_hash_hex lease_where);
use Cluster;

my $TAG = sprintf 't046-%d-%d', $$, time;

my $LIMIT = 25;

my $HTTP = "session_limit_scope cluster;\n"
           . "    session_db_timeout 1s;\n"
           . "    session_auth_cache_ttl 60s;";


# a request of class "other" to node 0 of $c, or to $port
sub nope {
    my ($c, $key, $port) = @_;
    return api_request('GET', '/api/v1/nope', $key, undef, undef,
                       { port => $port // $c->port(0) });
}

# how many lines of node $i's (node 0's) error log match $re
sub count_lines {
    my ($c, $re, $i) = @_;
    return scalar(() = $c->error_log($i // 0) =~ /$re/g);
}

# $n requests of $key written at once on one connection (pipelined): nginx
# answers them one after the other in one turn of its event loop, at one
# reading of its clock; the statuses of the answers
sub pipelined {
    my ($c, $key, $n) = @_;

    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $c->port(0), Proto => 'tcp',
                                  Timeout => 5)
        or die "pipelined: connect: $!";

    my $req = "GET /api/v1/nope HTTP/1.1\r\nHost: localhost\r\n"
              . "Authorization: Bearer $key\r\n";
    my $all = ("$req\r\n" x ($n - 1)) . "${req}Connection: close\r\n\r\n";

    syswrite($s, $all) == length $all or die "pipelined: write: $!";

    my $sel = IO::Select->new($s);
    my $deadline = Time::HiRes::time() + 10;
    my $buf = '';

    while ((my $left = $deadline - Time::HiRes::time()) > 0) {
        last unless $sel->can_read($left);
        last unless sysread $s, my $chunk, 65536;
        $buf .= $chunk;
    }

    close $s;

    return ($buf =~ m{HTTP/1\.1 (\d{3}) }g);
}


# --- the directive -----------------------------------------------------------

{
    my $c = Cluster->new(nodes => 1, workers => 1,
                         http => 'session_limit_scope everywhere;');

    my ($rc, $out) = $c->test_conf(0);

    isnt($rc, 0, 'session_limit_scope everywhere: nginx -t fails');
    like($out, qr/invalid value "everywhere" in "session_limit_scope"/,
         'session_limit_scope everywhere: the message');

    $c->{http} = "session_limit_scope node;\n"
                 . "    session_limit_scope cluster;";
    ($rc, $out) = $c->test_conf(0);

    isnt($rc, 0, 'session_limit_scope twice: nginx -t fails');
    like($out, qr/"session_limit_scope" directive is duplicate/,
         'session_limit_scope twice: the message');

    $c->{http} = '';
    $c->{location} = 'session_limit_scope cluster;';
    ($rc, $out) = $c->test_conf(0);

    isnt($rc, 0, 'session_limit_scope in a location: nginx -t fails');
    like($out, qr/"session_limit_scope" directive is not allowed here/,
         'session_limit_scope in a location: the message');
}


# --- one node: the figures, the status, a reload -------------------------

# The blocks below count one node's blocks.  A node that starts reads how
# many nodes the lease rows of the last two windows list (decision (qo))
# and starts keys new to it with parts of the limit among them: the rows
# that another script's nodes left (t/045 runs three in the same lane)
# go first.
psql("DELETE FROM rate_leases WHERE minute >= "
     . (POSIX::floor(time() / 60) - 2));

my $C = Cluster->new(nodes => 1, workers => 1, http => $HTTP,
                     location => "session_limits other=$LIMIT;");
$C->start;

{
    my $key = fixture(plan => 'unlimited', name => "$TAG-figures")->{key};

    my $reset = fresh_window(25);
    my $s0 = $C->status(0)->{rate_limit};

    is($s0->{scope}, 'cluster', 'session_status: scope cluster');

    my @remaining;

    for (1 .. $LIMIT + 2) {
        my $r = nope($C, $key);
        push @remaining, $r->{status} . ':'
                         . ($r->{headers}{'x-ratelimit-remaining'} // '-');

        if ($r->{status} == 429) {
            is($r->{headers}{'x-ratelimit-reset'}, $reset,
               '429: X-RateLimit-Reset is the window\'s end');
            ok(($r->{headers}{'retry-after'} // 0) >= 1,
               '429: Retry-After');
        }
    }

    is("@remaining",
       join(' ', (map { '404:' . ($LIMIT - $_) } 1 .. $LIMIT),
                 '429:0', '429:0'),
       'one node: X-RateLimit-Remaining counts down to 0 exactly, then 429');

    my $s1 = $C->status(0)->{rate_limit};
    my $leases = $s1->{leases} - $s0->{leases};

    cmp_ok($leases, '<=', 3,
           "one node: $LIMIT admitted with $leases lease statements");
    is($s1->{leased} - $s0->{leased}, $LIMIT, 'session_status: leased');
    cmp_ok($s1->{spent}, '>', $s0->{spent}, 'session_status: spent');
    is($s1->{held}, 0, 'session_status: nothing held');

    my $prom = HTTP::Tiny->new->get('http://127.0.0.1:' . $C->port(0)
                                    . '/status?format=prometheus');

    like($prom->{content}, qr/^session_api_rate_leases_total \d+$/m,
         'prometheus: session_api_rate_leases_total');
    like($prom->{content}, qr/^session_api_rate_lease_held 0$/m,
         'prometheus: session_api_rate_lease_held');
}

{
    my $key = fixture(plan => 'unlimited', name => "$TAG-reload")->{key};

    fresh_window(15);

    nope($C, $key) for 1 .. 3;

    my $s0 = $C->status(0)->{rate_limit};

    cmp_ok($s0->{held}, '>', 0, "reload: the node holds $s0->{held}");

    $C->reload(0);

    my $s1 = $C->status(0)->{rate_limit};

    is($s1->{held}, $s0->{held}, 'reload: the lease is kept');

    my $r = nope($C, $key);

    is($r->{status}, 404, 'reload: admitted after the reload');
    is($r->{headers}{'x-ratelimit-remaining'}, $LIMIT - 4,
       'reload: counting goes on');

    my $admitted = 4;
    $admitted += nope($C, $key)->{status} == 404 ? 1 : 0 for 1 .. $LIMIT;

    is($admitted, $LIMIT, 'reload: exactly the limit in the window');
}


# --- a slow database: the lease row locked past session_db_timeout ---------

{
    my $key = fixture(plan => 'unlimited', name => "$TAG-slow")->{key};

    fresh_window(20);

    # the first request's lease (10) makes the window's row; the row
    # locked, the lease asked for ahead of need (at 4 left) hangs, and
    # the request that finds nothing held joins it: 503 when it times out

    is(nope($C, $key)->{status}, 404, 'slow database: the first lease');

    my $minute = POSIX::floor(time() / 60);
    my $lock = "SELECT 1 FROM rate_leases WHERE "
               . lease_where($key, $minute) . " FOR UPDATE";

    my $locker = psql_begin($lock, "SELECT count(*) FROM pg_stat_activity"
                            . " WHERE state = 'idle in transaction'"
                            . " AND query LIKE '%rate_leases%FOR UPDATE%'");

    my $failed0 = count_lines($C, qr/no lease from the database/);
    my (@st, $r503);

    for (1 .. 14) {
        my $r = nope($C, $key);
        push @st, $r->{status};
        $r503 = $r if $r->{status} == 503;
        last if grep({ $_ == 503 } @st) >= 2;
    }

    psql_end($locker, 'ROLLBACK');

    ok($r503, 'slow database: 503 once the node holds nothing')
        or diag("statuses: @st");

    if ($r503) {
        like($r503->{content}, qr/database unavailable/,
             'slow database: "database unavailable"');
        is($r503->{headers}{'retry-after'}, 1, 'slow database: Retry-After 1');
        ok(!exists $r503->{headers}{'x-ratelimit-remaining'},
           'slow database: no X-RateLimit headers (nothing counted)');
        cmp_ok($r503->{elapsed}, '>=', 0.9,
               'slow database: after session_db_timeout');
    }

    is(count_lines($C, qr/no lease from the database/) - $failed0, 1,
       'slow database: logged once');

    my $r = nope($C, $key);

    is($r->{status}, 404, 'slow database: the lock gone, admitted again');
    ok(count_lines($C, qr/leases from the database again/) >= 1,
       'slow database: the recovery is logged');

    is(scalar(grep { $_ == 404 } @st), 9,
       'slow database: what the node held (9) is admitted')
        or diag("statuses: @st");

    my $admitted = scalar(grep { $_ == 404 } @st) + 2;
    $admitted += nope($C, $key)->{status} == 404 ? 1 : 0 for 1 .. $LIMIT;

    # a lease that timed out on the node may still commit once the lock
    # goes (its answer lost): that block is lost, never more is admitted

    cmp_ok($admitted, '<=', $LIMIT,
           'slow database: at most the limit in the window');
    cmp_ok($admitted, '>=', $LIMIT - 10,
           'slow database: at most a block lost (503s not counted)');
}

# --- budget on its way to the node (decision (qk)) -------------------------
#
# A lease that another worker of the node still waits the answer of is
# played by the row: the test adds 3 to what the row says the node took,
# as a committed lease whose answer has not come would.  The node's next
# lease says what the node took as far as it knows (10); the database
# leases nothing more and answers what the row says (13), and the node
# counts the 3 at once.  A node that does not know what it took (its
# count does not agree with the row's, as after a restart) is never
# given budget by the row's count: it counts only what is leased to it.

# the row of $key's class "other" in window $minute: its WHERE, and
# "granted took[1] nodes[1]"
sub lease_row {
    my ($key, $minute) = @_;

    my $where = lease_where($key, $minute);

    return ($where, psql("SELECT granted || ' ' || coalesce(took[1], -1)"
                         . " || ' ' || nodes[1] FROM rate_leases"
                         . " WHERE $where"));
}

my $NODE;

{
    my $key = fixture(plan => 'unlimited', name => "$TAG-on-its-way")->{key};

    fresh_window(20);

    my $s0 = $C->status(0)->{rate_limit};

    is(nope($C, $key)->{status}, 404, 'on its way: the first lease');

    my $minute = POSIX::floor(time() / 60);
    my ($where, $row) = lease_row($key, $minute);

    like($row, qr/^10 10 (\d+)$/, 'on its way: the row says 10, the node\'s');
    ($NODE) = $row =~ / (\d+)$/;

    psql("UPDATE rate_leases SET granted = granted + 3,"
         . " took[1] = took[1] + 3 WHERE $where");

    # the sixth request leaves 4 of the 10: the lease ahead of need

    is(nope($C, $key)->{status}, 404, "on its way: request $_ admitted")
        for 2 .. 6;

    my ($held) = wait_until(5, 0.05, sub {
        my $s = $C->status(0)->{rate_limit};
        my $held = $s->{held} - $s0->{held};
        return $s->{leases} - $s0->{leases} >= 2 && $held >= 7 ? $held : 0;
    });

    is($held, 7, 'on its way: the 3 counted by the node (4 + 3 held)');
    is((lease_row($key, $minute))[1] =~ s/ .*//r, 13,
       'on its way: the database leased nothing more');

    my @st = map { nope($C, $key)->{status} } 7 .. $LIMIT + 2;
    my $admitted = 6 + grep { $_ == 404 } @st;

    is($admitted, $LIMIT, 'on its way: exactly the limit admitted');
    is(join(' ', @st[-2, -1]), '429 429', 'on its way: then 429');
}

{
    my $key = fixture(plan => 'unlimited', name => "$TAG-not-known")->{key};

    fresh_window(20);

    my $minute = POSIX::floor(time() / 60);
    my ($where) = lease_row($key, $minute);

    # the row says the node took 5 before its first lease of the window
    # (as a node that restarted in it): those 5 are not the node's to use

    psql("INSERT INTO rate_leases (minute, key_hash, class, granted, given,"
         . " nodes, took) VALUES ($minute, '\\x" . key_hash_hex($key)
         . "'::bytea, 2, 5, 5, ARRAY[$NODE]::bigint[], ARRAY[5])");

    my @st = map { nope($C, $key)->{status} } 1 .. $LIMIT;
    my $admitted = grep { $_ == 404 } @st;

    is($admitted, $LIMIT - 5,
       'not known: the node admits what was leased to it, not the row\'s 5');
    is((lease_row($key, $minute))[1] =~ s/ .*//r, $LIMIT,
       'not known: the window is leased out');
}

# --- a node upgraded before its database (schema 20) ------------------------
#
# The seven-argument session_rate_lease() of schema 21 hidden (renamed):
# the node's lease fails with "function does not exist", is sent again
# as schema 19 takes it (six arguments), and the node leases so until
# the minute ends, logged once; no request gets 503.

{
    my $key = fixture(plan => 'unlimited', name => "$TAG-schema-20")->{key};
    my $seven = 'bytea, integer, integer, integer, integer, bigint, integer';

    fresh_window(20);

    psql("ALTER FUNCTION session_rate_lease($seven)"
         . " RENAME TO session_rate_lease_hidden");

    my $warned0 = count_lines($C, qr/no lease statement of schema 21/);
    my $failed0 = count_lines($C, qr/no lease from the database/);

    my @st = map { nope($C, $key)->{status} } 1 .. $LIMIT + 1;

    psql("ALTER FUNCTION session_rate_lease_hidden($seven)"
         . " RENAME TO session_rate_lease");

    is("@st", join(' ', (404) x $LIMIT, 429),
       'schema 20: exactly the limit admitted, then 429, no 503');
    is(count_lines($C, qr/no lease statement of schema 21/) - $warned0, 1,
       'schema 20: logged once in the minute');
    is(count_lines($C, qr/no lease from the database/) - $failed0, 0,
       'schema 20: no failed lease');
    is(psql("SELECT count(*) FROM pg_proc WHERE proname"
            . " = 'session_rate_lease' AND pronargs = 7"), 1,
       'schema 20: the function is back');
}

$C->stop;


# --- two locations, two limits (decisions (l) and (ql)) ---------------------
#
# A key's budget is leased for the key and the class, whichever location
# asked, and each request is checked against its own location's limit,
# as node-local counters are: a block leased under the high limit of one
# location does not let the key past the low limit of another.

{
    my $c = Cluster->new(nodes => 1, workers => 1, http => $HTTP,
                         location => 'session_limits other=1000;');

    my $low = $c->port(1);

    $c->{http} .= "\n    server {\n        listen 127.0.0.1:$low;\n"
                  . "        location /api/v1/ {\n"
                  . "            session_api;\n"
                  . "            session_limits other=5;\n"
                  . "        }\n    }";
    $c->start;

    my $key = fixture(plan => 'unlimited', name => "$TAG-two-limits")->{key};

    fresh_window(15);

    my @high = map { nope($c, $key)->{status} } 1 .. 7;

    is("@high", join(' ', (404) x 7), 'two limits: 7 admitted under 1000');

    my $r = nope($c, $key, $low);

    is($r->{status}, 429,
       'two limits: the location of limit 5 refuses the 8th request')
        or diag("X-RateLimit-Remaining: "
                . ($r->{headers}{'x-ratelimit-remaining'} // '-'));
    is($r->{headers}{'x-ratelimit-limit'}, 5, 'two limits: its limit');
    is($r->{headers}{'x-ratelimit-remaining'}, 0,
       'two limits: nothing remaining there');

    $r = nope($c, $key);

    is($r->{status}, 404, 'two limits: the other location admits on');
    is($r->{headers}{'x-ratelimit-remaining'}, 1000 - 8,
       'two limits: its X-RateLimit-Remaining counts every admission');

    # a fresh key at the low limit first: 5 there, then the high one
    my $key2 = fixture(plan => 'unlimited', name => "$TAG-low-first")->{key};

    fresh_window(15);

    my @low = map { nope($c, $key2, $low)->{status} } 1 .. 6;

    is("@low", join(' ', (404) x 5, 429),
       'two limits: exactly 5 at the low limit, then 429');
    is(nope($c, $key2)->{status}, 404,
       'two limits: the high limit admits the 6th');

    unlike($c->error_log(0), qr/\[(?:alert|crit|emerg)\]/,
           'two limits: no alert');

    $c->stop;
}


# --- the nodes of the window before (decision (qm)) -------------------------
#
# Limit 20 over three nodes, below three blocks of 10: the first two
# nodes to lease in a window take a block each, and the third finds the
# budget leased out.  A window's row now starts with the nodes that took
# budget of the key in the windows before, and the first leases are
# parts of the limit among them (20 / 3 = 6): a round-robin client is
# admitted exactly 20 with no 429 before.  The window before is played by
# a row of the minute before, listing the three nodes.  The first key the
# nodes ever lease for still meets the first blocks, and its row lists
# the node that found the budget leased out, for its next window.  A key
# new to the cluster after that starts, on each node, with a part of the
# limit among the most nodes that the node's answers listed in the window
# (decision (qn)): exact too, with no row of its own before.  A worker
# that has just started has no answer to go by: it reads the most nodes
# that the window's rows list when it starts (decision (qo)), so that a
# key new to the cluster after a reload of every node is exact too.

# $n requests of $key round-robin over the nodes of $c; the statuses
sub round_robin {
    my ($c, $key, $n) = @_;
    return map { nope($c, $key, $c->port($_ % $c->nodes))->{status} }
           0 .. $n - 1;
}

# A key new to the cluster, $limit + 4 requests round-robin over the three
# nodes of $c in window $minute: exactly the limit admitted, the first
# 429 after it, and its row 20 leased over three nodes, none more than 7
# (first blocks of 20 / 3)
sub exact_new_key {
    my ($c, $key, $minute, $limit, $what) = @_;

    my @st = round_robin($c, $key, $limit + 4);

    is(scalar(grep { $_ == 404 } @st), $limit,
       "$what: exactly the limit ($limit) admitted")
        or diag("statuses: @st");
    is(first_429(\@st), $limit + 1,
       "$what: no request refused before the limit")
        or diag("statuses: @st");
    is(psql("SELECT granted || ' ' || cardinality(nodes) || ' '"
            . " || (SELECT max(t) FROM unnest(took) t) FROM rate_leases"
            . " WHERE " . lease_where($key, $minute)),
       '20 3 7', "$what: the row: 20 leased over three nodes, none more"
       . ' than 7');
}

{
    my $limit = 20;
    my $c = Cluster->new(nodes => 3, workers => 1, http => $HTTP,
                         location => "session_limits other=$limit;");

    # no rows of other nodes in the windows that the nodes read when they
    # start (the blocks above leave rows of one node, which guess nothing):
    # the first key meets the first blocks of a fresh cluster
    psql("DELETE FROM rate_leases WHERE minute >= "
         . (POSIX::floor(time() / 60) - 2));

    $c->start;

    my $sampled = qr/the lease rows list up to \d+ nodes/;
    my ($read) = wait_until(5, 0.05, sub {
        return 3 == grep { count_lines($c, $sampled, $_) == 1 } 0 .. 2;
    });
    ok($read, 'each node has read the lease rows when it started');

    my $new = fixture(plan => 'unlimited', name => "$TAG-qm-new")->{key};
    my $key = fixture(plan => 'unlimited', name => "$TAG-qm-before")->{key};
    my $new2 = fixture(plan => 'unlimited', name => "$TAG-qn-new")->{key};

    # the four keys' 75 requests and three reloads in one window
    fresh_window(40);

    my $minute = POSIX::floor(time() / 60);

    # a key new to the cluster: the first two nodes take a block each, and
    # the third finds the window leased out.  It is listed all the same
    # (took 0), for the key's next window
    is(join(' ', round_robin($c, $new, 3)), '404 404 429',
       'new key: the third node\'s first request finds the budget leased'
       . ' out');
    is(psql("SELECT array_to_string(took, ',') FROM rate_leases WHERE "
            . lease_where($new, $minute)),
       '10,10,0', 'new key: the row lists the three nodes, one with none');

    my $nodes = psql("SELECT nodes FROM rate_leases WHERE "
                     . lease_where($new, $minute));

    # the window before of the other key, on the same three nodes
    psql("INSERT INTO rate_leases (minute, key_hash, class, granted, given,"
         . " nodes, took) VALUES (" . ($minute - 1) . ", '\\x"
         . key_hash_hex($key) . "'::bytea, 2, 20, 6, '$nodes'::bigint[],"
         . " ARRAY[7, 7, 6])");

    my @st = round_robin($c, $key, $limit + 4);

    is(scalar(grep { $_ == 404 } @st), $limit,
       "window before: exactly the limit ($limit) admitted over three"
       . " nodes") or diag("statuses: @st");
    is(first_429(\@st), $limit + 1,
       'window before: no request refused before the limit')
        or diag("statuses: @st");
    is(psql("SELECT granted || ' ' || cardinality(nodes) FROM rate_leases"
            . " WHERE " . lease_where($key, $minute)),
       '20 3', 'window before: the row: 20 leased, three nodes');

    # another key new to the cluster, now that each node's answers have
    # listed three nodes: first blocks of 20 / 3, none leased out early
    exact_new_key($c, $new2, $minute, $limit, 'new key after the others');

    # every node reloaded: its new worker has seen no answer, and reads
    # the rows (three nodes) when it starts
    my $new3 = fixture(plan => 'unlimited', name => "$TAG-qo-new")->{key};

    my $three = qr/the lease rows list up to 3 nodes in this window/;

    $c->reload($_) for 0 .. 2;

    ($read) = wait_until(5, 0.05, sub {
        return 3 == grep { count_lines($c, $three, $_) == 1 } 0 .. 2;
    });
    ok($read, 'reloaded: each node\'s new worker reads three nodes in the'
       . ' rows');

    exact_new_key($c, $new3, $minute, $limit, 'new key after a reload');

    unlike(join('', map { $c->error_log($_) } 0 .. 2),
           qr/\[(?:error|alert|crit|emerg)\]/, 'window before: no error');

    $c->stop;
}


# --- the next window's first blocks, leased together ----------------------

{
    my $limit = 1000;

    # at the debug level, as an operator may run it: nginx's debug line of
    # a timer added reads a descriptor from the event's data (the batch's
    # timer had none, and the worker crashed at the first batch)
    my $n = Cluster->new(nodes => 1, workers => 1, http => $HTTP,
                         location => "session_limits other=$limit;",
                         log => 'debug');
    $n->start;

    # the second from which a key leases its next window's first block:
    # 45 + the sixth byte of the key's hash modulo 12 (zone_lease.c)
    my $second = sub {
        return 45 + hex(substr(key_hash_hex($_[0]), 10, 2)) % 12;
    };

    # keys that do so from second 53 at the latest
    my @keys;
    my $k = 0;

    while (@keys < 8) {
        my $key = fixture(plan => 'unlimited',
                          name => "$TAG-next-" . $k++)->{key};
        push @keys, $key if $second->($key) <= 53;
    }

    # keys that do so from second 56 (keys of one project)
    my $project = fixture(plan => 'unlimited',
                          name => "$TAG-piped")->{project_id};
    my @piped;

    while (@piped < 8) {
        my $key = sessionctl_ok('key', 'create', $project)->{key};
        push @piped, $key if $second->($key) == 56;
    }

    # from second 53 to 55 of a minute
    my $now = Time::HiRes::time();
    my $at = POSIX::floor($now / 60) * 60 + 53;

    $at += 60 if $now > $at + 2;

    if ($at > $now) {
        note(sprintf 'waiting %.1f s for second 53', $at - $now);
        Time::HiRes::sleep($at - $now);
    }

    my $next = POSIX::floor(Time::HiRes::time() / 60) + 1;

    # the next window's budget of one of them leased out (to other nodes)
    my $spent = pop @keys;

    psql("INSERT INTO rate_leases (minute, key_hash, class, granted, given,"
         . " nodes) VALUES ($next, '\\x" . key_hash_hex($spent)
         . "'::bytea, 2, $limit, $limit, '{1}')");

    # keys whose next window's block is asked for by a request that
    # nginx answers in one turn of its event loop with others of the key
    # (pipelined on one connection): those others find that lease in
    # flight and ask for none, whatever the millisecond.  A lease's stamp
    # was the millisecond with its low bit set, one ahead of an even
    # one: read as 2^32 - 1 ms old, stale, and each request after it
    # leased the block again (a key's next window leased two to four
    # times over, one run of t/046 in five with the fast key below; with
    # eight keys pipelined, every run but about one in 256).  Before
    # second 56, seven requests each: the first block (10, waited for)
    # and the next (40, ahead of need) in, a block of which half is
    # left; from second 56, eight pipelined, of which the first (or the
    # fifth, if the second lease's answer restarted the count) asks for
    # the next window's block.
    my $cur_in = join ',', map { "'\\x" . key_hash_hex($_) . "'::bytea" }
                           @piped;

    for my $key (@piped) {
        nope($n, $key) for 1 .. 7;
    }

    wait_until(3, 0.02, sub {
        psql("SELECT count(*) FROM rate_leases WHERE minute = " . ($next - 1)
             . " AND class = 2 AND granted = 50 AND key_hash IN ($cur_in)")
        == @piped;
    });

    # one key's rate measured: its first block (10, waited for) and two
    # requests, 5 more 0.15 s later: its next window's block is what it
    # would admit in 30 s at that rate (at most a quarter of the limit,
    # and of what one node's part is), not the next block's 40
    my $fast = pop @keys;

    nope($n, $fast) for 1 .. 2;
    Time::HiRes::sleep(0.15);
    nope($n, $fast) for 1 .. 5;

    # busy keys: each admitted 8 times
    for (1 .. 8) {
        nope($n, $_) for @keys, $spent;
    }

    my $wait56 = ($next - 1) * 60 + 56 - Time::HiRes::time();
    Time::HiRes::sleep($wait56) if $wait56 > 0;

    my @piped_st;

    for my $key (@piped) {
        push @piped_st, pipelined($n, $key, 8);
        Time::HiRes::sleep(0.003);
    }

    is("@piped_st", join(' ', (404) x (8 * @piped)),
       'next window: pipelined requests admitted');

    my $in = join ',', map { "'\\x" . key_hash_hex($_) . "'::bytea" } @keys;
    my $rows = "FROM rate_leases WHERE minute = $next AND class = 2"
               . " AND key_hash IN ($in)";
    my $fast_row_where = "FROM rate_leases WHERE "
                         . lease_where($fast, $next);
    my $fast_row = "SELECT granted $fast_row_where";

    my $all_in = join ',', map { "'\\x" . key_hash_hex($_) . "'::bytea" }
                           @keys, @piped, $fast;
    my $all_rows = "FROM rate_leases WHERE minute = $next AND class = 2"
                   . " AND key_hash IN ($all_in)";

    my ($ok) = wait_until(3, 0.05, sub {
        psql("SELECT count(*) $all_rows") == @keys + @piped + 1;
    });

    ok($ok, 'next window: each busy key leased its first block ahead');

    # one statement's rows are one transaction's
    my $statements = psql("SELECT count(DISTINCT xmin::text) $rows");

    cmp_ok($statements, '<', scalar @keys,
           'next window: ' . scalar(@keys) . " keys' blocks in $statements"
           . ' statements');

    # each key's next window leased once: the row's total is its one grant
    is(psql("SELECT count(*) $all_rows AND granted <> given"), 0,
       'next window: each key leased its block once')
        or diag(psql("SELECT encode(key_hash, 'hex'), granted, given"
                     . " $all_rows AND granted <> given"));

    my $fast_block = psql($fast_row);

    cmp_ok($fast_block, '>', 40,
           "next window: a block from the key's rate ($fast_block)");
    cmp_ok($fast_block, '<=', $limit / 4,
           'next window: at most a quarter of the limit')
        or diag(psql("SELECT granted, given, nodes, xmin $fast_row_where"),
                "\n", $n->error_log(0));

    my $left = reset_of(Time::HiRes::time()) - Time::HiRes::time();
    Time::HiRes::sleep($left + 0.05) if $left > 0;

    my $s0 = $n->status(0)->{rate_limit};
    my @st = map { nope($n, $_)->{status} } @keys, $fast;

    is("@st", join(' ', (404) x (@keys + 1)),
       'next window: each key admitted at once from its block');
    is(nope($n, $spent)->{status}, 429,
       'next window: a key whose budget was leased out gets 429');

    my $s1 = $n->status(0)->{rate_limit};

    is($s1->{waits} - $s0->{waits}, 0,
       'next window: no request waited for a lease');
    is($s1->{leases} - $s0->{leases}, 0,
       'next window: no lease statement at the turn of the minute');

    unlike($n->error_log(0), qr/exited on signal/,
           'next window: no worker crashed (the debug log on)');

    $n->stop;
}


# --- the database gone: its connections cut ---------------------------------

SKIP: {
    my ($port, $pid, $conninfo) = relay_db();

    skip 'the database cannot be relayed', 9 unless defined $port;

    my $c = Cluster->new(nodes => 1, workers => 1, http => $HTTP,
                         location => "session_limits other=$LIMIT;",
                         db => $conninfo);
    $c->start;

    # the node's LISTEN in effect first: it empties the auth cache when it
    # is (decision (f)), and a key cached before would be looked up again
    # once the database is gone (503 before any lease, on a slow machine)
    my ($listening) = wait_until(20, 0.05, sub {
        psql(q{SELECT count(*) FROM pg_stat_activity}
             . q{ WHERE application_name = 'nginx session listen'}
             . q{ AND state = 'idle'}
             . q{ AND query NOT LIKE 'SELECT pg_backend_pid()%'}) >= 1;
    });
    ok($listening, 'database down: the node listens');
    Time::HiRes::sleep(0.2);

    my $key = fixture(plan => 'unlimited', name => "$TAG-down")->{key};

    fresh_window(20);

    is(nope($c, $key)->{status}, 404, 'database down: admitted before');

    my $held = $c->status(0)->{rate_limit}{held};
    my $failed0 = count_lines($c, qr/no lease from the database/);

    relay_stop($pid);

    my @st = map { nope($c, $key)->{status} } 1 .. $held + 3;

    is(scalar(grep { $_ == 404 } @st), $held,
       "database down: what the node held ($held) is admitted")
        or diag("statuses: @st");
    is(scalar(grep { $_ == 503 } @st), 3, 'database down: then 503');
    is(count_lines($c, qr/no lease from the database/) - $failed0, 1,
       'database down: logged once');

    # the database back, the node leases again by itself

    ($port, $pid) = relay_start($port);

    my ($ok) = wait_until(10, 0.2, sub {
        nope($c, $key)->{status} == 404;
    });

    ok($ok, 'database back: admitted again, without a reload');
    ok(count_lines($c, qr/leases from the database again/) >= 1,
       'database back: the recovery is logged');

    $c->stop;
}

done_testing();
