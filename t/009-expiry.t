# The expiry sweep (docs/api.md §7 and §10, docs/operations.md):
# every worker runs session_sweep() every session_expiry_sweep_interval
# (+-25%), one sweep at a time across workers and nodes; it records
# status 'expired' in the row, sends NOTIFY 'expired:<id>' on
# session_events and queues one session.expired outbox row for every
# webhook session, completed or not.
#
# Blocks whose checks need Perl say "--- check: NAME" (as in
# t/007-sessions.t): the check runs from --- init against the nginx that
# Test::Nginx started for the block.  Waits are bounded polls
# (wait_until), never fixed sleeps, except where a check must see that
# something does NOT happen for a while.
#
# Nothing here stops the database: the outage is a TCP relay between
# nginx and PostgreSQL that the script closes and opens again.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use File::Temp ();
use IO::Select ();
use IO::Socket::INET ();
use IO::Socket::UNIX ();
use POSIX ();
use Socket qw(SOCK_STREAM);
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json);
use SessionTest qw(:DEFAULT api_request check_init db_http_config ping_request
                   send_get send_request answer);

our $TAG = sprintf 't009-%d-%d', $$, time;

our $UUID = qr/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
our $TS = qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/;

# the sweep's advisory lock, "sesswept" as a bigint
our $SWEEP_LOCK = '8315179226771058804';

our $HOOK = 'https://example.com/hook';

our (%KEY, %PROJECT);

for my $name (qw(MAIN RACE LOCKS DOWN DEFAULT)) {
    my $f = fixture(plan => 'pro', name => "$TAG-$name");
    $KEY{$name} = $f->{key};
    $PROJECT{$name} = $f->{project_id};
}


# --- helpers -------------------------------------------------------------

# api(METHOD, PATH, KEY, BODY): SessionTest's api_request
sub api { return api_request(@_) }

sub create {
    my ($key, $body) = @_;

    my $r = api('POST', '/api/v1/sessions', $key, $body);

    die "create: $r->{status} $r->{content}\n"
        unless $r->{status} == 201 && ref $r->{json} eq 'HASH';

    return $r->{json};
}

sub row_status {
    my ($id) = @_;
    return psql('SELECT status FROM sessions WHERE id = ' . sql_quote($id));
}

# a session inserted with SQL, due in $secs seconds (negative: overdue)
sub insert_session {
    my ($project, $secs, $mode) = @_;

    $mode //= 'long_poll';
    my $url = $mode eq 'webhook' ? sql_quote($HOOK) : 'NULL';

    return scalar psql('INSERT INTO sessions (project_id, delivery_mode, '
                       . 'webhook_url, expires_at) VALUES ('
                       . sql_quote($project) . ", '$mode', $url, "
                       . "now() + $secs * interval '1 second') RETURNING id");
}

# waits (bounded) until every id has status 'expired' in its row
sub wait_expired {
    my ($timeout, @ids) = @_;

    my $list = join ', ', map { sql_quote($_) } @ids;

    return wait_until($timeout, 0.1, sub {
        psql("SELECT count(*) FROM sessions WHERE id IN ($list)"
             . " AND status = 'expired'") == @ids
    });
}

sub outbox {
    my ($id, $type) = @_;

    return psql("SELECT id || '|' || project_id || '|' || url || '|' "
                . "|| payload FROM webhook_outbox WHERE session_id = "
                . sql_quote($id) . ' AND event_type = ' . sql_quote($type)
                . ' ORDER BY created_at');
}

sub slurp {
    my ($file) = @_;

    open my $fh, '<', $file or return '';
    local $/;
    my $s = <$fh>;

    return $s // '';
}

# A psql of its own, fed on a pipe, writing to a file: for LISTEN and
# for holding locks in an open transaction.  send() writes SQL;
# marker() writes a SELECT of a marker and waits until it is printed,
# which also makes psql print the notifications it has received.
{
    package PsqlSession;

    my $Seq = 0;

    sub new {
        my ($class) = @_;

        my $out = File::Temp->new;
        pipe(my $r, my $w) or die "pipe: $!";

        my $pid = fork;
        die "fork: $!" unless defined $pid;

        if ($pid == 0) {
            close $w;
            open STDIN, '<&', $r or POSIX::_exit(127);
            open STDOUT, '>', $out->filename or POSIX::_exit(127);
            open STDERR, '>&', \*STDOUT or POSIX::_exit(127);
            { exec 'psql', '-X', '-q', '-A', '-t', '-d',
                   Session::db_conninfo(); }
            POSIX::_exit(127);
        }

        close $r;
        my $old = select $w;
        $| = 1;
        select $old;

        return bless { pid => $pid, w => $w, out => $out }, $class;
    }

    sub send {
        my ($self, $sql) = @_;
        print { $self->{w} } "$sql\n";
    }

    sub output { main::slurp($_[0]{out}->filename) }

    sub marker {
        my ($self, $timeout) = @_;

        my $m = sprintf 'marker-%d-%d', $$, ++$Seq;
        $self->send("SELECT '$m';");

        my ($ok) = SessionTest::wait_until($timeout // 10, 0.05, sub {
            $self->output =~ /^\Q$m\E$/m
        });

        return $ok;
    }

    sub close {
        my ($self) = @_;

        return unless $self->{w};
        close $self->{w};
        delete $self->{w};
        waitpid $self->{pid}, 0;
    }

    sub DESTROY { $_[0]->close }
}

# has the LISTEN session been told "expired:<id>"?
sub notified {
    my ($l, $id) = @_;

    $l->marker;

    return $l->output =~ /with payload "expired:\Q$id\E"/;
}


# A TCP relay on 127.0.0.1 to the test database, nginx's
# $TEST_NGINX_RELAY_DB_CONF (relay_db() of t/lib/SessionTest.pm): killing
# it cuts every connection of nginx to PostgreSQL.
our ($RELAY_PORT, $RELAY_PID) = relay_db();


# --- the checks -----------------------------------------------------------

my %checks;

# Sessions of every kind; those with expires_in 1 expire, the others
# are untouched.
$checks{expire} = sub {
    my ($name) = @_;

    my $l = PsqlSession->new;
    $l->send('LISTEN session_events;');
    ok($l->marker, "$name - a psql listens on session_events");

    my $t0 = Time::HiRes::time();

    my %s = (
        lp      => create($KEY{MAIN}, { delivery_mode => 'long_poll',
                                        expires_in => 1 }),
        wh      => create($KEY{MAIN}, { delivery_mode => 'webhook',
                                        webhook_url => $HOOK,
                                        expires_in => 1 }),
        wh_done => create($KEY{MAIN}, { delivery_mode => 'webhook',
                                        webhook_url => $HOOK,
                                        expires_in => 2 }),
        lp_live => create($KEY{MAIN}, { delivery_mode => 'long_poll' }),
        wh_live => create($KEY{MAIN}, { delivery_mode => 'webhook',
                                        webhook_url => "$HOOK/live" }),
    );

    my $r = api('POST', "/api/v1/sessions/$s{wh_done}{id}/complete",
                $KEY{MAIN});
    is($r->{status}, 200, "$name - a webhook session is completed");

    my @due = map { $s{$_}{id} } qw(lp wh wh_done);
    my ($all, $waited) = wait_expired(15, @due);
    my $late = Time::HiRes::time() - $t0 - 2;

    ok($all, "$name - the three due rows say 'expired'");
    Test::More::note(sprintf '%s: rows expired %.2f s after the last'
                     . ' expires_at', $name, $late);
    cmp_ok($late, '<', 5, "$name - within a few seconds of expires_at"
           . ' (interval 1s)');

    is(row_status($s{lp_live}{id}), 'open', "$name - long_poll, not due:"
       . ' open');
    is(row_status($s{wh_live}{id}), 'open', "$name - webhook, not due:"
       . ' open');
    is(psql('SELECT count(*) FROM webhook_outbox WHERE session_id = '
            . sql_quote($s{wh_live}{id})), 0,
       "$name - webhook, not due: no event");
    is(psql('SELECT count(*) FROM webhook_outbox WHERE session_id = '
            . sql_quote($s{lp}{id})), 0,
       "$name - long_poll: no webhook event");

    is(psql('SELECT completed_at IS NOT NULL FROM sessions WHERE id = '
            . sql_quote($s{wh_done}{id})), 't',
       "$name - completed and expired: completed_at stays");

    # the webhook session: exactly one session.expired event
    for my $which (qw(wh wh_done)) {
        my $sid = $s{$which}{id};
        my @rows = outbox($sid, 'session.expired');

        is(scalar @rows, 1, "$name - $which - one session.expired row");
        next unless @rows;

        my ($oid, $proj, $url, $payload) = split /\|/, $rows[0], 4;
        my $p = eval { decode_json($payload) } || {};

        is($proj, $PROJECT{MAIN}, "$name - $which - project_id");
        is($url, $HOOK, "$name - $which - url");
        is(join(',', sort keys %$p), 'created_at,data,id,type',
           "$name - $which - payload fields");
        is($p->{id}, $oid, "$name - $which - payload id is the row id");
        is($p->{type}, 'session.expired', "$name - $which - type");
        like($p->{created_at} // '', $TS, "$name - $which - created_at");

        my $d = $p->{data} || {};
        is($d->{id}, $sid, "$name - $which - data.id");
        is($d->{status}, 'expired', "$name - $which - data.status");
        is($d->{delivery_mode}, 'webhook', "$name - $which - data mode");
        is($d->{webhook_url}, $HOOK, "$name - $which - data.webhook_url");
        is($d->{expires_at}, $s{$which}{expires_at},
           "$name - $which - data.expires_at");

        if ($which eq 'wh_done') {
            like($d->{completed_at} // '', $TS,
                 "$name - $which - data.completed_at is set");
            my @done = outbox($sid, 'session.completed');
            is(scalar @done, 1,
               "$name - $which - and its session.completed row");
        } else {
            ok(!defined $d->{completed_at},
               "$name - $which - data.completed_at is null");
        }
    }

    # long polls hear of it
    for my $which (qw(lp wh wh_done)) {
        ok(notified($l, $s{$which}{id}),
           "$name - $which - NOTIFY expired:<id> on session_events");
    }

    ok(!notified($l, $s{lp_live}{id}), "$name - not due: no NOTIFY");

    # what clients see is unchanged
    $r = api('GET', "/api/v1/sessions/$s{lp}{id}", $KEY{MAIN});
    is($r->{status}, 410, "$name - GET an expired session: 410");
    $r = api('GET', "/api/v1/sessions/$s{lp_live}{id}", $KEY{MAIN});
    is($r->{status}, 200, "$name - GET a live one: 200");

    # and later runs do not touch them again
    my ($more) = wait_until(3, 0.1, sub {
        psql(q{SELECT count(*) FROM webhook_outbox WHERE event_type = }
             . q{'session.expired' AND session_id IN (}
             . join(', ', map { sql_quote($s{$_}{id}) } qw(wh wh_done))
             . ')') > 2
    });
    ok(!$more, "$name - no second event in the next runs");

    $l->close;
};

# Two workers of nginx and three psql sweeps race over 1500 overdue
# webhook sessions: each gets one session.expired row, no more.
$checks{race} = sub {
    my ($name) = @_;

    my $n = 1500;
    my $proj = sql_quote($PROJECT{RACE});

    psql('INSERT INTO sessions (project_id, delivery_mode, webhook_url, '
         . "created_at, expires_at) SELECT $proj, 'webhook', "
         . sql_quote("$HOOK/race") . " || '/' || i, "
         . "now() - interval '1 minute', now() - interval '1 second' "
         . "FROM generate_series(1, $n) AS i");

    my @racers;

    for (1 .. 3) {
        my $p = PsqlSession->new;
        $p->send('SELECT * FROM session_sweep(25);') for 1 .. 40;
        push @racers, $p;
    }

    my ($done) = wait_until(30, 0.2, sub {
        psql("SELECT count(*) FROM sessions WHERE project_id = $proj"
             . " AND status <> 'expired'") == 0
    });

    $_->marker for @racers;

    ok($done, "$name - all $n sessions marked expired");

    is(psql('SELECT count(*) || \'|\' || count(DISTINCT o.session_id) '
            . 'FROM webhook_outbox o JOIN sessions s ON s.id = o.session_id'
            . " WHERE s.project_id = $proj"
            . " AND o.event_type = 'session.expired'"),
       "$n|$n", "$name - $n events for $n sessions: one each");

    my $out = join '', map { $_->output } @racers;
    my $skipped = () = $out =~ /^0\|f\|f$/mg;
    my $ran = () = $out =~ /^\d+\|[tf]\|t$/mg;

    Test::More::note("$name: psql sweeps that ran $ran, that found the"
                     . " lock taken $skipped");
    ok($ran + $skipped >= 100, "$name - the psql sweeps answered")
        or diag($out);

    $_->close for @racers;
};

# One sweep at a time, and a sweep never waits: for the lock of another
# sweep, nor for a row that a transaction holds.
$checks{locks} = sub {
    my ($name) = @_;

    # another sweep holds the lock: nothing is marked, nobody waits
    my $holder = PsqlSession->new;
    $holder->send("SELECT pg_advisory_lock($SWEEP_LOCK);");
    ok($holder->marker, "$name - a psql holds the sweep's lock");

    my $id = insert_session($PROJECT{LOCKS}, -1);

    my $t0 = Time::HiRes::time();
    is(psql('SELECT swept || \'|\' || more || \'|\' || ran'
            . ' FROM session_sweep(10)'), '0|false|false',
       "$name - session_sweep() while the lock is held: 0, did not run");
    cmp_ok(Time::HiRes::time() - $t0, '<', 1, "$name - answered at once");

    # (nothing to wait for: the row must NOT change for a while)
    my ($changed) = wait_until(2.5, 0.1, sub {
        row_status($id) eq 'expired'
    });
    ok(!$changed, "$name - nginx does not mark it while the lock is held");

    $holder->close;

    ok((wait_expired(10, $id))[0], "$name - marked once the lock is free");

    # a row held by a transaction is skipped; the others are marked.
    # The row is locked before it becomes due (in 5 s), so that no
    # sweep can mark it between the insert and the lock; the other row
    # is inserted once it is due, so that the sweep that marks the other
    # one has seen the held row due.
    my $held = insert_session($PROJECT{LOCKS}, 5, 'webhook');

    my $tx = PsqlSession->new;
    $tx->send('BEGIN;');
    $tx->send('SELECT 1 FROM sessions WHERE id = ' . sql_quote($held)
              . ' FOR UPDATE;');
    ok($tx->marker, "$name - a transaction holds one row");
    is(row_status($held), 'open', "$name - it was not due before the lock");

    ok((wait_until(15, 0.1, sub {
        psql('SELECT now() > expires_at FROM sessions WHERE id = '
             . sql_quote($held)) eq 't'
    }))[0], "$name - the held row is due");

    my $free = insert_session($PROJECT{LOCKS}, -1, 'webhook');

    ok((wait_expired(10, $free))[0],
       "$name - the other due row is marked meanwhile");
    is(row_status($held), 'open', "$name - the held row is left as it is");

    $tx->send('COMMIT;');
    $tx->close;

    ok((wait_expired(10, $held))[0], "$name - marked once it is released");

    is(psql("SELECT count(*) FROM webhook_outbox WHERE event_type ="
            . " 'session.expired' AND session_id IN (" . sql_quote($held)
            . ', ' . sql_quote($free) . ')'), 2,
       "$name - one event each");
};

# The database goes away and comes back: the sweep logs it once, nginx
# keeps serving, and the sweep runs again by itself.
$checks{outage} = sub {
    my ($name) = @_;

    SKIP: {
        skip "$name - no relay to the database (conninfo is a URI or has"
             . ' several hosts)', 6 unless defined $RELAY_PORT;

        my $first = insert_session($PROJECT{DOWN}, -1);
        ok((wait_expired(10, $first))[0],
           "$name - through the relay: marked");

        relay_stop($RELAY_PID);
        undef $RELAY_PID;

        my $log = $Test::Nginx::Util::ErrLogFile;
        my ($seen) = wait_until(10, 0.1, sub {
            slurp($log) =~ /session sweep: database unavailable/
        });
        ok($seen, "$name - the sweep notices the outage");

        my $id = insert_session($PROJECT{DOWN}, -1);

        # (nothing to wait for: the row must NOT change while it is down)
        my ($changed) = wait_until(2.5, 0.1, sub {
            row_status($id) eq 'expired'
        });
        ok(!$changed, "$name - nothing is marked while it is down");

        my $r = http_request('GET', '/ping');
        is($r->{status}, 200, "$name - nginx keeps serving");

        (undef, $RELAY_PID) = relay_start($RELAY_PORT);

        ok((wait_expired(15, $id))[0],
           "$name - marked once the database is back");

        my @errors = grep { /\[error\].*session sweep/ }
                     split /\n/, slurp($log);
        is(scalar @errors, 1, "$name - one error line for the outage")
            or diag(join "\n", @errors);
    }
};

# the default interval (5s +-25%) keeps well within 60 s
$checks{default} = sub {
    my ($name) = @_;

    my $s = create($KEY{DEFAULT}, { delivery_mode => 'long_poll',
                                    expires_in => 1 });
    my $t0 = Time::HiRes::time();

    my ($ok, $waited) = wait_expired(20, $s->{id});
    ok($ok, "$name - marked with the default interval");
    cmp_ok($waited, '<', 1 + 6.25 + 2, "$name - within one interval");
};

# reload: old workers leave at once, the sweep timer does not hold them
$checks{reload} = sub {
    my ($name) = @_;

    my $master = slurp($Test::Nginx::Util::PidFile);
    chomp $master;

    my @old = grep { /^\d+$/ } split /\s+/, `pgrep -P $master`;
    ok(@old >= 1, "$name - workers before the reload");

    my $t0 = Time::HiRes::time();
    kill 'HUP', $master;

    my ($gone) = wait_until(10, 0.05, sub { !grep { kill 0, $_ } @old });
    my $took = Time::HiRes::time() - $t0;

    ok($gone, "$name - the old workers exit");
    cmp_ok($took, '<', 3, "$name - promptly (interval 30s)");
};

# a reload while a statement of the old worker waits on a lock: the
# worker stays for it (session_db_timeout), and begins nothing meanwhile:
# its idle connections (the LISTEN one at least) are not checked again,
# though session_db_idle_check (1 s) passes twice
$checks{reload_held} = sub {
    my ($name) = @_;

    need_debug_log('the "session db: idle check" lines') or return;

    my $master = slurp($Test::Nginx::Util::PidFile);
    chomp $master;

    my ($old) = grep { /^\d+$/ } split /\s+/, `pgrep -P $master`;
    ok($old, "$name - the worker before the reload");

    my $checked = qr/\[debug\] $old#\d+: .*session db: idle check/;
    my ($idle) = wait_until(10, 0.05, sub {
        error_log_count($checked) > 0
    });
    ok($idle, "$name - the worker checks its idle connections");

    my $tx = PsqlSession->new;
    $tx->send('BEGIN;');
    $tx->send('LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE;');
    ok($tx->marker, "$name - sessions locked");

    my $req = send_get('/api/v1/sessions?limit=1', $KEY{MAIN});
    my ($waits) = wait_until(10, 0.05, sub {
        psql(q{SELECT count(*) FROM pg_stat_activity WHERE wait_event_type}
             . q{ = 'Lock' AND query LIKE '%FROM sessions%'}) > 0
    });
    ok($waits, "$name - a list waits on the lock");

    kill 'HUP', $master;

    my $down = qr/\[notice\] $old#\d+: gracefully shutting down/;
    my ($shutting) = wait_until(10, 0.05, sub {
        error_log_count($down) > 0
    });
    ok($shutting, "$name - the old worker shuts down");
    my $before = error_log_count($checked);

    # (nothing to wait for: no check may begin for two idle intervals)
    Time::HiRes::sleep(2.2);

    ok(kill(0, $old), "$name - held by its statement");
    is(error_log_count($checked), $before,
       "$name - no idle check begun while it shuts down");

    $tx->send('COMMIT;');
    $tx->close;

    is(answer($req, 15)->{status}, 200, "$name - the list is answered");
    my ($gone) = wait_until(10, 0.05, sub { !kill 0, $old });
    ok($gone, "$name - then the old worker exits");
};


# A psql holding the session's row with a change of its own (a new row
# version, as an upload or a complete makes): writes that come meanwhile
# wait for it, and are judged again once they get the row
# (HOW 'lock': a lock of the row alone, no change)
sub hold_row {
    my ($name, $id, $how) = @_;

    my $tx = PsqlSession->new;
    $tx->send('BEGIN;');
    $tx->send(($how // '') eq 'lock'
              ? 'SELECT 1 FROM sessions WHERE id = ' . sql_quote($id)
                . ' FOR UPDATE;'
              : 'UPDATE sessions SET image_count = image_count WHERE id = '
                . sql_quote($id) . ';');
    ok($tx->marker, "$name - a transaction holds the session's row");

    return $tx;
}

# waits (bounded) until N statements wait for a lock
sub lock_waiters {
    my ($n) = @_;

    return (wait_until(10, 0.02, sub {
        psql(q{SELECT count(*) FROM pg_stat_activity}
             . q{ WHERE wait_event_type = 'Lock'}) >= $n
    }))[0];
}

our $PNG = "\x89PNG\r\n\x1a\n" . ('x' x 32);

sub upload_send {
    my ($id, $body) = @_;
    return send_request('POST', "/api/v1/sessions/$id/images", $KEY{MAIN},
                        { 'Content-Type' => 'image/png' }, $body // $PNG);
}

sub complete_send {
    my ($id) = @_;
    return send_request('POST', "/api/v1/sessions/$id/complete", $KEY{MAIN});
}

# Writes that waited for the session's row are judged when they get it
# (decision (x)): sent before expires_at behind another write's lock,
# given the row after it, an upload (small and streamed) and a complete
# are 410 and change nothing; and a complete that waited behind an
# upload has a completed_at no earlier than the image's created_at
$checks{lock_wait} = sub {
    my ($name) = @_;

    my $id = insert_session($PROJECT{MAIN}, 3);

    my $tx = hold_row($name, $id);
    held_across_expiry($name, $id, $tx, 'COMMIT', 1);

    # uploads behind a write that rolls back, and behind a lock alone,
    # after which PostgreSQL would not judge an UPDATE's condition again
    # by itself (no new row version): an upload locks the row first
    $id = insert_session($PROJECT{MAIN}, 3);
    held_across_expiry($name, $id, hold_row($name, $id), 'ROLLBACK', 0);

    $id = insert_session($PROJECT{MAIN}, 3);
    held_across_expiry($name, $id, hold_row($name, $id, 'lock'), 'COMMIT', 0);

    # far from its expiry: the upload then the complete, each after the
    # row; the completion is no earlier than the image it counts
    my $id2 = insert_session($PROJECT{MAIN}, 600);

    $tx = hold_row($name, $id2);
    my $up = upload_send($id2);
    ok(lock_waiters(1), "$name - an upload waits");
    my $co = complete_send($id2);
    ok(lock_waiters(2), "$name - then a complete");

    $tx->send('COMMIT;');
    $tx->close;

    is(answer($up, 15)->{status}, 201, "$name - the upload: 201");
    my $done = answer($co, 15);
    is($done->{status}, 200, "$name - the complete: 200");
    is($done->{json}{image_count}, 1, "$name - it counts the image");
    is(psql('SELECT s.completed_at >= i.created_at FROM sessions s'
            . ' JOIN images i ON i.session_id = s.id WHERE s.id = '
            . sql_quote($id2)), 't',
       "$name - completed_at is no earlier than the image's created_at");
};

# writes sent to the session $id while $tx holds its row, until its
# expires_at has passed; then $tx ends ($end): each write is 410 and
# changes nothing.  $all: a complete and keyed writes too, else a small
# and a streamed upload
sub held_across_expiry {
    my ($name, $id, $tx, $end, $all) = @_;

    $name .= " (held, then $end)";

    my @req = (upload_send($id), upload_send($id, $PNG . ('y' x 200_000)));

    push @req, complete_send($id) if $all;

    push @req, send_request('POST', "/api/v1/sessions/$id/images",
                            $KEY{MAIN}, { 'Idempotency-Key' => "$id-1",
                                          'Content-Type' => 'image/png' },
                            $PNG),
               send_request('POST', "/api/v1/sessions/$id/complete",
                            $KEY{MAIN}, { 'Idempotency-Key' => "$id-2" }),
               send_request('POST', "/api/v1/sessions/$id/images",
                            $KEY{MAIN}, { 'Idempotency-Key' => "$id-3",
                                          'Content-Type' => 'image/png' },
                            $PNG . ('z' x 200_000))
        if $all;

    ok(lock_waiters(scalar @req), "$name - " . @req . " writes wait");

    ok((wait_until(10, 0.05, sub {
        psql('SELECT now() >= expires_at FROM sessions WHERE id = '
             . sql_quote($id)) eq 't'
    }))[0], "$name - expires_at passes while they wait");

    $tx->send("$end;");
    $tx->close;

    my @ans = map { answer($_, 15) } @req;
    is(join(' ', map { $_->{status} } @ans), join(' ', ('410') x @req),
       "$name - judged when they get the row: 410 each");
    is($ans[$_]{json}{message}, 'session has expired',
       "$name - answer $_: session has expired") for 0 .. $#req;
    # (the sweep may have marked it expired meanwhile: not one of them)
    is(psql("SELECT image_count || (status = 'completed')::text"
            . " || coalesce(completed_at::text, '-') FROM sessions WHERE id = "
            . sql_quote($id)), '0false-', "$name - nothing changed");
    is(psql('SELECT count(*) FROM images WHERE session_id = '
            . sql_quote($id)), 0, "$name - no image stored");
}


# --- blocks -------------------------------------------------------------

master_on();
no_shuffle();
no_long_string();

my $CONFIG = <<'EOF';
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
    }
    location = /ping {
        return 200 "pong\n";
    }
EOF

add_block_preprocessor(sub {
    my $block = shift;

    workers(defined $block->workers ? $block->workers : 1);

    db_http_config($block, "session_expiry_sweep_interval 1s;\n");

    $block->set_value('config', $CONFIG) unless defined $block->config;

    check_init($block, \%checks);

    ping_request($block);
});


run_tests();

__DATA__

=== TEST 1: due sessions are marked, notified and queued; others untouched
--- workers: 2
--- check: expire
--- no_error_log
[error]
[alert]



=== TEST 2: two workers and three psql sweeps race: one event per session
--- workers: 2
--- check: race
--- no_error_log
[error]
[alert]



=== TEST 3: one sweep at a time, and a sweep never waits
--- check: locks
--- no_error_log
[error]
[alert]



=== TEST 4: the database goes away and comes back
--- http_config
    session_db $TEST_NGINX_RELAY_DB_CONF;
    session_db_timeout 1s;
    session_expiry_sweep_interval 1s;
--- check: outage
--- no_error_log
[alert]
[crit]
[emerg]



=== TEST 5: the default interval
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
--- check: default
--- no_error_log
[error]



=== TEST 6: a reload is not held by the sweep's timer
--- workers: 2
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 30s;
--- check: reload
--- no_error_log
[alert]



=== TEST 7: session_expiry_sweep_interval 1500ms is accepted
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 1500ms;
--- no_error_log
[emerg]



=== TEST 8: session_expiry_sweep_interval 30s is accepted
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 30s;
--- no_error_log
[emerg]



=== TEST 9: session_expiry_sweep_interval 0
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 0;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_expiry_sweep_interval" directive must be between 1s and 30s in \S+nginx\.conf:\d+$/



=== TEST 10: session_expiry_sweep_interval 500ms
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 500ms;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_expiry_sweep_interval" directive must be between 1s and 30s in \S+nginx\.conf:\d+$/



=== TEST 11: session_expiry_sweep_interval 31s
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 31s;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_expiry_sweep_interval" directive must be between 1s and 30s in \S+nginx\.conf:\d+$/



=== TEST 12: session_expiry_sweep_interval abc
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval abc;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_expiry_sweep_interval" directive invalid value in \S+nginx\.conf:\d+$/



=== TEST 13: session_expiry_sweep_interval twice
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 2s;
    session_expiry_sweep_interval 3s;
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_expiry_sweep_interval" directive is duplicate in \S+nginx\.conf:\d+$/



=== TEST 14: session_expiry_sweep_interval in a server
--- config
    session_expiry_sweep_interval 2s;
    location /api/ {
        session_api;
    }
--- must_die
--- error_log eval
qr/\[emerg\] .*"session_expiry_sweep_interval" directive is not allowed here in \S+nginx\.conf:\d+$/



=== TEST 15: session_expiry_sweep_interval without a value
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval;
--- must_die
--- error_log eval
qr/\[emerg\] .*invalid number of arguments in "session_expiry_sweep_interval" directive in \S+nginx\.conf:\d+$/



=== TEST 16: an exiting worker held by a statement begins no idle check
--- debug_log: the "session db: idle check" lines
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_idle_check 1s;
    session_db_timeout 10s;
--- check: reload_held
--- no_error_log
[alert]



=== TEST 17: writes that waited for the session's row are judged when they get it
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_expiry_sweep_interval 30s;
--- check: lock_wait
--- no_error_log
[error]
[alert]
