-- A dead letter's provenance (PostgreSQL).
--
-- `untrusted` on `dead_letters` is set when a logger enforcing identity found that the dead
-- letter's claims cannot be believed (`mesh_core::provenance::dead_letter_trusted`): a dead letter
-- mesh made whose `user-id` is not the owner of the queue its `x-mesh-dead-queue` names, or
-- one the broker made delivered under another module's queue name. Such a row is never
-- re-driven as it is. false when no check was made: a logger not enforcing identity, and
-- rows stored before this migration.
-- The same column as the SQLite migration of the same version.

ALTER TABLE dead_letters ADD COLUMN untrusted boolean NOT NULL DEFAULT false;
