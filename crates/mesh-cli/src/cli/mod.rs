//! The command line: every command, option and example, as clap derives it; one file per
//! family of commands, the values they parse in [`values`], and this file the program's own
//! definition (`mesh` and its commands) and its parse.
//!
//! Every other module reads the command line through the names re-exported here.

mod access;
mod audit;
mod bus;
mod console;
mod contract;
mod dead;
mod generate;
mod global;
mod outbox;
mod saga;
mod shared;
mod topology;
mod values;

use clap::{Parser, Subcommand};

pub(crate) use self::access::AccessCommand;
pub(crate) use self::audit::{
    AuditCli, AuditCliCommand, AuditCommand, AuditRunArgs, EventFilter, ReplayArgs,
};
pub(crate) use self::bus::{CallArgs, EmitArgs, LogsCommand, LogsTailArgs, StatusArgs, TailArgs};
pub(crate) use self::console::ConsoleArgs;
pub(crate) use self::contract::{
    CodegenLanguage, ContractCheckArgs, ContractCodegenArgs, ContractCommand, ContractDocsArgs,
    ContractExportArgs, ContractFormat, ContractSource,
};
pub(crate) use self::dead::{DeadCommand, RedriveArgs};
pub(crate) use self::generate::{CompletionsArgs, ManArgs};
pub(crate) use self::global::{ColorWhen, EnvPassword, Global, LogFormatArg, QueueTypeArg};
pub(crate) use self::outbox::{shown, OutboxCommand, OutboxDatabaseArg, OutboxRelayArgs, Source};
pub(crate) use self::saga::{SagaCommand, SagaDatabaseArg};
pub(crate) use self::shared::StoreArg;
pub(crate) use self::topology::{TopologyArgs, TopologyCommand};
// The topology spec's tests make their bindings as the command line does.
#[cfg(test)]
pub(crate) use self::topology::parse_binding;
pub(crate) use self::values::{parse_duration, rate_interval};

use self::bus::{CALL_HELP, EMIT_HELP, STATUS_HELP, TAIL_HELP};
use self::console::CONSOLE_HELP;
use self::generate::{COMPLETIONS_HELP, MAN_HELP};

/// The mesh command-line tool: emit and watch events, call tools, and compare the broker's
/// topology with the mesh contract.
#[derive(Debug, Parser)]
#[command(
    name = "mesh",
    version,
    about,
    long_about = None,
    propagate_version = true,
    after_help = exit_table!(),
    after_long_help = LONG_HELP,
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,

    #[command(subcommand)]
    pub(crate) command: Command,
}

const LONG_HELP: &str = concat!(
    "\
Examples:
  mesh emit module.umami.site.created --data '{\"site\":\"blog\"}'
  mesh tail 'module.umami.#' --count 10
  mesh call billing.quote --data '{\"plan\":\"basic\"}' --timeout 2s
  mesh topology plan --bind 'billing=module.umami.#'
  mesh access plan --spec mesh.toml --check
  mesh status --json
  mesh outbox relay --database postgres://shop@db/shop --source module.shop
  source <(mesh completions bash)
  mesh man --out /usr/local/share/man/man1

Short flags (one letter, one meaning): -d --data, -f the input file (--data-file, --spec),
-n how many (--count, --limit), -s --source, -k --key, -t --timeout, -q --queue,
-r --reason, -m --module, -p --pattern, -b --bind, -o --out. Durations: 500ms, 5s, 1m30s,
2h, 1day.

What needs what:
  emit, tail and call speak AMQP only. topology show/plan/apply/remove, access plan/apply and
  the queue part of status read RabbitMQ's management HTTP API (the rabbitmq_management
  plugin, by default http://<broker host>:15672 with the AMQP credentials; https with
  --management-url https://… and --management-ca-file): AMQP cannot list bindings or queue
  arguments.
  Without it those commands fail with exit code 8. Credentials go over plain http only to
  a loopback host, unless --management-allow-http.

",
    exit_table!()
);

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Emit one event, or many with --count
    #[command(after_help = EMIT_HELP)]
    Emit(EmitArgs),
    /// Print events as they are emitted (an ephemeral, at-most-once subscription)
    #[command(after_help = TAIL_HELP)]
    Tail(TailArgs),
    /// Call a tool and print its reply
    #[command(after_help = CALL_HELP)]
    Call(CallArgs),
    /// Compare the broker's exchanges, queues and bindings with the contract, and fix them
    #[command(subcommand)]
    Topology(TopologyCommand),
    /// Compare the broker's users and permissions with the access plan, and fix them
    #[command(subcommand)]
    Access(AccessCommand),
    /// Show the connection, and the queues of this node's modules
    #[command(after_help = STATUS_HELP)]
    Status(StatusArgs),
    /// Record every event (the audit logger) and query what was recorded
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Inspect and re-drive dead letters recorded by the audit logger
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Follow the log records processes ship to the mesh.logs exchange
    #[command(subcommand)]
    Logs(LogsCommand),
    /// Export, show and check the contracts the modules announced (AsyncAPI 3.0); generate code
    #[command(subcommand)]
    Contract(ContractCommand),
    /// Relay a transactional outbox's committed events to the broker, and count its rows
    #[command(subcommand)]
    Outbox(OutboxCommand),
    /// List and show the instances of the sagas in a service's database
    #[command(subcommand)]
    Saga(SagaCommand),
    /// Serve the operator's console: events, dead letters, a live tail and the system map, with
    /// re-drive, replay and purge
    #[command(after_help = CONSOLE_HELP)]
    Console(ConsoleArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell
    #[command(after_help = COMPLETIONS_HELP)]
    Completions(CompletionsArgs),
    /// Write the man pages: mesh.1 and one page per command (mesh-emit.1, mesh-dead-redrive.1…)
    #[command(after_help = MAN_HELP)]
    Man(ManArgs),
}

/// Parses the command line, matching each `--pattern` to the `--module` before it (clap's
/// derive keeps the values but not their order among options).
pub(crate) fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().try_get_matches()?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    let Some(("topology", topology)) = matches.subcommand() else {
        return Ok(cli);
    };
    // `remove` takes one --module and no --pattern.
    let Some((_, sub)) = topology.subcommand().filter(|(name, _)| *name != "remove") else {
        return Ok(cli);
    };
    let modules: Vec<usize> = sub
        .indices_of("modules")
        .map(Iterator::collect)
        .unwrap_or_default();
    let owners: Vec<Option<usize>> = sub
        .indices_of("patterns")
        .map(|indices| {
            indices
                .map(|p| modules.iter().rposition(|&m| m < p))
                .collect()
        })
        .unwrap_or_default();
    if let Command::Topology(
        TopologyCommand::Show(args)
        | TopologyCommand::Plan { args, .. }
        | TopologyCommand::Apply { args, .. },
    ) = &mut cli.command
    {
        args.pattern_owner = owners;
    }
    Ok(cli)
}

/// A usage error clap refused the line with, as the one-line message and hint a `--json`
/// failure carries: clap's first line (what is wrong), then its tips, the usage line and
/// where to read more, in one hint.
pub(crate) fn usage_error_parts(error: &clap::Error) -> (String, Option<String>) {
    // Plain text: clap's styles are dropped by `Display`.
    let text = error.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|line| !line.is_empty());
    let message = lines
        .next()
        .map(|line| line.strip_prefix("error: ").unwrap_or(line).to_owned())
        .unwrap_or_else(|| "invalid arguments".to_owned());
    let rest: Vec<&str> = lines.collect();
    let hint = (!rest.is_empty()).then(|| rest.join("; "));
    (message, hint)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use clap::CommandFactory;

    use super::audit::{parse_batch_size, parse_batch_wait, parse_prefetch};
    use super::dead::ReasonArg;
    use super::topology::Binding;
    use super::values::{
        parse_limit, parse_rate, parse_time, MAX_LIMIT, MAX_RATE, MAX_TIMEOUT, MIN_RATE,
        MIN_TIMEOUT,
    };
    use super::*;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]

        /// Any text is a bounded value or refused with a message: never a panic, never a
        /// value that a deadline or an interval cannot be made of.
        #[test]
        fn every_parser_bounds_any_text(
            text in "\\PC{0,24}|[0-9]{1,30}(ns|us|ms|s|m|h|d|w|y|days|years)?|[-+]?[0-9.]{1,12}(e[-+]?[0-9]{1,4})?|[-+]?(inf|nan|infinity|NaN)"
        ) {
            if let Ok(duration) = parse_duration(&text) {
                proptest::prop_assert!((MIN_TIMEOUT..=MAX_TIMEOUT).contains(&duration));
                proptest::prop_assert!(std::time::Instant::now().checked_add(duration).is_some());
            }
            if let Ok(rate) = parse_rate(&text) {
                proptest::prop_assert!((MIN_RATE..=MAX_RATE).contains(&rate));
                let interval = rate_interval(rate);
                proptest::prop_assert!(!interval.is_zero() && interval <= MAX_TIMEOUT + Duration::from_secs(1));
            }
            if let Ok(limit) = parse_limit(&text) {
                proptest::prop_assert!((1..=MAX_LIMIT).contains(&limit));
            }
            if let Ok(wait) = parse_batch_wait(&text) {
                proptest::prop_assert!(wait <= mesh_audit::MAX_BATCH_WAIT);
            }
            if let Ok(size) = parse_batch_size(&text) {
                proptest::prop_assert!((1..=mesh_audit::MAX_BATCH_SIZE).contains(&size));
            }
            if let Ok(prefetch) = parse_prefetch(&text) {
                proptest::prop_assert!(prefetch >= 1);
            }
            let _ = parse_time(&text);
        }
    }

    #[test]
    fn a_usage_error_is_one_message_and_a_hint() {
        use clap::Parser as _;
        let error = Cli::try_parse_from(["mesh", "status", "--bogus"]).unwrap_err();
        let (message, hint) = usage_error_parts(&error);
        assert_eq!(message, "unexpected argument '--bogus' found");
        let hint = hint.unwrap();
        assert!(hint.contains("Usage: mesh status"), "{hint}");
        assert!(!hint.contains('\n') && !hint.contains('\u{1b}'), "{hint:?}");
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
        AuditCli::command().debug_assert();
    }

    #[test]
    fn both_programs_take_the_same_audit_run_options() {
        use clap::Parser as _;
        let args = [
            "--node",
            "n1",
            "--enforce-identity",
            "--user-prefix",
            "acme/",
            "--batch-wait",
            "2s",
        ];
        let mesh = Cli::try_parse_from(["mesh", "audit", "run"].iter().chain(&args)).unwrap();
        let Command::Audit(AuditCommand::Run(run)) = mesh.command else {
            panic!("audit run")
        };
        let audit = AuditCli::try_parse_from(["mesh-audit", "run"].iter().chain(&args)).unwrap();
        let AuditCliCommand::Run(alone) = audit.command;
        for run in [&run, &alone] {
            assert!(run.enforce_identity);
            assert_eq!(run.user_prefix.as_deref(), Some("acme/"));
            assert_eq!(run.batch_wait, Duration::from_secs(2));
        }
        assert_eq!(mesh.global.node, audit.global.node);
        // A prefix without enforcement would be silently ignored: refused instead.
        assert!(AuditCli::try_parse_from(["mesh-audit", "run", "--user-prefix", "acme/"]).is_err());
        assert!(Cli::try_parse_from(["mesh", "audit", "run", "--batch-wait-ms", "5"]).is_err());
    }

    #[test]
    fn short_flags_mean_their_long_options() {
        use clap::Parser as _;
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("mesh").chain(args.iter().copied()))
                .unwrap_or_else(|e| panic!("{args:?}: {e}"))
                .command
        };
        let Command::Emit(emit) = parse(&["emit", "k.a.b", "-d", "{}", "-s", "a", "-n", "2"])
        else {
            panic!("emit")
        };
        assert_eq!(
            (emit.data.as_deref(), emit.source.as_deref(), emit.count),
            (Some("{}"), Some("a"), Some(2))
        );
        let Command::Emit(emit) = parse(&["emit", "k.a.b", "-f", "body.json"]) else {
            panic!("emit")
        };
        assert_eq!(emit.data_file, Some(PathBuf::from("body.json")));
        let Command::Call(call) = parse(&["call", "a.b", "-d", "1", "-t", "2s"]) else {
            panic!("call")
        };
        assert_eq!(
            (call.data.as_str(), call.timeout),
            ("1", Duration::from_secs(2))
        );
        let Command::Dead(DeadCommand::List {
            queue,
            reason,
            limit,
            ..
        }) = parse(&[
            "dead",
            "list",
            "-q",
            "q.x.events",
            "-r",
            "expired",
            "-n",
            "5",
        ])
        else {
            panic!("dead list")
        };
        assert_eq!(
            (queue.as_deref(), reason, limit),
            (Some("q.x.events"), Some(ReasonArg::Expired), 5)
        );
        let Command::Audit(AuditCommand::Query { filter, limit, .. }) =
            parse(&["audit", "query", "-k", "module.#", "-s", "umami", "-n", "3"])
        else {
            panic!("audit query")
        };
        assert_eq!(
            (filter.key.as_deref(), filter.source.as_deref(), limit),
            (Some("module.#"), Some("umami"), 3)
        );
        let Command::Topology(TopologyCommand::Apply { args, dry_run, .. }) = parse(&[
            "topology",
            "apply",
            "-f",
            "mesh.toml",
            "-m",
            "m",
            "-p",
            "a.#",
            "-b",
            "n=b.*",
            "--dry-run",
        ]) else {
            panic!("topology apply")
        };
        assert!(dry_run);
        assert_eq!(args.spec, Some(PathBuf::from("mesh.toml")));
        assert_eq!(
            (args.modules, args.patterns),
            (vec!["m".to_owned()], vec!["a.#".to_owned()])
        );
        assert_eq!(
            args.bindings,
            [Binding {
                module: "n".to_owned(),
                pattern: "b.*".to_owned()
            }]
        );
        let Command::Logs(LogsCommand::Tail(tail)) = parse(&["logs", "tail", "-n", "4"]) else {
            panic!("logs tail")
        };
        assert_eq!(tail.count, Some(4));
        // The connection options have no short form.
        assert!(Cli::try_parse_from(["mesh", "-u", "amqp://h", "status"]).is_err());
    }

    #[test]
    fn debug_shows_no_password() {
        use clap::Parser as _;
        let cli = Cli::try_parse_from([
            "mesh",
            "--url",
            "amqp://u:amqps3cr/et@h/v",
            "audit",
            "count",
            "--store",
            "postgres://u:pgs3cret@h/db",
        ])
        .unwrap();
        let shown = format!("{cli:?}");
        assert!(!shown.contains("s3cr"), "{shown}");
        assert!(shown.contains("<redacted>@h/v"), "{shown}");
    }

    #[test]
    fn every_command_has_an_example() {
        let cli = Cli::command();
        for sub in cli.get_subcommands() {
            let mut found = sub
                .get_after_help()
                .is_some_and(|h| h.to_string().contains("mesh "));
            for nested in sub.get_subcommands() {
                let help = nested.get_after_help().map(ToString::to_string);
                assert!(
                    help.as_deref().is_some_and(|h| h.contains("mesh ")),
                    "{} {} has no example",
                    sub.get_name(),
                    nested.get_name()
                );
                found = true;
            }
            assert!(found, "{} has no example", sub.get_name());
        }
    }
}
