-- Retention by arrival (SQLite).
--
-- Retention (`mesh audit prune`, the logger's `--retain`) removes rows by `received_at`, when
-- the logger stored them, never by the event's own `x-time`: a publisher must not choose its
-- event's retention. SQLite removes them in bounded chunks between batches, found through
-- these indexes. The PostgreSQL migration of the same version partitions `events` by arrival
-- instead. Idempotent (`IF NOT EXISTS`).

CREATE INDEX IF NOT EXISTS events_by_arrival ON events (received_at);
CREATE INDEX IF NOT EXISTS event_conflicts_by_arrival ON event_conflicts (received_at);
CREATE INDEX IF NOT EXISTS dead_letters_by_arrival ON dead_letters (received_at);
