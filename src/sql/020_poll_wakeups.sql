-- Session Service schema, version 20: a write wakes the long polls only
-- of a session that a poll may be waiting on (docs/decisions.md (yf)).
--
-- Until now every upload and every complete sent a NOTIFY on
-- session_events, whether or not any poll waited on the session.  A
-- NOTIFY is not free: the writer takes PostgreSQL's notify lock at its
-- commit (which serialises every notifying commit of the database), and
-- each node's LISTEN backend is woken to read the entry.
--
-- sessions.polled_until: a poll that is about to wait on the session
-- "arms" it, setting this a few minutes ahead (by a statement of its own,
-- committed before the poll's next read, so that either the write locks
-- the row first and the read sees the write, or the arm does and the
-- write sees it).  A write notifies when polled_until is still ahead, or
-- when session_wakeups says that not every node arms yet.
--
-- session_wakeups.polled_only: false while nodes of a release before
-- this one may serve (they poll without arming): every write notifies,
-- as before.  A database made from nothing by this release's sessionctl
-- starts true; one upgraded starts false, and `sessionctl wakeups
-- polled` sets it once every node runs this release (docs/operations.md,
-- "Upgrading").  Nodes of this release arm either way.

SET LOCAL lock_timeout = '5s';

-- NULL: never armed; a new column without a default rewrites nothing
ALTER TABLE sessions ADD COLUMN polled_until timestamptz;

CREATE TABLE session_wakeups (
    -- one row only
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    polled_only  boolean NOT NULL
);

-- sessionctl migrate sets sessionctl.schema_before to the version it
-- found: 0 for a database it made from nothing
INSERT INTO session_wakeups (polled_only)
VALUES (coalesce(current_setting('sessionctl.schema_before', true), '')
        = '0');
