//! `mesh contract check` on every before/after pair of the compatibility table (shared with
//! meshbus-contract's own test of the verdicts): exit 11 naming each expected finding's rule,
//! key or tool and field when the table expects findings, exit 0 when it expects none.

use mesh_testkit::TempDir;

use crate::{assert_code, run, stdout};

#[path = "../../../mesh-contract/tests/pairs/mod.rs"]
mod pairs;

#[tokio::test]
async fn check_gives_the_table_s_verdict_and_exit_code_for_every_pair() {
    let dir = TempDir::new("contract-pairs").expect("a temporary directory");
    let cases = pairs::cases();
    assert!(cases.len() >= 15, "{} pairs", cases.len());
    let mut breaking = 0;
    for (n, case) in cases.iter().enumerate() {
        let write = |side: &str, parts: &pairs::Parts| {
            let path = dir.join(format!("{n}-{side}.json"));
            std::fs::write(&path, pairs::system(parts).to_document().to_string()).expect("written");
            path.display().to_string()
        };
        let old = write("before", &case.before);
        let new = write("after", &case.after);
        let output = run(None, &["contract", "check", "--against", &old, &new]).await;
        let report = stdout(&output);
        if case.expected.is_empty() {
            assert_eq!(output.status.code(), Some(0), "{}: {report}", case.name);
            continue;
        }
        breaking += 1;
        assert_code(&output, 11);
        for (rule, subject, path, _, broken) in &case.expected {
            for word in [rule.as_str(), subject, path]
                .into_iter()
                .chain(broken.iter().copied())
            {
                assert!(
                    report.contains(word),
                    "{}: `{word}` missing from:\n{report}",
                    case.name
                );
            }
        }
    }
    assert!(
        breaking > 0 && breaking < cases.len(),
        "both verdicts are in the table"
    );
}
