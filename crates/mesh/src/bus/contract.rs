//! What a bus declares, checked and gathered into its contract: the patterns of its handlers
//! (with their compiled schemas when it validates bodies), the emits and calls it declared,
//! and the tools it serves. [`BusBuilder::start`](crate::BusBuilder::start) runs these checks
//! in this order, so a bus that starts announces only keys it owns and schemas a reader can
//! use.

use std::sync::Arc;

use mesh_core::contract::{HandlerContract, MessageContract, ModuleContract, ToolContract};
use mesh_core::{EventName, Name, RoutingKey, ToolKey, TopicPattern};

use crate::error::{Error, ErrorKind};
use crate::handler::{HandlerCall, HandlerDecl, HandlerEntry};
use crate::identity::Identity;
use crate::layer::BusLayer;
use crate::rpc::ServeEntry;
use crate::schema::{self, Schema};

/// An emit declared on the builder: a full key (typed) or an event name under the bus's
/// prefix, its version and schema.
pub(super) struct EmitDecl {
    pub(super) key: EmitKey,
    pub(super) version: u32,
    pub(super) schema: Option<Schema>,
}

/// The key of a declared emit, as declared.
pub(super) enum EmitKey {
    Full(&'static str),
    Event(String),
}

/// The contract of a bus of `identity` on `node` that declares nothing yet.
pub(super) fn empty(identity: &Identity, node: &Name) -> ModuleContract {
    ModuleContract {
        owner: owner(identity, node),
        node: node.to_string(),
        emits: Vec::new(),
        handles: Vec::new(),
        serves: Vec::new(),
        calls: Vec::new(),
    }
}

/// Checks the declared handlers (patterns, schemas), adds their patterns to the contract,
/// and makes their entries, each in the bus's `layers` (the outermost first); with
/// `validate`, each declared schema compiled to check bodies.
pub(super) fn handlers(
    declared: Vec<HandlerDecl>,
    layers: &[Arc<dyn BusLayer>],
    validate: bool,
    contract: &mut ModuleContract,
) -> Result<Vec<HandlerEntry>, Error> {
    // Only a bus with feature `schemas` validates bodies.
    #[cfg(not(feature = "schemas"))]
    let _ = validate;
    let mut handlers = Vec::with_capacity(declared.len());
    for declared in declared {
        let patterns = declared
            .patterns
            .iter()
            .map(|p| TopicPattern::parse(p))
            .collect::<Result<Vec<_>, _>>()?;
        if patterns.is_empty() {
            return Err(Error::options("a handler needs at least one pattern"));
        }
        #[cfg(feature = "schemas")]
        let check = match (&declared.schema, validate) {
            (Some(schema), true) => {
                refuse_defs(schema.as_json(), &declared.subject)?;
                Some(Arc::new(
                    schema::Check::compile(
                        schema.as_json(),
                        declared.version,
                        declared.subject.clone(),
                    )
                    .map_err(|problem| invalid_schema(&declared.subject, problem))?,
                ))
            }
            (Some(schema), false) => {
                vet(schema.as_json(), &declared.subject)?;
                None
            }
            (None, _) => None,
        };
        #[cfg(not(feature = "schemas"))]
        if let Some(schema) = &declared.schema {
            vet(schema.as_json(), &declared.subject)?;
        }
        for pattern in &patterns {
            contract.handles.push(HandlerContract {
                pattern: pattern.to_string(),
                version: declared.version,
                schema: declared.schema.as_ref().map(|s| s.as_json().clone()),
            });
        }
        let service = layers
            .iter()
            .rev()
            .fold(declared.service, |service, layer| {
                layer.wrap_handler(service)
            });
        handlers.push(HandlerEntry {
            patterns,
            call: HandlerCall::of(service),
            #[cfg(feature = "schemas")]
            check,
        });
    }
    Ok(handlers)
}

/// Checks the declared emits (each key one the bus owns, each schema usable) and adds them
/// to the contract.
pub(super) fn emits(
    declared: Vec<EmitDecl>,
    identity: &Identity,
    node: &Name,
    contract: &mut ModuleContract,
) -> Result<(), Error> {
    let prefix = identity.prefix(node);
    for emit in declared {
        let key = match emit.key {
            EmitKey::Full(key) => {
                let key = RoutingKey::parse(key)?;
                if !identity.owns(node, &key) {
                    return Err(Error::new(ErrorKind::ForeignKey {
                        key: key.to_string(),
                        allowed: format!("{prefix}…"),
                    }));
                }
                key
            }
            EmitKey::Event(name) => {
                let name = EventName::parse(&name)?;
                RoutingKey::try_from(format!("{prefix}{}", name.as_str()))?
            }
        };
        if let Some(schema) = &emit.schema {
            vet(schema.as_json(), &format!("the emit of `{key}`"))?;
        }
        contract.emits.push(MessageContract {
            key: key.to_string(),
            version: emit.version,
            schema: emit.schema.map(Schema::into_json),
        });
    }
    Ok(())
}

/// Checks the tools served and the calls declared (names, schemas) and adds them to the
/// contract; with `validate`, each served tool's request schema compiled to check requests.
pub(super) fn tools(
    serves: &mut [ServeEntry],
    calls: Vec<ToolContract>,
    validate: bool,
    contract: &mut ModuleContract,
) -> Result<(), Error> {
    #[cfg(not(feature = "schemas"))]
    let _ = validate;
    for serve in serves.iter_mut() {
        ToolKey::parse(&serve.tool)?;
        #[cfg(feature = "schemas")]
        if let (Some(request), true) = (&serve.request, validate) {
            let subject = format!("the request of tool `{}`", serve.tool);
            refuse_defs(request.as_json(), &subject)?;
            serve.check = Some(Arc::new(
                schema::Check::compile(request.as_json(), None, subject.clone())
                    .map_err(|problem| invalid_schema(&subject, problem))?,
            ));
        }
        contract.serves.push(ToolContract {
            tool: serve.tool.clone(),
            request: serve.request.as_ref().map(|s| s.as_json().clone()),
            reply: serve.reply.as_ref().map(|s| s.as_json().clone()),
        });
    }
    for call in calls {
        ToolKey::parse(&call.tool)?;
        contract.calls.push(call);
    }
    for tool in contract.serves.iter().chain(&contract.calls) {
        for schema in tool.request.iter().chain(&tool.reply) {
            vet(schema, &format!("tool `{}`", tool.tool))?;
        }
    }
    Ok(())
}

/// The owner of a bus's keys as its contract names it: `module.<m>`, `node.<n>` or
/// `context.<c>`.
fn owner(identity: &Identity, node: &Name) -> String {
    match identity {
        Identity::Module(module) => format!("module.{module}"),
        Identity::Context(context) => format!("context.{context}"),
        Identity::Node => format!("node.{node}"),
    }
}

fn invalid_schema(subject: &str, problem: String) -> Error {
    Error::new(ErrorKind::InvalidSchema {
        subject: subject.to_owned(),
        problem,
    })
}

/// Refuses a declared schema that uses `$defs` (it would dangle once an exporter moves
/// `definitions`).
fn refuse_defs(schema: &serde_json::Value, subject: &str) -> Result<(), Error> {
    if schema::uses_defs(schema) {
        return Err(invalid_schema(
            subject,
            "it uses `$defs`: shared parts go under `definitions`, referenced as \
             `#/definitions/<Name>` (draft-07 style)"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Refuses a declared schema that cannot be used: one with `$defs`, or (feature `schemas`)
/// one that does not compile, so a contract announces only schemas a reader can use.
fn vet(schema: &serde_json::Value, subject: &str) -> Result<(), Error> {
    refuse_defs(schema, subject)?;
    #[cfg(feature = "schemas")]
    schema::Check::compile(schema, None, subject.to_owned())
        .map_err(|problem| invalid_schema(subject, problem))?;
    Ok(())
}
