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
-- session_retention within the month stay counted).  The row is locked
-- before the count, so that no counted create falls between the two.  A
-- count per account over sessions_project_created, once per change:
-- plans and accounts change rarely, and a create pays nothing for it.
-- Applying this migration counts nothing: an account moved to a plan
-- with a quota earlier in the month is counted from its next change.

CREATE FUNCTION session_usage_seed(p_accounts uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_month    date := date_trunc('month', now() AT TIME ZONE 'UTC')::date;
    v_account  uuid;
    v_made     integer;
BEGIN
    FOREACH v_account IN ARRAY p_accounts LOOP
        -- the row first, locked: a counted create waits for it from here
        -- on, and every create that counted before has committed its
        -- session by the time the count below takes its snapshot
        INSERT INTO monthly_usage (account_id, month, sessions_created)
        VALUES (v_account, v_month, 0)
        ON CONFLICT (account_id, month) DO NOTHING;

        PERFORM 1 FROM monthly_usage
          WHERE account_id = v_account AND month = v_month
            FOR UPDATE;

        SELECT count(*) INTO v_made
          FROM projects p
          JOIN sessions s ON s.project_id = p.id
         WHERE p.account_id = v_account
           AND s.created_at >= v_month::timestamp AT TIME ZONE 'UTC';

        UPDATE monthly_usage
           SET sessions_created = greatest(sessions_created, v_made)
         WHERE account_id = v_account AND month = v_month;
    END LOOP;
END
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
