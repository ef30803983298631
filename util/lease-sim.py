#!/usr/bin/env python3
"""A simulation of session_limit_scope cluster's leases (docs/decisions.md
(qb), (qj), (qk), (qm), (qn)): nodes with their workers' leases in flight, the
zone's block per key (zone_lease.c) and the window's row (src/sql/015,
019, 021 and 022), for one key, one class and one window.  Nothing of nginx runs
here: it is for weighing a rule before it is written in C and SQL.

    python3 util/lease-sim.py              every rule, every client below
    python3 util/lease-sim.py qj qk        some rules
    python3 util/lease-sim.py --slow qm    leases answered 0.5 to 50 ms late

Rules: "qb", blocks of a tenth of the limit, the end in shares of what is
left; "qj", each node's equal part first; "qk", qj with the node telling
what it took as far as it knows, so that a lease in flight to another
worker of the node is counted instead of leased again; "qm", qk with the
window's row listing the nodes of the windows before, so that the first
leases are parts of the limit among them (played here as a key as busy
in the window before, on every node: the steady state); "qn", qm for a
key new to the cluster (its row lists no node before), each node's first
block a part of the limit among the nodes it guesses from its answers for
other keys (decision (qn); by default all of them, as a node that has
seen a key leased over every node guesses).

Clients: "seq", one sequential client round-robin over the nodes (t/045:
the first 429 must come at the limit + 1); "conc", 16 connections per
node at once, the budget spent in a few milliseconds (util/bench-cluster.sh
part 2: the lease statements per admitted request); "moved", round-robin
for 30 requests, then one node only; "2:1:1", each request to node 0
with odds 1/2, else node 1 or 2.  A lease is answered 0.5 to 2 ms after
it is sent; a client's next request comes 0.5 to 1.5 ms after an answer.
With rule qb, conc gives 17, 20 and 21 statements at 100, 200 and 300,
the figures util/bench-cluster.sh measured for it.  --slow makes each
half of a lease's round trip 0.25 to 25 ms (a loaded machine): there qj's
first 429 comes early in up to 28 % of the seq runs, qk's in none.  qk's
comes early wherever the nodes outnumber limit / 10 (20 on three nodes,
30 on four, 100 on twelve); qm's nowhere in the table.  qn's nowhere
either, with the statements of qm; a guess two nodes too high (stopped
nodes) stays exact with up to 50 % more statements, one too low is
early where qk is.
"""

import heapq
import random
import sys

LEASE_MIN = 10

# each half of a lease's round trip, ms (--slow: up to 25)
HALF = [0.25, 1]


class Row:
    """the window's row: granted, the nodes in order, what each took"""

    def __init__(self, expect=0):
        self.granted = 0
        self.nodes = []
        self.took = {}
        # qm: the nodes that leased in the window before (022)
        self.expect = expect

    def count(self):
        """the nodes the window counts on, as the answer says"""
        return max(len(self.nodes), self.expect)

    def lease(self, rule, node, want, limit, known=None):
        had = self.took.get(node, 0)
        if rule in ('qk', 'qm') and known is not None and had > known:
            # budget in flight to the node already: none more (021)
            return 0
        left = limit - self.granted
        if left <= 0:
            return None
        n = len(self.nodes) + (node not in self.nodes)
        share = max(1, -(-left // n))
        part = limit // n
        if rule == 'qm':
            # parts of the limit among the nodes of the window before too,
            # at least 1 each
            n = max(n, self.expect)
            part = max(1, limit // n)
        if rule != 'qb' and had < part:
            give = min(want, left, part - had)
        else:
            give = min(want, left, share)
        self.granted += give
        self.took[node] = had + give
        if node not in self.nodes:
            self.nodes.append(node)
        return give


class Sim:
    def __init__(self, rule, nodes, workers, limit, seed, expect=None,
                 guess=None):
        self.rule = rule
        # qn: a key new to the cluster (no row before), and the node's
        # guess of how many nodes lease (by default all of them)
        self.guess = (nodes if guess is None else guess) \
            if rule == 'qn' else 0
        self.limit = limit
        self.cap = max(LEASE_MIN, limit // (10 if rule == 'qb' else 4))
        self.rng = random.Random(seed)
        # qm: the window before had these nodes (by default all of them)
        self.row = Row((nodes if expect is None else expect)
                       if rule == 'qm' else 0)
        if rule == 'qn':
            self.rule = rule = 'qm'
            self.qn = True
        else:
            self.qn = False
        self.stmts = 0
        self.now = 0.0
        self.events = []
        self.seq = 0
        self.workers = workers
        self.zone = [dict(held=0, used=0, want=0, last=0.0, granted=0,
                          nodes=0, asked=False, took=0, block=0,
                          synced=False)
                     for _ in range(nodes)]
        self.flights = [[None] * workers for _ in range(nodes)]

    def at(self, t, fn, *args):
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, fn, args))

    def run(self):
        while self.events:
            self.now, _, fn, args = heapq.heappop(self.events)
            fn(*args)

    # the zone (ngx_http_session_lease_take_locked, _answer)

    def size(self, l):
        return min(l['want'] or LEASE_MIN, self.cap)

    def take(self, n):
        l = self.zone[n]
        left = max(0, self.limit - l['granted'])
        if l['held'] == 0:
            size = self.size(l)
            if self.qn and l['nodes'] == 0:
                # qn: the first block, a part of the limit among the
                # nodes the node guesses
                size = max(1, min(size, self.limit // self.guess))
            return ('busy', 0) if left == 0 else ('again', size)
        l['held'] -= 1
        l['used'] += 1
        if l['asked']:
            return 'ok', 0
        size = self.size(l)
        if self.rule != 'qb':
            nodes = max(l['nodes'], self.guess, 1)
            ahead = (l['held'] * 2 < l['block'] and left > 0
                     and l['took'] < self.limit // nodes)
        else:
            ahead = (l['held'] * 2 < size
                     and left >= max(4, 2 * l['nodes']) * size)
        if not ahead:
            return 'ok', 0
        l['asked'] = True
        return 'ok', size

    def answer(self, n, given, granted, nodes, took, waiters, asked):
        l = self.zone[n]
        if asked:
            l['asked'] = False
        if given is None:
            l['granted'] = self.limit
            return
        if self.rule in ('qk', 'qm') and l['synced']:
            # what the row says the node took, less what it has had
            given = max(0, took - l['took'])
        l['held'] += given
        l['took'] += given
        if given:
            l['block'] = given
        l['synced'] = l['synced'] or l['took'] == took
        l['granted'] = max(l['granted'], granted)
        l['nodes'] = max(l['nodes'], nodes)
        want = max(l['want'], LEASE_MIN)
        if waiters:
            want = max(want * 4, waiters)
        if l['last'] == 0:
            l['last'] = self.now or 1e-9
            l['used'] = 0
        elif self.now - l['last'] >= 100:
            rate = l['used'] * 30000 / (self.now - l['last'])
            if rate > want:
                want = rate
            elif not waiters:
                want = max(rate, want / 2)
            l['last'] = self.now
            l['used'] = 0
        l['want'] = int(max(min(want, self.cap), LEASE_MIN))

    # the statements (lease.c): one flight per key and worker

    def send(self, n, w, want, asked):
        l = self.zone[n]
        f = {'waiters': [], 'asked': asked, 'want': want,
             'known': l['took'] if l['synced'] else None}
        self.flights[n][w] = f
        self.stmts += 1
        self.at(self.now + self.rng.uniform(*HALF), self.execute, n, w, f)
        return f

    def execute(self, n, w, f):
        # the answer: (leased, total, nodes) as the row had them then
        given = self.row.lease(self.rule, n, f['want'], self.limit,
                               f['known'])
        self.at(self.now + self.rng.uniform(*HALF), self.done, n, w, f,
                (given, self.row.granted, self.row.count(),
                 self.row.took.get(n, 0)))

    def done(self, n, w, f, res):
        self.flights[n][w] = None
        self.answer(n, *res, len(f['waiters']), f['asked'])
        for cb in f['waiters']:
            rc, lease = self.take(n)
            if rc == 'again':
                nf = self.flights[n][w] or self.send(n, w, lease, False)
                nf['waiters'].append(cb)
            else:
                self.finish(n, w, rc, lease, cb)

    def finish(self, n, w, rc, lease, cb):
        if lease and self.flights[n][w] is None:
            self.send(n, w, lease, True)
        cb(rc)

    def request(self, n, cb):
        w = self.rng.randrange(self.workers)
        rc, lease = self.take(n)
        if rc == 'again':
            f = self.flights[n][w] or self.send(n, w, lease, False)
            f['waiters'].append(cb)
        else:
            self.finish(n, w, rc, lease, cb)


def sequential(rule, limit, pick, nodes=3, seed=0, total=None, expect=None,
               guess=None):
    """one client, a request after each answer; (statuses, statements)"""
    s = Sim(rule, nodes, 2, limit, seed, expect, guess)
    st = []
    total = total or limit + 9

    def step():
        if len(st) >= total:
            return
        k = len(st)

        def cb(rc):
            st.append(rc)
            s.at(s.now + s.rng.uniform(0.5, 1.5), step)
        s.request(pick(k, s.rng, nodes), cb)

    s.at(0, step)
    s.run()
    return st, s.stmts


def concurrent(rule, limit, nodes=3, conns=16, seed=0):
    """conns connections per node; (admitted, statements)"""
    s = Sim(rule, nodes, 1, limit, seed)
    st = []
    sent = [0]

    def conn(n):
        if sent[0] >= 3 * limit:
            return
        sent[0] += 1

        def cb(rc):
            st.append(rc)
            s.at(s.now + s.rng.uniform(0.5, 1.5), conn, n)
        s.request(n, cb)

    for n in range(nodes):
        for _ in range(conns):
            s.at(s.rng.uniform(0, 0.2), conn, n)
    s.run()
    return st.count('ok'), s.stmts


PICKS = {
    'round-robin': lambda k, r, n: k % n,
    'moved': lambda k, r, n: k % n if k < 30 else 0,
    '2:1:1': lambda k, r, n: r.choice([0, 0, 1, 2]),
}


def report(rule):
    print('rule %s' % rule)
    for nodes in (2, 3, 4, 6, 12):
        cells = []
        for limit in (20, 30, 40, 45, 100, 200, 300, 1000):
            late = early = stmts = 0
            for seed in range(100):
                st, m = sequential(rule, limit, PICKS['round-robin'],
                                   nodes, seed)
                first = st.index('busy') + 1 if 'busy' in st else 0
                stmts += m
                if first != limit + 1 or st.count('ok') != limit:
                    early += 1
            cells.append('%d: %s%.0f' % (limit, 'INEXACT %d%%, ' % early
                                         if early else '', stmts / 100))
        print('  seq, %d nodes (limit: statements): %s'
              % (nodes, '; '.join(cells)))
    for limit in (100, 200, 300):
        res = [concurrent(rule, limit, seed=seed) for seed in range(20)]
        print('  conc, 3 nodes, limit %d: admitted %d..%d, statements'
              ' %.1f' % (limit, min(a for a, _ in res),
                         max(a for a, _ in res),
                         sum(m for _, m in res) / len(res)))
    for name in ('moved', '2:1:1'):
        for limit in (100, 300):
            res = [sequential(rule, limit, PICKS[name], 3, seed, 2 * limit)
                   for seed in range(20)]
            print('  %s, 3 nodes, limit %d: admitted %.1f, statements %.1f'
                  % (name, limit,
                     sum(st.count('ok') for st, _ in res) / len(res),
                     sum(m for _, m in res) / len(res)))


if __name__ == '__main__':
    args = sys.argv[1:]
    if args[:1] == ['--slow']:
        HALF[1] = 25
        args = args[1:]
    for r in args or ['qb', 'qj', 'qk', 'qm', 'qn']:
        report(r)
