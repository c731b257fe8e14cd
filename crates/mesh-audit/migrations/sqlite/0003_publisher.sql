-- Who published each message, as the broker validated it (SQLite).
--
-- `publisher` on `events` and `event_conflicts` is the event's validated user
-- (`mesh_core::codec::validated_user`): the `user-id` property RabbitMQ checked against the
-- publishing connection, or `x-mesh-user` on a copy mesh published on the original
-- publisher's behalf. `user_id` on `dead_letters` is the dead letter's own `user-id`
-- property: who published that copy (the consumer or logger that gave up on it; the
-- original publisher for one the broker dead-lettered itself, keeping its properties). The
-- original publisher of a copy mesh made rides in its `x-mesh-user` header, kept with the
-- others. NULL when the message carried none, and for rows stored before this migration.
-- The same columns as the PostgreSQL migration of the same version.

ALTER TABLE events ADD COLUMN publisher TEXT;
ALTER TABLE event_conflicts ADD COLUMN publisher TEXT;
ALTER TABLE dead_letters ADD COLUMN user_id TEXT;
