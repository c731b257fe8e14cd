-- Events per minute, routing key and source (PostgreSQL): what the console's overview and
-- system map read, so they never scan `events`.
--
-- `minute` is the start of the minute of the events' x-time, in UTC. The store adds each
-- event it inserts to its row in the same transaction (a redelivery, a resend or an id
-- conflict is not inserted, so not counted); rows are never removed, as events are not.
-- The same columns as the SQLite migration of the same version.

CREATE TABLE event_rollups (
    minute      timestamptz NOT NULL,
    routing_key text        NOT NULL,
    source      text        NOT NULL,
    events      bigint      NOT NULL,
    PRIMARY KEY (minute, routing_key, source)
);

INSERT INTO event_rollups (minute, routing_key, source, events)
SELECT date_trunc('minute', time AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', routing_key, source,
       count(*)
FROM events
GROUP BY 1, 2, 3;
