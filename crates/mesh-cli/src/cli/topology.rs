//! `mesh topology …`: the broker's exchanges, queues and bindings against the contract.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// `mesh topology …`.
#[derive(Debug, Subcommand)]
pub(crate) enum TopologyCommand {
    /// What the broker has and what the contract wants, side by side
    #[command(after_help = SHOW_HELP, after_long_help = SHOW_LONG_HELP)]
    Show(TopologyArgs),
    /// The differences between what the contract wants and what the broker has
    #[command(after_help = PLAN_HELP, after_long_help = PLAN_LONG_HELP)]
    Plan {
        #[command(flatten)]
        args: TopologyArgs,
        /// Exit with code 9 when there is any difference
        #[arg(long)]
        check: bool,
    },
    /// Create what is missing and remove bindings the contract does not want
    #[command(after_help = APPLY_HELP, after_long_help = APPLY_LONG_HELP)]
    Apply {
        #[command(flatten)]
        args: TopologyArgs,
        /// Replace queues whose arguments differ: deletes them with the messages they hold
        #[arg(long)]
        force: bool,
        /// Print what apply would do, step by step (or why it would refuse); change nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Delete a module's queues on a node (after showing what each holds)
    #[command(after_help = REMOVE_HELP)]
    Remove {
        /// The module whose queues go
        #[arg(short, long, value_name = "M")]
        module: String,
        /// Delete queues that have consumers or hold messages too (what they hold is lost)
        #[arg(long)]
        force: bool,
        /// Show each queue, what it holds and what remove would do (or why it would refuse);
        /// change nothing
        #[arg(long)]
        dry_run: bool,
    },
}

const REMOVE_HELP: &str = "\
Removes the durable queues of module M on the node (--node, MESH_NODE, else the host name):
<node>.<M>.events, its retry queues <node>.<M>.events.retry.<step> and any retired delay queue
<node>.<M>.events.delay.<step> (for the audit logger also <node>.audit-logger.dead), and the
serve queues serve.<M>.<...> of the tools M owns. Serve queues are shared by every node of the
module; --node shared names the queue shared.<M>.events. Each queue is listed with the messages
it holds (ready, unacked) and its consumers, as the management API last counted them (it
counts every few seconds: stop the module first). If any has a consumer or a message, remove
refuses and changes nothing, unless --force, which deletes them with what they hold. Deleting
a queue takes its bindings with it; a module that starts again declares its queues anew.
Reads and deletes through the management HTTP API.

Examples:
  mesh topology remove --module billing --node demo --dry-run
  mesh topology remove -m billing --node demo
  mesh topology remove -m billing --node n1 --force --json";

macro_rules! topology_note {
    () => {
        "\
The contract wants the exchanges mesh.events, mesh.rpc, mesh.events.dead, mesh.retry,
mesh.replies and mesh.logs (durable topics; the retired direct mesh.reply is deleted), and for each module given with --bind M=P
(repeatable; the pattern P of module M, in any order among the other options), with
--module M --pattern P… or in --spec FILE, the queue <node>.<module>.events (x-queue-type,
x-dead-letter-exchange mesh.events.dead and, on quorum queues, x-delivery-limit) bound to
mesh.events on exactly its patterns (the module audit-logger also wants its
<node>.audit-logger.dead bound to mesh.events.dead on #; with shared = true in the spec, the
shared loggers' shared.audit-logger.events and shared.audit-logger.dead). A module with
forward_scheduled = true in the spec also wants its schedule queue scheduled.<module>.events
(arguments as its consumer queue's) and its hops scheduled.<module>.events.retry.<hop> (1s, 5s,
30s, 2m, 10m, up to longest_schedule_hop; x-queue-type only), each bound to mesh.retry on its
own name, so a bus that forwards scheduled events starts without configure. The retired
mesh.dead-letters, if the broker still has it, is shown: apply removes its binding, never the
queue (a logger drains and deletes it).
Retry queues (<queue>.retry.<step>) are declared by the SDK when the module starts; they are
not compared. Retired delay queues (<queue>.delay.<step>) are listed: apply deletes those with
no message and no consumer, and leaves the others draining.
This reads the management HTTP API: AMQP cannot list bindings or arguments.

--pattern without --bind: with one --module, every --pattern is that module's, wherever it
stands; with several, each --pattern belongs to the --module before it (the older form, kept
for scripts; --bind says the same without depending on the order).

A spec file (TOML, or JSON when it ends in .json):
  node = \"anchor\"              # optional: else --node
  queue_type = \"quorum\"        # optional: quorum or classic (--queue-type wins)
  delivery_limit = 20          # optional
  [[modules]]
  name = \"billing\"
  patterns = [\"module.umami.#\", \"node.*.joined\"]
  queue_type = \"classic\"       # optional
  shared = false               # optional: the queue shared.<module>.events
  retry = [\"5s\", \"1m\"]         # optional: its retry steps, whose retry queues are declared
  serves = [\"billing.quote\"]   # optional: its tools, whose serve.<key> queues are declared
  forward_scheduled = true     # optional: its schedule queue and hops are declared
  longest_schedule_hop = \"2m\"  # optional: as its bus's (default 10m); implies forward_scheduled
  [access]                     # optional: read by mesh access only"
    };
}

const SHOW_HELP: &str = "\
Lists every exchange, queue and binding of the vhost, marked as wanted (=), missing (+),
different (~), a binding not wanted (-) or outside the spec (?).

Example:
  mesh topology show --bind 'billing=module.umami.#'";
const SHOW_LONG_HELP: &str = concat!(
    "\
Lists every exchange, queue and binding of the vhost, marked as wanted (=), missing (+),
different (~), a binding not wanted (-) or outside the spec (?).

Example:
  mesh topology show --bind 'billing=module.umami.#'",
    "\n\n",
    topology_note!()
);

const PLAN_HELP: &str = "\
Each line is one difference: + missing, ~ other arguments, - a binding not wanted (a foreign
binding too: one on a mesh exchange the contract does not explain, such as an exchange bound
to an exchange or a queue mesh never names; apply removes it).

Examples:
  mesh topology plan --bind 'billing=module.umami.#' --bind 'billing=node.*.joined'
  mesh topology plan -m billing -p 'module.umami.#' -p 'node.*.joined'
  mesh topology plan --spec mesh.toml --check --json";
const PLAN_LONG_HELP: &str = concat!(
    "\
Each line is one difference: + missing, ~ other arguments, - a binding not wanted (a foreign
binding too: one on a mesh exchange the contract does not explain, such as an exchange bound
to an exchange or a queue mesh never names; apply removes it).

Examples:
  mesh topology plan --bind 'billing=module.umami.#' --bind 'billing=node.*.joined'
  mesh topology plan -m billing -p 'module.umami.#' -p 'node.*.joined'
  mesh topology plan --spec mesh.toml --check --json",
    "\n\n",
    topology_note!()
);

const APPLY_HELP: &str = "\
Refuses, changing nothing, when a queue has other arguments than the contract's, unless
--force, which deletes and re-creates it (its messages are lost; the refusal says how many).
Exchanges with other settings are never replaced. --dry-run prints each step apply would take
(`would create`, `would bind`, …) or its refusal, and changes nothing.

Examples:
  mesh topology apply -f mesh.toml --dry-run
  mesh topology apply --spec mesh.toml";
const APPLY_LONG_HELP: &str = concat!(
    "\
Refuses, changing nothing, when a queue has other arguments than the contract's, unless
--force, which deletes and re-creates it (its messages are lost; the refusal says how many).
Exchanges with other settings are never replaced. --dry-run prints each step apply would take
(`would create`, `would bind`, …) or its refusal, and changes nothing.

Examples:
  mesh topology apply -f mesh.toml --dry-run
  mesh topology apply --spec mesh.toml",
    "\n\n",
    topology_note!()
);

/// What the contract is compared for.
#[derive(Debug, Args)]
pub(crate) struct TopologyArgs {
    /// Module M's queue is bound on topic pattern P (repeatable, in any order; split at the
    /// first `=`)
    #[arg(short, long = "bind", value_name = "M=P", value_parser = parse_binding)]
    pub(crate) bindings: Vec<Binding>,

    /// A module whose queue the contract wants (repeatable)
    #[arg(short, long = "module", value_name = "M")]
    pub(crate) modules: Vec<String>,

    /// A topic pattern of the --module (with several, of the --module before it; repeatable)
    #[arg(short, long = "pattern", value_name = "P")]
    pub(crate) patterns: Vec<String>,

    /// A TOML or JSON file listing modules, their patterns and queue types
    #[arg(short = 'f', long, value_name = "FILE")]
    pub(crate) spec: Option<PathBuf>,

    /// x-delivery-limit of quorum module queues [default: mesh-amqp's, 20]
    #[arg(long, value_name = "N")]
    pub(crate) delivery_limit: Option<u32>,

    /// Where each --pattern stands among the --module options (filled in from the parse).
    #[arg(skip)]
    pub(crate) pattern_owner: Vec<Option<usize>>,
}

/// `--bind M=P`: a module and one topic pattern of its queue (both checked later, with the
/// rest of the contract).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binding {
    pub(crate) module: String,
    pub(crate) pattern: String,
}

/// `M=P`, split at the first `=` (a module name with `=` goes in a spec file).
pub(crate) fn parse_binding(text: &str) -> Result<Binding, String> {
    match text.split_once('=') {
        Some((module, pattern)) if !module.is_empty() && !pattern.is_empty() => Ok(Binding {
            module: module.to_owned(),
            pattern: pattern.to_owned(),
        }),
        _ => Err("expected MODULE=PATTERN, e.g. billing=module.umami.#".to_owned()),
    }
}
