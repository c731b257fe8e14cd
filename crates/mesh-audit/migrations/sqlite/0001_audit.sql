-- The audit trail and the dead-letter store (SQLite).
--
-- Times are TEXT in one fixed-width UTC form, 2026-09-03T12:00:00.123456Z, so comparing and
-- sorting the text is comparing and sorting the time. Ids are lowercase hyphenated UUIDs.
-- The PostgreSQL migration of the same version holds the same columns in its own types.

CREATE TABLE events (
    id           TEXT    NOT NULL PRIMARY KEY,  -- x-event-id: each event stored once
    routing_key  TEXT    NOT NULL,
    source       TEXT    NOT NULL,              -- x-source
    node         TEXT    NOT NULL,              -- x-node
    time         TEXT    NOT NULL,              -- x-time
    causation_id TEXT,                          -- x-causation-id
    schema       INTEGER,                       -- x-schema as stated; NULL means version 1
    received_at  TEXT    NOT NULL,
    headers      TEXT    NOT NULL,              -- every header, as JSON
    body         TEXT    NOT NULL               -- the JSON body exactly as emitted
);

CREATE INDEX events_by_time ON events (time, id);
CREATE INDEX events_by_key ON events (routing_key, time);
CREATE INDEX events_by_source ON events (source, time);
CREATE INDEX events_by_causation ON events (causation_id) WHERE causation_id IS NOT NULL;

CREATE TABLE dead_letters (
    id             TEXT    NOT NULL PRIMARY KEY, -- derived from the content: a redelivery is absorbed
    event_id       TEXT,                         -- NULL when the message has no well-formed id
    routing_key    TEXT    NOT NULL,
    reason         TEXT,                         -- x-mesh-dead-reason (or the broker's x-death)
    attempts       INTEGER NOT NULL,
    last_error     TEXT,
    queue          TEXT,                         -- the failing consumer's queue
    dead_at        TEXT    NOT NULL,
    received_at    TEXT    NOT NULL,
    content_type   TEXT,
    message_id     TEXT,
    amqp_timestamp INTEGER,
    headers        TEXT    NOT NULL,             -- every header, as JSON
    body           BLOB    NOT NULL,             -- byte for byte: need not be JSON
    redriven_at    TEXT,
    redrive_count  INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX dead_letters_by_time ON dead_letters (dead_at, id);
CREATE INDEX dead_letters_by_queue ON dead_letters (queue, dead_at);
CREATE INDEX dead_letters_by_reason ON dead_letters (reason, dead_at);
CREATE INDEX dead_letters_by_event ON dead_letters (event_id);
