//! `mesh access …`: the broker's users and permissions against the access plan.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// `mesh access …`.
#[derive(Debug, Subcommand)]
pub(crate) enum AccessCommand {
    /// The differences between the access plan and the broker's users and permissions
    #[command(after_help = ACCESS_PLAN_HELP, after_long_help = ACCESS_PLAN_LONG_HELP)]
    Plan {
        #[command(flatten)]
        args: AccessArgs,
        /// Exit with code 9 when there is any difference
        #[arg(long)]
        check: bool,
    },
    /// Create the missing users and set passwords, tags and permissions as planned
    #[command(after_help = ACCESS_APPLY_HELP, after_long_help = ACCESS_APPLY_LONG_HELP)]
    Apply {
        #[command(flatten)]
        args: AccessArgs,
        /// Print what apply would change (or why it would refuse); change nothing
        #[arg(long)]
        dry_run: bool,
    },
}

/// What the access plan is made from.
#[derive(Debug, Args)]
pub(crate) struct AccessArgs {
    /// The spec file (TOML, or JSON when it ends in .json), as for topology, with an
    /// optional [access] table
    #[arg(short = 'f', long, value_name = "FILE")]
    pub(crate) spec: PathBuf,

    /// A TOML file of passwords, "user" = "password" (not open to other users of the
    /// machine); users it does not name are read from MESH_PASSWORD_<USER>
    #[arg(long, value_name = "FILE")]
    pub(crate) passwords: Option<PathBuf>,
}

macro_rules! access_note {
    () => {
        "\
The plan has one broker user per identity: <prefix>module.<module> for each module of the spec,
<prefix>mesh.<context> for each context, <prefix>node.<node> (unless node_user = false),
<prefix>audit-logger.<node> when the spec has the module audit-logger (tag management: it
lists its queue's bindings; with shared = true, on shared.audit-logger.* instead of its
node's), and <prefix>operator
(tag management, every permission: it runs topology apply, dead redrive and status). Each
may read and write only its own queues (<node>.<module>.events on any node,
shared.<module>.events, their retry queues, serve.<owner>.<tool…>, server-named amq.gen-…)
and configure (declare, delete) only server-named ones: mesh topology apply declares the
others (list each module's retry steps and served tools in the spec) and the runtime finds
them; it never configures an exchange nor writes to the default exchange, publish on mesh.events only
under <origin>.<owner>.…, bind on mesh.events only its spec patterns, call any tool and serve
only its own (docs/CONTRACT.md, \"Users and permissions\", has every expression).
Users not in the plan are never changed; those carrying the prefix with permissions on the
vhost are listed (?). Every binding on a mesh exchange that the contract does not explain
(an exchange bound to or from one, a queue mesh never names, a mesh queue bound where mesh
never binds it) is a difference too, as in mesh topology plan. This reads the management HTTP
API as an administrator.

Passwords never go on the command line: --passwords FILE, or MESH_PASSWORD_<USER> with the
user name upper-cased and every byte that is not a letter or digit as _ (module.umami:
MESH_PASSWORD_MODULE_UMAMI). A password differs when it is not the one the broker's stored
hash was made from (sha256 and sha512 hashes are checked).

The [access] table of the spec file (all optional):
  [access]
  user_prefix = \"acme/\"         # default none: users are global to a broker
  contexts = [\"billing-ctx\"]    # runtime contexts, each with a user mesh.<context>
  node_user = true               # a user node.<node> for the node itself
  runtime_declares_queues = false # true: modules may declare their own queues (and so an
                                 # exchange named like one); only while retry/serves lag
  max_connections = 4            # each planned user's limit, the operator's excepted
  max_channels = 64              # each planned user's channels per connection, likewise
  max_queues = 1000              # the vhost's queue limit"
    };
}

const ACCESS_PLAN_HELP: &str = "\
Each line is one difference: + missing, ~ differs, - a topic permission, a limit or a foreign
binding not wanted; ? a note (no password given, a user outside the plan). Exit code 9 with
--check when there is any.

Examples:
  MESH_PASSWORD_MODULE_UMAMI=… mesh access plan --spec mesh.toml --check
  mesh access plan --spec mesh.toml --passwords /etc/mesh/passwords.toml --json";
const ACCESS_PLAN_LONG_HELP: &str = concat!(
    "\
Each line is one difference: + missing, ~ differs, - a topic permission, a limit or a foreign
binding not wanted; ? a note (no password given, a user outside the plan). Exit code 9 with
--check when there is any.

Examples:
  MESH_PASSWORD_MODULE_UMAMI=… mesh access plan --spec mesh.toml --check
  mesh access plan --spec mesh.toml --passwords /etc/mesh/passwords.toml --json",
    "\n\n",
    access_note!()
);

const ACCESS_APPLY_HELP: &str = "\
Puts a user only when it is missing or its password or tags differ, then its permissions and
topic permissions, then the limits, and removes the foreign bindings; then plans again. Refuses, changing nothing, when a planned user has no
password (exit code 2). --dry-run makes the same checks and prints each change apply would
make (`would apply`), changing nothing.

Examples:
  mesh access apply -f mesh.toml --passwords /etc/mesh/passwords.toml --dry-run
  mesh access apply --spec mesh.toml --passwords /etc/mesh/passwords.toml";
const ACCESS_APPLY_LONG_HELP: &str = concat!(
    "\
Puts a user only when it is missing or its password or tags differ, then its permissions and
topic permissions, then the limits, and removes the foreign bindings; then plans again. Refuses, changing nothing, when a planned user has no
password (exit code 2). --dry-run makes the same checks and prints each change apply would
make (`would apply`), changing nothing.

Examples:
  mesh access apply -f mesh.toml --passwords /etc/mesh/passwords.toml --dry-run
  mesh access apply --spec mesh.toml --passwords /etc/mesh/passwords.toml",
    "\n\n",
    access_note!()
);
