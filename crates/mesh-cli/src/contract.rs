//! `mesh contract export | show | check | codegen | docs`: the modules' announced contracts,
//! from the audit store (the newest `<origin>.<owner>.contract.announced` of each owner, read
//! as the console's contracts page reads them: `mesh_console::announced_system`) or from
//! files, on top of the `mesh-contract` library (which does the export, the check and the
//! code without I/O) and the console's page of the contracts (`mesh_console::contract_docs`).

use std::path::Path;

use anyhow::Context as _;
use mesh_contract::asyncapi::{export, ExportOptions, Server};
use mesh_contract::codegen::CodegenOptions;
use mesh_contract::{check, System};
use serde_json::json;

use crate::cli::{
    CodegenLanguage, ContractCheckArgs, ContractCodegenArgs, ContractCommand, ContractDocsArgs,
    ContractExportArgs, ContractFormat, ContractSource, Global, StoreArg,
};
use crate::exit::{fail, Code, WithCode};
use crate::output::{self, paint, BAD, DIM, GOOD, NAME, WARN};
use crate::store;

/// Runs one `contract` command.
pub(crate) async fn run(global: &Global, command: &ContractCommand) -> anyhow::Result<Code> {
    match command {
        ContractCommand::Export(args) => run_export(global, args).await,
        ContractCommand::Show { source } => {
            let system = load(global, source).await?;
            show(global, &system)?;
            Ok(Code::Ok)
        }
        ContractCommand::Check(args) => run_check(global, args).await,
        ContractCommand::Codegen(args) => run_codegen(global, args).await,
        ContractCommand::Docs(args) => run_docs(global, args).await,
    }
}

/// The system of `--from FILE…`, else of the audit store.
async fn load(global: &Global, source: &ContractSource) -> anyhow::Result<System> {
    if source.from.is_empty() {
        from_store(global, &source.store).await
    } else {
        let mut system = System::new();
        for path in &source.from {
            for contract in read_file(path)?.modules() {
                system.insert(contract.clone());
            }
        }
        Ok(system)
    }
}

/// A file of any form `mesh_contract::System::from_document` reads, of at most
/// [`mesh_files::MAX_SETTINGS`] bytes.
fn read_file(path: &Path) -> anyhow::Result<System> {
    let text = crate::config::read_settings_file(path)
        .coded(Code::Usage, || format!("cannot read {}", path.display()))?;
    System::from_json(&text).coded(Code::Usage, || {
        format!("cannot read the contracts of {}", path.display())
    })
}

/// The newest readable announcement of every owner in the store
/// ([`mesh_console::announced_system`], as the console's contracts page reads it); an
/// unreadable one is skipped with a warning naming its event id.
async fn from_store(global: &Global, arg: &StoreArg) -> anyhow::Result<System> {
    let store = store::open(global, arg).await?;
    let result = mesh_console::announced_system(&store).await;
    store.close().await;
    let announced = result.context("reading the contract announcements")?;
    for skipped in &announced.skipped {
        output::note(paint(
            WARN,
            format!(
                "warning: skipping the announcement {} ({}): {}",
                skipped.event, skipped.key, skipped.reason
            ),
        ));
    }
    for key in &announced.unreadable_keys {
        output::note(paint(
            WARN,
            format!("warning: no readable announcement under {key}"),
        ));
    }
    Ok(announced.system)
}

async fn run_export(global: &Global, args: &ContractExportArgs) -> anyhow::Result<Code> {
    let system = load(global, &args.source).await?;
    if system.is_empty() {
        output::note(paint(
            WARN,
            "warning: no contract announced: the document lists nothing",
        ));
    }
    let document = match args.format {
        ContractFormat::Asyncapi => {
            let url = args.server.as_deref().unwrap_or(crate::config::url(global));
            let options = ExportOptions {
                module: args.module.clone(),
                title: args.title.clone(),
                version: args.document_version.clone(),
                server: Some(server(url)?),
            };
            export(&system, &options).coded(Code::Usage, || "cannot export".to_owned())?
        }
        ContractFormat::System => match &args.module {
            Some(owner) => system
                .only(owner)
                .coded(Code::Usage, || "cannot export".to_owned())?,
            None => system,
        }
        .to_document(),
    };
    // Names and descriptions are the modules' own: escaped in the document as in any output.
    let text = output::json_document(&document).context("writing the document")?;
    match &args.out {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
            output::note(paint(DIM, format!("wrote {}", path.display())));
        }
        None => output::raw(&text)?,
    }
    Ok(Code::Ok)
}

async fn run_docs(global: &Global, args: &ContractDocsArgs) -> anyhow::Result<Code> {
    let system = load(global, &args.source).await?;
    if system.is_empty() {
        output::note(paint(
            WARN,
            "warning: no contract announced: the page lists nothing",
        ));
    }
    let title = args
        .title
        .as_deref()
        .unwrap_or(mesh_console::DEFAULT_DOCS_TITLE);
    let page = mesh_console::contract_docs(&system, title);
    match &args.out {
        Some(path) => {
            std::fs::write(path, page).with_context(|| format!("writing {}", path.display()))?;
            output::note(paint(DIM, format!("wrote {}", path.display())));
        }
        None => output::raw(page.as_bytes())?,
    }
    Ok(Code::Ok)
}

async fn run_codegen(global: &Global, args: &ContractCodegenArgs) -> anyhow::Result<Code> {
    let system = load(global, &args.source).await?;
    if system.is_empty() {
        output::note(paint(
            WARN,
            "warning: no contract announced: the code has no type",
        ));
    }
    let options = CodegenOptions {
        module: args.module.clone(),
    };
    let code = match args.language {
        CodegenLanguage::Rust => mesh_contract::codegen::rust(&system, &options)
            .coded(Code::Usage, || "cannot generate the code".to_owned())?,
    };
    match &args.out {
        Some(path) => {
            std::fs::write(path, code).with_context(|| format!("writing {}", path.display()))?;
            output::note(paint(DIM, format!("wrote {}", path.display())));
        }
        None => output::raw(code.as_bytes())?,
    }
    Ok(Code::Ok)
}

/// The document's server from a broker URL: its first host, scheme and virtual host, never
/// its user or password (the URL is read by the transport's parser, and written back by its
/// `Display`, which leaves the password out; the user is cut here).
fn server(url: &str) -> anyhow::Result<Server> {
    let options: mesh::amqp::AmqpOptions = url.parse().coded(Code::Usage, || {
        "the server URL is not an amqp:// URL".to_owned()
    })?;
    // `amqp[s]://user@host:port[,host:port…]/vhost`
    let shown = options.to_string();
    let (protocol, rest) = shown.split_once("://").unwrap_or(("amqp", &shown));
    let rest = rest.split_once('@').map_or(rest, |(_, after)| after);
    let (hosts, vhost) = rest.split_once('/').unwrap_or((rest, ""));
    let host = hosts.split(',').next().unwrap_or(hosts);
    Ok(Server {
        host: host.to_owned(),
        protocol: protocol.to_owned(),
        pathname: format!("/{vhost}"),
    })
}

async fn run_check(global: &Global, args: &ContractCheckArgs) -> anyhow::Result<Code> {
    let old = read_file(&args.against)?;
    let new = match &args.new {
        Some(path) => read_file(path)?,
        None => from_store(global, &args.store).await?,
    };
    if new.is_empty() && !old.is_empty() {
        // Most likely the wrong store or file: "compatible" would be a lie a CI job believes.
        return Err(fail(
            Code::Error,
            "the newer contract has no module: nothing announced there (the wrong --store or file?)",
        ));
    }
    let findings = check(&old, &new);
    for finding in &findings {
        if global.json {
            output::json(&finding.to_json())?;
        } else {
            output::line(format_args!(
                "{} {} {}{}: {} (changed by {}); breaks its {}: {}",
                paint(BAD, "breaking"),
                paint(WARN, finding.rule.as_str()),
                paint(NAME, &finding.subject.to_string()),
                if finding.path.is_empty() {
                    String::new()
                } else {
                    format!(" {}", &finding.path)
                },
                &finding.detail,
                &finding.changed_by,
                finding.breaks.as_str(),
                &finding.broken.join(", "),
            ))?;
        }
    }
    if global.json {
        output::json(&json!({"breaking": findings.len(), "compatible": findings.is_empty()}))?;
    } else if findings.is_empty() {
        output::line(paint(
            GOOD,
            format!(
                "compatible: no breaking change across {} modules",
                new.len()
            ),
        ))?;
    } else {
        let n = findings.len();
        let plural = if n == 1 { "" } else { "s" };
        output::line(paint(BAD, format!("{n} breaking change{plural}")))?;
    }
    Ok(if findings.is_empty() {
        Code::Ok
    } else {
        Code::Incompatible
    })
}

/// Owners, comma-separated, or a dim `none`.
fn list(items: &[String]) -> impl std::fmt::Display + '_ {
    output::lazy(move |f| {
        if items.is_empty() {
            write!(f, "{}", paint(DIM, "none"))
        } else {
            f.write_str(&items.join(", "))
        }
    })
}

/// Who emits each key and who handles it, who serves each tool and who calls it.
fn show(global: &Global, system: &System) -> anyhow::Result<()> {
    let keys = system.key_table();
    let tools = system.tool_table();
    if global.json {
        for row in &keys {
            output::json(&json!({
                "key": row.key,
                "pattern": row.unmatched_pattern,
                "emitters": row.emitters.iter().map(|(o, v)| json!({"owner": o, "version": v})).collect::<Vec<_>>(),
                "handlers": row.handlers.iter().map(|(o, p, v)| json!({"owner": o, "pattern": p, "version": v})).collect::<Vec<_>>(),
            }))?;
        }
        for row in &tools {
            output::json(
                &json!({"tool": row.tool, "servers": row.servers, "callers": row.callers}),
            )?;
        }
        return Ok(());
    }
    if system.is_empty() {
        output::line(paint(DIM, "no contract announced"))?;
        return Ok(());
    }
    for row in &keys {
        output::line(format_args!(
            "{}{}",
            paint(NAME, &row.key),
            output::lazy(|f| if row.unmatched_pattern {
                write!(f, " {}", paint(DIM, "(a pattern no emitted key matches)"))
            } else {
                Ok(())
            })
        ))?;
        let emitters: Vec<String> = row
            .emitters
            .iter()
            .map(|(o, v)| format!("{o} (v{v})"))
            .collect();
        output::line(format_args!("  emitted by  {}", list(&emitters)))?;
        let handlers: Vec<String> = row
            .handlers
            .iter()
            .map(|(o, p, v)| {
                let version = v.map(|v| format!(" v{v}")).unwrap_or_default();
                if *p == row.key {
                    format!("{o}{version}")
                } else {
                    format!("{o} ({p}{version})")
                }
            })
            .collect();
        output::line(format_args!("  handled by  {}", list(&handlers)))?;
    }
    for row in &tools {
        output::line(format_args!(
            "{} {}",
            paint(DIM, "tool"),
            paint(NAME, &row.tool)
        ))?;
        output::line(format_args!("  served by   {}", list(&row.servers)))?;
        output::line(format_args!("  called by   {}", list(&row.callers)))?;
    }
    Ok(())
}
