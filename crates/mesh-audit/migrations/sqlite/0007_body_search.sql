-- Body search (SQLite): a full-text index of each event's body (decision 0030).
--
-- `events_body` is a contentless FTS5 table (it keeps the index, never the text) whose rowid
-- is the event's rowid in `events`. It indexes the words of the first 100,000 characters of
-- the body's JSON text, keys and values alike, folded to lower case, accents kept (the
-- `unicode61` tokenizer: a word is a run of letters and digits). The triggers keep it in step
-- with every insert and delete (the store's writes, retention), in the same transaction.
-- Existing rows are indexed here, in one pass. Idempotent: run again, it indexes every row
-- anew. The PostgreSQL migration of the same version builds its own index.

CREATE VIRTUAL TABLE IF NOT EXISTS events_body USING fts5 (
    body,
    content = '',
    contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 0'
);

INSERT INTO events_body (events_body) VALUES ('delete-all');
INSERT INTO events_body (rowid, body) SELECT rowid, substr(body, 1, 100000) FROM events;

CREATE TRIGGER IF NOT EXISTS events_body_insert AFTER INSERT ON events BEGIN
    INSERT INTO events_body (rowid, body) VALUES (new.rowid, substr(new.body, 1, 100000));
END;

CREATE TRIGGER IF NOT EXISTS events_body_delete AFTER DELETE ON events BEGIN
    DELETE FROM events_body WHERE rowid = old.rowid;
END;

CREATE TRIGGER IF NOT EXISTS events_body_update AFTER UPDATE OF body ON events BEGIN
    DELETE FROM events_body WHERE rowid = old.rowid;
    INSERT INTO events_body (rowid, body) VALUES (new.rowid, substr(new.body, 1, 100000));
END;
