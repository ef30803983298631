# Idempotency-Key in one commit (docs/decisions.md (xa)-(xe)):
# the key's lock, its row, the work and the kept answer are one statement.
#
#     one commit                  the key's row and the work's rows carry
#                                 the same transaction id; every create
#                                 variant, complete, upload and ack; the
#                                 replay is the first answer's bytes
#     a repeat meanwhile          409 at once while the first waits inside
#                                 its transaction (not after it), for each
#                                 endpoint that does work
#     a row that commits after    the work is undone (409), nothing done
#     the statement's snapshot    twice; the retry replays, or takes a
#                                 claim over after its lease (a create
#                                 and an upload)
#     the key's lock held         409 for as long as it is held, free at
#                                 once after (a hash that collides too)
#     a 5xx during the work       the key stays free: the retry runs (a
#                                 create and an upload)
#     nodes of the previous       their functions (migration 3 and 10)
#     version                     replay and tell apart the new rows
#
# Blocks 3a, 4a and 5a repeat 3, 4 and 5 with a plan without a quota,
# whose keyed create inserts the key's row first (decisions.md (xf)); 2
# has such a create among its cases.  t/050 runs every block again with
# images streamed (decision (zd)).
#
# The blocks whose checks need Perl say "--- check: NAME" (as in
# t/011-idempotency.t).  Needs TEST_NGINX_SESSION_DB (util/test.sh).

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use Digest::SHA ();
use IO::Socket::INET ();
use Time::HiRes ();
use Session qw(:DEFAULT decode_json encode_json);
use SessionTest qw(:DEFAULT error_body api_request answer check_init
                    db_http_config key_headers);

our (%KEY, %PROJECT);

our $TAG = sprintf 't040-%d-%d', $$, time;

{
    my %fix = (
        PRO   => 'pro',
        FREE  => 'free',
        UNLIM => 'unlimited',
        HOLD  => 'pro',
        LATE  => 'pro',
        LOCK  => 'pro',
        ERR   => 'pro',
        # a plan without a quota: the create's keyed statement inserts
        # the key's row first (decisions.md (xf))
        UHOLD => 'unlimited',
        ULATE => 'unlimited',
        ULOCK => 'unlimited',
        UERR  => 'unlimited',
    );

    for my $name (sort keys %fix) {
        my $f = fixture(plan => $fix{$name}, name => "$TAG-$name");
        $KEY{$name} = $f->{key};
        $PROJECT{$name} = $f->{project_id};
        $PROJECT{"$name.account"} = $f->{account_id};
    }
}


our $RUNNING = error_body(409, 'Conflict',
                          'a request with this Idempotency-Key is in progress');

my $LP = '{"delivery_mode": "long_poll"}';
my $PNG = "\x89PNG\r\n\x1a\n" . ('p' x 300);


sub api { return api_request(@_) }

sub idem { { 'Idempotency-Key' => $_[0] } }

sub new_key { sprintf '%s-%s-%d', $TAG, $_[0], int rand 1e9 }

sub count_of {
    my ($table, $where) = @_;
    return psql("SELECT count(*) FROM $table WHERE $where") + 0;
}

sub sessions_of {
    return count_of('sessions', 'project_id = ' . sql_quote($PROJECT{$_[0]}));
}

sub usage_of {
    return psql('SELECT coalesce(sum(sessions_created), 0) FROM monthly_usage'
                . ' WHERE account_id = '
                . sql_quote($PROJECT{"$_[0].account"})) + 0;
}

sub key_row {
    my ($who, $key, $cols) = @_;
    return psql("SELECT $cols FROM idempotency_keys WHERE project_id = "
                . sql_quote($PROJECT{$who}) . ' AND key = ' . sql_quote($key));
}

# backends of the module waiting for a lock
sub lock_waiters {
    return psql(q{SELECT count(*) FROM pg_stat_activity}
                . q{ WHERE wait_event_type = 'Lock'}
                . qq{ AND application_name NOT LIKE '$TAG-%'}
                . q{ AND pid <> pg_backend_pid()});
}

# a psql of our own holding what $sql takes (locks, an uncommitted row)
# in an open transaction, until psql_end()
sub hold {
    my ($sql, $label) = @_;
    local $ENV{PGAPPNAME} = "$TAG-holder";
    my $app = "$TAG-$label";
    return psql_begin("$sql; SET application_name = '$app'",
                      q{SELECT count(*) FROM pg_stat_activity}
                      . qq{ WHERE application_name = '$app'});
}

# a POST sent on a connection of its own, not waiting for its answer
# (SessionTest::answer reads it)
sub send_post {
    my ($path, $key, $body, $headers) = @_;

    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                  PeerPort => $Test::Nginx::Util::ServerPort,
                                  Proto => 'tcp')
        or die "send_post: connect: $!";

    my $h = '';
    $h .= "$_: $headers->{$_}\r\n" for sort keys %$headers;
    $body //= '';

    print $s "POST $path HTTP/1.1\r\nHost: localhost\r\n"
             . "Authorization: Bearer $key\r\n$h"
             . 'Content-Length: ' . length($body) . "\r\n"
             . "Connection: close\r\n\r\n$body";

    return { sock => $s, t0 => Time::HiRes::time() };
}

# the first answer and its replay: the same status, bytes and Location
sub same_answer {
    my ($name, $r1, $r2) = @_;
    is($r2->{status}, $r1->{status}, "$name: the same status");
    is($r2->{content}, $r1->{content}, "$name: the same bytes");
    is($r2->{headers}{location}, $r1->{headers}{location},
       "$name: the same Location");
    is($r2->{headers}{'content-length'}, $r1->{headers}{'content-length'},
       "$name: the same length");
    is($r2->{headers}{'idempotent-replayed'}, 'true', "$name: a replay");
}

# a session and an image of it, without keys
sub session_with_image {
    my ($who) = @_;
    my $s = api('POST', '/api/v1/sessions', $KEY{$who}, $LP);
    my $sid = $s->{json}{id};
    my $i = api('POST', "/api/v1/sessions/$sid/images", $KEY{$who}, $PNG,
                { 'Content-Type' => 'image/png' });
    return ($sid, $i->{json}{id});
}


our %checks;

# Every statement of work keeps its answer in its own transaction: the
# key's row has the xmin of the row the work wrote, and no claim
$checks{one_commit} = sub {
    my ($name) = @_;

    # the three creates: counted (pro), the insert alone (unlimited), and
    # the one that reads the plan (free, which lacks webhooks: 403)
    for my $who (qw(PRO UNLIM)) {
        my $k = new_key("create-$who");
        my $r1 = api('POST', '/api/v1/sessions', $KEY{$who}, $LP, idem($k));
        is($r1->{status}, 201, "$name - create ($who): 201");
        my $sid = $r1->{json}{id} // '';

        is(key_row($who, $k, 'xmin::text = (SELECT xmin::text FROM sessions'
                             . ' WHERE id = ' . sql_quote($sid) . '::uuid)'),
           't', "$name - create ($who): the key's row in the session's "
                . 'transaction');
        is(key_row($who, $k, 'claim_id IS NULL AND claimed_at IS NULL'
                             . ' AND status = 201'),
           't', "$name - create ($who): an answer, no claim");

        my $r2 = api('POST', '/api/v1/sessions', $KEY{$who}, $LP, idem($k));
        same_answer("$name - create ($who) replayed", $r1, $r2);
    }

    my $wh = '{"delivery_mode": "webhook",'
             . ' "webhook_url": "https://example.com/hook"}';
    my $k = new_key('create-403');
    my $before = sessions_of('FREE');
    my $r1 = api('POST', '/api/v1/sessions', $KEY{FREE}, $wh, idem($k));
    is($r1->{status}, 403, "$name - create the plan lacks: 403");
    my $r2 = api('POST', '/api/v1/sessions', $KEY{FREE}, $wh, idem($k));
    same_answer("$name - the 403 replayed", $r1, $r2);
    is(sessions_of('FREE'), $before, "$name - the 403 created nothing");

    # complete, upload and ack
    my ($sid, $iid) = session_with_image('PRO');
    my $path = "/api/v1/sessions/$sid/images";

    $k = new_key('upload');
    $r1 = api('POST', $path, $KEY{PRO}, $PNG,
              { %{ idem($k) }, 'Content-Type' => 'image/png' });
    is($r1->{status}, 201, "$name - upload: 201");
    is(key_row('PRO', $k, 'xmin::text = (SELECT xmin::text FROM images'
                          . ' WHERE id = '
                          . sql_quote($r1->{json}{id} // '') . '::uuid)'),
       't', "$name - upload: the key's row in the image's transaction");
    $r2 = api('POST', $path, $KEY{PRO}, $PNG,
              { %{ idem($k) }, 'Content-Type' => 'image/png' });
    same_answer("$name - upload replayed", $r1, $r2);
    is(count_of('images', 'session_id = ' . sql_quote($sid)), 2,
       "$name - upload: one image more");

    $k = new_key('ack');
    $r1 = api('POST', "$path/$iid/ack", $KEY{PRO}, undef, idem($k));
    is($r1->{status}, 200, "$name - ack: 200");
    is(key_row('PRO', $k, 'xmin::text = (SELECT xmin::text FROM images'
                          . ' WHERE id = ' . sql_quote($iid) . ')'),
       't', "$name - ack: the key's row in the acknowledgement's "
            . 'transaction');
    $r2 = api('POST', "$path/$iid/ack", $KEY{PRO}, undef, idem($k));
    same_answer("$name - ack replayed", $r1, $r2);

    $k = new_key('complete');
    $r1 = api('POST', "/api/v1/sessions/$sid/complete", $KEY{PRO}, undef,
              idem($k));
    is($r1->{status}, 200, "$name - complete: 200");
    is(key_row('PRO', $k, 'xmin::text = (SELECT xmin::text FROM sessions'
                          . ' WHERE id = ' . sql_quote($sid) . ')'),
       't', "$name - complete: the key's row in the session's transaction");
    $r2 = api('POST', "/api/v1/sessions/$sid/complete", $KEY{PRO}, undef,
              idem($k));
    same_answer("$name - complete replayed", $r1, $r2);

    # an upload the completed session refuses (409, from the statement
    # that would have done the work) is kept too, and replayed; a
    # streamed one is kept once its transaction is rolled back, when the
    # key's lock is free again
    for my $i (1 .. 3) {
        $k = new_key("completed-$i");
        $r1 = api('POST', $path, $KEY{PRO}, $PNG,
                  { %{ idem($k) }, 'Content-Type' => 'image/png' });
        is($r1->{status}, 409, "$name - upload into a completed session: 409");
        $r2 = api('POST', $path, $KEY{PRO}, $PNG,
                  { %{ idem($k) }, 'Content-Type' => 'image/png' });
        same_answer("$name - the upload's 409 replayed ($i)", $r1, $r2);
    }

    # an answer without work (a 404 of the statement) is kept too
    $k = new_key('404');
    my $nope = '/api/v1/sessions/00000000-0000-4000-8000-000000000000'
               . '/complete';
    $r1 = api('POST', $nope, $KEY{PRO}, undef, idem($k));
    is($r1->{status}, 404, "$name - no such session: 404");
    $r2 = api('POST', $nope, $KEY{PRO}, undef, idem($k));
    same_answer("$name - the 404 replayed", $r1, $r2);
    is(key_row('PRO', $k, 'claim_id IS NULL AND body IS NOT NULL'), 't',
       "$name - the 404 kept as its body");
};

# While the first request waits inside its transaction (a row it needs is
# locked), a repeat with its key answers 409 at once; the first then
# answers and its answer is replayed.  For each endpoint that does work.
$checks{running} = sub {
    my ($name) = @_;
    my $acct = $PROJECT{'HOLD.account'};

    my ($sid, $iid) = session_with_image('HOLD');
    my $images = "/api/v1/sessions/$sid/images";

    my @cases = (
        ['create', '/api/v1/sessions', $LP,
         { 'Content-Type' => 'application/json' },
         'SELECT 1 FROM monthly_usage WHERE account_id = ' . sql_quote($acct)
         . ' FOR UPDATE', 201],
        ['upload', $images, $PNG, { 'Content-Type' => 'image/png' },
         'SELECT 1 FROM sessions WHERE id = ' . sql_quote($sid)
         . ' FOR UPDATE', 201],
        ['ack', "$images/$iid/ack", undef, {},
         'SELECT 1 FROM images WHERE id = ' . sql_quote($iid)
         . ' FOR UPDATE', 200],
        ['complete', "/api/v1/sessions/$sid/complete", undef, {},
         'SELECT 1 FROM sessions WHERE id = ' . sql_quote($sid)
         . ' FOR UPDATE', 200],
    );

    # the create of a plan without a quota waits at its session's
    # foreign key, after the insert of the key's row
    push @cases,
        ['create-unlimited', '/api/v1/sessions', $LP,
         { 'Content-Type' => 'application/json' },
         'SELECT 1 FROM projects WHERE id = ' . sql_quote($PROJECT{UHOLD})
         . ' FOR UPDATE', 201, 'UHOLD'];

    for my $c (@cases) {
        my ($what, $path, $body, $h, $lock, $status, $who) = @$c;
        my $key = $KEY{ $who // 'HOLD' };
        my $k = new_key("running-$what");
        my %h = (%$h, %{ idem($k) });

        my $held = hold($lock, "lock-$what");
        my $first = send_post($path, $key, $body, \%h);

        my ($waiting) = wait_until(10, 0.02, sub { lock_waiters() >= 1 });
        ok($waiting, "$name - $what: the first waits in its transaction");

        my $t0 = Time::HiRes::time();
        my $r = api('POST', $path, $key, $body, \%h);
        my $took = Time::HiRes::time() - $t0;

        is($r->{status}, 409, "$name - $what: the repeat: 409");
        is($r->{content}, $RUNNING, "$name - $what: in progress");
        cmp_ok($took, '<', 2, "$name - $what: at once");
        ok(lock_waiters() >= 1,
           "$name - $what: while the first still waits");

        psql_end($held, 'ROLLBACK');

        my $a = answer($first, 15);
        is($a->{status}, $status, "$name - $what: the first: $status");
        ok(!exists $a->{headers}{'idempotent-replayed'},
           "$name - $what: the first is no replay");

        my $again = api('POST', $path, $key, $body, \%h);
        is($again->{status}, $status, "$name - $what: then a replay");
        is($again->{content}, $a->{content},
           "$name - $what: of the first answer");
        is($again->{headers}{'idempotent-replayed'}, 'true',
           "$name - $what: Idempotent-Replayed");
    }

    is(count_of('images', 'session_id = ' . sql_quote($sid)), 2,
       "$name - one upload");
};

# A row of the key that commits after the statement took its snapshot
# (here: held uncommitted by another transaction, which did not take the
# key's lock, as a node of the previous version does not) is not seen by
# the statement's read; its insert meets it, and the work it did is
# undone.  A create, and an upload (a streamed one meets the row in its
# last statement, after the COPY).
sub late_rows {
    my ($name, $who) = @_;
    my $proj = sql_quote($PROJECT{$who});

    # warm the auth cache
    api('GET', '/api/v1/sessions', $KEY{$who});

    my $sid = api('POST', '/api/v1/sessions', $KEY{$who}, $LP)->{json}{id};
    my $images = "/api/v1/sessions/$sid/images";

    # what, path, body, headers, the rows the work adds
    my @work = (
        ['create', '/api/v1/sessions', $LP,
         { 'Content-Type' => 'application/json' }, sub { sessions_of($who) }],
        ['upload', $images, $PNG, { 'Content-Type' => 'image/png' },
         sub { count_of('images', 'session_id = ' . sql_quote($sid)) }],
    );

    my @rows = (
        # another request's kept answer: the retry replays it
        ['answer', q{status, content_type, body) VALUES (%s, %s, 'POST',}
                   . q{ %s, decode('%s', 'hex'), 201,}
                   . q{ 'application/json', '\x7b22616e73776572223a317d')}],
        # an old node's claim: 409 until its lease ends, then taken over
        ['claim', q{claim_id, claimed_at) VALUES (%s, %s, 'POST',}
                  . q{ %s, decode('%s', 'hex'),}
                  . q{ gen_random_uuid(), now())}],
        # rolled back: the statement goes on and keeps its own answer
        ['rollback', q{claim_id, claimed_at) VALUES (%s, %s, 'POST',}
                     . q{ %s, decode('%s', 'hex'),}
                     . q{ gen_random_uuid(), now())}],
    );

    for my $w (@work) {
        my ($work, $path, $body, $h, $count) = @$w;
        my $sha = Digest::SHA::sha256_hex($body);

        for my $row (@rows) {
            my ($kind, $tpl) = @$row;
            my $what = "$work, $kind";
            my $k = new_key("late-$work-$kind");
            my %h = (%$h, %{ idem($k) });
            my $before = $count->();
            my $usage = usage_of($who);

            my $held = hold('INSERT INTO idempotency_keys (project_id, key,'
                            . ' method, path, body_sha256, '
                            . sprintf($tpl, $proj, sql_quote($k),
                                      sql_quote($path), $sha),
                            "row-$work-$kind");

            my $first = send_post($path, $KEY{$who}, $body, \%h);

            my ($waiting) = wait_until(10, 0.02, sub { lock_waiters() >= 1 });
            ok($waiting, "$name - $what: the insert of the key's row waits");

            psql_end($held, $kind eq 'rollback' ? 'ROLLBACK' : 'COMMIT');

            my $a = answer($first, 15);

            if ($kind eq 'rollback') {
                is($a->{status}, 201, "$name - $what: the request's own 201");
                is($count->(), $before + 1, "$name - $what: done once");
                is(key_row($who, $k, 'status'), '201',
                   "$name - $what: its answer kept");
                next;
            }

            is($a->{status}, 409, "$name - $what: 409");
            is($a->{content}, $RUNNING, "$name - $what: in progress");
            is($count->(), $before, "$name - $what: the work undone");
            is(usage_of($who), $usage, "$name - $what: the quota undone");

            if ($kind eq 'answer') {
                my $r = api('POST', $path, $KEY{$who}, $body, \%h);
                is($r->{status}, 201, "$name - $what: the retry: 201");
                is($r->{content}, '{"answer":1}',
                   "$name - $what: the kept answer replayed");
                is($r->{headers}{'idempotent-replayed'}, 'true',
                   "$name - $what: a replay");
                next;
            }

            my $r = api('POST', $path, $KEY{$who}, $body, \%h);
            is($r->{status}, 409, "$name - $what: within its lease: 409");

            psql('UPDATE idempotency_keys SET claimed_at = now()'
                 . q{ - interval '1 hour' WHERE project_id = } . $proj
                 . ' AND key = ' . sql_quote($k));

            $r = api('POST', $path, $KEY{$who}, $body, \%h);
            is($r->{status}, 201, "$name - $what: past its lease: taken over");
            ok(!exists $r->{headers}{'idempotent-replayed'},
               "$name - $what: not a replay");
            is($count->(), $before + 1, "$name - $what: done once");
            is(key_row($who, $k, 'status IS NOT NULL AND claim_id IS NULL'),
               't', "$name - $what: the claim replaced by the answer");
        }
    }
}

$checks{late_row} = sub { late_rows($_[0], 'LATE') };
$checks{late_row_free} = sub { late_rows($_[0], 'ULATE') };

# The key's advisory lock held elsewhere (by a request with the same key,
# or one whose key's hash is the same): 409 while it is held, and the key
# free as soon as it is not
sub lock_held {
    my ($name, $who) = @_;
    my $k = new_key('lock');
    my $before = sessions_of($who);

    api('GET', '/api/v1/sessions', $KEY{$who});

    my $held = hold('SELECT pg_advisory_xact_lock(hashtextextended('
                    . sql_quote($PROJECT{$who} . $k) . ', 0))', 'advisory');

    my $t0 = Time::HiRes::time();
    my $r = api('POST', '/api/v1/sessions', $KEY{$who}, $LP, idem($k));
    my $took = Time::HiRes::time() - $t0;
    is($r->{status}, 409, "$name - held: 409");
    cmp_ok($took, '<', 2, "$name - held: at once");
    is(sessions_of($who), $before, "$name - held: nothing created");
    is(key_row($who, $k, 'count(*)'), '0', "$name - held: nothing kept");

    # another key is not held by it
    $r = api('POST', '/api/v1/sessions', $KEY{$who}, $LP,
             idem(new_key('lock-other')));
    is($r->{status}, 201, "$name - another key: 201");

    # an upload under the held key: 409 at once, before any work
    my $sid = api('POST', '/api/v1/sessions', $KEY{$who}, $LP)->{json}{id};
    my $up = "/api/v1/sessions/$sid/images";
    my $png = { %{ idem($k) }, 'Content-Type' => 'image/png' };

    $t0 = Time::HiRes::time();
    $r = api('POST', $up, $KEY{$who}, $PNG, $png);
    $took = Time::HiRes::time() - $t0;
    is($r->{status}, 409, "$name - held, an upload: 409");
    is($r->{content}, $RUNNING, "$name - held, an upload: in progress");
    cmp_ok($took, '<', 2, "$name - held, an upload: at once");
    is(count_of('images', 'session_id = ' . sql_quote($sid)), 0,
       "$name - held, an upload: no image");
    is(psql('SELECT image_count FROM sessions WHERE id = ' . sql_quote($sid)),
       '0', "$name - held, an upload: no sequence taken");

    psql_end($held, 'COMMIT');

    $r = api('POST', '/api/v1/sessions', $KEY{$who}, $LP, idem($k));
    is($r->{status}, 201, "$name - released: 201");
    ok(!exists $r->{headers}{'idempotent-replayed'},
       "$name - released: not a replay");

    # the key is the create's now: the upload under it is another request
    $r = api('POST', $up, $KEY{$who}, $PNG, $png);
    is($r->{status}, 422, "$name - released, the upload: 422");
    $r = api('POST', $up, $KEY{$who}, $PNG,
             { %{ idem(new_key('lock-upload')) },
               'Content-Type' => 'image/png' });
    is($r->{status}, 201, "$name - an upload under a free key: 201");
    is($r->{json}{sequence}, 1, "$name - its sequence is the first");
}

$checks{lock} = sub { lock_held($_[0], 'LOCK') };
$checks{lock_free} = sub { lock_held($_[0], 'ULOCK') };

# A statement of work that fails (500) keeps nothing: the retry runs.  A
# create, and an upload (a streamed one fails at the end of its COPY).
sub work_fails {
    my ($name, $who) = @_;
    my $proj = sql_quote($PROJECT{$who});

    my $sid = api('POST', '/api/v1/sessions', $KEY{$who}, $LP)->{json}{id};

    # what, the table the trigger refuses a row of, path, body, headers,
    # the rows the work adds
    my @work = (
        ['create', 'sessions', "NEW.project_id = $proj", '/api/v1/sessions',
         $LP, {}, sub { sessions_of($who) }],
        ['upload', 'images', 'NEW.session_id = ' . sql_quote($sid),
         "/api/v1/sessions/$sid/images", $PNG,
         { 'Content-Type' => 'image/png' },
         sub { count_of('images', 'session_id = ' . sql_quote($sid)) }],
    );

    for my $w (@work) {
        my ($what, $table, $when, $path, $body, $h, $count) = @$w;
        my $k = new_key("fails-$what");
        my %h = (%$h, %{ idem($k) });
        my $before = $count->();
        my $usage = usage_of($who);

        psql(q{CREATE FUNCTION t040_fail() RETURNS trigger LANGUAGE plpgsql}
             . q{ AS $$BEGIN RAISE EXCEPTION 't040: the work fails'; END$$;}
             . qq{ CREATE TRIGGER t040_fail BEFORE INSERT ON $table}
             . qq{ FOR EACH ROW WHEN ($when) EXECUTE FUNCTION t040_fail()});

        my $r = api('POST', $path, $KEY{$who}, $body, \%h);

        psql("DROP TRIGGER t040_fail ON $table; DROP FUNCTION t040_fail()");

        is($r->{status}, 500, "$name - $what: the work fails: 500");
        is(key_row($who, $k, 'count(*)'), '0', "$name - $what: nothing kept");
        is($count->(), $before, "$name - $what: nothing done");
        is(usage_of($who), $usage, "$name - $what: no quota used");

        $r = api('POST', $path, $KEY{$who}, $body, \%h);
        is($r->{status}, 201, "$name - $what: the retry runs: 201");
        ok(!exists $r->{headers}{'idempotent-replayed'},
           "$name - $what: the retry is not a replay");
        is($count->(), $before + 1, "$name - $what: done once");
    }
}

$checks{fails} = sub { work_fails($_[0], 'ERR') };
$checks{fails_free} = sub { work_fails($_[0], 'UERR') };

# The functions that nodes of the previous version call (migrations 3 and
# 10) still work on the rows this version writes
$checks{previous} = sub {
    my ($name) = @_;
    my $k = new_key('previous');
    my $proj = sql_quote($PROJECT{PRO});

    my $r = api('POST', '/api/v1/sessions', $KEY{PRO}, $LP, idem($k));
    is($r->{status}, 201, "$name - a create: 201");

    my $claim = sub {
        my ($body) = @_;
        return psql('SELECT outcome || coalesce(status, 0) || ' . q{' '}
                    . ' || coalesce((answer_session).id::text, '
                    . q{'-')} . " FROM idempotency_claim($proj, "
                    . sql_quote($k) . q{, 'POST', '/api/v1/sessions', }
                    . q{sha256(convert_to(} . sql_quote($body)
                    . q{, 'UTF8')), 2)});
    };

    is($claim->($LP), 'replay201 ' . ($r->{json}{id} // ''),
       "$name - an old node replays it");
    is($claim->('{}'), 'mismatch0 -', "$name - and tells another body apart");
    is(psql("SELECT idempotency_store($proj, " . sql_quote($k)
            . q{, gen_random_uuid(), 500, 'x', NULL, '\x00')}), 'f',
       "$name - and cannot overwrite it");
    is(key_row('PRO', $k, 'status'), '201', "$name - the answer stays");
};


master_on();
no_shuffle();
no_long_string();

my $CONFIG = <<'EOF';
    location /api/ {
        session_api;
        session_limits create=1000 list=1000 other=1000;
    }
EOF

add_block_preprocessor(sub {
    my $block = shift;

    db_http_config($block);

    $block->set_value('config', $CONFIG) unless defined $block->config;

    key_headers($block, \%KEY, 'PRO', 'application/json');

    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: one commit for the key and the work, every endpoint
--- check: one_commit
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 2: a repeat while the first waits in its transaction: 409 at once
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout 10s;
    session_auth_cache_ttl 60s;
--- check: running
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 3: a row of the key committed after the snapshot: the work undone
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout 10s;
    session_auth_cache_ttl 60s;
--- check: late_row
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- error_log
another request with the key answered first, nothing done
--- no_error_log
[error]



=== TEST 3a: the same with a plan without a quota (the key's row first)
--- http_config
    session_db $TEST_NGINX_SESSION_DB_CONF;
    session_db_timeout 10s;
    session_auth_cache_ttl 60s;
--- check: late_row_free
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- error_log
another request with the key answered first, nothing done
--- no_error_log
[error]



=== TEST 4: the key's lock held elsewhere: 409, then free
--- check: lock
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 4a: the same with a plan without a quota
--- check: lock_free
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 5: a 5xx during the work keeps nothing
--- check: fails
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- error_log
t040: the work fails



=== TEST 5a: the same with a plan without a quota
--- check: fails_free
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- error_log
t040: the work fails



=== TEST 6: the previous version's functions on the new rows
--- check: previous
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]
