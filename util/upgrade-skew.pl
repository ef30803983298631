#!/usr/bin/env perl
# The traffic of make upgrade-test's version-skew run (util/upgrade.sh):
# two nginx nodes on one database, OLD (the module of the last commit
# before the newest migration) and NEW (this tree's), and the newest
# migration applied (SKEW_MIGRATE, the new sessionctl migrate) while both
# serve.  Loopback only; everything ends within SKEW_SECONDS + 60 s.
#
# Processes, each for SKEW_SECONDS:
#   - two pollers: one holds a long poll on OLD and uploads on NEW, the
#     other the reverse; each poll must be waiting (the node's
#     session_status long_poll.waiting) before the upload, and must answer
#     200 with the uploaded image; then the image is acknowledged;
#   - SKEW_CLIENTS mixed clients, each request on a node picked at random:
#     creates (long_poll and webhook sessions), uploads, acks, completes,
#     lists, reads, polls with timeout=0.  Half of the POSTs carry an
#     Idempotency-Key, and each of those is sent again to the OTHER node:
#     the replay must be the same status, body and Location, marked
#     Idempotent-Replayed;
#   - a webhook receiver (t/lib/Webhook.pm), answering 204.
# At SKEW_MIGRATE_AT seconds the parent runs SKEW_MIGRATE, at
# SKEW_UPGRADE_NEW_AT seconds SKEW_UPGRADE_NEW (when set: node NEW runs
# the previous module until the migration is in, as a rolling upgrade
# does, and this is its binary upgrade to the new one), and at
# SKEW_UPGRADE_AT seconds SKEW_UPGRADE (when set: node OLD's binary
# upgrade to the new module, util/upgrade.sh usr2).  A poll that a node
# answers during its upgrade (200 and no image, as at a timeout: its old
# worker shuts down) is sent again, with timeout=0, and must then have the
# image.  Each request is on a new connection: a keep-alive connection
# that a shutting-down worker closes is bench/upgrade-load.c's subject.
#
# Then, from the database and the receiver's log: every 2xx of the
# clients is there (the sessions, images, acks and completions the
# clients were told of, and nothing else: no work done twice), every
# webhook event of the run was delivered, none twice.  Prints "key value"
# lines; exits 1 when anything failed (the reasons on standard error).
#
# Environment: SKEW_OLD, SKEW_NEW (http://127.0.0.1:PORT), SKEW_KEY,
# SKEW_PROJECT, SKEW_DB (conninfo for psql), SKEW_MIGRATE (a command),
# SKEW_DIR (logs), SKEW_HOOK_PORT; SKEW_SECONDS (30), SKEW_MIGRATE_AT
# (10), SKEW_CLIENTS (2), SKEW_UPGRADE_NEW and SKEW_UPGRADE_NEW_AT
# (SKEW_MIGRATE_AT + 2), SKEW_UPGRADE and SKEW_UPGRADE_AT (20).

use strict;
use warnings;

use FindBin ();
use lib "$FindBin::Bin/../t/lib";

use HTTP::Tiny ();
use IO::Select ();
use IO::Socket::INET ();
use JSON::PP ();
use POSIX ();
use Time::HiRes qw(time sleep);
use Webhook qw(receiver_start receiver_requests);

my %NODE = (old => $ENV{SKEW_OLD}, new => $ENV{SKEW_NEW});
my $KEY = $ENV{SKEW_KEY};
my $PROJECT = $ENV{SKEW_PROJECT};
my $DB = $ENV{SKEW_DB};
my $MIGRATE = $ENV{SKEW_MIGRATE};
my $DIR = $ENV{SKEW_DIR};
my $SECONDS = $ENV{SKEW_SECONDS} // 30;
my $MIGRATE_AT = $ENV{SKEW_MIGRATE_AT} // 10;
my $CLIENTS = $ENV{SKEW_CLIENTS} // 2;
my $UPGRADE = $ENV{SKEW_UPGRADE};
my $UPGRADE_AT = $ENV{SKEW_UPGRADE_AT} // 20;
my $UPGRADE_NEW = $ENV{SKEW_UPGRADE_NEW};
my $UPGRADE_NEW_AT = $ENV{SKEW_UPGRADE_NEW_AT} // $MIGRATE_AT + 2;

for (qw(SKEW_OLD SKEW_NEW SKEW_KEY SKEW_PROJECT SKEW_DB SKEW_MIGRATE
        SKEW_DIR SKEW_HOOK_PORT))
{
    die "upgrade-skew.pl: $_ is not set\n" unless $ENV{$_};
}

my $Json = JSON::PP->new->canonical;
my $PNG = "\x89PNG\r\n\x1a\n" . ('s' x 200);
my $HOOK = "http://127.0.0.1:$ENV{SKEW_HOOK_PORT}/ok";

my ($Proc, $Log, $Seq) = ('parent', undef, 0);

sub other { $_[0] eq 'old' ? 'new' : 'old' }

# one JSON line to this process's log
sub record {
    my (%r) = @_;

    $r{t} = time;
    $r{proc} = $Proc;
    print $Log $Json->encode(\%r), "\n";
}

sub bad {
    my ($why, %r) = @_;
    record(bad => $why, %r);
}


# --- requests ----------------------------------------------------------------

my %Http;

# req(NODE, METHOD, PATH, BODY, HEADERS): one request to NODE, on a new
# connection; returns HTTP::Tiny's answer with json
sub req {
    my ($node, $method, $path, $body, $headers) = @_;

    $Http{$node} //= HTTP::Tiny->new(keep_alive => 0, timeout => 30);

    my %h = (Authorization => "Bearer $KEY", %{ $headers || {} });
    my %o = (headers => \%h);
    $o{content} = $body if defined $body;

    my $t0 = time;
    my $r = $Http{$node}->request($method, "$NODE{$node}/api/v1$path", \%o);
    $r->{elapsed} = time - $t0;
    $r->{json} = eval { $Json->decode($r->{content}) }
        if ($r->{headers}{'content-type'} // '') eq 'application/json';

    return $r;
}

# a request whose answer must be WANT (a status); logged, bad otherwise
sub expect {
    my ($want, $op, $node, @req) = @_;

    my $r = req($node, @req);
    my %rec = (op => $op, node => $node, status => $r->{status});

    if ($r->{status} != $want) {
        bad("$op on $node: $r->{status}, expected $want: "
            . substr($r->{content} // '', 0, 200), %rec);
    } else {
        record(%rec);
    }

    return $r;
}

# a POST, with an Idempotency-Key half of the time; a keyed one is sent
# again to the other node, and the replay must be the first answer again
sub post {
    my ($want, $op, $node, $path, $body, $ctype) = @_;

    my %h = ('Content-Type' => $ctype // 'application/json');
    my $keyed = rand() < 0.5;
    $h{'Idempotency-Key'} = sprintf '%s-%d-%d', $Proc, $$, ++$Seq if $keyed;

    my $r = expect($want, $op, $node, 'POST', $path, $body, \%h);
    return $r unless $keyed && $r->{status} == $want;

    my $n2 = other($node);
    my $r2 = req($n2, 'POST', $path, $body, \%h);
    my %rec = (op => "$op-replay", node => $n2, status => $r2->{status});

    my @diff;
    push @diff, "status $r2->{status}" if $r2->{status} != $r->{status};
    push @diff, 'body' if ($r2->{content} // '') ne ($r->{content} // '');
    push @diff, 'Location'
        if ($r2->{headers}{location} // '') ne ($r->{headers}{location} // '');
    push @diff, 'no Idempotent-Replayed'
        if ($r2->{headers}{'idempotent-replayed'} // '') ne 'true';

    if (@diff) {
        bad("$op replayed on $n2 (first on $node): " . join(', ', @diff)
            . ': ' . substr($r2->{content} // '', 0, 200), %rec);
    } else {
        record(%rec);
    }

    return $r;
}

sub create {
    my ($node, $mode) = @_;

    my $body = { delivery_mode => $mode };
    $body->{webhook_url} = "$HOOK/$Proc" if $mode eq 'webhook';

    my $r = post(201, 'create', $node, '/sessions', $Json->encode($body));
    return undef unless $r->{status} == 201 && $r->{json};

    record(op => 'created', sid => $r->{json}{id}, mode => $mode);

    return { id => $r->{json}{id}, mode => $mode, images => [] };
}

sub upload {
    my ($node, $s) = @_;

    my $r = post(201, 'upload', $node, "/sessions/$s->{id}/images", $PNG,
                 'image/png');
    return undef unless $r->{status} == 201 && $r->{json};

    my $iid = $r->{json}{id};
    push @{ $s->{images} }, $iid;
    record(op => 'uploaded', sid => $s->{id}, iid => $iid, mode => $s->{mode});

    return $iid;
}

sub ack {
    my ($node, $s, $iid) = @_;

    my $r = post(200, 'ack', $node, "/sessions/$s->{id}/images/$iid/ack",
                 undef);
    record(op => 'acked', sid => $s->{id}, iid => $iid)
        if $r->{status} == 200;
}

sub complete {
    my ($node, $s) = @_;

    my $r = post(200, 'complete', $node, "/sessions/$s->{id}/complete",
                 undef);
    return unless $r->{status} == 200;

    $s->{completed} = 1;
    record(op => 'completed', sid => $s->{id}, mode => $s->{mode});
}


# --- the processes -----------------------------------------------------------

my $T0 = time;
my $END = $T0 + $SECONDS;
my @Kids;

sub spawn {
    my ($name, $code) = @_;

    my $pid = fork;
    die "fork: $!" unless defined $pid;

    if ($pid == 0) {
        $Proc = $name;
        srand($$ ^ int(time * 1000));
        open $Log, '>', "$DIR/traffic.$name.log" or die "$DIR: $!";
        $Log->autoflush(1);

        eval { $code->(); 1 } or bad("died: $@");
        POSIX::_exit(0);
    }

    push @Kids, $pid;
}

# the node's long_poll.waiting
sub waiting {
    my ($node) = @_;

    my $r = HTTP::Tiny->new(timeout => 5)->get("$NODE{$node}/status");
    my $j = eval { $Json->decode($r->{content}) };

    return $j ? $j->{long_poll}{waiting} : -1;
}

# what SOCK sends until it closes, at most SECS seconds; closes it
sub read_all {
    my ($sock, $secs) = @_;

    my ($buf, $sel) = ('', IO::Select->new($sock));
    my $dl = time + $secs;

    while (time < $dl && $sel->can_read($dl - time)) {
        my $n = sysread $sock, my $chunk, 65536;
        last unless $n;
        $buf .= $chunk;
    }

    close $sock;

    return $buf;
}

# (status, image ids) of a poll's raw answer
sub poll_answer {
    my ($buf) = @_;

    my ($st) = $buf =~ m{^HTTP/1\.1 (\d{3})};
    my (undef, $body) = split /\r\n\r\n/, $buf, 2;
    my $j = eval { $Json->decode($body // '') };

    return ($st // 0, map { $_->{id} } @{ ($j && $j->{images}) || [] });
}

# a poll held on POLL_NODE, woken by an upload on the other node
sub poller {
    my ($pnode) = @_;
    my $unode = other($pnode);

    while (time < $END) {
        my $s = create($pnode, 'long_poll') or next;

        my $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
                                         PeerPort => (split /:/,
                                                      $NODE{$pnode})[-1],
                                         Proto => 'tcp', Timeout => 5);
        if (!$sock) {
            bad("poll on $pnode: connect: $!", op => 'poll', node => $pnode);
            next;
        }

        print $sock "GET /api/v1/sessions/$s->{id}/poll?timeout=20 HTTP/1.1"
                    . "\r\nHost: localhost\r\nAuthorization: Bearer $KEY\r\n"
                    . "Connection: close\r\n\r\n";

        # waiting, or answered already (its worker shuts down)
        my $t1 = time + 10;
        my $sel = IO::Select->new($sock);
        my $w = 0;

        until ($sel->can_read(0.02) || ($w = waiting($pnode)) >= 1
               || time > $t1)
        {
        }

        if ($w < 1) {
            my $buf = read_all($sock, 5);
            my ($st, @ids) = poll_answer($buf);

            if ($st == 200 && !@ids) {
                record(op => 'poll-empty', node => $pnode, status => $st);
            } else {
                bad("poll on $pnode: not waiting after 10 s, answered $st",
                    op => 'poll', node => $pnode);
            }

            next;
        }

        my $tu = time;
        my $iid = upload($unode, $s);
        if (!defined $iid) {
            close $sock;
            next;
        }

        my ($st, @ids) = poll_answer(read_all($sock, 25));
        my %rec = (op => 'poll-woken', node => $pnode, status => $st,
                   by => $unode, latency => time - $tu);

        if ($st == 200 && !@ids) {
            # answered as at a timeout: the worker shuts down (the parent
            # checks that the node was being upgraded then); again, at once
            record(op => 'poll-empty', node => $pnode, status => $st);

            my $r = req($pnode, 'GET', "/sessions/$s->{id}/poll?timeout=0");
            $rec{op} = 'poll-again';
            ($st, @ids) = poll_answer("HTTP/1.1 $r->{status} x\r\n\r\n"
                                      . ($r->{content} // ''));
            $rec{status} = $st;
        }

        if ($st != 200 || !grep { $_ eq $iid } @ids) {
            bad("poll on $pnode, upload on $unode: " . ($st // 'no answer')
                . ' without the image', %rec);
        } elsif ($rec{op} eq 'poll-woken' && $rec{latency} > 5) {
            # the upload's wake-up did not come: the poll's timeout read
            # found the image (decision (yf): a node that does not mark
            # the sessions it polls, on a database set to "polled")
            bad(sprintf("poll on %s, upload on %s: answered %.1f s after"
                        . " the upload, not woken by it", $pnode, $unode,
                        $rec{latency}), %rec);
        } else {
            record(%rec);
        }

        ack(rand() < 0.5 ? $pnode : $unode, $s, $iid);
        complete($pnode, $s) if rand() < 0.3;
    }
}

sub client {
    my (@open, @all);

    while (time < $END) {
        my $node = rand() < 0.5 ? 'old' : 'new';
        my $p = rand();

        if ($p < 0.2 || !@open) {
            my $s = create($node, rand() < 0.5 ? 'webhook' : 'long_poll');
            push @open, $s if $s;
            push @all, $s if $s;
            shift @open if @open > 8;

        } elsif ($p < 0.45) {
            upload($node, $open[rand @open]);

        } elsif ($p < 0.6) {
            my @un = map { my $s = $_; map { [$s, $_] }
                                          grep { !$s->{acked}{$_} }
                                          @{ $s->{images} } } @all;
            next unless @un;
            my ($s, $iid) = @{ $un[rand @un] };
            $s->{acked}{$iid} = 1;
            ack($node, $s, $iid);

        } elsif ($p < 0.65) {
            my $i = int rand @open;
            my ($s) = splice @open, $i, 1;
            complete($node, $s);

        } elsif ($p < 0.75) {
            expect(200, 'list', $node, 'GET', '/sessions?limit=5');

        } elsif ($p < 0.85) {
            my $s = $all[rand @all];
            expect(200, 'get', $node, 'GET', "/sessions/$s->{id}");
            expect(200, 'images', $node, 'GET', "/sessions/$s->{id}/images");

        } elsif ($p < 0.92) {
            my @with = grep { @{ $_->{images} } } @all;
            next unless @with;
            my $s = $with[rand @with];
            my $iid = $s->{images}[rand @{ $s->{images} }];
            my $r = expect(200, 'content', $node, 'GET',
                           "/sessions/$s->{id}/images/$iid/content");
            bad("content on $node: not the bytes uploaded", op => 'content')
                if $r->{status} == 200 && $r->{content} ne $PNG;

        } else {
            my @lp = grep { $_->{mode} eq 'long_poll' && !$_->{completed} }
                     @open;
            next unless @lp;
            my $s = $lp[rand @lp];
            expect(200, 'poll0', $node, 'GET',
                   "/sessions/$s->{id}/poll?timeout=0");
        }
    }
}


# --- the run ----------------------------------------------------------------

open $Log, '>', "$DIR/traffic.parent.log" or die "$DIR: $!";
$Log->autoflush(1);

my (undef, $hook_pid) = receiver_start("$DIR/webhooks.log",
                                       port => $ENV{SKEW_HOOK_PORT});

spawn('poll-old', sub { poller('old') });
spawn('poll-new', sub { poller('new') });
spawn("client$_", \&client) for 1 .. $CLIENTS;

# run(OP, COMMAND, AT): COMMAND at AT seconds into the run, recorded
sub run {
    my ($op, $cmd, $at) = @_;

    sleep 0.1 while time < $T0 + $at;

    my $t = time;
    my $out = `$cmd 2>&1`;
    my $rc = $? >> 8;
    chomp $out;
    record(op => $op, status => $rc, out => $out, seconds => time - $t,
           at => $t - $T0, end => time - $T0);
    bad("$op: exit $rc: $out") if $rc != 0;
}

run('migrate', $MIGRATE, $MIGRATE_AT);
run('upgrade-new', $UPGRADE_NEW, $UPGRADE_NEW_AT) if $UPGRADE_NEW;
run('upgrade', $UPGRADE, $UPGRADE_AT) if $UPGRADE;

waitpid $_, 0 for @Kids;


# --- what the run did, and what the database and the receiver say ------------

my (@recs, @bad);

for my $f (glob "$DIR/traffic.*.log") {
    open my $fh, '<', $f or die "$f: $!";
    while (my $line = <$fh>) {
        my $r = eval { $Json->decode($line) } or next;
        push @recs, $r;
        push @bad, $r->{bad} if $r->{bad};
    }
}

sub psql {
    my ($sql) = @_;

    my @out = `psql -X -q -At -v ON_ERROR_STOP=1 -d '$DB' -c "$sql"`;
    die "psql failed: $sql\n" if $?;
    chomp @out;

    return @out;
}

my %status;
my %by_op;

for my $r (grep { defined $_->{status} && $_->{node} } @recs) {
    $status{"$r->{node} $r->{status}"}++;
    $by_op{$r->{op}}++;
}

my %created = map { $_->{sid} => $_->{mode} } grep { $_->{op} eq 'created' }
                                                   @recs;
my %uploaded = map { $_->{iid} => $_->{sid} } grep { $_->{op} eq 'uploaded' }
                                                   @recs;
my %acked = map { $_->{iid} => 1 } grep { $_->{op} eq 'acked' } @recs;
my %completed = map { $_->{sid} => 1 } grep { $_->{op} eq 'completed' } @recs;

my %db_sessions = map { (split /\|/)[0] => (split /\|/)[1] }
    psql("SELECT id, status FROM sessions WHERE project_id = '$PROJECT'");
my %db_images = map { (split /\|/)[0] => [ (split /\|/)[1, 2] ] }
    psql("SELECT i.id, i.session_id, i.acknowledged_at IS NOT NULL "
         . "FROM images i JOIN sessions s ON s.id = i.session_id "
         . "WHERE s.project_id = '$PROJECT'");

sub diff_sets {
    my ($what, $told, $db) = @_;

    my @lost = grep { !exists $db->{$_} } sort keys %$told;
    my @extra = grep { !exists $told->{$_} } sort keys %$db;

    push @bad, "$what: " . @lost . " answered 2xx but not in the database"
        if @lost;
    push @bad, "$what: " . @extra . " in the database that no client was "
               . "told of (work done twice?)" if @extra;
}

diff_sets('sessions', \%created, \%db_sessions);
diff_sets('images', \%uploaded, \%db_images);

push @bad, "image $_: acknowledged (200) but not in the database"
    for grep { !($db_images{$_} && $db_images{$_}[1] eq 't') } keys %acked;
push @bad, "session $_: completed (200) but not in the database"
    for grep { ($db_sessions{$_} // '') ne 'completed' } keys %completed;

# every event of the run's webhook sessions delivered, each once
my %want;
for my $iid (keys %uploaded) {
    $want{"image.uploaded $iid"} = 1
        if ($created{ $uploaded{$iid} } // '') eq 'webhook';
}
for my $sid (keys %completed) {
    $want{"session.completed $sid"} = 1
        if ($created{$sid} // '') eq 'webhook';
}

my (%got, %ids);
my $t1 = time + 30;

for (;;) {
    %got = ();
    %ids = ();

    for my $r (receiver_requests("$DIR/webhooks.log")) {
        my $j = eval { $Json->decode($r->{body}) } or next;
        $ids{ $r->{headers}{'webhook-id'} // '' }++;
        $got{"$j->{type} $j->{data}{id}"}++;
    }

    last if !grep { !$got{$_} } keys %want;
    last if time > $t1;
    sleep 0.2;
}

my @missing = grep { !$got{$_} } sort keys %want;
my @twice = grep { $ids{$_} > 1 } sort keys %ids;

push @bad, scalar(@missing) . " webhook events not delivered within 30 s "
           . "of the end (e.g. $missing[0])" if @missing;
push @bad, scalar(@twice) . " webhook events delivered more than once "
           . "(e.g. $twice[0])" if @twice;

# a poll answered empty only on a node while it was being upgraded
my ($upg) = grep { ($_->{op} // '') eq 'upgrade' } @recs;
my ($upg_new) = grep { ($_->{op} // '') eq 'upgrade-new' } @recs;
my %upgrade_of = (old => $upg, new => $upg_new);

for my $r (grep { ($_->{op} // '') eq 'poll-empty' } @recs) {
    my $at = $r->{t} - $T0;
    my $u = $upgrade_of{ $r->{node} };

    push @bad, sprintf('a poll on %s answered 200 without the image at '
                       . '%.1f s, not during an upgrade of the node',
                       $r->{node}, $at)
        unless $u && $at >= $u->{at} && $at <= $u->{end} + 2;
}

my @woken = grep { ($_->{op} // '') =~ /^poll-(?:woken|again)$/
                   && !$_->{bad} } @recs;
for my $n (qw(old new)) {
    my $k = grep { $_->{node} eq $n } @woken;
    push @bad, "no poll on $n woken by an upload on " . other($n) if !$k;
}

my @lat = sort { $a <=> $b } map { $_->{latency} } @woken;
my ($mig) = grep { ($_->{op} // '') eq 'migrate' } @recs;

printf "seconds %d\n", $SECONDS;
printf "migrate_at %.1f\n", $mig->{at};
printf "migrate_seconds %.2f\n", $mig->{seconds};
printf "migrate_out %s\n", $mig->{out} =~ s/\n/; /gr;
printf "upgrade_new_at %.1f\nupgrade_new_out %s\n", $upg_new->{at},
       $upg_new->{out}
    if $upg_new;
printf "upgrade_at %.1f\nupgrade_out %s\n", $upg->{at}, $upg->{out}
    if $upg;
printf "polls_answered_empty_at_upgrade %d\n",
       scalar(grep { ($_->{op} // '') eq 'poll-empty' } @recs);
printf "answers %d\n", scalar(grep { defined $_->{status} && $_->{node} }
                                   @recs);
print "status $_ $status{$_}\n" for sort keys %status;
print "op $_ $by_op{$_}\n" for sort keys %by_op;
printf "sessions %d\nimages %d\nacks %d\ncompletes %d\n",
       scalar(keys %created), scalar(keys %uploaded), scalar(keys %acked),
       scalar(keys %completed);
printf "polls_woken old %d new %d\n",
       scalar(grep { $_->{node} eq 'old' } @woken),
       scalar(grep { $_->{node} eq 'new' } @woken);
printf "poll_wake_ms p50 %.0f max %.0f\n",
       @lat ? 1000 * $lat[$#lat / 2] : 0, @lat ? 1000 * $lat[-1] : 0;
printf "webhooks expected %d delivered %d duplicates %d\n",
       scalar(keys %want), scalar(grep { $got{$_} } keys %want),
       scalar(@twice);
printf "failures %d\n", scalar(@bad);

if (@bad) {
    my %seen;
    print STDERR "upgrade-skew.pl: $_\n" for grep { !$seen{$_}++ } @bad;
    exit 1;
}

exit 0;
