-- Session Service schema, version 21: a lease asked for by a node that
-- has budget in flight to it is answered with what the node took, not
-- with more budget (session_limit_scope cluster, docs/decisions.md (qk)).
--
-- A node's workers lease each on their own connection.  When a lease
-- ahead of need, sent by one worker, is slow to come back, a request in
-- another worker finds the node's block empty and leases at need; past
-- the node's part the database gives it a share of what is left, which
-- the node does not need yet, and the node that runs dry next gets a 429
-- before the key's limit is reached (t/045's "no other request refused
-- before the limit", seen once under load; util/lease-sim.py with leases
-- answered in up to 50 ms: the first 429 early in up to 28 % of runs).
--
-- The node now says what it has been leased in the window as far as it
-- knows (p_had, NULL when it does not know).  When the row says the node
-- took more, the difference is on its way to the node: nothing more is
-- leased, and the answer's took (what the row says the node took, which
-- every answer now carries) lets the node count that budget at once, in
-- whichever worker the answer lands first.
--
-- session_rate_lease() of six arguments (version 19) is unchanged: the
-- nodes of the previous release call it, version 18's batch calls it,
-- and this function leases through it, so that one rule leases for all.

CREATE FUNCTION session_rate_lease(p_key bytea, p_class integer,
                                   p_minute integer, p_want integer,
                                   p_limit integer, p_node bigint,
                                   p_had integer)
RETURNS TABLE (leased integer, total integer, nodes integer,
               took integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_row  rate_leases;
    v_at   integer;
BEGIN
    -- budget on its way to the node: the row's lock first, then its count
    IF p_had IS NOT NULL THEN
        SELECT * INTO v_row FROM rate_leases l
         WHERE l.minute = p_minute AND l.key_hash = p_key
           AND l.class = p_class
           FOR UPDATE;

        v_at := array_position(v_row.nodes, p_node);

        IF v_row.took[v_at] > p_had THEN
            RETURN QUERY SELECT 0, v_row.granted, cardinality(v_row.nodes),
                                v_row.took[v_at];
            RETURN;
        END IF;
    END IF;

    -- no row: the window's budget is leased out
    SELECT l.leased INTO leased
      FROM session_rate_lease(p_key, p_class, p_minute, p_want, p_limit,
                              p_node) AS l;

    -- the row as the lease left it, locked; none: swept (a window long
    -- over), no lease
    SELECT * INTO v_row FROM rate_leases l
     WHERE l.minute = p_minute AND l.key_hash = p_key AND l.class = p_class;

    IF NOT FOUND THEN
        RETURN;
    END IF;

    v_at := array_position(v_row.nodes, p_node);

    leased := coalesce(leased, 0);
    total := v_row.granted;
    nodes := cardinality(v_row.nodes);
    -- NULL for a node past the 64 listed (or a row of before version 19)
    took := v_row.took[v_at];
    RETURN NEXT;
END
$$;
