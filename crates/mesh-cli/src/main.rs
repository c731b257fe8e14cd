//! `mesh`: the command-line tool of the mesh event bus.
//!
//! ```text
//! mesh emit <KEY> [-d JSON | -f FILE | stdin] [-s SOURCE] [--causation ID] [--schema V]
//!                 [-n COUNT] [--rate R]
//! mesh tail [PATTERN…] [-n COUNT] [--metrics-addr ADDR]
//! mesh call <TOOL> [-d JSON] [-t 5s]
//! mesh topology show | plan [--check] | apply [--force] [--dry-run]
//!               [-b M=P…] [-m M -p P…] [-f SPEC]
//! mesh access plan [--check] | apply [--dry-run]   -f SPEC [--passwords F]
//! mesh status
//! mesh audit run [--store URL] [--batch-size N] [--batch-wait 50ms] [--metrics-addr ADDR]
//! mesh audit trace <ID>
//! mesh audit replay -k PATTERN --since T [--until T] [-s SOURCE] --to NODE.MODULE
//!                   [--rate N] [--dry-run]
//! mesh audit query | count [-k PATTERN] [-s SOURCE] [--since T] [--until T] [-n LIMIT]
//! mesh dead list [-q QUEUE] [-r REASON] [--pending] [--since T] [-n LIMIT]
//! mesh dead show <ID | EVENT-ID>
//! mesh dead redrive <ID…> [--again] | --all | -q QUEUE   [--dry-run]
//! mesh dead purge [-q QUEUE] [-r REASON] [--redriven] | --all   [--dry-run]
//! mesh logs tail [PATTERN] [-n COUNT]
//! mesh contract export [-m OWNER] [-o FILE] [--format asyncapi|system] [--from FILE…]
//! mesh contract show [--from FILE…]
//! mesh contract check --against OLD [NEW]
//! mesh contract codegen rust [-m OWNER] [-o FILE] [--from FILE…]
//! mesh outbox relay --database URL -s ORIGIN.OWNER… [--batch N] [--poll-interval 10ms]
//!                   [--lease-ttl 60s] [--publish-deadline 30s] [--retention 1h]
//!                   [--owner NAME] [--metrics-addr ADDR]
//! mesh outbox status --database URL
//! mesh saga list --database URL [--saga NAME] [-n N]
//! mesh saga show SAGA KEY --database URL
//! mesh completions bash | zsh | fish | elvish | powershell
//! mesh man [-o DIR]
//! ```
//!
//! `mesh-audit run …` (the crate's second binary) is `mesh audit run …` with the same options.
//!
//! # Global options
//!
//! Every command (and `mesh-audit`) takes these. Each is taken from the first of: the flag,
//! the variable, the chosen context of the config file, the default.
//!
//! | flag | variable | context key | default |
//! |---|---|---|---|
//! | `--context NAME` | `MESH_CONTEXT` | (`current-context`) | none |
//! | `--url URL` | `MESH_URL` | `url` (+ `cacertfile`, `certfile`, `keyfile`) | `amqp://127.0.0.1:5672`, guest/guest |
//! | `--password-file PATH` | `MESH_PASSWORD_FILE`, or `MESH_PASSWORD` (the password) | `password-file` | the URL's password |
//! | `--node NODE` | `MESH_NODE` | `node` | the host name up to its first dot |
//! | `--queue-type quorum\|classic` | `MESH_QUEUE_TYPE` | `queue-type` | `quorum` |
//! | `--connect-timeout 5s` | `MESH_CONNECT_TIMEOUT` | `connect-timeout` | `5s` (1ms to 24h) |
//! | `--management-url URL` | `MESH_MANAGEMENT_URL` | `management-url` | `http://<host>:15672` |
//! | `--management-ca-file PEM` | `MESH_MANAGEMENT_CA_FILE` | `management-ca-file` | the URL's `cacertfile`, else the system's roots |
//! | `--store URL` (audit, dead and contract commands, status) | `MESH_AUDIT_STORE` | `store` | `$XDG_DATA_HOME/mesh/audit.db` (`~/.local/share/mesh/audit.db`) |
//! | `--log-format text\|json` | `MESH_LOG_FORMAT` | | `text` |
//! | `--management-allow-http`, `--json`, `--color auto\|always\|never` | | | off, off, auto |
//!
//! Logs go to stderr, filtered by `RUST_LOG`: `info` for the commands that run as services
//! (`audit run`, `mesh-audit run`, `console`, `outbox relay`), nothing for the others unless
//! `RUST_LOG` asks (a `RUST_LOG` that is not a filter is a usage error). `--color` governs
//! their colour as it does the output's: `auto` colours only when stderr is a terminal and
//! `NO_COLOR` is unset, so a log file or journald never holds an escape code.
//! `--log-format json` writes one JSON object per record.
//!
//! The config file is `MESH_CONFIG`, else `$XDG_CONFIG_HOME/mesh/config.toml`, else
//! `~/.config/mesh/config.toml`: named contexts under `[contexts.NAME]` and an optional
//! `current-context`; no password in it (a `password` key, or a URL with one, is refused). A
//! bad file is exit code 2 naming the file and the line. `emit`, `tail` and `call` speak AMQP
//! only; `topology`, `access` and the queue part of `status` read RabbitMQ's management HTTP
//! API. `amqps://…?cacertfile=…` connects with TLS.
//!
//! # Short flags
//!
//! One letter means one thing in every command that has the option; the connection options
//! and the flags that destroy or run dry (`--all`, `--force`, `--dry-run`) have none.
//!
//! | short | long | commands |
//! |---|---|---|
//! | `-d` | `--data` | `emit`, `call` |
//! | `-f` | the input file: `--data-file` / `--spec` | `emit` / `topology`, `access` |
//! | `-n` | how many: `--count` / `--limit` | `emit`, `tail`, `logs tail` / `audit query`, `dead list`, `saga list` |
//! | `-s` | `--source` | `emit`, `audit query`, `audit count`, `outbox relay` |
//! | `-k` | `--key` | `audit query`, `audit count` |
//! | `-t` | `--timeout` | `call` |
//! | `-q` | `--queue` | `dead list`, `dead redrive`, `dead purge` |
//! | `-r` | `--reason` | `dead list`, `dead purge` |
//! | `-m` / `-p` / `-b` | `--module` / `--pattern` / `--bind` | `topology show`, `plan`, `apply` (`-m` also `contract export`, `contract codegen`) |
//! | `-o` | `--out` | `man`, `contract export`, `contract codegen` |
//!
//! Durations have one syntax (`500ms`, `5s`, `1m30s`, `2h`, `1day`) in `--timeout`,
//! `--connect-timeout` and the "ago" form of `--since`/`--until`. `--reason` takes the dead
//! reasons of `mesh_core::DeadReason` (`max-attempts`, `permanent`, `undecodable`,
//! `unread-schema`, `delivery-limit`, `rejected`, `expired`, `forged-source`,
//! `schema-invalid`, `foreign-path`); any other value is a usage error listing them. `--bind M=P` binds module
//! M's queue on pattern P whatever the order of the options; `--pattern` is the only
//! `--module`'s, or, with several, the one's before it.
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
//! | 11 | `contract check`: a breaking change (the newer contract breaks a module: see docs/CONTRACT.md, "Compatibility rules") |
//!
//! Errors are printed on one line to stderr with their cause chain
//! (`error: cannot emit `x.y`: invalid key: unknown origin `x`, …`), followed by a line
//! `hint: …` when the error says what to do (the audit store's do). Under `--json` a failure,
//! a refused command line included, is one JSON object on stderr: `error`, `kind` (the code's
//! name), `exit_code` and, when known, `hint`.

use std::process::ExitCode;

fn main() -> ExitCode {
    mesh_cli::mesh_main()
}
