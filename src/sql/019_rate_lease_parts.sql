-- Session Service schema, version 19: a lease near the end of a key's
-- budget fills each node up to an equal part of the limit, so that the
-- nodes of an even spread lease the end once each (session_limit_scope
-- cluster, docs/decisions.md (qj)).
--
-- Version 15 gave a node at most an equal share of what is left, among
-- the nodes that leased in the window: shares that shrink one lease
-- after the other, about nodes x ln(left) leases for the end of a busy
-- key's budget.  The row now keeps what each node was leased in the
-- window (took, beside nodes), and a node is leased at most what takes
-- it to floor(limit / nodes); a node that has had that part gets the
-- equal share of what is left, as before.  A key spread evenly over the
-- nodes has each node's part, whatever the order of their leases, so
-- that none refuses while another still holds budget, and a node that
-- takes more (an uneven spread) still gets all that is left in the end.
-- Never past the limit, as before.
--
-- session_rate_lease() keeps its arguments and its answer, so that both
-- releases' nodes (and session_rate_lease_many() of version 18) call
-- it; the previous release's nodes get the new parts too, which they
-- need not know of.  Rows of windows leased before this migration have
-- no took: their nodes count as having had nothing.

SET LOCAL lock_timeout = '5s';

-- took[i]: leased to nodes[i] in the window so far (NULL before version 19)
ALTER TABLE rate_leases ADD COLUMN took integer[];

CREATE OR REPLACE FUNCTION session_rate_lease(p_key bytea, p_class integer,
                                              p_minute integer,
                                              p_want integer,
                                              p_limit integer, p_node bigint)
RETURNS TABLE (leased integer, total integer, nodes integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_want  integer := greatest(coalesce(p_want, 1), 1);
    v_row   rate_leases;
    v_at    integer;
    v_n     integer;
    v_had   integer;
    v_left  integer;
    v_give  integer;
BEGIN
    INSERT INTO rate_leases AS l (minute, key_hash, class, granted, given,
                                  nodes, took)
    VALUES (p_minute, p_key, p_class, least(v_want, p_limit),
            least(v_want, p_limit), ARRAY[p_node],
            ARRAY[least(v_want, p_limit)])
    ON CONFLICT (minute, key_hash, class) DO NOTHING
    RETURNING l.given, l.granted, cardinality(l.nodes)
         INTO leased, total, nodes;

    IF FOUND THEN
        RETURN NEXT;
        RETURN;
    END IF;

    -- the row is there: locked until the commit, which orders the nodes
    SELECT * INTO v_row FROM rate_leases l
     WHERE l.minute = p_minute AND l.key_hash = p_key AND l.class = p_class
       FOR UPDATE;

    -- the row swept meanwhile (a window long over): no lease
    IF NOT FOUND THEN
        RETURN;
    END IF;

    v_left := p_limit - v_row.granted;

    -- leased out: no row, as in version 15
    IF v_left <= 0 THEN
        RETURN;
    END IF;

    v_at := array_position(v_row.nodes, p_node);
    v_n := cardinality(v_row.nodes) + (v_at IS NULL)::integer;
    v_had := CASE WHEN v_at IS NULL THEN 0
                  ELSE coalesce(v_row.took[v_at], 0) END;

    IF v_had < p_limit / v_n THEN
        -- up to the node's equal part of the limit
        v_give := least(v_want, v_left, p_limit / v_n - v_had);
    ELSE
        -- past it: an equal share of what is left, as in version 15
        v_give := least(v_want, v_left,
                        greatest(1, (v_left + v_n - 1) / v_n));
    END IF;

    -- at most 64 nodes listed, as in version 15: others count, unlisted
    IF v_at IS NULL AND cardinality(v_row.nodes) < 64 THEN
        v_row.nodes := v_row.nodes || p_node;
        v_at := cardinality(v_row.nodes);
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
