-- Session Service schema, version 23: the monthly quota counts every
-- session of the month, including those created while the account's plan
-- had no quota.  A create on a plan without a quota touches no usage row
-- (docs/decisions.md (cm), (nc)), so a plan that gains a quota, or an
-- account moved to a plan with one, would otherwise start the month from
-- the row's old figure (none, or where counting stopped) and let the
-- account create its quota again (docs/api.md §10.9, decisions.md (jd)).
--
-- When a plan's quota is set (to any number) and when an account moves
-- to a plan with a quota, the usage row of the month of each account
-- concerned becomes the number of sessions its projects created this UTC
-- month, unless the row already says more (sessions deleted by
-- session_retention within the month stay counted).  A count per account
-- over sessions_project_created, once per change: plans and accounts
-- change rarely, and a create pays nothing for it.

CREATE FUNCTION session_usage_seed(p_accounts uuid[]) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO monthly_usage AS u (account_id, month, sessions_created)
    SELECT p.account_id, m.month, count(*)::integer
      FROM (SELECT date_trunc('month', now() AT TIME ZONE 'UTC')::date
                   AS month) m
      JOIN projects p ON p.account_id = ANY (p_accounts)
      JOIN sessions s ON s.project_id = p.id
       AND s.created_at >= m.month::timestamp AT TIME ZONE 'UTC'
     GROUP BY p.account_id, m.month
    ON CONFLICT (account_id, month) DO UPDATE
        SET sessions_created = greatest(u.sessions_created,
                                        EXCLUDED.sessions_created)
$$;

CREATE FUNCTION session_usage_plan_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM session_usage_seed(ARRAY(SELECT a.id FROM accounts a
                                      WHERE a.plan = NEW.name));
    RETURN NULL;
END
$$;

CREATE TRIGGER plans_quota_set
    AFTER UPDATE OF monthly_quota ON plans
    FOR EACH ROW
    WHEN (NEW.monthly_quota IS NOT NULL
          AND OLD.monthly_quota IS DISTINCT FROM NEW.monthly_quota)
    EXECUTE FUNCTION session_usage_plan_changed();

CREATE FUNCTION session_usage_account_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM plans pl WHERE pl.name = NEW.plan
                                        AND pl.monthly_quota IS NOT NULL) THEN
        PERFORM session_usage_seed(ARRAY[NEW.id]);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER accounts_plan_moved
    AFTER UPDATE OF plan ON accounts
    FOR EACH ROW
    WHEN (OLD.plan IS DISTINCT FROM NEW.plan)
    EXECUTE FUNCTION session_usage_account_moved();
