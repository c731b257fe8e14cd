-- Body search (PostgreSQL): a full-text index of each event's body (decision 0030).
--
-- A GIN index on the words of the first 100,000 characters of the body's JSON text, keys and
-- values alike (`to_tsvector('simple', …)`: lower case, no stemming, no stop words). It is
-- created on the partitioned `events`, so on every partition, those made later included; the
-- store's body search uses the same expression. Building it reads every existing row once,
-- holding the table against writes meanwhile (the logger runs the migration before it
-- consumes). The first 100,000 characters: a tsvector holds at most 1 MB, which a longer
-- body of distinct words could pass, failing its insert.

CREATE INDEX IF NOT EXISTS events_by_body ON events
    USING gin (to_tsvector('simple', left(body::text, 100000)));
