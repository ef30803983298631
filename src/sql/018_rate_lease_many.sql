-- Session Service schema, version 18: the next window's first blocks of
-- many keys leased in one statement (session_limit_scope cluster,
-- docs/decisions.md (qh)).
--
-- Near the end of a window every busy key leases its first block of the
-- next one on every node (decision (qb)): with version 15 that is one
-- statement, and one commit, per key and node, all of them in the last
-- 15 seconds of each minute.  A node now gathers those leases for a
-- moment and sends them together.  Each lease is still
-- session_rate_lease() of version 15, row by row, so a batch leases
-- exactly what the same leases one by one would have: never past the
-- limit, an equal share near it.  Additive: version 15's function is
-- unchanged, and a node of the previous release keeps using it.

-- p_keys: the SHA-256 of the keys, 32 bytes each, one after the other;
-- p_classes, p_wants, p_limits: the class, the lease wanted and the limit
-- of each; p_minute and p_node as for session_rate_lease().  A row for
-- each lease, i its place in the arrays (from 1): (i, leased, total,
-- nodes) as session_rate_lease() answers, or (i, 0, NULL, NULL) when the
-- window's budget of that key is leased out.  The rows are locked in the
-- order of (key, class), whichever the order of the arrays, so that two
-- nodes' batches of one window cannot deadlock; they stay locked until
-- the statement commits.
CREATE FUNCTION session_rate_lease_many(p_keys bytea, p_classes integer[],
                                        p_minute integer,
                                        p_wants integer[],
                                        p_limits integer[], p_node bigint)
RETURNS TABLE (i integer, leased integer, total integer, nodes integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_n  integer := coalesce(cardinality(p_classes), 0);
    v_r  record;
BEGIN
    IF octet_length(p_keys) IS DISTINCT FROM 32 * v_n
       OR coalesce(cardinality(p_wants), 0) <> v_n
       OR coalesce(cardinality(p_limits), 0) <> v_n
    THEN
        RAISE EXCEPTION 'session_rate_lease_many: % bytes of keys for % '
                        'classes, % wants, % limits',
                        octet_length(p_keys), v_n, cardinality(p_wants),
                        cardinality(p_limits);
    END IF;

    FOR v_r IN
        SELECT k.n, substring(p_keys FROM (k.n - 1) * 32 + 1 FOR 32) AS key
          FROM generate_series(1, v_n) AS k(n)
         ORDER BY 2, p_classes[k.n], k.n
    LOOP
        i := v_r.n;

        SELECT l.leased, l.total, l.nodes INTO leased, total, nodes
          FROM session_rate_lease(v_r.key, p_classes[v_r.n], p_minute,
                                  p_wants[v_r.n], p_limits[v_r.n],
                                  p_node) AS l;

        -- no row: the window's budget is leased out (all three NULL)
        leased := coalesce(leased, 0);

        RETURN NEXT;
    END LOOP;
END
$$;
