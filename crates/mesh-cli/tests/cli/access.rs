//! `mesh access plan | apply` against a private RabbitMQ node (users are global to a broker:
//! the shared one is never given the test's users): drift before apply, none after, and a
//! permission or topic permission changed by hand is found, named and restored. No password
//! appears in any output.

use std::process::Output;

use mesh_testkit::{eventually, NodeOptions, PrivateNode};

use crate::{assert_code, finish, mesh, stderr, stdout, NODE, WAIT};

/// The planned users of the spec below, and their passwords.
fn users(prefix: &str) -> Vec<(String, String)> {
    // MESH_NODE (the test node) wins over the spec's node, as for topology.
    let node = format!("node.{NODE}");
    ["operator", node.as_str(), "module.billing", "module.umami"]
        .iter()
        .enumerate()
        .map(|(i, user)| {
            (
                format!("{prefix}{user}"),
                format!("pw-{i}-Zq8vX{}", std::process::id()),
            )
        })
        .collect()
}

fn variable(user: &str) -> String {
    let mut name = "MESH_PASSWORD_".to_owned();
    name.extend(user.bytes().map(|b| {
        if b.is_ascii_alphanumeric() {
            char::from(b.to_ascii_uppercase())
        } else {
            '_'
        }
    }));
    name
}

struct Setup {
    node: PrivateNode,
    management_url: String,
    spec: std::path::PathBuf,
    users: Vec<(String, String)>,
    outputs: Vec<Output>,
}

impl Setup {
    /// `mesh access <args> --spec … --management-url …` with every password in the
    /// environment but those of `without`.
    async fn mesh_without(&mut self, args: &[&str], without: &[&str]) -> Output {
        let mut command = mesh(Some(&self.node.url()));
        command
            .arg("access")
            .args(args)
            .arg("--spec")
            .arg(&self.spec)
            .arg("--management-url")
            .arg(&self.management_url);
        for (user, password) in &self.users {
            if !without.contains(&user.as_str()) {
                command.env(variable(user), password);
            }
        }
        let output = finish(command.spawn().expect("mesh starts")).await;
        self.outputs.push(output.clone());
        output
    }

    async fn mesh(&mut self, args: &[&str]) -> Output {
        self.mesh_without(args, &[]).await
    }

    async fn ctl(&self, args: &[&str]) {
        self.node
            .rabbitmqctl(args)
            .await
            .unwrap_or_else(|e| panic!("rabbitmqctl {args:?}: {e:#}"));
    }
}

#[tokio::test]
async fn access_is_planned_applied_and_restored_after_a_change_by_hand() {
    let node = PrivateNode::start(NodeOptions::default().management(true))
        .await
        .expect("a private RabbitMQ node with management");
    let management_url = format!(
        "http://127.0.0.1:{}",
        node.management_port().expect("management enabled")
    );
    let prefix = format!("acc{}-", std::process::id());
    let dir = std::env::temp_dir().join(format!("mesh-cli-access-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("mesh.toml");
    std::fs::write(
        &spec,
        format!(
            "node = \"n1\"\n[access]\nuser_prefix = \"{prefix}\"\n\
             [[modules]]\nname = \"umami\"\npatterns = [\"module.umami.#\"]\n\
             [[modules]]\nname = \"billing\"\npatterns = [\"module.umami.*.created\"]\n"
        ),
    )
    .unwrap();
    let umami = format!("{prefix}module.umami");
    let mut setup = Setup {
        node,
        management_url,
        spec,
        users: users(&prefix),
        outputs: Vec::new(),
    };

    // The management listener may come up a moment after the node reports booted.
    let spec_path = setup.spec.clone();
    let url = setup.node.url();
    let management_url = setup.management_url.clone();
    eventually(WAIT, "the management API answers", || {
        let mut command = mesh(Some(&url));
        command
            .args(["access", "plan", "--spec"])
            .arg(&spec_path)
            .arg("--management-url")
            .arg(&management_url);
        async move {
            let output = finish(command.spawn().expect("mesh starts")).await;
            (output.status.code() == Some(0)).then_some(())
        }
    })
    .await;

    // Before apply: every user is missing.
    let output = setup.mesh(&["plan", "--check"]).await;
    assert_code(&output, 9);
    let text = stdout(&output);
    assert!(text.contains(&format!("user {umami} is missing")), "{text}");

    // Without one password, apply refuses and changes nothing.
    let output = setup.mesh_without(&["apply"], &[umami.as_str()]).await;
    assert_code(&output, 2);
    assert!(
        stderr(&output).contains("nothing was changed"),
        "{}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains(&variable(&umami)),
        "{}",
        stderr(&output)
    );
    let output = setup.mesh(&["plan", "--check"]).await;
    assert_code(&output, 9);

    // A dry run refuses the same way, then lists what apply would do, and does none of it.
    let output = setup
        .mesh_without(&["apply", "--dry-run"], &[umami.as_str()])
        .await;
    assert_code(&output, 2);
    assert!(
        stderr(&output).contains("nothing was changed"),
        "{}",
        stderr(&output)
    );
    let output = setup.mesh(&["apply", "--dry-run"]).await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(
        text.lines()
            .any(|line| line.contains(&format!("user {umami} is missing"))
                && line.ends_with("would apply")),
        "{text}"
    );
    assert!(text.contains("nothing was changed"), "{text}");
    let listed = setup.node.rabbitmqctl(&["list_users"]).await.unwrap();
    assert!(
        !listed.contains(&umami),
        "a dry run creates no user: {listed}"
    );
    let output = setup.mesh(&["plan", "--check"]).await;
    assert_code(&output, 9);

    let output = setup.mesh(&["apply"]).await;
    assert_code(&output, 0);
    assert!(
        stdout(&output).contains("agrees with the access plan"),
        "{}",
        stdout(&output)
    );
    let output = setup.mesh(&["plan", "--check"]).await;
    assert_code(&output, 0);

    // The broker has what was planned.
    let listed = setup
        .node
        .rabbitmqctl(&["list_topic_permissions", "-p", "/"])
        .await
        .unwrap();
    assert!(listed.contains(r"^module\.umami\."), "{listed}");

    // Permissions changed by hand.
    setup
        .ctl(&["set_permissions", "-p", "/", &umami, ".*", ".*", ".*"])
        .await;
    let output = setup.mesh(&["plan", "--check"]).await;
    assert_code(&output, 9);
    let text = stdout(&output);
    assert!(
        text.contains(&format!("user {umami} has permissions configure `.*`")),
        "{text}"
    );
    let output = setup.mesh(&["apply"]).await;
    assert_code(&output, 0);
    let output = setup.mesh(&["plan", "--check"]).await;
    assert_code(&output, 0);

    // A topic permission changed by hand, and one the plan does not give.
    setup
        .ctl(&[
            "set_topic_permissions",
            "-p",
            "/",
            &umami,
            "mesh.events",
            ".*",
            ".*",
        ])
        .await;
    setup
        .ctl(&[
            "set_topic_permissions",
            "-p",
            "/",
            &umami,
            "amq.topic",
            ".*",
            ".*",
        ])
        .await;
    let output = setup.mesh(&["plan", "--check"]).await;
    assert_code(&output, 9);
    let text = stdout(&output);
    assert!(
        text.contains(&format!("user {umami} has topic permission on mesh.events")),
        "{text}"
    );
    assert!(text.contains("amq.topic"), "{text}");
    let output = setup.mesh(&["apply"]).await;
    assert_code(&output, 0);
    let output = setup.mesh(&["plan", "--check", "--json"]).await;
    assert_code(&output, 0);
    let listed = setup
        .node
        .rabbitmqctl(&["list_topic_permissions", "-p", "/"])
        .await
        .unwrap();
    assert!(!listed.contains("amq.topic"), "{listed}");

    // Another password is a change too.
    setup.users[3].1.push('x');
    let output = setup.mesh(&["plan", "--check"]).await;
    assert_code(&output, 9);
    assert!(
        stdout(&output).contains(&format!("user {umami} has another password")),
        "{}",
        stdout(&output)
    );
    let output = setup.mesh(&["apply"]).await;
    assert_code(&output, 0);
    let output = setup.mesh(&["plan", "--check"]).await;
    assert_code(&output, 0);

    for output in &setup.outputs {
        let all = format!("{}{}", stdout(output), stderr(output));
        for (_, password) in &setup.users {
            assert!(!all.contains(password.as_str()), "a password in: {all}");
            assert!(!all.contains("Zq8vX"), "a password in: {all}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
