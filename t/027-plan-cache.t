# The create of a key whose plan has no quota (docs/decisions.md
# (nc)): the auth cache keeps, with each key, its account's plan's
# monthly quota (or none) and the delivery modes it allows; a create that
# needs neither the plan nor the usage row is the insert alone, and on
# a plan with a quota the usage row is counted against the cached quota
# without reading the plan.  The plan's rules still hold: a change of a
# plan, or of an account's plan, reaches every worker at once by
# notification (src/sql/011_plan_notify.sql), not after
# session_auth_cache_ttl, which is an hour here so that only the
# notification can explain a change of answer.  nginx's debug log tells
# which statement each create used.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Session qw(:DEFAULT);
use SessionTest qw(:DEFAULT api_request check_init db_http_config error_log
                   listening);

our $TAG = sprintf 't027-%d-%d', $$, time;

# a plan of this test's own, so that changing it harms nobody
our $PLAN = "$TAG-open";
our $TIGHT = "$TAG-tight";

sessionctl_ok('plan', 'set', $PLAN, '--quota', 'unlimited',
              '--features', 'long_poll');
sessionctl_ok('plan', 'set', $TIGHT, '--quota', '0',
              '--features', 'long_poll,webhook');

our $OPEN = fixture(plan => $PLAN, name => "$TAG-a");
our $MOVED = fixture(plan => $PLAN, name => "$TAG-b");
our $QUOTA = fixture(plan => 'pro', name => "$TAG-c");

our $HOOK = 'https://93.184.216.34/hook';


# --- helpers -------------------------------------------------------------

sub create {
    my ($key, $mode) = @_;

    my $body = { delivery_mode => $mode // 'long_poll' };
    $body->{webhook_url} = $HOOK if ($mode // '') eq 'webhook';

    return api_request('POST', '/api/v1/sessions', $key, $body);
}

# how many creates of each kind nginx's debug log has seen so far
sub kinds {
    need_debug_log('the "session create:" lines') or return (0, 0, 0);

    my $log = error_log();

    my $alone = () = $log =~ /session create: the insert alone/g;
    my $plan = () = $log =~ /session create: with the plan/g;
    my $counted = () = $log =~ /session create: counted, then the insert/g;

    return ($alone, $plan, $counted);
}

# one create of $key: its answer, and the statement it used
sub create_kind {
    my ($key, $mode) = @_;

    my @before = kinds();
    my $r = create($key, $mode);
    my @after = kinds();

    my $kind = $after[0] > $before[0] ? 'alone'
             : $after[1] > $before[1] ? 'plan'
             : $after[2] > $before[2] ? 'counted'
             :                          'none';

    return ($r, $kind);
}

# until a create of $key answers $status (at most 5 s)
sub until_status {
    my ($key, $mode, $status) = @_;

    my ($r) = wait_until(5, 0.05, sub {
        my $r = create($key, $mode);
        $r->{status} == $status ? $r : undef;
    });

    return $r;
}


# how many notifications of the auth channel with PAYLOAD the debug log
# has; heard(PAYLOAD, BEFORE): waits (5 s at most) until it has more
sub auth_heard {
    my ($payload) = @_;
    my $log = error_log();
    return scalar(() = $log =~ /session listen: auth "\Q$payload\E"/g);
}

sub heard {
    my ($payload, $before) = @_;
    return (wait_until(5, 0.02, sub { auth_heard($payload) > $before }))[0];
}

# a long_poll plan NAME with the monthly QUOTA, and an account on it
# (named after it), with a project and a key: fixture()'s hash
sub plan_account {
    my ($plan, $quota) = @_;

    sessionctl_ok('plan', 'set', $plan, '--quota', $quota,
                  '--features', 'long_poll');

    return fixture(plan => $plan, name => $plan);
}

# the sessions an account's projects created this UTC month
sub month_sessions {
    my ($account) = @_;

    return psql("SELECT count(*) FROM sessions s JOIN projects p"
                . " ON p.id = s.project_id WHERE p.account_id = '$account'"
                . " AND s.created_at >= date_trunc('month',"
                . " now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'");
}

# the account's usage row of the month ('' when it has none)
sub month_usage {
    my ($account) = @_;

    return psql("SELECT sessions_created FROM monthly_usage"
                . " WHERE account_id = '$account' AND month ="
                . " date_trunc('month', now() AT TIME ZONE 'UTC')::date");
}


# --- the checks ------------------------------------------------------------

my %checks;

$checks{fast} = sub {
    my ($name) = @_;

    # worker 0 empties the cache once the LISTEN connection is up:
    # only then can a change of answer come from a notification alone
    listening();

    # the key's first request looks it up: its plan comes with it
    my ($r, $kind) = create_kind($OPEN->{key});
    is($r->{status}, 201, "$name - first create: 201");
    is($kind, 'alone', "$name - first create: the insert alone");

    ($r, $kind) = create_kind($OPEN->{key});
    is($r->{status}, 201, "$name - second create: 201");
    is($kind, 'alone', "$name - second create: the insert alone");

    my $s = $r->{json};
    is($s->{status}, 'open', "$name - the document: open");
    is($s->{delivery_mode}, 'long_poll', "$name - the document: the mode");
    is($s->{project_id}, $OPEN->{project_id},
       "$name - the document: the project");
    is(psql("SELECT count(*) FROM sessions WHERE id = '$s->{id}'"
            . " AND project_id = '$OPEN->{project_id}'"), 1,
       "$name - the row is there");

    # a mode the plan does not allow: the plan has the last word
    ($r, $kind) = create_kind($OPEN->{key}, 'webhook');
    is($r->{status}, 403, "$name - webhook on a long_poll plan: 403");
    is($r->{json}{message}, 'plan does not allow webhook',
       "$name - its message");
    is($kind, 'plan', "$name - webhook: with the plan");

    # a plan with a quota counts every create: the first, which looks
    # the key up, and the next, from the cache
    for my $n (1, 2) {
        ($r, $kind) = create_kind($QUOTA->{key});
        is($r->{status}, 201, "$name - a quota plan, create $n: 201");
        is($kind, 'counted', "$name - a quota plan, create $n: counted");
        is(psql("SELECT sessions_created FROM monthly_usage"
                . " WHERE account_id = '$QUOTA->{account_id}'"), $n,
           "$name - a quota plan, create $n: in the usage row");
    }
    is(psql("SELECT count(*) FROM monthly_usage"
            . " WHERE account_id = '$OPEN->{account_id}'"), 0,
       "$name - no quota: nothing counted");
};

# the plan is changed in SQL (the trigger notifies): the next creates
# follow the new rules at once, the cache TTL (1 h) notwithstanding
$checks{plan_changed} = sub {
    my ($name) = @_;

    # worker 0 empties the cache once the LISTEN connection is up:
    # only then can a change of answer come from a notification alone
    listening();

    my ($r, $kind) = create_kind($OPEN->{key});
    is($r->{status}, 201, "$name - before: 201");
    is($kind, 'alone', "$name - before: the insert alone");

    psql("UPDATE plans SET features = '{webhook}' WHERE name = '$PLAN'");

    $r = until_status($OPEN->{key}, 'long_poll', 403);
    ok($r, "$name - long_poll taken from the plan: 403");
    is($r && $r->{json}{message}, 'plan does not allow long_poll',
       "$name - its message");

    # the sessions made without a quota count (decision (jd)): a quota
    # of one more than them allows one more
    my $made = month_sessions($OPEN->{account_id});
    cmp_ok($made, '>', 0, "$name - sessions made without a quota");

    psql("UPDATE plans SET features = '{long_poll}', monthly_quota = "
         . ($made + 1) . " WHERE name = '$PLAN'");

    is(month_usage($OPEN->{account_id}), $made,
       "$name - the quota set: the month's sessions counted");

    $r = until_status($OPEN->{key}, 'long_poll', 201);
    ok($r, "$name - long_poll back, with a quota of one more: 201");

    ($r, $kind) = create_kind($OPEN->{key});
    is($r->{status}, 429, "$name - the quota holds: 429");
    is($r->{json}{message}, 'monthly session quota exceeded',
       "$name - its message");
    is($kind, 'counted', "$name - counted against the cached quota");

    # the quota raised: the cached one would still refuse
    psql("UPDATE plans SET monthly_quota = " . ($made + 2)
         . " WHERE name = '$PLAN'");

    $r = until_status($OPEN->{key}, 'long_poll', 201);
    ok($r, "$name - a quota of two more: one more, 201");

    ($r, $kind) = create_kind($OPEN->{key});
    is($r->{status}, 429, "$name - and then 429");
    is(month_usage($OPEN->{account_id}), $made + 2,
       "$name - the quota counted, never more");

    psql("UPDATE plans SET monthly_quota = NULL WHERE name = '$PLAN'");

    $r = until_status($OPEN->{key}, 'long_poll', 201);
    ok($r, "$name - no quota again: 201");

    ($r, $kind) = create_kind($OPEN->{key});
    is($kind, 'alone', "$name - and the insert alone again");
};

# the account moves to a plan with a quota of 0 (in SQL: the trigger
# notifies): its creates are refused at once
$checks{account_moved} = sub {
    my ($name) = @_;

    # worker 0 empties the cache once the LISTEN connection is up:
    # only then can a change of answer come from a notification alone
    listening();

    my ($r, $kind) = create_kind($MOVED->{key});
    is($r->{status}, 201, "$name - before: 201");
    is($kind, 'alone', "$name - before: the insert alone");

    psql("UPDATE accounts SET plan = '$TIGHT'"
         . " WHERE id = '$MOVED->{account_id}'");

    $r = until_status($MOVED->{key}, 'long_poll', 429);
    ok($r, "$name - on a plan with a quota of 0: 429");

    ($r, $kind) = create_kind($MOVED->{key});
    is($kind, 'counted', "$name - counted against a quota of 0");
    is(month_usage($MOVED->{account_id}), month_sessions($MOVED->{account_id}),
       "$name - the month's sessions counted, the refused ones not");

    psql("UPDATE accounts SET plan = '$PLAN'"
         . " WHERE id = '$MOVED->{account_id}'");

    $r = until_status($MOVED->{key}, 'long_poll', 201);
    ok($r, "$name - moved back: 201");
};


# A plan that gains a quota, an account that moves to a plan with one,
# and a quota taken away and set again: the quota counts every session
# of the month, those made without a quota too (decision (jd))
$checks{month_counted} = sub {
    my ($name) = @_;

    listening();

    # a plan without a quota gets one of 3 after 3 sessions
    my $plan = "$TAG-gains";
    my $f = plan_account($plan, 'unlimited');

    is(create($f->{key})->{status}, 201, "$name - no quota: create $_")
        for 1 .. 3;
    is(month_usage($f->{account_id}), '', "$name - no quota: no usage row");

    my $before = auth_heard('plans');
    sessionctl_ok('plan', 'set', $plan, '--quota', '3');
    is(month_usage($f->{account_id}), 3,
       "$name - a quota of 3 set: the 3 sessions counted");
    ok(heard('plans', $before), "$name - the change heard");

    my $r = create($f->{key});
    is($r->{status}, 429, "$name - a quota of 3 after 3 sessions: 429");
    is($r->{json}{message}, 'monthly session quota exceeded',
       "$name - its message");
    is(month_sessions($f->{account_id}), 3, "$name - no session more");

    # an account moved from a plan without a quota to one with 4
    my $four = "$TAG-four";
    sessionctl_ok('plan', 'set', $four, '--quota', '4',
                  '--features', 'long_poll');
    my $m = plan_account("$TAG-none", 'unlimited');

    is(create($m->{key})->{status}, 201, "$name - before the move: $_")
        for 1 .. 3;

    $before = auth_heard("account:$m->{account_id}");
    psql("UPDATE accounts SET plan = '$four'"
         . " WHERE id = '$m->{account_id}'");
    is(month_usage($m->{account_id}), 3,
       "$name - moved to a quota of 4: the 3 sessions counted");

    # once the move is heard: the fourth passes, the fifth does not
    ok(heard("account:$m->{account_id}", $before), "$name - the move heard");
    my $kind;
    ($r, $kind) = create_kind($m->{key});
    is($r->{status}, 201, "$name - moved: the fourth, 201");
    is($kind, 'counted', "$name - moved: counted");
    ($r, $kind) = create_kind($m->{key});
    is($r->{status}, 429, "$name - moved: the fifth, 429");
    is(month_sessions($m->{account_id}), 4, "$name - moved: 4 sessions");
    is(month_usage($m->{account_id}), 4, "$name - moved: 4 counted");

    # a quota taken away and set again: what was made meanwhile counts
    my $back = "$TAG-back";
    my $b = plan_account($back, '5');

    is(create($b->{key})->{status}, 201, "$name - a quota of 5: $_")
        for 1 .. 2;
    is(month_usage($b->{account_id}), 2, "$name - 2 counted");

    sessionctl_ok('plan', 'set', $back, '--quota', 'unlimited');
    ($r) = wait_until(5, 0.05, sub {
        my ($r, $kind) = create_kind($b->{key});
        $r->{status} == 201 && $kind eq 'alone' ? $r : undef;
    });
    ok($r, "$name - the quota taken away: the insert alone");
    is(create($b->{key})->{status}, 201, "$name - and one more");

    my $made = month_sessions($b->{account_id});
    cmp_ok($made, '>=', 4, "$name - $made sessions this month");
    is(month_usage($b->{account_id}), 2, "$name - the row stays at 2");

    $before = auth_heard('plans');
    sessionctl_ok('plan', 'set', $back, '--quota', $made + 1);
    is(month_usage($b->{account_id}), $made,
       "$name - the quota set again: every session counted");
    ok(heard('plans', $before), "$name - the change heard");

    is(create($b->{key})->{status}, 201, "$name - one more: 201");
    $r = create($b->{key});
    is($r->{status}, 429, "$name - then 429");
    is(month_sessions($b->{account_id}), $made + 1,
       "$name - exactly the quota made");
    is(month_usage($b->{account_id}), $made + 1, "$name - and counted");
};


# --- blocks -------------------------------------------------------------

master_on();
workers(2);
no_shuffle();
no_long_string();

add_block_preprocessor(sub {
    my $block = shift;

    db_http_config($block, "session_auth_cache_ttl 1h;\n");

    $block->set_value('config', <<'EOF') unless defined $block->config;
    location /api/ {
        session_api;
        session_limits create=100000 list=100000 other=100000;
    }
EOF

    $block->set_value('more_headers', "Authorization: Bearer $OPEN->{key}\n")
        unless defined $block->more_headers;

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: a plan without a quota: the create is the insert alone
--- debug_log: the "session create:" and "session listen: listening" lines
--- check: fast
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 2: the plan changes: the next creates follow it at once
--- debug_log: the "session create:" and "session listen: listening" lines
--- check: plan_changed
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 3: the account moves to another plan: its creates follow at once
--- debug_log: the "session create:" and "session listen: listening" lines
--- check: account_moved
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 4: a quota that is set counts the month's sessions made without one
--- debug_log: the "session create:" and "session listen: listening" lines
--- check: month_counted
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]
