//! `mesh`: the command-line tool of the mesh event bus.
//!
//! ```text
//! mesh emit <KEY> [--data JSON | --data-file F | stdin] [--source S] [--causation ID]
//!                 [--schema V] [--count N] [--rate R]
//! mesh tail [PATTERN…] [--count N] [--metrics-addr ADDR]
//! mesh audit run [--store URL] [--metrics-addr ADDR]
//! mesh logs tail [PATTERN] [--count N]
//! mesh call <TOOL> [--data JSON] [--timeout 5s]
//! mesh topology show | plan [--check] | apply [--force]   [--module M --pattern P…] [--spec F]
//! mesh access plan [--check] | apply   --spec F [--passwords F]
//! mesh status
//! ```
//!
//! Every command takes `--url` (`MESH_URL`, default `amqp://127.0.0.1:5672`, guest/guest;
//! `amqps://…?cacertfile=…` for TLS), `--password-file` (`MESH_PASSWORD_FILE`; or the password
//! itself in `MESH_PASSWORD`), `--node` (`MESH_NODE`, default: the host name up to its first dot), `--json` (one JSON
//! object per line on stdout) and `--color auto|always|never`. `emit`, `tail` and `call`
//! speak AMQP only; `topology`, `access` and the queue part of `status` read RabbitMQ's management
//! HTTP API (`--management-url`, `MESH_MANAGEMENT_URL`, default `http://<host>:15672`).
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (also when the reader of the output went away: a broken pipe) |
//! | 1 | an error without a code of its own |
//! | 2 | usage: bad arguments (also a number or duration outside its bounds, e.g. `--timeout` beyond 24h), an invalid key, pattern or name, data that is not JSON, an emitter that does not own the key |
//! | 3 | the broker is unreachable (connection refused, timed out, unknown host, tls failed) |
//! | 4 | `call`: no server serves the tool |
//! | 5 | `call`: no reply within `--timeout` |
//! | 6 | `call`: the tool answered with an error |
//! | 7 | `emit`: at least one event was not confirmed by the broker |
//! | 8 | the RabbitMQ management API is unreachable (`topology`, `access`, `status`) |
//! | 9 | `topology plan --check`, `access plan --check`: the broker differs from the contract or the access plan |
//! | 10 | forbidden: the broker refused this user the operation (its permissions: a key it may not publish, a queue it may not read, the default exchange) |
//!
//! Errors are printed on one line to stderr with their cause chain
//! (`error: cannot emit `x.y`: invalid key: unknown origin `x`, …`).

use std::process::ExitCode;

fn main() -> ExitCode {
    mesh_cli::mesh_main()
}
