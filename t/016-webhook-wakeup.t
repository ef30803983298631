# The webhook dispatchers are woken (NOTIFY session_webhooks) by a
# statement that queued an event, and by nothing else: an upload or a
# completion of a long_poll session inserts no outbox row and must not
# wake every worker of every node (src/sql/014_outbox_wakeup.sql).
#
# Needs TEST_NGINX_SESSION_DB (util/test.sh sets it).  Starts no nginx:
# psql listens, and counts the notifications of each statement.

use strict;
use warnings;

use lib 't/lib';
use Test::More;
use Session qw(:DEFAULT);

my $F = fixture(plan => 'pro', name => sprintf('t016-%d-%d', $$, time));

# notices(@sql): runs LISTEN, then each statement in its own transaction
# (psql -c each), and returns how many notifications arrived
sub notices {
    my (@sql) = @_;

    my @args = ('psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1',
                '-d', db_conninfo(), '-At',
                '-c', 'LISTEN session_webhooks');
    push @args, map { ('-c', $_) } @sql, 'SELECT 1';

    open my $fh, '-|', @args or die "psql: $!";
    my $out = do { local $/; <$fh> };
    close $fh;
    is($?, 0, 'psql exits 0') or diag($out);

    my @n = $out =~ /Asynchronous notification "session_webhooks"/g;

    return scalar @n;
}

my $sid = psql("INSERT INTO sessions (project_id, delivery_mode,"
               . " webhook_url, expires_at) VALUES ("
               . sql_quote($F->{project_id}) . ", 'webhook',"
               . " 'https://hook.invalid/', now() + interval '1 hour')"
               . " RETURNING id");

like($sid, qr/^[0-9a-f-]{36}$/, 'a webhook session');

is(notices('INSERT INTO webhook_outbox SELECT * FROM webhook_outbox'
           . ' WHERE false'),
   0, 'an INSERT of no row wakes nobody');

# a row that is not due for a day: no dispatcher would send it
is(notices('INSERT INTO webhook_outbox (project_id, session_id,'
           . ' event_type, url, payload, next_attempt_at) VALUES ('
           . sql_quote($F->{project_id}) . ', ' . sql_quote($sid)
           . ", 'session.completed', 'https://hook.invalid/', '{}',"
           . " now() + interval '1 day')"),
   1, 'an INSERT of a row wakes the dispatchers once');

is(notices('INSERT INTO webhook_outbox (project_id, session_id,'
           . ' event_type, url, payload, next_attempt_at)'
           . ' SELECT project_id, session_id, event_type, url, payload,'
           . ' next_attempt_at FROM webhook_outbox WHERE session_id = '
           . sql_quote($sid)),
   1, 'one statement, one notification');

psql('DELETE FROM sessions WHERE id = ' . sql_quote($sid));

done_testing();
