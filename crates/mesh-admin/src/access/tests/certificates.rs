//! Users logging in by certificate, and the tools a module may call.

use super::*;

fn certificate_spec() -> AccessSpec {
    spec()
        .certificate_login(name("umami"))
        .certificate_login(name("audit-logger"))
}

#[test]
fn a_certificate_user_needs_no_password_and_must_have_none() {
    let grants = grants(&certificate_spec());
    assert!(grant(&grants, "module.umami").certificate);
    assert!(grant(&grants, "audit-logger.n1").certificate);
    assert!(!grant(&grants, "module.billing").certificate);
    assert!(!grant(&grants, "operator").certificate);

    // Missing: created without a password; no note asks for one.
    let mut passwords = Passwords::new();
    for g in grants.iter().filter(|g| !g.certificate) {
        passwords.insert(g.user.clone(), Password::new("pw"));
    }
    let fresh = plan(&grants, &BrokerAccess::default(), &passwords, "");
    assert!(fresh.changes.contains(&Change::MissingUser {
        user: "module.umami".into()
    }));
    assert!(fresh.missing_passwords().is_empty(), "{:?}", fresh.notes);

    // There with a password (any, even one given): a difference.
    let mut broker = broker_as_planned(&grants);
    passwords.insert("module.umami", Password::new("pw"));
    let had = plan(&grants, &broker, &passwords, "");
    let umami: Vec<&Change> = had
        .changes
        .iter()
        .filter(|c| c.user() == "module.umami")
        .collect();
    assert_eq!(
        umami,
        [&Change::HasPassword {
            user: "module.umami".into()
        }]
    );
    assert_eq!(umami[0].kind(), "has-password");
    assert!(umami[0].to_string().contains("certificate"));

    // There without one: nothing to do.
    for user in &mut broker.users {
        if user.name == "module.umami" || user.name == "audit-logger.n1" {
            user.password_hash = String::new();
        }
    }
    assert!(plan(&grants, &broker, &passwords, "").is_empty());
}

#[test]
fn definitions_give_a_certificate_user_an_empty_hash() {
    let grants = grants(&certificate_spec());
    let mut passwords = Passwords::new();
    passwords.insert("module.billing", Password::new("pw"));
    let definitions = definitions("v", &grants, &passwords, [1, 2, 3, 4]);
    let users = definitions["users"].as_array().unwrap();
    let hash = |user: &str| {
        users
            .iter()
            .find(|u| u["name"] == user)
            .map(|u| u["password_hash"].as_str().unwrap().to_owned())
    };
    assert_eq!(hash("module.umami").as_deref(), Some(""));
    assert_eq!(hash("audit-logger.n1").as_deref(), Some(""));
    assert!(!hash("module.billing").unwrap().is_empty());
    // No password, no certificate: left out.
    assert_eq!(hash("mesh.ctx"), None);
    let permitted = definitions["permissions"].as_array().unwrap();
    assert!(permitted.iter().any(|p| p["user"] == "module.umami"));
}

#[test]
fn the_spec_limits_the_tools_a_module_calls() {
    let grants = grants(
        &spec()
            .calls(
                name("umami"),
                [pattern("billing.quote"), pattern("shop.*.list")],
            )
            .calls(name("billing"), []),
    );
    let umami = topic_of(grant(&grants, "module.umami"), "mesh.rpc");
    matches(
        &umami.write,
        &["billing.quote", "shop.cart.list"],
        &[
            "billing.quote.x",
            "billing.quotes",
            "xbilling.quote",
            "billing.refund",
            "shop.list",
            "shop.a.b.list",
        ],
    );
    // Serving stays its own.
    assert_eq!(umami.read, r"^umami\.");
    let billing = topic_of(grant(&grants, "module.billing"), "mesh.rpc");
    matches(&billing.write, &[""], &["umami.anything", "billing.own"]);
    // Not limited: every tool, as before.
    let ctx = topic_of(grant(&grants, "mesh.ctx"), "mesh.rpc");
    assert_eq!(ctx.write, ".*");
}

#[test]
fn a_tool_pattern_reads_as_the_broker_matches_keys() {
    for (text, keys) in [
        (
            "billing.#",
            &["billing", "billing.quote", "billing.a.b"][..],
        ),
        ("#.quote", &["quote", "billing.quote", "a.b.quote"][..]),
        (
            "billing.#.quote",
            &["billing.quote", "billing.a.quote", "billing.a.b.quote"][..],
        ),
        ("*.quote", &["billing.quote", "shop.quote"][..]),
        ("#", &["a", "a.b"][..]),
        ("a-b.c_d", &["a-b.c_d"][..]),
    ] {
        let parsed = pattern(text);
        let expression = format!("^(?:{})$", grants::topic_expression(text));
        let r = re(&expression);
        for key in keys {
            assert!(parsed.matches(key), "{text} matches {key}");
            assert!(r.is_match(key), "`{expression}` should match `{key}`");
        }
        for key in ["x", "x.y.z", "billingx.quote", "billing.quotex", "a.b"] {
            assert_eq!(
                r.is_match(key),
                parsed.matches(key),
                "`{expression}` and `{text}` disagree on `{key}`"
            );
        }
    }
}
