-- Session Service schema, version 11: a change of plan reaches the auth
-- caches at once.  Workers cache, with each key, whether its account's
-- plan has no monthly quota and which delivery modes it allows, so that
-- a create on such a plan is a plain insert (docs/decisions.md (nc)).
-- Whoever changes a plan or moves an account to another one (sessionctl,
-- or SQL by hand), the workers of every node hear it on the
-- session_auth channel and forget what they cached: 'plans' for a change
-- of the plans table, 'account:<id>' for an account's plan or status.

CREATE FUNCTION session_auth_plans_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('session_auth', 'plans');
    RETURN NULL;
END
$$;

CREATE TRIGGER plans_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON plans
    FOR EACH STATEMENT EXECUTE FUNCTION session_auth_plans_changed();

CREATE FUNCTION session_auth_account_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('session_auth', 'account:' || NEW.id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER accounts_plan_changed
    AFTER UPDATE OF plan, status ON accounts
    FOR EACH ROW
    WHEN (OLD.plan IS DISTINCT FROM NEW.plan
          OR OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION session_auth_account_changed();
