-- Events that reuse the id of a different stored event (SQLite).
--
-- `events` holds each id once. A message whose id is stored already is a redelivery or a
-- resend when its routing key, source and body are the stored event's; otherwise it is a
-- different event reusing the id, kept here in full instead of being dropped. The same
-- columns as the PostgreSQL migration of the same version.

CREATE TABLE event_conflicts (
    id           TEXT    NOT NULL PRIMARY KEY,  -- UUID v5 of (event id, key, source, body SHA-256): a redelivery is absorbed
    event_id     TEXT    NOT NULL,              -- x-event-id: the id of the stored event in `events` it conflicts with
    routing_key  TEXT    NOT NULL,
    source       TEXT    NOT NULL,              -- x-source
    node         TEXT    NOT NULL,              -- x-node
    time         TEXT    NOT NULL,              -- x-time
    causation_id TEXT,                          -- x-causation-id
    schema       INTEGER,                       -- x-schema as stated; NULL means version 1
    received_at  TEXT    NOT NULL,              -- when the logger first saw it
    headers      TEXT    NOT NULL,              -- every header, as JSON
    body         TEXT    NOT NULL,              -- the JSON body exactly as emitted
    body_sha256  TEXT    NOT NULL               -- lowercase hex
);

CREATE INDEX event_conflicts_by_time ON event_conflicts (time, id);
CREATE INDEX event_conflicts_by_event ON event_conflicts (event_id);
