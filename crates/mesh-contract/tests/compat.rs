//! The compatibility rules on a table of before/after pairs: each rule in its breaking form
//! and its compatible counterpart, with the verdict, the side and modules it breaks and the
//! field path.

mod pairs;

use mesh_contract::{check, Rule, Side};
use pairs::{base, cases, system, Parts};
use serde_json::{json, Value};

#[test]
fn every_rule_breaks_its_side_and_its_counterpart_is_compatible() {
    let cases = cases();
    assert!(cases.len() >= 15);
    let mut rules_seen = std::collections::BTreeSet::new();
    for case in &cases {
        let findings = check(&system(&case.before), &system(&case.after));
        let got: Vec<(Rule, String, String, Side, Vec<String>)> = findings
            .iter()
            .map(|f| {
                (
                    f.rule,
                    f.subject.name().to_owned(),
                    f.path.clone(),
                    f.breaks,
                    f.broken.clone(),
                )
            })
            .collect();
        let want: Vec<(Rule, String, String, Side, Vec<String>)> = case
            .expected
            .iter()
            .map(|(rule, subject, path, side, broken)| {
                rules_seen.insert(*rule);
                (
                    *rule,
                    (*subject).to_owned(),
                    (*path).to_owned(),
                    *side,
                    broken.iter().map(|s| (*s).to_owned()).collect(),
                )
            })
            .collect();
        assert_eq!(got, want, "{}: {findings:#?}", case.name);
        for finding in &findings {
            let text = finding.to_string();
            assert!(
                text.contains(finding.rule.as_str()) && text.contains(&finding.broken.join(", ")),
                "{text}"
            );
        }
    }
    assert_eq!(rules_seen.len(), 9, "every rule is covered: {rules_seen:?}");
}

#[test]
fn fields_are_followed_through_definitions_and_cycles() {
    let schema = |city: Value| {
        json!({
            "type": "object",
            "properties": {"customer": {"$ref": "#/definitions/Customer"}},
            "definitions": {
                "Customer": {"type": "object", "properties": {
                    "address": {"anyOf": [{"$ref": "#/definitions/Address"}, {"type": "null"}]},
                    "referrer": {"$ref": "#/definitions/Customer"},
                }},
                "Address": {"type": "object", "properties": {"city": city}},
            },
        })
    };
    let before = Parts {
        emit: Some((1, schema(json!({"type": "string"})))),
        ..base()
    };
    let after = Parts {
        emit: Some((2, schema(json!({"type": "integer"})))),
        ..base()
    };
    let findings = check(&system(&before), &system(&after));
    assert_eq!(findings.len(), 1, "{findings:#?}");
    assert_eq!(findings[0].rule, Rule::FieldRetyped);
    assert_eq!(findings[0].path, "/customer/address/city");
    assert_eq!(findings[0].broken, ["module.billing"]);
    assert!(check(&system(&before), &system(&before)).is_empty());
}
