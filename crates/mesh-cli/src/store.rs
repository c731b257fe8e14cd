//! Where the audit store is, for every command that reads it (and the logger, which writes
//! it): `--store`, `MESH_AUDIT_STORE`, the context's store, or the default SQLite file.

use std::path::PathBuf;

use anyhow::Context as _;
use mesh_audit::{Store, StoreOptions};

use crate::cli::{Global, StoreArg};
use crate::exit::{fail, Code, WithCode};

/// The default store, for `mesh audit run`, `mesh-audit run` and the reading commands alike:
/// `$XDG_DATA_HOME/mesh/audit.db`, else `~/.local/share/mesh/audit.db`.
fn default_store_path() -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .or_else(|| dirs::home_dir().map(|home| home.join(".local").join("share")))
        .ok_or_else(|| {
            fail(
                Code::Usage,
                "no home directory for the default audit store: give --store or MESH_AUDIT_STORE",
            )
        })?;
    Ok(dir.join("mesh").join("audit.db"))
}

/// The store URL: `--store`, `MESH_AUDIT_STORE`, the context's store, or the default SQLite
/// file (created by the logger only; the reading commands say when it does not exist).
pub(crate) fn store_url(global: &Global, arg: &StoreArg, create: bool) -> anyhow::Result<String> {
    if let Some(url) = arg.store.as_ref().or(global.context_store.as_ref()) {
        return Ok(url.trim().to_owned());
    }
    let path = default_store_path()?;
    if !create && !path.exists() {
        return Err(fail(
            Code::Error,
            format!(
                "no audit store at {}: run `mesh audit run` to record one, or give --store",
                path.display()
            ),
        ));
    }
    Ok(format!("sqlite://{}", path.display()))
}

/// The store for `status`: the one given, or the default one when it exists; `None` when
/// there is none.
pub(crate) async fn open_if_any(global: &Global, arg: &StoreArg) -> anyhow::Result<Option<Store>> {
    if arg.store.is_none()
        && global.context_store.is_none()
        && !default_store_path().is_ok_and(|p| p.exists())
    {
        return Ok(None);
    }
    open(global, arg).await.map(Some)
}

/// Opens the store of `--store` (or the context's, or the default one, which must exist) as
/// the commands that read it do: a store an audit logger made, never created or migrated
/// here (a database without its tables says so, with a hint).
pub(crate) async fn open(global: &Global, arg: &StoreArg) -> anyhow::Result<Store> {
    let url = store_url(global, arg, false)?;
    let options: StoreOptions = url
        .parse()
        .coded(Code::Usage, || "invalid --store".to_owned())?;
    let shown = options.redacted_url();
    Store::open_existing(options)
        .await
        .with_context(|| format!("opening the audit store {shown}"))
}
