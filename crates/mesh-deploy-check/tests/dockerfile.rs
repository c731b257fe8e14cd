//! `deploy/Dockerfile`, checked for its structure (no Dockerfile linter is packaged in
//! Debian, and no container engine runs here): two stages, the binaries built with
//! `--locked` from packages and binaries that exist, a slim runtime running as a user that is
//! not root, and a build context that excludes `target/`.

mod common;

use std::fs;

use anyhow::{ensure, Context};
use common::{deploy_file, workspace};

/// One instruction: its keyword (upper case) and its arguments, continuation lines joined.
#[derive(Debug)]
struct Instruction {
    keyword: String,
    args: String,
}

fn instructions(text: &str) -> Vec<Instruction> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if pending.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if let Some(start) = trimmed.strip_suffix('\\') {
            pending.push_str(start.trim_end());
            pending.push(' ');
            continue;
        }
        if trimmed.starts_with('#') {
            continue;
        }
        pending.push_str(trimmed);
        let (keyword, args) = pending
            .split_once(char::is_whitespace)
            .unwrap_or((&pending, ""));
        out.push(Instruction {
            keyword: keyword.to_ascii_uppercase(),
            args: args.trim().to_owned(),
        });
        pending.clear();
    }
    out
}

/// The stages: each `FROM` and the instructions after it.
fn stages(all: Vec<Instruction>) -> Vec<Vec<Instruction>> {
    let mut stages: Vec<Vec<Instruction>> = Vec::new();
    for instruction in all {
        if instruction.keyword == "FROM" {
            stages.push(Vec::new());
        }
        if let Some(stage) = stages.last_mut() {
            stage.push(instruction);
        }
    }
    stages
}

/// The workspace's packages and their binaries, from the manifests under `crates/`.
fn packages() -> anyhow::Result<Vec<(String, Vec<String>)>> {
    let mut packages = Vec::new();
    for entry in fs::read_dir(workspace().join("crates"))? {
        let manifest = entry?.path().join("Cargo.toml");
        if !manifest.is_file() {
            continue;
        }
        let value: toml::Value = toml::from_str(&fs::read_to_string(&manifest)?)
            .with_context(|| format!("parsing {}", manifest.display()))?;
        let name = value["package"]["name"]
            .as_str()
            .context("package.name")?
            .to_owned();
        let bins = value
            .get("bin")
            .and_then(toml::Value::as_array)
            .map(|bins| {
                bins.iter()
                    .filter_map(|b| b.get("name")?.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        packages.push((name, bins));
    }
    Ok(packages)
}

/// The values after each `flag` in `words`.
fn after<'a>(words: &[&'a str], flag: &str) -> Vec<&'a str> {
    words
        .windows(2)
        .filter(|w| w[0] == flag)
        .map(|w| w[1])
        .collect()
}

#[test]
fn two_stages_build_locked_and_run_as_a_user() -> anyhow::Result<()> {
    let stages = stages(instructions(&deploy_file("Dockerfile")?));
    ensure!(
        stages.len() >= 2,
        "a multi-stage build: {} stage(s)",
        stages.len()
    );
    let build = &stages[0];
    let from: Vec<&str> = build[0].args.split_whitespace().collect();
    ensure!(
        from.len() == 3 && from[1].eq_ignore_ascii_case("AS"),
        "the build stage is named: FROM image AS name"
    );
    let (image, name) = (from[0], from[2]);
    // The builder's toolchain is at least the workspace's rust-version.
    let manifest: toml::Value =
        toml::from_str(&fs::read_to_string(workspace().join("Cargo.toml"))?)?;
    let msrv = manifest["workspace"]["package"]["rust-version"]
        .as_str()
        .context("rust-version")?;
    let tag = image.strip_prefix("rust:").context("a rust image builds")?;
    let version =
        |v: &str| -> Vec<u32> { v.split(['.', '-']).map_while(|p| p.parse().ok()).collect() };
    ensure!(
        version(tag) >= version(msrv),
        "rust:{tag} is older than rust-version {msrv}"
    );

    // The cargo build: --locked, release, the binaries of packages that exist.
    let cargo = build
        .iter()
        .find(|i| i.keyword == "RUN" && i.args.contains("cargo build"))
        .context("a RUN cargo build")?;
    let words: Vec<&str> = cargo.args.split_whitespace().collect();
    ensure!(words.contains(&"--locked"), "cargo build --locked");
    ensure!(words.contains(&"--release"), "cargo build --release");
    let packages = packages()?;
    let built_packages = after(&words, "-p");
    for package in &built_packages {
        ensure!(
            packages.iter().any(|(name, _)| name == package),
            "-p {package}: no such package in the workspace"
        );
    }
    let bins = after(&words, "--bin");
    for bin in ["mesh", "mesh-audit"] {
        ensure!(bins.contains(&bin), "cargo build --bin {bin}");
        ensure!(
            packages
                .iter()
                .any(|(name, b)| built_packages.contains(&name.as_str())
                    && b.iter().any(|b| b == bin)),
            "--bin {bin} belongs to none of the built packages"
        );
    }
    // What the build stage copies exists in the repository.
    for copy in build.iter().filter(|i| i.keyword == "COPY") {
        let parts: Vec<&str> = copy.args.split_whitespace().collect();
        for source in &parts[..parts.len().saturating_sub(1)] {
            ensure!(
                workspace().join(source).exists(),
                "COPY {source}: not in the repository"
            );
        }
    }

    // The runtime: a slim image, the two binaries from the build stage, a user that is not
    // root, the logger as entrypoint.
    let runtime = stages.last().context("a runtime stage")?;
    let base = runtime[0]
        .args
        .split_whitespace()
        .next()
        .unwrap_or_default();
    ensure!(
        base != name && (base.contains("slim") || base.contains("distroless")),
        "a small runtime image: {base}"
    );
    let copied: Vec<&str> = runtime
        .iter()
        .filter(|i| i.keyword == "COPY" && i.args.starts_with(&format!("--from={name} ")))
        .flat_map(|i| i.args.split_whitespace())
        .collect();
    for bin in ["mesh", "mesh-audit"] {
        ensure!(
            copied.contains(&format!("/src/target/release/{bin}").as_str())
                || copied
                    .iter()
                    .any(|c| c.ends_with(&format!("/release/{bin}"))),
            "the runtime copies {bin} from the build stage"
        );
    }
    let user = runtime
        .iter()
        .rev()
        .find(|i| i.keyword == "USER")
        .context("the runtime stage sets USER")?;
    let who = user.args.split(':').next().unwrap_or_default();
    ensure!(
        !who.is_empty() && who != "root" && who != "0",
        "the runtime runs as a user that is not root: USER {}",
        user.args
    );
    let entrypoint = runtime
        .iter()
        .find(|i| i.keyword == "ENTRYPOINT")
        .context("an ENTRYPOINT")?;
    ensure!(
        entrypoint.args.contains("mesh-audit"),
        "the entrypoint is mesh-audit: {}",
        entrypoint.args
    );
    Ok(())
}

/// The image's logs are plain text: `NO_COLOR` set in the runtime stage, so even `docker run
/// -t` (a terminal) gives lines without colour escape codes.
#[test]
fn the_image_logs_without_colour() -> anyhow::Result<()> {
    let stages = stages(instructions(&deploy_file("Dockerfile")?));
    let runtime = stages.last().context("a runtime stage")?;
    let set: Vec<&str> = runtime
        .iter()
        .filter(|i| i.keyword == "ENV")
        .flat_map(|i| i.args.split_whitespace())
        .collect();
    ensure!(set.contains(&"NO_COLOR=1"), "ENV NO_COLOR=1: {set:?}");
    Ok(())
}

#[test]
fn the_build_context_leaves_out_the_target_dir() -> anyhow::Result<()> {
    let ignore = fs::read_to_string(workspace().join(".dockerignore"))
        .context(".dockerignore at the repository root (the build context)")?;
    let lines: Vec<&str> = ignore.lines().map(str::trim).collect();
    for excluded in ["target", ".git", "deploy/secrets", "deploy/tls"] {
        ensure!(
            lines.contains(&excluded),
            ".dockerignore leaves out {excluded}"
        );
    }
    Ok(())
}

#[test]
fn the_instruction_reader_joins_continuations_and_skips_comments() {
    let parsed = instructions("# c\nFROM a AS b\nRUN x \\\n  # inner\n  y\nUSER 1\n");
    let got: Vec<(&str, &str)> = parsed
        .iter()
        .map(|i| (i.keyword.as_str(), i.args.as_str()))
        .collect();
    assert_eq!(got, [("FROM", "a AS b"), ("RUN", "x y"), ("USER", "1")]);
}
