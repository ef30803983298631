# docs/openapi.yaml: valid under a maintained validator (Redocly CLI,
# pinned in util/openapi/package.json, installed by make deps), and
# complete: every route of the contract's endpoint table (docs/api.md
# §5) with its success status, every HTTP status that the contract
# names, and the statuses each route can answer (the list below) are in
# the document.  SESSION_API_MD=... checks another copy of the contract.
use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Temp qw(tempdir);
use JSON::PP;
use Test::More;

my $root = abs_path(dirname(__FILE__) . '/..');
my $doc = "$root/docs/openapi.yaml";
my $redocly = "$root/util/openapi/node_modules/.bin/redocly";
my $config = "$root/util/openapi/redocly.yaml";

# no telemetry, no update check: the test machine reaches no such host
$ENV{REDOCLY_TELEMETRY} = 'off';
$ENV{REDOCLY_SUPPRESS_UPDATE_NOTICE} = 'true';

ok(-x $redocly, 'redocly is installed (make deps)')
    or BAIL_OUT("$redocly missing: run make deps");

# 1. The validator: no error and no warning.
my $out = `"$redocly" lint --config "$config" --format=stylish "$doc" 2>&1`;
my $rc = $? >> 8;
is($rc, 0, 'redocly lint exits 0') or diag($out);
unlike($out, qr/\b(error|warning)\b/, 'no error or warning') or diag($out);

# 2. The document as JSON (the validator's own bundler reads the YAML).
my $tmp = tempdir(CLEANUP => 1);
system("\"$redocly\" bundle \"$doc\" --dereferenced --ext json"
       . " -o \"$tmp/openapi.json\" >\"$tmp/bundle.log\" 2>&1") == 0
    or BAIL_OUT('redocly bundle failed: ' . `cat "$tmp/bundle.log"`);
my $api = do {
    local $/;
    open my $fh, '<', "$tmp/openapi.json" or die $!;
    decode_json(<$fh>);
};

is($api->{openapi}, '3.1.0', 'OpenAPI 3.1');

sub statuses {
    my ($method, $path) = @_;
    my $op = $api->{paths}{$path}{lc $method} or return;
    return keys %{ $op->{responses} || {} };
}

my %anywhere;
for my $path (keys %{ $api->{paths} }) {
    for my $m (keys %{ $api->{paths}{$path} }) {
        next unless ref $api->{paths}{$path}{$m} eq 'HASH'
                    && $api->{paths}{$path}{$m}{responses};
        $anywhere{$_} = 1 for statuses($m, $path);
    }
}

# 3. What each route answers (docs/api.md §1, §2, §5, §6, §10).  Every
# route: 400 (nginx's own refusals, query parameters), 401, 403, 414 (a
# request line too long), 429, 500, 503; session routes also 404 and
# 410; every POST takes an Idempotency-Key (409 in progress, 422 another
# request), and a POST whose body is read 501 (a Transfer-Encoding
# nginx refuses); complete and ack 413 over 65536 bytes with a key.
# HEAD is answered wherever GET is.
my @common = qw(400 401 403 414 429 500 503);
my @sid = (@common, qw(404 410));
my %routes = (
    'POST /api/v1/sessions' => [qw(201 409 413 415 422 501), @common],
    'GET /api/v1/sessions' => [qw(200), @common],
    'GET /api/v1/sessions/{sid}' => [qw(200), @sid],
    'POST /api/v1/sessions/{sid}/complete' =>
        [qw(200 409 413 422 501), @sid],
    'POST /api/v1/sessions/{sid}/images' =>
        [qw(201 409 413 415 422 501), @sid],
    'GET /api/v1/sessions/{sid}/images' => [qw(200), @sid],
    'GET /api/v1/sessions/{sid}/images/{iid}' => [qw(200), @sid],
    'GET /api/v1/sessions/{sid}/images/{iid}/content' =>
        [qw(200 304), @sid],
    'POST /api/v1/sessions/{sid}/images/{iid}/ack' =>
        [qw(200 409 413 422 501), @sid],
    'GET /api/v1/sessions/{sid}/poll' => [qw(200), @sid],
);
for my $route (grep { /^GET / } keys %routes) {
    (my $head = $route) =~ s/^GET/HEAD/;
    $routes{$head} = $routes{$route};
}

for my $route (sort keys %routes) {
    my ($method, $path) = split / /, $route;
    my %have = map { $_ => 1 } statuses($method, $path);
    ok(%have, "$route is in the document") or next;
    my @missing = grep { !$have{$_} } @{ $routes{$route} };
    is("@missing", '', "$route lists every status it can answer");
}

# 4. The contract itself.
my $contract = $ENV{SESSION_API_MD} // "$root/docs/api.md";
SKIP: {
    skip "no contract at $contract: the maintained list only", 3
        unless -r $contract;

    open my $fh, '<', $contract or die "$contract: $!";
    my $text = do { local $/; <$fh> };

    my $rows = 0;
    while ($text =~ m{^\|\s*(GET|POST|PUT|PATCH|DELETE)\s*\|\s*(/\S+)\s*\|
                      \s*(\d{3})}mgx) {
        my ($method, $path, $status) = ($1, $2, $3);
        $rows++;
        ok(exists $routes{"$method $path"},
           "the contract's $method $path is in the maintained list");
        ok((grep { $_ eq $status } statuses($method, $path)),
           "$method $path answers $status in the document");
    }
    cmp_ok($rows, '>=', 10, "the contract's endpoint table read ($rows rows)");

    # every standard status the text names (494 is nginx's, sent as 400)
    my %standard = map { $_ => 1 }
        qw(200 201 204 301 302 304 400 401 403 404 405 406 408 409 410
           411 412 413 414 415 416 422 429 431 500 501 502 503 504);
    my %named;
    while ($text =~ /(?<![\w\/.])([2-5]\d\d)(?![\w\/%])/g) {
        $named{$1} = 1 if $standard{$1};
    }
    cmp_ok(scalar keys %named, '>=', 10, 'the contract names statuses');

    for my $status (sort keys %named) {
        if ($status eq '405') {
            # answered by the router for a method a path does not have,
            # so it belongs to no operation: the document says it once
            like($api->{info}{description},
                 qr/405 `method not allowed`.*`Allow`/s,
                 '405 is described (info.description)');
            next;
        }
        ok($anywhere{$status},
           "the contract's status $status is in the document");
    }
}

# 5. The webhook payloads (docs/api.md §7).
for my $event (qw(image.uploaded session.completed session.expired)) {
    my $op = $api->{webhooks}{$event}{post};
    ok($op, "webhook $event is described") or next;
    my %params = map { $_->{name} => 1 } @{ $op->{parameters} || [] };
    is(join(',', grep { $params{$_} }
                 qw(webhook-id webhook-timestamp webhook-signature)),
       'webhook-id,webhook-timestamp,webhook-signature',
       "webhook $event has the Standard Webhooks headers");
}

done_testing();
