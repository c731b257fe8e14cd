-- Events per minute, routing key and source (SQLite): what the console's overview and system
-- map read, so they never scan `events`.
--
-- `minute` is the start of the minute of the events' x-time, in the stored time form
-- (2026-09-03T12:01:00.000000Z). The store adds each event it inserts to its row in the same
-- transaction (a redelivery, a resend or an id conflict is not inserted, so not counted);
-- rows are never removed, as events are not. The same columns as the PostgreSQL migration of
-- the same version.

CREATE TABLE event_rollups (
    minute      TEXT    NOT NULL,
    routing_key TEXT    NOT NULL,
    source      TEXT    NOT NULL,
    events      INTEGER NOT NULL,
    PRIMARY KEY (minute, routing_key, source)
);

INSERT INTO event_rollups (minute, routing_key, source, events)
SELECT substr(time, 1, 16) || ':00.000000Z', routing_key, source, count(*)
FROM events
GROUP BY 1, 2, 3;
