//! A directory of the test's own in the temporary directory ([`TempDir`]), removed on drop.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use rand::Rng;

/// A new, empty directory `mesh-<label>-<pid>-<n>-<random>` in the temporary directory,
/// removed with everything in it on drop (even when the test panics).
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates the directory; `label` names the test in it, for whoever finds one left behind
    /// by a killed test.
    pub fn new(label: &str) -> anyhow::Result<TempDir> {
        let dir = std::env::temp_dir().join(format!("mesh-{label}-{}", unique()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(TempDir(dir))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `name` in the directory.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `<pid>-<counter>-<random>`, lowercase: unique among the processes sharing the machine,
/// and usable as a database name once `-` is replaced.
pub(crate) fn unique() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut rng = rand::thread_rng();
    let random: String = (0..8)
        .map(|_| char::from(b'a' + rng.gen_range(0..26u8)))
        .collect();
    format!(
        "{}-{}-{random}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_directory_of_its_own_removed_on_drop() {
        let one = TempDir::new("kit-temp").expect("a temporary directory");
        let two = TempDir::new("kit-temp").expect("a temporary directory");
        assert_ne!(one.path(), two.path());
        assert!(one.path().is_dir());
        assert!(one
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("mesh-kit-temp-")));
        std::fs::create_dir_all(one.join("a/b")).expect("a subdirectory");
        std::fs::write(one.join("a/b/file"), b"x").expect("a file");
        let path = one.path().to_owned();
        drop(one);
        assert!(!path.exists());
        assert!(two.path().is_dir());
    }
}
