-- The audit trail and the dead-letter store (PostgreSQL).
--
-- The same columns as the SQLite migration of the same version, in PostgreSQL's own types:
-- uuid, timestamptz (microseconds), jsonb for headers (queryable), json for an event's body
-- (kept exactly as emitted: jsonb would reorder keys and drop duplicates), bytea for a dead
-- letter's body (which need not be JSON).

CREATE TABLE events (
    id           uuid        NOT NULL PRIMARY KEY,  -- x-event-id: each event stored once
    routing_key  text        NOT NULL,
    source       text        NOT NULL,              -- x-source
    node         text        NOT NULL,              -- x-node
    time         timestamptz NOT NULL,              -- x-time
    causation_id text,                              -- x-causation-id (need not be an event)
    schema       bigint,                            -- x-schema as stated (a u32); NULL means version 1
    received_at  timestamptz NOT NULL,
    headers      jsonb       NOT NULL,
    body         json        NOT NULL
);

CREATE INDEX events_by_time ON events (time, id);
CREATE INDEX events_by_key ON events (routing_key text_pattern_ops, time);
CREATE INDEX events_by_source ON events (source, time);
CREATE INDEX events_by_causation ON events (causation_id) WHERE causation_id IS NOT NULL;

CREATE TABLE dead_letters (
    id             uuid        NOT NULL PRIMARY KEY, -- derived from the content: a redelivery is absorbed
    event_id       uuid,                             -- NULL when the message has no well-formed id
    routing_key    text        NOT NULL,
    reason         text,                             -- x-mesh-dead-reason (or the broker's x-death)
    attempts       bigint      NOT NULL,
    last_error     text,
    queue          text,                             -- the failing consumer's queue
    dead_at        timestamptz NOT NULL,
    received_at    timestamptz NOT NULL,
    content_type   text,
    message_id     text,
    amqp_timestamp bigint,
    headers        jsonb       NOT NULL,
    body           bytea       NOT NULL,
    redriven_at    timestamptz,
    redrive_count  integer     NOT NULL DEFAULT 0
);

CREATE INDEX dead_letters_by_time ON dead_letters (dead_at, id);
CREATE INDEX dead_letters_by_queue ON dead_letters (queue, dead_at);
CREATE INDEX dead_letters_by_reason ON dead_letters (reason, dead_at);
CREATE INDEX dead_letters_by_event ON dead_letters (event_id);
