# Through PgBouncer in transaction mode (docs/decisions.md
# (pa)): the query pool points at a PgBouncer that the script starts
# (pool_mode = transaction, one server connection for everyone:
# default_pool_size = 1), "session_db_pooler transaction" says so, and
# LISTEN goes straight to PostgreSQL ("session_db_listen").  Sessions,
# images (streamed ones too, on the upload connections: decisions (ze)),
# the long poll, revocation, webhooks and the expiry sweep work through
# it, with two workers of two connections each sharing the one server
# connection.
#
# What would break them, each caught here:
#   - startup options: this PgBouncer refuses them (no
#     ignore_startup_parameters), so every request would answer 503;
#   - named statements on a PgBouncer that keeps none for its clients
#     (1.18, or max_prepared_statements = 0: TEST 7): all four clients
#     share the one server connection, so a second PREPARE of the same
#     names would fail there, and PgBouncer is told to replace its server
#     connection (RECONNECT), after which a statement prepared on the old
#     one is gone: every kind of request runs again on the new one;
#   - where PgBouncer keeps them (1.21 and later, max_prepared_statements
#     100 here: docs/decisions.md (pg)), the statements are prepared and
#     run by name: the server shows PgBouncer's names for them, with
#     their runs counted, and after the RECONNECT it prepares them again
#     on the new server connection; told to keep none any more (TEST 10,
#     TEST 11 under a pipeline), it leaves the server without the names:
#     a statement that meets this goes again as text, and no request
#     sees it;
#   - LISTEN through the pooler: no notification would come back; the
#     long poll, the revocation and the webhook are woken only by theirs
#     here (session_auth_cache_ttl 1h, no other wake-up within the waits);
#   - pipelines: waiting reads go under one Sync through PgBouncer, each
#     with its own answer.
# The statement_timeout that the module can no longer send comes from
# PgBouncer's connect_query.
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it) and PgBouncer
# (Debian's package pgbouncer, "make deps").

use strict;
use warnings;

use lib 't/lib';
use Test::Nginx::Socket 'no_plan';
use File::Temp ();
use Session qw(:DEFAULT decode_json encode_json);
use SessionTest qw(:DEFAULT api_request send_get answer status_json
                   check_init run_action listening error_log
                   pipelined_ok);
use Pgbouncer;
use Webhook;

BEGIN {
    if (!pgbouncer_path()) {
        Test::More->builder->skip_all('pgbouncer is not installed'
                                      . ' (package pgbouncer, make deps)');
    }
}

our $TAG = sprintf 't048-%d-%d', $$, time;

our $PGB = pgbouncer_start(pool_mode => 'transaction', pool_size => 1,
                           prepared => 100,
                           connect_query => 'SET statement_timeout = 5000');

# one that keeps no statement for its clients, whatever its version
# (TEST 7), on the lane's next port
our $PGB0 = pgbouncer_start(pool_mode => 'transaction', pool_size => 1,
                            prepared => 0,
                            port => ($ENV{TEST_NGINX_PORT} || 1984) + 6,
                            connect_query => 'SET statement_timeout = 5000');


# does $PGB keep prepared statements for its clients (1.21 and later)?
our $KEEPS = pgbouncer_keeps($PGB);

our $F = fixture(plan => 'pro', name => "$TAG-main");
our $GONE = fixture(plan => 'pro', name => "$TAG-gone");

our $DIR = File::Temp->newdir('t048-XXXXXX', TMPDIR => 1);
our $HOOKS = "$DIR/requests.log";
our ($HOOK) = receiver_start($HOOKS);

our $PNG = "\x89PNG\r\n\x1a\n" . ('x' x 32);

# over session_image_chunk_size (64k) and session_body_buffer_size
# (128k, under which a body is gathered whole and goes in one statement):
# streamed with COPY on an upload connection, read back a slice at a time
# (docs/decisions.md (za), (zb))
our $BIG = "\x89PNG\r\n\x1a\n" . join('', map { chr($_ % 251) } 1 .. 200000);


# --- helpers -------------------------------------------------------------

# api(METHOD, PATH, BODY, HEADERS, KEY): SessionTest's api_request with
# the key of $F, 20 s
sub api {
    my ($method, $path, $body, $headers, $key) = @_;

    return api_request($method, $path, $key // $F->{key}, $body, $headers,
                       { timeout => 20 });
}

sub create {
    my ($body) = @_;

    my $r = api('POST', '/api/v1/sessions',
                $body // { delivery_mode => 'long_poll' });

    die "create: $r->{status} $r->{content}\n" unless $r->{status} == 201;

    return $r->{json}{id};
}

sub upload {
    my ($sid) = @_;

    my $r = api('POST', "/api/v1/sessions/$sid/images", $PNG,
                { 'Content-Type' => 'image/png' });

    die "upload: $r->{status} $r->{content}\n" unless $r->{status} == 201;

    return $r->{json}{id};
}

# hold_the_pool(NAME, SID): the sessions table locked, and a read of
# SID (sent, not answered) waiting for the lock in PostgreSQL on the one
# pool connection, so that the reads sent next wait in nginx; returns
# the lock (for psql_end) and the holder (for answer)
sub hold_the_pool {
    my ($name, $sid) = @_;

    my $lock = psql_begin('LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE',
                          q{SELECT count(*) FROM pg_locks l JOIN pg_class c}
                          . q{ ON c.oid = l.relation}
                          . q{ WHERE c.relname = 'sessions'}
                          . q{ AND l.mode = 'AccessExclusiveLock'}
                          . q{ AND l.granted});

    my $holder = send_get("/api/v1/sessions/$sid", $F->{key});

    my ($blocked) = wait_until(10, 0.02, sub {
        psql(q{SELECT count(*) FROM pg_stat_activity}
             . q{ WHERE wait_event_type = 'Lock'}
             . q{ AND application_name = 'nginx session pool'});
    });
    ok($blocked, "$name - the holder waits for the lock, in PostgreSQL");

    return ($lock, $holder);
}

# one request of every statement the pool runs for the API (each kind
# of create, of upload, of complete and of ack, with and without an
# Idempotency-Key), and of those of the upload connections (a streamed
# upload, with and without a key): [what, status wanted, status got]
my $Seq = 0;

sub every_statement {
    my ($name) = @_;

    my $tag = sprintf '%s-%d', $TAG, ++$Seq;
    my @got;
    my $check = sub { push @got, [@_] };

    my $r = api('POST', '/api/v1/sessions', { delivery_mode => 'long_poll' });
    $check->('create', 201, $r->{status});
    my $sid = $r->{json}{id} // 'none';

    $r = api('POST', '/api/v1/sessions', { delivery_mode => 'long_poll' },
             { 'Idempotency-Key' => "$tag-create" });
    $check->('create with a key', 201, $r->{status});

    $r = api('GET', "/api/v1/sessions/$sid");
    $check->('get', 200, $r->{status});

    $r = api('GET', '/api/v1/sessions?limit=2');
    $check->('list', 200, $r->{status});

    my $next = $r->{json}{next_cursor};
    $r = api('GET', '/api/v1/sessions?limit=2'
                    . (defined $next ? "&cursor=$next" : ''));
    $check->('list after a cursor', 200, $r->{status});

    $r = api('POST', "/api/v1/sessions/$sid/images", $PNG,
             { 'Content-Type' => 'image/png' });
    $check->('upload', 201, $r->{status});
    my $iid = $r->{json}{id} // 'none';

    $r = api('POST', "/api/v1/sessions/$sid/images", $PNG,
             { 'Content-Type' => 'image/png',
               'Idempotency-Key' => "$tag-upload" });
    $check->('upload with a key', 201, $r->{status});
    my $iid2 = $r->{json}{id} // 'none';

    # streamed: BEGIN ... COMMIT through the pooler, nothing prepared
    $r = api('POST', "/api/v1/sessions/$sid/images", $BIG,
             { 'Content-Type' => 'image/png' });
    $check->('streamed upload', 201, $r->{status});
    my $big = $r->{json}{id} // 'none';

    for my $i (1, 2) {
        $r = api('POST', "/api/v1/sessions/$sid/images", $BIG,
                 { 'Content-Type' => 'image/png',
                   'Idempotency-Key' => "$tag-streamed" });
        $check->("streamed upload with a key ($i)", 201, $r->{status});
        $check->("streamed upload with a key ($i): replayed",
                 $i == 2 ? 'true' : 'no',
                 $r->{headers}{'idempotent-replayed'} // 'no');
    }

    $r = api('GET', "/api/v1/sessions/$sid/images/$big/content");
    $check->('streamed download', 200, $r->{status});
    $check->('streamed download: the bytes', 1,
             ($r->{content} // '') eq $BIG);

    $r = api('GET', "/api/v1/sessions/$sid/images");
    $check->('image list', 200, $r->{status});

    $r = api('GET', "/api/v1/sessions/$sid/images/$iid");
    $check->('image get', 200, $r->{status});

    $r = api('GET', "/api/v1/sessions/$sid/images/$iid/content");
    $check->('image content', 200, $r->{status});
    $check->('image content: the bytes', 1, ($r->{content} // '') eq $PNG);

    $r = api('GET', "/api/v1/sessions/$sid/poll?timeout=0");
    $check->('poll', 200, $r->{status});

    $r = api('POST', "/api/v1/sessions/$sid/images/$iid/ack");
    $check->('ack', 200, $r->{status});

    $r = api('POST', "/api/v1/sessions/$sid/images/$iid2/ack", undef,
             { 'Idempotency-Key' => "$tag-ack" });
    $check->('ack with a key', 200, $r->{status});

    $r = api('POST', "/api/v1/sessions/$sid/complete", undef,
             { 'Idempotency-Key' => "$tag-complete" });
    $check->('complete with a key', 200, $r->{status});

    my $other = create();
    $r = api('POST', "/api/v1/sessions/$other/complete");
    $check->('complete', 200, $r->{status});

    return @got;
}

sub all_ok {
    my ($name, @got) = @_;

    for my $g (@got) {
        my ($what, $want, $status) = @$g;
        is($status, $want, "$name - $what: $want");
    }
}

# What the connections did with their statements, through PgBouncer B
# (which keeps them for its clients or not: KEEPS), once every statement
# has run (every_statement()).  Four clients share its one server
# connection: had one of them left its statements there under its own
# names, the next one's PREPARE would have failed.
sub prepared_ok {
    my ($name, $b, $keeps) = @_;

    my $log = error_log();

    unlike($log, qr/preparing the (upload )?statements failed/,
           "$name - no PREPARE failed");

    # the statements on the server connection: under the module's names,
    # under PgBouncer's, and how many times those ran
    my ($ours, $its, $runs) = split /\|/, pgbouncer_psql($b,
        q{SELECT count(*) FILTER (WHERE name ~ '^ngx_'),}
        . q{ count(*) FILTER (WHERE name LIKE 'PGBOUNCER%'),}
        . q{ coalesce(sum(generic_plans + custom_plans)}
        . q{ FILTER (WHERE name LIKE 'PGBOUNCER%'), 0)}
        . q{ FROM pg_prepared_statements});

    is($ours, 0, "$name - no statement is left under the module's names");

    if ($keeps) {
        like($log, qr/the pooler keeps prepared statements for its clients, the statements are prepared/,
             "$name - the pooler keeps them: said once");
        like($log, qr/session db: the statements are prepared/,
             "$name - the pool's statements are prepared");
        like($log, qr/session db: the upload statements are prepared/,
             "$name - the upload statements are prepared");
        ok($its > 0, "$name - the server holds them under PgBouncer's names")
            or diag("$its statements");
        ok($runs >= 20, "$name - and runs them by name")
            or diag("$runs runs");
        return;
    }

    like($log, qr/the pooler passes prepared statements on to one server connection and keeps none for its clients/,
         "$name - the pooler keeps none: said once");
    like($log, qr/session db: the statements are not kept by the pooler, sent as text/,
         "$name - the pool's statements go as text");
    like($log, qr/session db: the upload statements are not kept by the pooler, sent as text/,
         "$name - the upload statements go as text");
    unlike($log, qr/session db: the (upload )?statements are prepared/,
           "$name - nothing counts as prepared");
    is($its, 0, "$name - nor under PgBouncer's (this one keeps none)");
}

# PgBouncer's server connections to PostgreSQL: their backend pids
sub server_pids {
    return sort { $a <=> $b }
           map { $_->{remote_pid} }
           grep { $_->{database} eq 'pooled' }
           pgbouncer_admin($PGB, 'SHOW SERVERS');
}

# the backends of the LISTEN connections that are not PgBouncer's
sub listen_backends {
    return psql(q{SELECT count(*) FROM pg_stat_activity}
                . q{ WHERE application_name = 'nginx session listen'}
                . q{ AND pid NOT IN (} . join(',', server_pids(), 0) . q{)});
}

# the webhook requests the receiver got for session $sid
sub hooks_of {
    my ($sid) = @_;

    return grep { ($_->{body} // '') =~ /\Q$sid\E/ }
           receiver_requests($HOOKS);
}


# --- the actions and checks ------------------------------------------------

my %actions;

# the PgBouncer of the block being run ($PGB, or $PGB0 for
# "--- pgbouncer: unkept")
our $USED = $PGB;

# before nginx starts: PgBouncer's server connection is a new one, which
# holds no statement from an earlier block
$actions{fresh} = sub { pgbouncer_admin($PGB, 'RECONNECT pooled') };

# before nginx starts: the server connection holds a statement of the
# module's first name, as a client's pipeline that failed after its
# first Parse leaves it (PostgreSQL keeps what a Parse before the error
# made); a Parse of that name would fail there
$actions{leftover} = sub {
    pgbouncer_admin($USED, 'RECONNECT pooled');
    pgbouncer_psql($USED, 'PREPARE ngx_session_1 AS SELECT 1');

    my $left = pgbouncer_psql($USED, q{SELECT count(*)}
                                     . q{ FROM pg_prepared_statements}
                                     . q{ WHERE name = 'ngx_session_1'});
    die "no statement left on PgBouncer's server connection: $left\n"
        unless $left eq '1';
};

my %checks;

# every endpoint through the pooler; LISTEN straight to PostgreSQL
$checks{endpoints} = sub {
    my ($name) = @_;

    listening();

    all_ok($name, every_statement($name));

    is(listen_backends(), 1,
       "$name - one LISTEN connection for the two workers, on PostgreSQL");

    my @servers = server_pids();
    is(scalar @servers, 1, "$name - PgBouncer has one server connection");

    is(psql(q{SELECT count(*) FROM pg_stat_activity}
            . q{ WHERE application_name = 'nginx session pool'}
            . q{ AND pid NOT IN (} . join(',', @servers, 0) . q{)}), 0,
       "$name - no pool connection passes PgBouncer by");
    is(psql(q{SELECT count(*) FROM pg_stat_activity}
            . q{ WHERE application_name = 'nginx session upload'}
            . q{ AND pid NOT IN (} . join(',', @servers, 0) . q{)}), 0,
       "$name - no upload connection passes PgBouncer by");
    ok((grep { $_->{application_name} eq 'nginx session upload' }
             pgbouncer_admin($PGB, 'SHOW CLIENTS')),
       "$name - the streamed uploads went through an upload connection");

    prepared_ok($name, $PGB, $KEEPS);

    unlike(error_log(), qr/statement_timeout is/,
           "$name - the server's statement_timeout is PgBouncer's");
    unlike(error_log(), qr/connection pooler/,
           "$name - no connection is found to pass a pooler unsaid");
};

# PgBouncer replaces its server connection: a statement prepared on the
# old one would be gone ("prepared statement ... does not exist") unless
# PgBouncer prepares it again; every statement runs on the new one
$checks{reconnect} = sub {
    my ($name) = @_;

    listening();

    all_ok("$name - before", every_statement("$name-before"));

    # (one, or two for a moment: a connection of the block before that
    # PgBouncer closes once it is released)
    my %before = map { $_ => 1 } server_pids();
    ok(%before, "$name - PgBouncer has a server connection");

    pgbouncer_admin($PGB, 'RECONNECT pooled');

    # the old one goes once released; the next statement opens a new one
    my ($new) = wait_until(10, 0.05, sub {
        api('GET', '/api/v1/sessions?limit=1');
        my @now = server_pids();
        return @now && !grep { $before{$_} } @now;
    });
    ok($new, "$name - PgBouncer has a new server connection");

    all_ok("$name - after", every_statement("$name-after"));
};

# a long poll is woken by an upload at once: the notification came
# through the LISTEN connection
$checks{poll} = sub {
    my ($name) = @_;

    listening();

    my $sid = create();
    my $before = status_json()->{long_poll}{waiting};

    my $poll = send_get("/api/v1/sessions/$sid/poll?timeout=30", $F->{key});

    my ($waits) = wait_until(10, 0.02, sub {
        status_json()->{long_poll}{waiting} > $before;
    });
    ok($waits, "$name - the poll waits");

    my $iid = upload($sid);
    my $r = answer($poll, 30);

    is($r->{status}, 200, "$name - the poll: 200");
    is($r->{json}{images}[0]{id}, $iid, "$name - with the image");
    ok($r->{elapsed} < 10, "$name - at once, not at its timeout")
        or diag("answered after $r->{elapsed} s");

    # completed from psql, which is only heard through LISTEN
    my $sid2 = create();
    $poll = send_get("/api/v1/sessions/$sid2/poll?timeout=30", $F->{key});

    ($waits) = wait_until(10, 0.02, sub {
        status_json()->{long_poll}{waiting} > $before;
    });
    ok($waits, "$name - another poll waits");

    psql(q{SELECT session_complete(project_id, id) FROM sessions}
         . qq{ WHERE id = '$sid2'});

    $r = answer($poll, 30);
    is($r->{status}, 410, "$name - completed elsewhere: 410");
    ok($r->{elapsed} < 10, "$name - at once") or
        diag("answered after $r->{elapsed} s");
};

# a deleted key is refused at once on both workers, although the auth
# cache would keep it for an hour: the notification came through LISTEN
$checks{revocation} = sub {
    my ($name) = @_;

    listening();

    my $path = '/api/v1/sessions?limit=1';

    # the key in the cache of every worker that answers
    for (1 .. 6) {
        is(api('GET', $path, undef, undef, $GONE->{key})->{status}, 200,
           "$name - before: 200");
    }

    sessionctl_ok('key', 'delete', $GONE->{key_id});

    my ($gone) = wait_until(5, 0.05, sub {
        api('GET', $path, undef, undef, $GONE->{key})->{status} == 401;
    });
    ok($gone, "$name - deleted: 401");

    my @after = map { api('GET', $path, undef, undef, $GONE->{key})->{status} }
                1 .. 6;
    is_deeply(\@after, [(401) x 6], "$name - 401 on every worker");
};

# webhooks: an upload's event is sent at once (the outbox's notification
# wakes the dispatcher), a session's expiry is found by the sweep
$checks{webhooks} = sub {
    my ($name) = @_;

    listening();

    my $url = "http://127.0.0.1:$HOOK/ok/$TAG";
    my $sid = create({ delivery_mode => 'webhook', webhook_url => $url });

    my $t0 = Time::HiRes::time();
    my $iid = upload($sid);

    my ($hook) = wait_until(10, 0.05, sub { (hooks_of($iid))[0] });
    ok($hook, "$name - image.uploaded is delivered");
    ok($hook && $hook->{t} - $t0 < 5, "$name - at once")
        or diag(sprintf 'after %.1f s', $hook ? $hook->{t} - $t0 : -1);
    is(decode_json($hook->{body})->{type}, 'image.uploaded',
       "$name - its type") if $hook;

    my ($recorded) = wait_until(10, 0.05, sub {
        psql(q{SELECT count(*) FROM webhook_outbox}
             . qq{ WHERE payload::text LIKE '%$iid%'}
             . q{ AND delivered_at IS NOT NULL});
    });
    ok($recorded, "$name - recorded as delivered");

    # the sweep (session_sweep(), its advisory lock within the statement)
    my $short = create({ delivery_mode => 'webhook', webhook_url => $url,
                         expires_in => 1 });

    my ($expired) = wait_until(15, 0.1, sub {
        grep { decode_json($_->{body})->{type} eq 'session.expired' }
             hooks_of($short);
    });
    ok($expired, "$name - session.expired is delivered (the sweep ran)");
    is(psql("SELECT status FROM sessions WHERE id = '$short'"), 'expired',
       "$name - the session is expired");
};

# every endpoint through the block's PgBouncer: through the one that
# keeps no statement for its clients each goes with its text; through
# the other, as TEST 1; nothing is left under the module's names
$checks{used} = sub {
    my ($name) = @_;

    listening();

    all_ok($name, every_statement($name));

    prepared_ok($name, $USED, $USED == $PGB ? $KEEPS : 0);
};

# PgBouncer is told to keep no statement for its clients any more
# (max_prepared_statements 0, RELOAD) while the connections send theirs
# by name: the server has none of those names.  A statement that meets
# this did not run: it goes again as text (a streamed upload waits again
# for a connection, none of its body read yet), its connection sends
# text from then on, and no request sees it.  Only where PgBouncer kept
# them.
$checks{stops_keeping} = sub {
    my ($name) = @_;

    SKIP: {
        skip 'this PgBouncer keeps no prepared statement (before 1.21)', 1
            unless $KEEPS;

        listening();

        all_ok("$name - before", every_statement("$name-before"));
        like(error_log(), qr/session db: the statements are prepared/,
             "$name - before: the statements are prepared");

        my $sid = create();
        my $mark = length error_log();
        my (@got, $ok, $err);

        pgbouncer_set($PGB, max_prepared_statements => 0);

        # two workers, each with pool and upload connections that meet
        # the lost names whenever they are first used
        $ok = eval {
            for (1 .. 12) {
                my $list = api('GET', '/api/v1/sessions?limit=1')->{status};
                my $big = api('POST', "/api/v1/sessions/$sid/images", $BIG,
                              { 'Content-Type' => 'image/png' })->{status};

                push @got, "$list/$big";
            }
            1;
        };
        $err = $@;

        all_ok("$name - after", every_statement("$name-after"));

        my $log = substr error_log(), $mark;

        pgbouncer_set($PGB, max_prepared_statements => 100);

        ok($ok, "$name - the requests were answered") or diag($err);
        is(join(' ', grep { $_ ne '200/201' } @got), '',
           "$name - 200 and 201 every time, no 503")
            or diag("@got");
        like($log, qr/session db: the server does not have the statements this connection prepared/,
             "$name - said");
        like($log, qr/session db: a statement the server did not have goes again, as text/,
             "$name - a statement of the pool went again");
        like($log, qr/session db: an upload whose first statement the server did not have waits again/,
             "$name - an upload went again");
    }
};

# the same, met by a pipeline of reads: the first read's error (26000)
# and the reads skipped after it all go again, as text, each with its
# own answer
$checks{stops_keeping_pipeline} = sub {
    my ($name) = @_;

    SKIP: {
        skip 'this PgBouncer keeps no prepared statement (before 1.21)', 1
            unless $KEEPS;

        listening();

        my @sid = map { create() } 1 .. 6;

        # the key in the auth cache: the only statements are the reads
        is(api('GET', "/api/v1/sessions/$sid[0]")->{status}, 200,
           "$name - a read by name");

        my ($lock, $holder) = hold_the_pool($name, $sid[0]);

        my $mark = length error_log();
        my @req = map { send_get("/api/v1/sessions/$_", $F->{key}) } @sid;

        my ($waiting) = wait_until(10, 0.02, sub {
            return status_json()->{database}{waiting} >= @sid;
        });
        ok($waiting, "$name - the reads wait for the connection");

        pgbouncer_set($PGB, max_prepared_statements => 0);

        psql_end($lock);

        is(answer($holder, 20)->{status}, 200, "$name - the holder: 200");

        for my $i (0 .. $#sid) {
            my $r = answer($req[$i], 20);

            is($r->{status}, 200, "$name - read $i: 200");
            is($r->{json}{id}, $sid[$i], "$name - read $i: its own answer");
        }

        my $log = substr error_log(), $mark;

        pgbouncer_set($PGB, max_prepared_statements => 100);

        like($log, qr/session db: \d+ reads in one pipeline/,
             "$name - the reads went in a pipeline");
        like($log, qr/session db: a read of a pipeline goes again: the server did not have its statement/,
             "$name - its first read went again");
        like($log, qr/session db: a read of a pipeline goes again: skipped after an error/,
             "$name - the others too");
    }
};

# reads that wait for the one connection go in one pipeline, under one
# Sync: one transaction for PgBouncer
$checks{pipeline} = sub {
    my ($name) = @_;

    # the LISTEN connection up first: when it comes up it empties the
    # auth cache, and a key lookup would join the reads counted here
    listening();

    my @sid = map { create() } 1 .. 6;
    my $iid = upload($sid[0]);

    # the key in the auth cache: the only statements are the reads
    api('GET', "/api/v1/sessions/$sid[0]");

    my ($lock, $holder) = hold_the_pool($name, $sid[0]);

    my $before = status_json()->{database};
    my $mark = length error_log();

    my @want = ((map { ["/api/v1/sessions/$_", $_] } @sid),
                ["/api/v1/sessions/$sid[0]/images/$iid", $iid],
                ["/api/v1/sessions/$sid[0]/images", $iid]);

    my @req = map { send_get($_->[0], $F->{key}) } @want;

    # nginx has read every request (its debug log says so; the handler
    # queues the read in the same turn of the loop), and they wait (the
    # sweep's and the webhook queue's statements may wait beside them)
    my ($waiting) = wait_until(10, 0.02, sub {
        my $log = error_log();
        for my $w (@want) {
            return 0 if index($log, qq{http request line: "GET $w->[0] })
                        < 0;
        }
        return status_json()->{database}{waiting} >= @want;
    });
    ok($waiting, "$name - the reads wait for the connection");

    psql_end($lock);

    is(answer($holder, 20)->{status}, 200, "$name - the holder: 200");

    for my $i (0 .. $#want) {
        my $r = answer($req[$i], 20);
        my $got = ref $r->{json}{data} ? $r->{json}{data}[0]{id}
                                       : $r->{json}{id};

        is($r->{status}, 200, "$name - $want[$i][0]: 200");
        is($got, $want[$i][1], "$name - $want[$i][0]: its own answer");
    }

    my $after = status_json()->{database};

    pipelined_ok($before, $after, 1, scalar @want, $mark, $name);
};


# --- blocks -------------------------------------------------------------

master_on();
no_shuffle();
no_long_string();

my $HTTP = <<'EOF';
    session_db $TEST_NGINX_PGB_CONF_USED;
    session_db_pooler transaction;
    session_db_listen $TEST_NGINX_SESSION_DB_CONF;
    session_auth_cache_ttl 1h;
    session_webhook_allow_private on;
EOF

my $CONFIG = <<'EOF';
    location /api/ {
        session_api;
        session_limits create=100000 list=100000 other=100000;
    }
    location = /status {
        session_status;
    }
EOF

add_block_preprocessor(sub {
    my $block = shift;

    my $one = ($block->connections // '') =~ /^\s*1\s*$/;

    # the PgBouncer that keeps no statement for its clients, or the other
    $USED = ($block->pgbouncer // '') =~ /unkept/ ? $PGB0 : $PGB;
    $ENV{TEST_NGINX_PGB_CONF_USED} = nginx_quote($USED->{conninfo});

    workers($one ? 1 : 2);

    # one pool connection: no sweep in the middle of a check (every 30 s),
    # whose statement would wait beside the reads and join their pipeline
    # (a CI run counted 9 statements in TEST 6's pipeline of 8 reads);
    # with two, a sweep every second for the expiry's webhook
    $block->set_value('http_config',
                      $HTTP . ($one ? "    session_db_connections 1;\n"
                                      . "    session_db_timeout 20s;\n"
                                      . "    session_expiry_sweep_interval"
                                      . " 30s;\n"
                                    : "    session_db_connections 2;\n"
                                      . "    session_expiry_sweep_interval"
                                      . " 1s;\n"))
        unless defined $block->http_config;

    $block->set_value('config', $CONFIG) unless defined $block->config;
    $block->set_value('more_headers', "Authorization: Bearer $F->{key}\n");

    run_action($block, \%actions);
    check_init($block, \%checks);
});


run_tests();

__DATA__

=== TEST 1: every endpoint through PgBouncer in transaction mode
--- check: endpoints
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 2: PgBouncer replaces its server connection: every statement runs on the new one
--- connections: 1
--- action: fresh
--- check: reconnect
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 3: the long poll is woken through the LISTEN connection
--- check: poll
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 4: revocation reaches both workers at once
--- check: revocation
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 5: webhooks and the expiry sweep through PgBouncer
--- check: webhooks
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 6: waiting reads in one pipeline through PgBouncer
--- connections: 1
--- check: pipeline
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 7: through a PgBouncer that keeps no prepared statement: text
--- pgbouncer: unkept
--- check: used
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 8: a statement left by a failed PREPARE does not stop the next (keeping none)
--- pgbouncer: unkept
--- action: leftover
--- check: used
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 9: a statement left by a failed PREPARE does not stop the next
--- action: leftover
--- check: used
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
--- no_error_log
[error]



=== TEST 10: PgBouncer stops keeping the statements: they go again as text, no request sees it
--- check: stops_keeping
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200



=== TEST 11: PgBouncer stops keeping the statements under a pipeline of reads: they go again as text
--- connections: 1
--- check: stops_keeping_pipeline
--- request
GET /api/v1/sessions?limit=1
--- error_code: 200
