-- Session Service schema, version 1: the whole data model of docs/api.md §3 and §4.
-- Applied by "sessionctl migrate" inside one transaction.

CREATE TABLE plans (
    name           text PRIMARY KEY
                   CHECK (name ~ '^[A-Za-z0-9_.-]{1,64}$'),
    -- NULL means no monthly limit
    monthly_quota  integer CHECK (monthly_quota IS NULL OR monthly_quota >= 0),
    features       text[] NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

INSERT INTO plans (name, monthly_quota, features) VALUES
    ('free', 100, '{long_poll}'),
    ('pro', 10000, '{long_poll,webhook}'),
    ('unlimited', NULL, '{long_poll,webhook}')
ON CONFLICT (name) DO NOTHING;

CREATE TABLE accounts (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text NOT NULL,
    plan        text NOT NULL REFERENCES plans (name),
    status      text NOT NULL DEFAULT 'active'
                CHECK (status IN ('active', 'suspended')),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE projects (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    account_id      uuid NOT NULL REFERENCES accounts (id),
    name            text NOT NULL,
    -- "whsec_" + base64 of 32 random bytes (Standard Webhooks)
    webhook_secret  text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX projects_account ON projects (account_id);

CREATE TABLE api_keys (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id  uuid NOT NULL REFERENCES projects (id),
    -- SHA-256 of the lower-case key; the key itself is never stored
    key_hash    bytea NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
    prefix      text NOT NULL,
    -- last four hex digits, for "key list"
    hint        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    deleted_at  timestamptz
);

CREATE INDEX api_keys_project ON api_keys (project_id);

CREATE TABLE sessions (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id          uuid NOT NULL REFERENCES projects (id),
    delivery_mode       text NOT NULL
                        CHECK (delivery_mode IN ('webhook', 'long_poll')),
    webhook_url         text,
    status              text NOT NULL DEFAULT 'open'
                        CHECK (status IN ('open', 'completed', 'expired')),
    image_count         integer NOT NULL DEFAULT 0,
    acknowledged_count  integer NOT NULL DEFAULT 0,
    -- clock_timestamp: distinct, microsecond-ordered creation times
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at          timestamptz NOT NULL,
    completed_at        timestamptz,
    CHECK ((delivery_mode = 'webhook') = (webhook_url IS NOT NULL))
);

CREATE INDEX sessions_project_created
    ON sessions (project_id, created_at DESC, id DESC);
CREATE INDEX sessions_due_expiry
    ON sessions (expires_at) WHERE status <> 'expired';

CREATE TABLE images (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    session_id       uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    sequence         integer NOT NULL CHECK (sequence >= 1),
    content_type     text NOT NULL,
    size             integer NOT NULL CHECK (size >= 1),
    sha256           bytea NOT NULL CHECK (octet_length(sha256) = 32),
    content          bytea NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    acknowledged_at  timestamptz,
    UNIQUE (session_id, sequence)
);

CREATE INDEX images_unacknowledged
    ON images (session_id, sequence) WHERE acknowledged_at IS NULL;

-- sessions created per account per UTC calendar month
CREATE TABLE monthly_usage (
    account_id        uuid NOT NULL REFERENCES accounts (id),
    month             date NOT NULL,
    sessions_created  integer NOT NULL DEFAULT 0
                      CHECK (sessions_created >= 0),
    PRIMARY KEY (account_id, month)
);

CREATE TABLE idempotency_keys (
    project_id    uuid NOT NULL REFERENCES projects (id),
    key           text NOT NULL,
    method        text NOT NULL,
    path          text NOT NULL,
    body_sha256   bytea NOT NULL,
    -- NULL while the first request is still running
    status        integer,
    content_type  text,
    location      text,
    body          bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL DEFAULT now() + interval '24 hours',
    PRIMARY KEY (project_id, key)
);

CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

CREATE TABLE webhook_outbox (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id       uuid NOT NULL REFERENCES projects (id),
    session_id       uuid NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    event_type       text NOT NULL
                     CHECK (event_type IN ('image.uploaded',
                                           'session.completed',
                                           'session.expired')),
    url              text NOT NULL,
    -- the exact body, fixed when queued, so every retry signs the same bytes
    payload          text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    failed_at        timestamptz,
    last_error       text
);

CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at)
    WHERE delivered_at IS NULL AND failed_at IS NULL;
