-- Retention by arrival (PostgreSQL): `events` partitioned by `received_at`.
--
-- Retention (`mesh audit prune`, the logger's `--retain`) removes rows by `received_at`, when
-- the logger stored them, never by the event's own `x-time`. `events` becomes a table
-- partitioned by range of `received_at`: one partition per UTC day, `events_pYYYYMMDD`,
-- created ahead by the store, and `events_default` for an arrival no day's partition holds.
-- Retention drops whole partitions, and removes the rest in bounded chunks.
--
-- A partitioned table's unique keys must hold the partition key, so `events`' key is
-- `(id, received_at)` and "each id stored once" is kept by `event_ids`, one row per stored
-- event id, unpartitioned, written in the same statement as the event (decision 0022). Its
-- rows are removed with their events.
--
-- An existing store is converted in place: the old table becomes the partition
-- `events_legacy`, holding every arrival up to the end of the UTC day of its newest row. The
-- cost is a few passes over the old rows (its `(id, received_at)` key and arrival index
-- built, the partition bound checked, its ids copied to `event_ids`), while the migration
-- holds the old table locked; the logger runs the migration before it consumes. A store already
-- partitioned is left as it is (the migration is idempotent).

DO $migration$
DECLARE
    upper_bound timestamptz;
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'events'::regclass) = 'p' THEN
        RETURN;
    END IF;

    ALTER TABLE events RENAME TO events_legacy;
    -- The key of a partition: `event_ids` keeps each id once from now on.
    ALTER TABLE events_legacy DROP CONSTRAINT events_pkey;
    ALTER TABLE events_legacy ADD CONSTRAINT events_legacy_pkey PRIMARY KEY (id, received_at);
    ALTER INDEX events_by_time RENAME TO events_legacy_by_time;
    ALTER INDEX events_by_key RENAME TO events_legacy_by_key;
    ALTER INDEX events_by_source RENAME TO events_legacy_by_source;
    ALTER INDEX events_by_causation RENAME TO events_legacy_by_causation;

    CREATE TABLE events (
        id           uuid        NOT NULL,              -- x-event-id: once, by `event_ids`
        routing_key  text        NOT NULL,
        source       text        NOT NULL,              -- x-source
        node         text        NOT NULL,              -- x-node
        time         timestamptz NOT NULL,              -- x-time
        causation_id text,                              -- x-causation-id
        schema       bigint,                            -- x-schema as stated; NULL means version 1
        received_at  timestamptz NOT NULL,              -- arrival: the partition key
        headers      jsonb       NOT NULL,
        body         json        NOT NULL,
        publisher    text,
        PRIMARY KEY (id, received_at)
    ) PARTITION BY RANGE (received_at);

    CREATE INDEX events_by_time ON events (time, id);
    CREATE INDEX events_by_key ON events (routing_key text_pattern_ops, time);
    CREATE INDEX events_by_source ON events (source, time);
    CREATE INDEX events_by_causation ON events (causation_id) WHERE causation_id IS NOT NULL;
    CREATE INDEX events_by_arrival ON events (received_at);

    CREATE TABLE event_ids (
        id          uuid        NOT NULL PRIMARY KEY,
        received_at timestamptz NOT NULL               -- its event's arrival
    );
    CREATE INDEX event_ids_by_arrival ON event_ids (received_at);
    INSERT INTO event_ids (id, received_at) SELECT id, received_at FROM events_legacy;

    SELECT max(received_at) INTO upper_bound FROM events_legacy;
    IF upper_bound IS NULL THEN
        DROP TABLE events_legacy;
    ELSE
        upper_bound := (date_trunc('day', upper_bound AT TIME ZONE 'UTC') + interval '1 day')
            AT TIME ZONE 'UTC';
        EXECUTE format(
            'ALTER TABLE events ATTACH PARTITION events_legacy FOR VALUES FROM (MINVALUE) TO (%L)',
            upper_bound
        );
    END IF;

    CREATE TABLE events_default PARTITION OF events DEFAULT;
END
$migration$;

CREATE INDEX IF NOT EXISTS event_conflicts_by_arrival ON event_conflicts (received_at);
CREATE INDEX IF NOT EXISTS dead_letters_by_arrival ON dead_letters (received_at);
