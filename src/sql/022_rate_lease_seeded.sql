-- Session Service schema, version 22: a window's row starts with the
-- nodes that asked for the key's budget in the windows before, so that
-- the first leases of a window are parts of the limit among all of them
-- (session_limit_scope cluster, docs/decisions.md (qm)).
--
-- Until now a window's first lease made its row with one node, and each
-- node was leased up to limit / (the nodes that had leased so far): the
-- first nodes of a window took whole blocks (10 or more) before the
-- database knew how many would come.  With more nodes than limit / 10
-- (3 at a limit of 20, 11 at 100) the last node to come found the budget
-- leased out while the others still held it, and refused the key long
-- before its limit (util/lease-sim.py: a round-robin client's first 429
-- at the 3rd request of 20 on three nodes, the 11th of 100 on twelve).
--
-- A new window's row now lists, before its first lease, the nodes that
-- asked in the key's rows (any class) of this window and the five before
-- it, the rows the sweep keeps, each with took NULL: has not asked here.
-- A node's part is the limit divided by the nodes listed, as before, and
-- at least 1; past it, a node gets an equal share of what is left among
-- the nodes that asked in this window, so that a key that left some
-- nodes is not leased in shares cut for them.  A node that asks when the
-- window is leased out is listed all the same (took 0), so that the next
-- window counts it.  A key new to the cluster starts as before.
--
-- session_rate_lease() keeps its arguments and its answer: both
-- releases' nodes, the batch of version 18 and the function of version
-- 21 lease through it.  Its answer's nodes counts the listed nodes, so
-- that a node leases ahead of need up to the same part.

CREATE OR REPLACE FUNCTION session_rate_lease(p_key bytea, p_class integer,
                                              p_minute integer,
                                              p_want integer,
                                              p_limit integer, p_node bigint)
RETURNS TABLE (leased integer, total integer, nodes integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_want    integer := greatest(coalesce(p_want, 1), 1);
    v_row     rate_leases;
    v_at      integer;
    v_n       integer;
    v_took    integer;
    v_had     integer;
    v_left    integer;
    v_give    integer;
    v_part    integer;
BEGIN
    SELECT * INTO v_row FROM rate_leases l
     WHERE l.minute = p_minute AND l.key_hash = p_key AND l.class = p_class
       FOR UPDATE;

    IF NOT FOUND THEN
        -- a new window: the nodes of the key's recent windows, at most
        -- 64 as a row lists
        INSERT INTO rate_leases AS l (minute, key_hash, class, granted,
                                      given, nodes, took)
        SELECT p_minute, p_key, p_class, 0, 0,
               coalesce(array_agg(s.node), '{}'),
               coalesce(array_agg(NULL::integer), '{}')
          FROM (SELECT DISTINCT u.node
                  FROM rate_leases o,
                       unnest(o.nodes, o.took) AS u(node, took)
                 WHERE o.minute = ANY (ARRAY[p_minute, p_minute - 1,
                                             p_minute - 2, p_minute - 3,
                                             p_minute - 4, p_minute - 5])
                   AND o.key_hash = p_key
                   AND u.took IS NOT NULL
                 LIMIT 64) s
        ON CONFLICT (minute, key_hash, class) DO NOTHING;

        SELECT * INTO v_row FROM rate_leases l
         WHERE l.minute = p_minute AND l.key_hash = p_key
           AND l.class = p_class
           FOR UPDATE;

        -- the row swept meanwhile (a window long over): no lease
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;

    -- the node listed, at most 64 as in version 15: others count, unlisted
    v_at := array_position(v_row.nodes, p_node);
    v_n := cardinality(v_row.nodes) + (v_at IS NULL)::integer;

    IF v_at IS NULL AND cardinality(v_row.nodes) < 64 THEN
        v_row.nodes := v_row.nodes || p_node;
        v_at := cardinality(v_row.nodes);
    END IF;

    -- NULL: a node of the windows before that has not asked in this one
    v_had := coalesce(v_row.took[v_at], 0);
    v_left := p_limit - v_row.granted;

    IF v_left <= 0 THEN
        -- leased out: no row, as in version 15.  A node that asks is
        -- listed all the same (took 0), so that the next window counts it
        IF v_at IS NOT NULL AND v_row.took[v_at] IS NULL THEN
            v_row.took[v_at] := 0;

            UPDATE rate_leases l
               SET nodes = v_row.nodes, took = v_row.took
             WHERE l.minute = p_minute AND l.key_hash = p_key
               AND l.class = p_class;
        END IF;

        RETURN;
    END IF;

    -- the node's equal part of the limit, at least 1 (more nodes than
    -- the limit: 1 each, while it lasts)
    v_part := greatest(p_limit / v_n, 1);

    IF v_had < v_part THEN
        -- up to the node's equal part of the limit
        v_give := least(v_want, v_left, v_part - v_had);
    ELSE
        -- past it: an equal share of what is left among the nodes that
        -- asked in the window, this one with them (a row of before
        -- version 19 has no took: all it lists)
        IF v_row.took IS NULL THEN
            v_took := v_n;
        ELSE
            SELECT count(*) INTO v_took FROM unnest(v_row.took) AS t(n)
             WHERE t.n IS NOT NULL;
            v_took := v_took + (v_at IS NULL
                                OR v_row.took[v_at] IS NULL)::integer;
        END IF;

        v_give := least(v_want, v_left,
                        greatest(1, (v_left + v_took - 1) / v_took));
    END IF;

    IF v_at IS NOT NULL THEN
        v_row.took[v_at] := v_had + v_give;
    END IF;

    UPDATE rate_leases l
       SET granted = l.granted + v_give, given = v_give,
           nodes = v_row.nodes, took = v_row.took
     WHERE l.minute = p_minute AND l.key_hash = p_key AND l.class = p_class;

    leased := v_give;
    total := v_row.granted + v_give;
    nodes := cardinality(v_row.nodes);
    RETURN NEXT;
END
$$;
