//! Schemas derived from Rust types with schemars' draft-07 settings, as a bus declares them:
//! nested structures, an optional structure, a vector, an enum with documented variants. The
//! export is valid AsyncAPI with every reference resolving, and a type change is found.

// The types exist for their derived schemas only: their fields are never read.
#![allow(dead_code)]

mod support;

use mesh_contract::asyncapi::{export, ExportOptions};
use mesh_contract::{check, Rule, Side, System};
use schemars::JsonSchema;
use serde_json::{json, Value};

fn derived<T: JsonSchema>() -> Value {
    schemars::generate::SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

mod v1 {
    use super::JsonSchema;

    #[derive(JsonSchema)]
    pub(crate) struct OrderPlaced {
        pub(crate) id: String,
        pub(crate) customer: Customer,
        pub(crate) lines: Vec<Line>,
        pub(crate) total_cents: u64,
        pub(crate) status: Status,
    }

    #[derive(JsonSchema)]
    pub(crate) struct Customer {
        pub(crate) name: String,
        pub(crate) address: Option<Address>,
    }

    #[derive(JsonSchema)]
    pub(crate) struct Address {
        pub(crate) city: String,
        pub(crate) zip: String,
    }

    #[derive(JsonSchema)]
    pub(crate) struct Line {
        pub(crate) sku: String,
        pub(crate) quantity: u32,
    }

    /// Where the order stands.
    #[derive(JsonSchema)]
    pub(crate) enum Status {
        /// Just placed.
        New,
        /// Paid in full.
        Paid,
    }
}

mod v2 {
    pub(crate) use super::v1::{Customer, Line, Status};
    use super::JsonSchema;

    /// The same order, its total now a decimal string.
    #[derive(JsonSchema)]
    pub(crate) struct OrderPlaced {
        pub(crate) id: String,
        pub(crate) customer: Customer,
        pub(crate) lines: Vec<Line>,
        pub(crate) total_cents: String,
        pub(crate) status: Status,
    }
}

mod v3 {
    pub(crate) use super::v1::{Customer, Line};
    use super::JsonSchema;

    #[derive(JsonSchema)]
    pub(crate) struct OrderPlaced {
        pub(crate) id: String,
        pub(crate) customer: Customer,
        pub(crate) lines: Vec<Line>,
        pub(crate) total_cents: u64,
        pub(crate) status: Status,
    }

    /// Where the order stands, now also refunded.
    #[derive(JsonSchema)]
    pub(crate) enum Status {
        /// Just placed.
        New,
        /// Paid in full.
        Paid,
        /// Money returned.
        Refunded,
    }
}

fn system(version: u32, order: &Value) -> System {
    System::from_document(&json!([
        {"owner": "module.shop", "node": "n",
         "emits": [{"key": "module.shop.order.placed", "version": version, "schema": order}]},
        {"owner": "module.billing", "node": "n",
         "handles": [{"pattern": "module.shop.#"}]},
    ]))
    .expect("derived contracts read")
}

#[test]
fn derived_schemas_export_to_valid_asyncapi_and_changes_are_found() {
    let order = derived::<v1::OrderPlaced>();
    assert!(
        order.get("definitions").is_some(),
        "draft-07 definitions: {order:#}"
    );
    let before = system(1, &order);
    let document = export(&before, &ExportOptions::default()).expect("exported");
    support::assert_valid_asyncapi(&document);
    let schemas = &document["components"]["schemas"];
    for name in ["Customer", "Address", "Line", "Status"] {
        assert!(schemas.get(name).is_some(), "{name} in {schemas:#}");
    }

    let retyped = system(2, &derived::<v2::OrderPlaced>());
    let findings = check(&before, &retyped);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(
        (findings[0].rule, findings[0].path.as_str()),
        (Rule::FieldRetyped, "/total_cents")
    );
    assert_eq!(
        (findings[0].breaks, findings[0].broken.clone()),
        (Side::Readers, vec!["module.billing".to_owned()])
    );

    let widened = system(2, &derived::<v3::OrderPlaced>());
    let findings = check(&before, &widened);
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(
        (findings[0].rule, findings[0].path.as_str()),
        (Rule::EnumWidened, "/status")
    );
}
