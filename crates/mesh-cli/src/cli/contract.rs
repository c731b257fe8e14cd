//! `mesh contract …`: export, show, check and document the contracts the modules announced.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use crate::cli::shared::StoreArg;

/// `mesh contract …`.
#[derive(Debug, Subcommand)]
pub(crate) enum ContractCommand {
    /// Write the AsyncAPI 3.0 document of the announced contracts (or the system document)
    #[command(after_help = CONTRACT_EXPORT_HELP)]
    Export(ContractExportArgs),
    /// Show who emits each key and who handles it, who serves each tool and who calls it
    #[command(after_help = CONTRACT_SHOW_HELP)]
    Show {
        #[command(flatten)]
        source: ContractSource,
    },
    /// List the breaking changes from a saved contract to the current one (exit 11 if any)
    #[command(after_help = CONTRACT_CHECK_HELP)]
    Check(ContractCheckArgs),
    /// Write the types of the events and tools a module consumes or calls, from the contracts
    #[command(after_help = CONTRACT_CODEGEN_HELP)]
    Codegen(ContractCodegenArgs),
    /// Write the contracts as one self-contained HTML page: per key its schemas, versions,
    /// emitters and handlers; per tool its request, reply, errors, servers and callers
    #[command(after_help = CONTRACT_DOCS_HELP)]
    Docs(ContractDocsArgs),
}

/// Where the contracts come from: the audit store, or files.
#[derive(Debug, Args)]
pub(crate) struct ContractSource {
    #[command(flatten)]
    pub(crate) store: StoreArg,
    /// Read the contracts from these files instead of the audit store: a module's
    /// announcement body, an announcement event as `audit query --json` prints it, a system
    /// document or an AsyncAPI document written by `contract export`, or an array of these
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub(crate) from: Vec<PathBuf>,
}

/// `mesh contract export`.
#[derive(Debug, Args)]
pub(crate) struct ContractExportArgs {
    #[command(flatten)]
    pub(crate) source: ContractSource,
    /// Only this module's operations (its owner, e.g. module.billing)
    #[arg(short, long, value_name = "OWNER")]
    pub(crate) module: Option<String>,
    /// Write the document to FILE instead of stdout
    #[arg(short, long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// asyncapi: an AsyncAPI 3.0 document; system: the contracts as announced. Both are read
    /// back by `contract check --against` and `--from`
    #[arg(long, value_enum, default_value_t = ContractFormat::Asyncapi)]
    pub(crate) format: ContractFormat,
    /// The AsyncAPI document's title [default: mesh system, or the module's owner]
    #[arg(long, value_name = "TITLE")]
    pub(crate) title: Option<String>,
    /// The AsyncAPI document's version [default: 1.0.0]
    #[arg(long, value_name = "VERSION")]
    pub(crate) document_version: Option<String>,
    /// The broker the document names as its server, an amqp:// or amqps:// URL (any user or
    /// password in it is left out) [default: the connection's URL]
    #[arg(long, value_name = "URL")]
    pub(crate) server: Option<String>,
}

/// `--format` of `contract export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ContractFormat {
    /// An AsyncAPI 3.0 document (it carries the system too, in x-mesh-system)
    Asyncapi,
    /// The system document: every module's contract as it announced it
    System,
}

/// `mesh contract codegen`.
#[derive(Debug, Args)]
pub(crate) struct ContractCodegenArgs {
    /// The language of the code
    #[arg(value_enum, value_name = "LANGUAGE")]
    pub(crate) language: CodegenLanguage,
    #[command(flatten)]
    pub(crate) source: ContractSource,
    /// Only what this module consumes (the events its handlers match) or calls (its owner,
    /// e.g. module.billing) [default: every event and tool of the system]
    #[arg(short, long, value_name = "OWNER")]
    pub(crate) module: Option<String>,
    /// Write the code to FILE instead of stdout
    #[arg(short, long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
}

/// The languages of `contract codegen`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum CodegenLanguage {
    /// Rust: serde and schemars types, with the mesh `Event` impl of each event
    Rust,
}

/// `mesh contract check`.
#[derive(Debug, Args)]
pub(crate) struct ContractCheckArgs {
    /// The earlier contract: a file written by `contract export` (either format), or any
    /// file `--from` reads
    #[arg(long, value_name = "OLD")]
    pub(crate) against: PathBuf,
    /// The newer contract, a file of the same forms [default: the audit store's current
    /// contracts]
    #[arg(value_name = "NEW")]
    pub(crate) new: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) store: StoreArg,
}

/// `mesh contract docs`.
#[derive(Debug, Args)]
pub(crate) struct ContractDocsArgs {
    #[command(flatten)]
    pub(crate) source: ContractSource,
    /// Write the page to FILE instead of stdout
    #[arg(short, long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// The page's title [default: mesh system]
    #[arg(long, value_name = "TITLE")]
    pub(crate) title: Option<String>,
}

const CONTRACT_EXPORT_HELP: &str = "\
Each bus announces its contract when it starts (the event <origin>.<owner>.contract.announced);
the audit logger records it. export takes the newest readable announcement of every owner
from the store, however far back (each unreadable one skipped with a warning naming its event
id), or the --from files,
and writes one AsyncAPI 3.0 document: channels are routing keys, messages <key>.v<N> carry
the payload schemas (their definitions in components/schemas), operations are per module
(send, receive, and request/reply for tools). --module keeps one module's operations.

Examples:
  mesh contract export --out contract.json
  mesh contract export --module module.billing --from billing-announcement.json
  mesh contract export --format system --store sqlite:///var/lib/mesh/audit.db";

const CONTRACT_SHOW_HELP: &str = "\
One block per key: its emitters with the schema version each writes, and the modules whose
handler patterns match it (with the pattern when it is not the key itself); a handler pattern
no emitted key matches has a block of its own. Then one block per tool: servers and callers.

Examples:
  mesh contract show
  mesh contract show --from contract.json --json";

const CONTRACT_CHECK_HELP: &str = "\
Prints each breaking change: its rule, the key or tool, the field, the module that changed it
and whom it breaks (the readers of an event whose emitter changed, the emitters of an event
whose handler changed; the same for a tool's request and reply). Exit code 11 when there is
any, 0 when the newer contract is compatible (an empty newer contract is an error, exit
1). The rules are in docs/CONTRACT.md, section
\"Compatibility rules\".

Examples:
  mesh contract export --out before.json        # in CI, on the main branch
  mesh contract check --against before.json     # against the store's current contracts
  mesh contract check --against before.json after.json --json";

const CONTRACT_CODEGEN_HELP: &str = "\
Writes one Rust file from the contracts (the store's newest readable announcements, or the
--from files): for each event a module's handlers match, a struct deriving serde's Serialize
and Deserialize and schemars' JsonSchema, with its mesh::Event impl (the key, the emitter's
schema version and the derived schema); for each tool it calls, the tool key as a constant and
the request and reply types (the server's schemas). Without --module: every event and tool.
The file needs the crates meshbus (as mesh), serde (feature derive), serde_json and schemars 1.
A consumer then reads the emitter's published shape instead of a hand copy, and
`contract check` names a breaking change of the emitter before the code would misread it.

Examples:
  mesh contract codegen rust --module module.billing --out src/contract.rs
  mesh contract codegen rust --from contract.json";
const CONTRACT_DOCS_HELP: &str = "\
The system of `contract show` (the newest readable announcement of every owner in the store,
or the --from files) as one HTML page for people: a table of contents, the modules, then one
section per key (the versions, emitters and handlers, each schema pretty-printed) and per tool
(servers, callers, request and reply schemas, the error codes a reply may carry). The page is
self-contained (its style inline, no script, nothing fetched): open it from a file or publish
it anywhere. Every name and schema text is HTML-escaped.

Examples:
  mesh contract docs --out contracts.html
  mesh contract docs --from contract.json --title 'shop contracts' > contracts.html";
