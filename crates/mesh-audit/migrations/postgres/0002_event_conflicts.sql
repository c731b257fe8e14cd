-- Events that reuse the id of a different stored event (PostgreSQL).
--
-- `events` holds each id once. A message whose id is stored already is a redelivery or a
-- resend when its routing key, source and body are the stored event's; otherwise it is a
-- different event reusing the id, kept here in full instead of being dropped. The same
-- columns as the SQLite migration of the same version.

CREATE TABLE event_conflicts (
    id           uuid        NOT NULL PRIMARY KEY,  -- UUID v5 of (event id, key, source, body SHA-256): a redelivery is absorbed
    event_id     uuid        NOT NULL,              -- x-event-id: the id of the stored event in `events` it conflicts with
    routing_key  text        NOT NULL,
    source       text        NOT NULL,              -- x-source
    node         text        NOT NULL,              -- x-node
    time         timestamptz NOT NULL,              -- x-time
    causation_id text,                              -- x-causation-id
    schema       bigint,                            -- x-schema as stated; NULL means version 1
    received_at  timestamptz NOT NULL,              -- when the logger first saw it
    headers      jsonb       NOT NULL,
    body         json        NOT NULL,              -- kept exactly as emitted
    body_sha256  text        NOT NULL               -- lowercase hex
);

CREATE INDEX event_conflicts_by_time ON event_conflicts (time, id);
CREATE INDEX event_conflicts_by_event ON event_conflicts (event_id);
