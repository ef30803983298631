# A write wakes the long polls only of a session that a poll armed
# (docs/decisions.md (yf), src/sql/020_poll_wakeups.sql): before its
# polls wait, a node arms the session (sessions.polled_until) past their
# deadlines and then reads it again; an upload or a complete notifies
# only while the arm lasts, or always with "sessionctl wakeups all".
# The checks:
#   - a waiting poll arms its session, a few minutes ahead, and is woken
#     by an upload;
#   - the race the order exists for: an upload that holds the session's
#     row while the poll arms (and so did not see the arm, and does not
#     notify) is seen by the read that follows the arm: the poll answers
#     with the image at once, not at its timeout;
#   - a poll that joins a settled node with a deadline past the node's
#     arm makes it arm again, past the new deadline;
#   - a poll that waits without an arm (as a node of the previous release
#     does) is woken with "wakeups all", and is not with "polled" (then
#     its timeout's read answers with the image);
#   - sessionctl wakeups: shows and sets the mode, refuses another word;
#     a database made from nothing starts at polled, one upgraded at all.
#   - a complete notifies only an armed session, or any with "all".
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use IO::Select ();
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json schema_latest repo_root);
use SessionTest qw(:DEFAULT api_request send_get answer status_json
                    check_init listening long_poll_session png_upload);

our $TAG = sprintf 't053-%d-%d', $$, time;

our $F = fixture(plan => 'pro', name => "$TAG-main");
our $KEY = $F->{key};

# --- helpers -------------------------------------------------------------

sub create { return long_poll_session($KEY) }

sub upload { return png_upload($KEY, $_[0]) }

sub poll_send {
    my ($sid, $timeout) = @_;
    return send_get("/api/v1/sessions/$sid/poll?timeout=$timeout", $KEY);
}

sub waiting { status_json()->{long_poll}{waiting} }

# seconds the session's arm has left (undef: none)
sub armed_for {
    my ($sid) = @_;
    my $v = psql(q{SELECT extract(epoch FROM polled_until - now())}
                 . " FROM sessions WHERE id = '$sid'");
    return $v eq '' ? undef : $v;
}

sub wakeups { sessionctl_ok('wakeups')->{wakeups} }

# waits (10 s at most) until an arm statement waits for a row lock
sub arm_blocked {
    return (wait_until(10, 0.05, sub {
        psql(q{SELECT count(*) FROM pg_stat_activity}
             . q{ WHERE wait_event_type = 'Lock'}
             . q{ AND query LIKE '%SET polled_until = greatest%'}) > 0;
    }))[0];
}


# the module's arm statement (NGX_HTTP_SESSION_SQL_POLL_ARM), read from
# its header, with the projects, the ids (in this order) and the seconds
sub arm_sql {
    my ($project, $seconds, @ids) = @_;

    my $file = repo_root() . '/src/db/ngx_http_session_sql.h';
    open my $fh, '<', $file or die "$file: $!";
    my $h = do { local $/; <$fh> };

    my ($def) = $h =~ /^#define NGX_HTTP_SESSION_SQL_POLL_ARM\s*\\\n((?:.*\\\n)*.*\n)/m
        or die "no NGX_HTTP_SESSION_SQL_POLL_ARM in $file";
    my $sql = join '', $def =~ /"((?:[^"\\]|\\.)*)"/g;

    my %p = (1 => "'{" . join(',', ($project) x @ids) . "}'",
             2 => "'{" . join(',', @ids) . "}'",
             3 => $seconds);
    $sql =~ s/\$([123])\b/$p{$1}/g;

    return $sql;
}


# --- the checks -----------------------------------------------------------

my %checks;

# A poll that joins while the node's arm is under way, with a deadline
# past the one the arm was sent for, makes the node arm once more after
# it: the session is armed past the new deadline, and an upload wakes
# both polls at once
$checks{join_arming} = sub {
    my ($name) = @_;

    listening();

    my $sid = create();

    my $fh = psql_begin("SET application_name = 't053-hold';"
                        . " UPDATE sessions SET image_count = image_count"
                        . " WHERE id = '$sid'",
                        q{SELECT count(*) FROM pg_stat_activity}
                        . q{ WHERE application_name = 't053-hold'}
                        . q{ AND state = 'idle in transaction'});

    my $p1 = poll_send($sid, 20);

    my $blocked = arm_blocked();
    ok($blocked, "$name - the first poll's arm waits for the row");

    my $p2 = poll_send($sid, 400);
    my ($joined) = wait_until(10, 0.05, sub { waiting() >= 2 });
    ok($joined, "$name - a poll of 400 s joins while it arms");

    psql_end($fh, 'ROLLBACK');

    my ($armed) = wait_until(10, 0.05, sub {
        (armed_for($sid) // 0) > 400
    });
    ok($armed, "$name - armed past the second poll's deadline ("
               . (armed_for($sid) // 'none') . ' s)');

    upload($sid);

    for ([$p1, 'the first'], [$p2, 'the second']) {
        my $r = answer($_->[0], 10);
        is($r->{status}, 200, "$name - $_->[1] poll answers");
        is(scalar @{ $r->{json}{images} // [] }, 1,
           "$name - $_->[1] with the image");
    }
};

# Two arms of the same sessions in opposite orders (two workers, or two
# nodes, each batch in the order its polls came) must not deadlock: the
# arm locks its rows in the order of their ids.  A transaction holds the
# lower id; the arm is sent with the higher id first (the plan forced to
# follow the array, as it does on a large table); the transaction then
# changes the higher id.  An arm that locked in its array's order would
# hold the higher id while waiting for the lower: a deadlock, and one of
# the two undone.
$checks{arm_order} = sub {
    my ($name) = @_;

    my ($lo, $hi) = sort { $a cmp $b } map { create() } 1 .. 2;

    my $t0 = psql_begin("SET application_name = 't053-t0';"
                        . " UPDATE sessions SET image_count = image_count"
                        . " WHERE id = '$lo'",
                        q{SELECT count(*) FROM pg_stat_activity}
                        . q{ WHERE application_name = 't053-t0'}
                        . q{ AND state = 'idle in transaction'});

    my $t1 = psql_begin("SET application_name = 't053-t1';"
                        . ' SET enable_hashjoin = off;'
                        . ' SET enable_mergejoin = off;'
                        . ' ' . arm_sql($F->{project_id}, 300, $hi, $lo),
                        q{SELECT count(*) FROM pg_stat_activity}
                        . q{ WHERE application_name = 't053-t1'}
                        . q{ AND wait_event_type = 'Lock'});
    pass("$name - the arm waits for the lower id");

    print $t0 "UPDATE sessions SET completed_at = 'epoch' WHERE id = '$hi';\n";
    psql_end($t0, 'COMMIT');
    psql_end($t1, 'COMMIT');

    is(psql("SELECT completed_at = 'epoch' FROM sessions WHERE id = '$hi'"),
       't', "$name - the transaction's change committed");
    ok(defined armed_for($lo) && armed_for($lo) > 250
       && defined armed_for($hi) && armed_for($hi) > 250,
       "$name - and the arm's: both sessions armed");
};

$checks{arm} = sub {
    my ($name) = @_;

    listening();

    my $sid = create();
    is(armed_for($sid), undef, "$name - a new session is not armed");

    my $p = poll_send($sid, 30);

    my ($w) = wait_until(10, 0.05, sub { waiting() >= 1 });
    ok($w, "$name - the poll waits");

    my $left = armed_for($sid) // 0;
    ok($left > 240 && $left <= 300,
       "$name - its session is armed about 5 minutes ahead ($left s)");

    my $img = upload($sid);
    my $r = answer($p, 10);

    is($r->{status}, 200, "$name - the upload wakes it");
    is($r->{json}{images}[0]{id}, $img->{id}, "$name - with the image");
    ok($r->{elapsed} < 10, "$name - before its timeout");
};


# the upload locks the session's row and adds its image in a transaction
# that does not notify (it began before the arm); the poll's first read
# sees nothing, its arm waits for the row, and the read after the arm
# sees the image once the transaction commits
$checks{race} = sub {
    my ($name) = @_;

    listening();

    my $sid = create();

    my $fh = psql_begin(
        qq{UPDATE sessions SET image_count = image_count + 1}
        . qq{ WHERE id = '$sid';}
        . qq{ INSERT INTO images (session_id, sequence, content_type, size,}
        . qq{ sha256, content) VALUES ('$sid', 1, 'image/png', 1,}
        . qq{ sha256('\\x00'::bytea), '\\x00'::bytea)},
        qq{SELECT count(*) FROM pg_locks l JOIN pg_class c}
        . qq{ ON c.oid = l.relation WHERE c.relname = 'images'}
        . qq{ AND l.mode = 'RowExclusiveLock' AND l.granted});

    my $p = poll_send($sid, 20);

    # the arm waits behind the transaction's row lock
    my $blocked = arm_blocked();
    ok($blocked, "$name - the poll's arm waits for the session's row");

    ok(!answer_ready($p, 0.2), "$name - the poll has not answered yet");

    psql_end($fh);

    my $r = answer($p, 20);

    is($r->{status}, 200, "$name - the poll answers");
    is(scalar @{ $r->{json}{images} // [] }, 1,
       "$name - with the image committed while it armed");
    ok($r->{elapsed} < 5, "$name - at once, not at its timeout "
                          . sprintf('(%.2f s)', $r->{elapsed}));
    ok((armed_for($sid) // 0) > 240, "$name - the session is armed");
};

sub answer_ready {
    my ($p, $secs) = @_;
    return scalar IO::Select->new($p->{sock})->can_read($secs);
}


# the node settled with an arm of 5 minutes; a poll of 400 s joins it
$checks{rearm} = sub {
    my ($name) = @_;

    listening();

    my $sid = create();

    my $p1 = poll_send($sid, 30);
    my ($w1) = wait_until(10, 0.05, sub { waiting() >= 1 });
    ok($w1, "$name - the first poll waits");

    my $left = armed_for($sid) // 0;
    ok($left > 240 && $left <= 300, "$name - armed 5 minutes ahead");

    my $p2 = poll_send($sid, 400);
    my ($again) = wait_until(10, 0.05, sub {
        (armed_for($sid) // 0) > 400;
    });
    ok($again, "$name - the second poll's wait arms it past its deadline "
               . '(' . (armed_for($sid) // 'none') . ' s)');

    my $img = upload($sid);

    for my $p ($p1, $p2) {
        my $r = answer($p, 10);
        is($r->{status}, 200, "$name - a poll is woken");
        is($r->{json}{images}[0]{id}, $img->{id}, "$name - with the image");
    }
};


# a poll waits; its arm is taken away, as if a node of the previous
# release polled, which does not arm
$checks{unarmed} = sub {
    my ($name) = @_;

    listening();

    for my $mode ('all', 'polled') {
        sessionctl_ok('wakeups', $mode);

        my $sid = create();
        my $p = poll_send($sid, 3);

        my ($w) = wait_until(10, 0.05, sub { waiting() >= 1 });
        ok($w, "$name - $mode: the poll waits");

        psql("UPDATE sessions SET polled_until = NULL WHERE id = '$sid'");

        my $img = upload($sid);
        my $r = answer($p, 10);

        is($r->{status}, 200, "$name - $mode: the poll answers 200");
        is($r->{json}{images}[0]{id}, $img->{id},
           "$name - $mode: with the image");

        if ($mode eq 'all') {
            ok($r->{elapsed} < 2, "$name - all: woken by the upload");
        } else {
            ok($r->{elapsed} >= 2.5,
               "$name - polled: not woken, its timeout's read answers");
        }
    }
};


$checks{sessionctl} = sub {
    my ($name) = @_;

    is(wakeups(), 'polled', "$name - a database made by migrate: polled");

    is(sessionctl_ok('wakeups', 'all')->{wakeups}, 'all', "$name - set all");
    is(wakeups(), 'all', "$name - it stays all");
    is(sessionctl_ok('wakeups', 'polled')->{wakeups}, 'polled',
       "$name - set polled");

    my ($code, $res) = sessionctl('wakeups', 'some');
    is("$code $res", '1 sessionctl: invalid mode "some": all or polled',
       "$name - another word is a bad value (exit 1), as a bad --state");
    is(wakeups(), 'polled', "$name - and changes nothing");

    ($code, $res) = sessionctl('wakeups', 'all', 'polled');
    is($code, 2, "$name - two words are a usage error");

    # an upgraded database: migration 20 undone, migrate run again
    my $db = "t053_upgraded_$$";
    psql("CREATE DATABASE $db");

    my $conninfo = db_conninfo() . " dbname=$db";

    my $run = sub {
        local $ENV{TEST_NGINX_SESSION_DB} = $conninfo;
        return sessionctl_ok(@_);
    };

    $run->('migrate');
    is($run->('wakeups')->{wakeups}, 'polled', "$name - new: polled");

    my $undo = q{psql -X -q -d } . quotemeta($conninfo) . q{ -c }
        . quotemeta(q{DELETE FROM session_schema_migrations WHERE version = 20;}
                    . q{ DROP TABLE session_wakeups;}
                    . q{ ALTER TABLE sessions DROP COLUMN polled_until});
    is(system($undo), 0, "$name - migration 20 undone");

    {
        local $ENV{TEST_NGINX_SESSION_DB} = $conninfo;
        my ($c, $msg) = sessionctl('wakeups');
        is($c, 1, "$name - before schema 20: refused (exit 1)");
        like($msg, qr/run sessionctl migrate/, "$name - saying what to do");
    }

    # the highest migration shipped: 20 or a later one
    my $latest = schema_latest();

    is($run->('migrate')->{version}, $latest,
       "$name - migrated again, to the latest ($latest)");
    is($run->('wakeups')->{wakeups}, 'all',
       "$name - an upgraded database starts at all");

    psql("DROP DATABASE $db");
};


# completes notify as uploads do (t/008 TEST 10 checks the uploads); the
# armed session's notification last: it commits after the others
$checks{complete} = sub {
    my ($name) = @_;

    my ($quiet, $armed, $all) = map { create() } 1 .. 3;

    psql("UPDATE sessions SET polled_until = now() + interval '1 minute'"
         . " WHERE id = '$armed'");

    my $complete = sub {
        my $r = api_request('POST', "/api/v1/sessions/$_[0]/complete",
                            $KEY, undef, undef, { timeout => 30 });
        die "complete: $r->{status}\n" unless $r->{status} == 200;
    };

    my $out = notifications('session_events', sub {
        $complete->($quiet);
        sessionctl_ok('wakeups', 'all');
        $complete->($all);
        sessionctl_ok('wakeups', 'polled');
        $complete->($armed);
    }, qr/completed:\Q$armed\E/);

    like($out, qr/"completed:\Q$armed\E"/, "$name - the armed session's");
    like($out, qr/"completed:\Q$all\E"/, "$name - any with wakeups all");
    unlike($out, qr/\Q$quiet\E/, "$name - none of the unarmed session");
};


our $CONFIG = <<'EOF';
    location /api/ {
        session_api;
        session_poll_max_timeout 400s;
    }

    location = /status {
        session_status;
    }
EOF

add_block_preprocessor(sub {
    my $block = shift;

    $block->set_value('http_config',
                      "    session_db \$TEST_NGINX_SESSION_DB_CONF;\n")
        unless defined $block->http_config;
    $block->set_value('config', $CONFIG) unless defined $block->config;
    $block->set_value('more_headers', "Authorization: Bearer $KEY\n");

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: a waiting poll arms its session and is woken by an upload
--- check: arm
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 2: an upload that held the row while the poll armed is seen at once
--- check: race
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 3: a poll past the node's arm arms the session again
--- check: rearm
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 4: a poll without an arm: woken with wakeups all, not with polled
--- check: unarmed
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 5: sessionctl wakeups, and the mode a migration starts with
--- check: sessionctl
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 6: a complete notifies only an armed session, or any with wakeups all
--- check: complete
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 7: two arms of the same sessions in opposite orders do not deadlock
--- check: arm_order
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 8: a poll that joins while its node arms, past the arm: armed again
--- check: join_arming
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]
