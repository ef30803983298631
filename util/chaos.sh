#!/usr/bin/env bash
# "make chaos": load with Idempotency-Keys while PostgreSQL is stopped and
# started again and nginx is reloaded.
#
# A throw-away PostgreSQL (pg_virtualenv), nginx with the built module on
# 127.0.0.1, and CHAOS_CLIENTS clients that each, in a loop, create a
# session and upload an image into it, every request with a new
# Idempotency-Key, retried with the same key until the answer is neither
# a 5xx (nor 409 "in progress", nor a failed connection).  Meanwhile,
# CHAOS_CYCLES times: PostgreSQL stops (by turns "fast" and "immediate",
# the latter a crash), nginx is reloaded while it is down, PostgreSQL
# starts again, a worker is killed (SIGKILL, requests in flight) and
# nginx is reloaded once more under load.  Then:
#
#   every 2xx a client saw is in the database (its session, its image);
#   no duplicate: one session per create key, one image per upload key;
#   no worker crash in the error log ("exited on signal", "[alert]")
#   other than the workers the script killed;
#   the time from PostgreSQL back up to the first 2xx is <= 2 s.
#
# Prints the figures; exits non-zero when a check fails.  Loopback only,
# bounded: about 2 minutes with the defaults.
#
# Environment:
#   CHAOS_CLIENTS   concurrent clients (default 8)
#   CHAOS_CYCLES    stop/start cycles of PostgreSQL (default 3)
#   CHAOS_DOWN      seconds PostgreSQL stays down (default 5)
#   CHAOS_UP        seconds of load between cycles (default 15)
#   CHAOS_CONNECTIONS  session_db_connections (default 4)
#   CHAOS_IMAGE_CHUNK  session_image_chunk_size (default 512): half the
#                   clients upload images over it (streamed with COPY on
#                   an upload connection, decision (za); over 128k when
#                   the chunk is between 8k and 128k, since a body in
#                   between is gathered and sent whole), half under it
#                   (one statement on the query connections)
#   CHAOS_PORT      nginx's port (default: a free one)
#   CHAOS_KEEP      keep the scratch directory
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

NGINX=${CHAOS_NGINX:-/usr/sbin/nginx}
# SESSION_MODULE: another build of the module (as util/test.sh)
MODULE=${SESSION_MODULE:-$ROOT/build/ngx_http_session_module.so}
SESSIONCTL=$ROOT/build/sessionctl

CLIENTS=${CHAOS_CLIENTS:-8}
CYCLES=${CHAOS_CYCLES:-3}
DOWN=${CHAOS_DOWN:-5}
UP=${CHAOS_UP:-15}
# session_db_connections; fewer connections, fewer reconnect timers: the
# backoff shows more in the recovery time
CONNECTIONS=${CHAOS_CONNECTIONS:-4}
CHUNK=${CHAOS_IMAGE_CHUNK:-512}
# the service is back within this long of PostgreSQL
RECOVERY_GOAL=2

W=
NGINX_UP=

die() {
    echo "chaos.sh: $*" >&2
    exit 1
}

log() {
    echo "chaos.sh: $(date -u +%T) $*" >&2
}

# nginx_quote, conninfo_value, pg_virtualenv_conninfo, nginx_conf_head,
# sql, scratch_cleanup, free_port, json_field, ctl, start_nginx,
# nginx_down
# shellcheck source=util/bench-lib.sh
. "$ROOT/util/bench-lib.sh"

now() {
    date +%s.%N
}

reload_nginx() {
    kill -HUP "$(cat "$W/nginx.pid")"
    log "nginx reloaded"
}

# a worker dies with requests in flight: its clients retry elsewhere
kill_worker() {
    local pid
    pid=$(pgrep -P "$(cat "$W/nginx.pid")" | head -n 1)
    [ -n "$pid" ] || die "no worker to kill"
    kill -KILL "$pid"
    echo "$pid" >> "$W/killed"
    log "worker $pid killed"
}

pg() {
    pg_ctlcluster "$PGVERSION" regress "$@"
}


# One client: create, then upload into the new session, each with a new
# key, each retried with its key until the answer is final.  Writes a
# line per final answer: "KIND KEY STATUS ID T", T the epoch of the
# answer, and a line per attempt that failed: "retry KIND STATUS T".
client() {
    perl -MHTTP::Tiny -MJSON::PP -MTime::HiRes=time,sleep -e '
        my ($port, $key, $stop, $n, $chunk) = @ARGV;
        $| = 1;
        my $http = HTTP::Tiny->new(keep_alive => 0, timeout => 10);
        my $base = "http://127.0.0.1:$port/api/v1/sessions";
        # odd clients: an image over the chunk (streamed), even: under it.
        # A body over client_body_buffer_size (8k at the least) and up to
        # session_body_buffer_size (128k) is gathered and sent whole, not
        # streamed (decision (zh)): with a chunk in between, the streamed
        # ones are over 128k.
        my $over = $chunk + 8;
        $over = 131072 if $over + 8 > 8192 && $over + 8 <= 131072;
        my $png = "\x89PNG\r\n\x1a\n"
                  . ("c" x ($n % 2 ? $over : int($chunk / 2)));
        my $seq = 0;

        # the answer for a key, however many attempts it takes
        sub final {
            my ($kind, $url, $ctype, $body) = @_;
            my $k = sprintf "chaos-%d-%d-%d-%s", $n, $$, ++$seq, $kind;
            for (;;) {
                my $r = $http->request("POST", $url, {
                    headers => { Authorization => "Bearer $key",
                                 "Content-Type" => $ctype,
                                 "Idempotency-Key" => $k },
                    content => $body });
                my $st = $r->{status};
                if ($st >= 500 || $st == 409) {
                    printf "retry %s %d %.6f\n", $kind, $st, time;
                    sleep 0.05;
                    next;
                }
                my $id = "-";
                if ($st =~ /^2/) {
                    $id = eval { decode_json($r->{content})->{id} } // "-";
                }
                printf "%s %s %d %s %.6f\n", $kind, $k, $st, $id, time;
                return $st =~ /^2/ ? $id : undef;
            }
        }

        until (-e $stop) {
            my $sid = final("create", $base, "application/json",
                            q({"delivery_mode": "long_poll"}))
                or next;
            final("upload", "$base/$sid/images", "image/png", $png);
        }' "$PORT" "$KEY" "$W/stop" "$1" "$CHUNK"
}


# the figures from the clients' lines, the start times and the database
report() {
    perl -e '
        my ($w, $clients, $goal) = @ARGV;
        my (%ok, %final, %retry, @oks, @ups, $kinds);
        for my $i (1 .. $clients) {
            open my $fh, "<", "$w/client-$i.log" or die "$w/client-$i.log: $!";
            while (<$fh>) {
                my @f = split;
                if ($f[0] eq "retry") {
                    $retry{"$f[1] $f[2]"}++;
                    next;
                }
                my ($kind, $key, $st, $id, $t) = @f;
                $final{$kind}{$st}++;
                next unless $st =~ /^2/;
                $ok{$kind}{$key} = $id;
                push @oks, $t;
            }
        }
        open my $fh, "<", "$w/up-times" or die;
        chomp(@ups = <$fh>);
        @oks = sort { $a <=> $b } @oks;

        my $worst = 0;
        my @rec;
        for my $up (@ups) {
            my ($first) = grep { $_ >= $up } @oks;
            my $d = defined $first ? $first - $up : 999;
            push @rec, sprintf "%.2f", $d;
            $worst = $d if $d > $worst;
        }

        open my $out, ">", "$w/ok" or die;
        for my $kind (sort keys %ok) {
            print $out "$kind $_ $ok{$kind}{$_}\n" for sort keys %{ $ok{$kind} };
        }
        close $out;

        printf "answers:        %s\n", join ", ", map {
            my $k = $_;
            "$k " . join " ", map { "$_ x $final{$k}{$_}" }
                              sort keys %{ $final{$k} }
        } sort keys %final;
        printf "failed tries:   %s\n",
               join(", ", map { "$_ x $retry{$_}" } sort keys %retry)
               || "none";
        printf "recovery:       %s s after each start of PostgreSQL"
               . " (worst %.2f s, goal <= %d s)\n",
               join(" ", @rec), $worst, $goal;
        open my $r, ">", "$w/recovery" or die;
        printf $r "%.2f\n", $worst;
    ' "$W" "$CLIENTS" "$RECOVERY_GOAL"
}


inside() {
    local i pids=() mode project account fail=0

    pg_cluster_up
    DB=$(pg_virtualenv_conninfo)
    W=$(mktemp -d /tmp/chaos.XXXXXX)
    trap scratch_cleanup EXIT
    # nginx's workers (nobody, when run as root) write request bodies here
    chmod 755 "$W"
    PORT=${CHAOS_PORT:-$(free_port)}

    "$SESSIONCTL" -d "$DB" migrate > /dev/null || die "migrate failed"

    account=$(ctl account create chaos --plan unlimited | json_field account_id)
    project=$(ctl project create "$account" chaos | json_field project_id)
    KEY=$(ctl key create "$project" | json_field key)

    {
        nginx_conf_head "$MODULE" 2
        cat <<EOF
    session_db_timeout 2s;
    session_db_connections $CONNECTIONS;
    session_auth_cache_ttl 60s;
    session_image_chunk_size $CHUNK;

$(bench_api_server)
}
EOF
    } > "$W/nginx.conf"

    start_nginx
    log "nginx on 127.0.0.1:$PORT, PostgreSQL $PGVERSION on port $PGPORT,"\
        "$CLIENTS clients, $CYCLES cycles of $DOWN s down, $UP s up,"\
        "$CONNECTIONS connections per worker, images streamed over"\
        "$CHUNK bytes"

    : > "$W/up-times"
    : > "$W/killed"

    for i in $(seq "$CLIENTS"); do
        client "$i" > "$W/client-$i.log" &
        pids+=($!)
    done

    sleep "$UP"

    for i in $(seq "$CYCLES"); do
        mode=$([ $((i % 2)) -eq 1 ] && echo fast || echo immediate)
        log "cycle $i: PostgreSQL stops ($mode)"
        pg stop -m "$mode"

        sleep $((DOWN / 2))
        reload_nginx
        sleep $((DOWN - DOWN / 2))

        # back: the first moment it accepts connections
        pg start &
        until pg_isready -q -t 1 -h "$PGHOST" -p "$PGPORT"; do
            sleep 0.02
        done
        now >> "$W/up-times"
        wait $! || die "PostgreSQL did not start"
        log "cycle $i: PostgreSQL is back"

        sleep $((UP / 3))
        kill_worker
        sleep $((UP / 3))
        reload_nginx
        sleep $((UP - 2 * (UP / 3)))
    done

    touch "$W/stop"
    log "stopping the clients"

    for i in "${pids[@]}"; do
        wait "$i" || fail=1
    done
    [ "$fail" -eq 0 ] || die "a client failed"

    echo
    echo "## chaos: $CLIENTS clients, $CYCLES stops of PostgreSQL" \
         "($DOWN s each), $((2 * CYCLES)) reloads of nginx," \
         "$CYCLES workers killed"
    echo
    report

    # every 2xx is in the database, and nothing twice
    local missing extra alerts crashes killed

    sql "CREATE TABLE chaos_ok (kind text, key text, id uuid)" > /dev/null
    psql -X -q -d "$DB" -c "\\copy chaos_ok FROM '$W/ok' (DELIMITER ' ')"

    missing=$(sql "SELECT count(*) FROM chaos_ok c
                   WHERE NOT EXISTS (SELECT 1 FROM sessions s
                                      WHERE c.kind = 'create' AND s.id = c.id)
                     AND NOT EXISTS (SELECT 1 FROM images i
                                      WHERE c.kind = 'upload' AND i.id = c.id)")
    extra=$(sql "SELECT (SELECT count(*) FROM sessions
                          WHERE project_id = '$project')
                      + (SELECT count(*) FROM images i JOIN sessions s
                            ON s.id = i.session_id
                         WHERE s.project_id = '$project')
                      - (SELECT count(*) FROM chaos_ok)")

    sql "SELECT 'sessions:       ' || count(*) FILTER (WHERE kind = 'create')
                || ' creates and '
                || count(*) FILTER (WHERE kind = 'upload')
                || ' uploads answered 2xx (one key each); in the database: '
                || (SELECT count(*) FROM sessions
                     WHERE project_id = '$project') || ' sessions, '
                || (SELECT count(*) FROM images i JOIN sessions s
                       ON s.id = i.session_id
                    WHERE s.project_id = '$project') || ' images ('
                || (SELECT count(*) FROM images i JOIN sessions s
                       ON s.id = i.session_id
                    WHERE s.project_id = '$project' AND i.size > $CHUNK)
                || ' streamed)'
           FROM chaos_ok"
    echo "checks:         $missing 2xx not in the database, $extra rows" \
         "without a 2xx (duplicates or unanswered)"
    echo "keys:           $(sql "SELECT count(*) FROM idempotency_keys
                                 WHERE project_id = '$project'") rows," \
         "$(sql "SELECT count(*) FROM chaos_ok c JOIN idempotency_keys k
                   ON k.project_id = '$project' AND k.key = c.key
                 WHERE k.location NOT LIKE '%' || c.id::text") kept" \
         "answers naming another resource than the client saw"

    # the workers killed on purpose are not crashes
    killed=$(paste -sd'|' "$W/killed")
    grep -v -E "worker process ($killed) exited on signal 9" \
        "$W/error.log" > "$W/error.rest" || true
    crashes=$(grep -c 'exited on signal' "$W/error.rest" || true)
    alerts=$(grep -c '\[alert\]' "$W/error.rest" || true)
    echo "error log:      $crashes worker crashes, $alerts alerts" \
         "(besides the $(wc -l < "$W/killed") workers killed)," \
         "$(grep -c '\[error\]' "$W/error.log" || true) errors"

    [ "$missing" -eq 0 ] && [ "$extra" -eq 0 ] || fail=1
    [ "$crashes" -eq 0 ] && [ "$alerts" -eq 0 ] || fail=1
    awk -v w="$(cat "$W/recovery")" -v g="$RECOVERY_GOAL" \
        'BEGIN { exit !(w <= g) }' || fail=1

    if [ "$fail" -ne 0 ]; then
        grep -E 'exited on signal|\[alert\]' "$W/error.rest" | head -5 >&2
        die "FAILED"
    fi

    echo
    echo "chaos: PASS"
}


if [ "${1:-}" = "--inside-pg-virtualenv" ]; then
    inside
    exit
fi

[ -x "$MODULE" ] || [ -f "$MODULE" ] || die "no $MODULE: make build first"

# a free port of its own for the cluster (pg_virtualenv would take 5432
# when that is free, which another run may want at the same time)
pg_env_clear
pg_cluster_tries 3 "" pg_virtualenv -t -- \
    bash "$ROOT/util/chaos.sh" --inside-pg-virtualenv
