//! Tests of the files in `deploy/` (see `deploy/README.md`); the crate has no code of its own.
//!
//! - `tests/compose.rs`: `deploy/compose.yaml` as `docker compose config` (or Debian's
//!   `docker-compose config`) resolves it, and the audit logger's command line in it;
//! - `tests/systemd.rs`: `deploy/mesh-audit.service` through `systemd-analyze verify`, its
//!   hardening, and its command line with the example environment file;
//! - `tests/dockerfile.rs`: `deploy/Dockerfile`'s stages, user and build command (no
//!   Dockerfile linter is packaged in Debian, and no container engine runs in CI).
//!
//! A missing tool fails the test with the package to install; `scripts/test.sh` installs them.
