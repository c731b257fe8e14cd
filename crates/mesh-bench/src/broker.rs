//! The broker as the bench uses it: where it is, the bench's own vhosts (created and deleted
//! with `rabbitmqctl`), raw connections into them, and the queue chores between runs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::callbacks::{DefaultChannelCallback, DefaultConnectionCallback};
use amqprs::channel::{
    Channel, QueueBindArguments, QueueDeclareArguments, QueueDeleteArguments, QueuePurgeArguments,
};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{FieldTable, FieldValue};
use anyhow::{bail, Context};
use mesh::amqp::AmqpOptions;
use mesh_testkit::PrivateNode;

use crate::cli::QueueKind;
use crate::tls::RawTls;

/// How long one `rabbitmqctl` may take (each boots an Erlang VM).
const CTL_TIMEOUT: Duration = Duration::from_secs(120);

/// How the bench runs `rabbitmqctl`.
#[derive(Debug, Clone)]
pub(crate) enum Ctl {
    /// This command, against the broker of `--url`.
    Command(String),
    /// The private node of `--tls`.
    Node(Arc<PrivateNode>),
}

/// The broker named by `--url` (or the private node of `--tls`).
#[derive(Debug, Clone)]
pub(crate) struct Broker {
    options: AmqpOptions,
    ctl: Ctl,
    /// The raw client's TLS, when the broker is reached over TLS.
    tls: Option<RawTls>,
    /// Vhosts created and not deleted yet: deleted at the end whatever happens.
    live: Arc<Mutex<Vec<String>>>,
}

impl Broker {
    pub(crate) fn new(url: &str, ctl: Ctl, tls: Option<RawTls>) -> anyhow::Result<Broker> {
        let options: AmqpOptions = url.parse().with_context(|| format!("bad --url `{url}`"))?;
        anyhow::ensure!(
            !options.get_addresses().is_empty(),
            "--url names no broker address"
        );
        Ok(Broker {
            options,
            ctl,
            tls,
            live: Arc::default(),
        })
    }

    /// Creates vhost `name`, gives the URL's user every permission on it, and records it
    /// for [`Broker::delete_all`].
    pub(crate) async fn create_vhost(&self, name: &str) -> anyhow::Result<()> {
        // A vhost left by an interrupted run of the same pid is stale: start clean.
        let _ = self.ctl(&["delete_vhost", name]).await;
        self.ctl(&["add_vhost", name]).await?;
        if let Ok(mut live) = self.live.lock() {
            live.push(name.to_owned());
        }
        self.ctl(&[
            "set_permissions",
            "-p",
            name,
            self.options.get_user(),
            ".*",
            ".*",
            ".*",
        ])
        .await?;
        Ok(())
    }

    /// Deletes vhost `name` (and with it every queue and exchange in it).
    pub(crate) async fn delete_vhost(&self, name: &str) -> anyhow::Result<()> {
        if let Ok(mut live) = self.live.lock() {
            live.retain(|v| v != name);
        }
        self.ctl(&["delete_vhost", name]).await
    }

    /// Deletes every vhost created and not deleted yet; reports failures and goes on.
    pub(crate) async fn delete_all(&self) {
        let live: Vec<String> = match self.live.lock() {
            Ok(mut live) => std::mem::take(&mut *live),
            Err(_) => Vec::new(),
        };
        for vhost in live {
            if let Err(e) = self.ctl(&["delete_vhost", &vhost]).await {
                eprintln!("mesh-bench: could not delete vhost `{vhost}`: {e:#}");
            }
        }
    }

    async fn ctl(&self, args: &[&str]) -> anyhow::Result<()> {
        let command = match &self.ctl {
            Ctl::Command(command) => command,
            Ctl::Node(node) => {
                return node.rabbitmqctl(args).await.map(drop);
            }
        };
        let run = tokio::process::Command::new(command)
            .args(args)
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(CTL_TIMEOUT, run)
            .await
            .with_context(|| format!("`{command} {}` timed out", args.join(" ")))?
            .with_context(|| {
                format!("running `{command}` (install RabbitMQ's CLI or pass --rabbitmqctl)")
            })?;
        if !output.status.success() {
            bail!(
                "`{command} {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(())
    }

    /// mesh's options for `vhost`: the queue type, the confirm window and a connection name.
    pub(crate) fn mesh_options(
        &self,
        vhost: &str,
        kind: QueueKind,
        window: usize,
        name: &str,
    ) -> AmqpOptions {
        self.options
            .clone()
            .vhost(vhost)
            .queue_type(kind.mesh())
            .confirm_window(window)
            .connection_name(format!("bench.mesh.{name}"))
    }

    /// A raw connection into `vhost`.
    pub(crate) async fn raw(&self, vhost: &str, name: &str) -> anyhow::Result<Connection> {
        let address = &self.options.get_addresses()[0];
        let mut args = OpenConnectionArguments::new(
            &address.host,
            address.port,
            self.options.get_user(),
            self.options.get_password(),
        );
        args.virtual_host(vhost)
            .connection_name(&format!("bench.raw.{name}"))
            .heartbeat(10);
        if let Some(tls) = &self.tls {
            args.tls_adaptor(tls.adaptor());
        }
        let connection = Connection::open(&args)
            .await
            .with_context(|| format!("connecting to {address}, vhost `{vhost}`"))?;
        connection
            .register_callback(DefaultConnectionCallback)
            .await?;
        Ok(connection)
    }
}

/// Opens a plain channel (no confirms).
pub(crate) async fn channel(connection: &Connection) -> anyhow::Result<Channel> {
    let channel = connection.open_channel(None).await?;
    channel.register_callback(DefaultChannelCallback).await?;
    Ok(channel)
}

/// Closes a connection, ignoring a connection the broker already closed.
pub(crate) async fn close(connection: Connection) {
    if connection.is_open() {
        let _ = tokio::time::timeout(Duration::from_secs(10), connection.close()).await;
    }
}

/// Declares durable queue `queue` of `kind` and binds it to `exchange` on `key`.
pub(crate) async fn declare_bound(
    connection: &Connection,
    queue: &str,
    kind: QueueKind,
    exchange: &str,
    key: &str,
) -> anyhow::Result<()> {
    let ch = channel(connection).await?;
    let mut arguments = FieldTable::new();
    arguments.insert(
        "x-queue-type"
            .try_into()
            .map_err(|_| anyhow::anyhow!("bad name"))?,
        FieldValue::S(
            kind.as_str()
                .try_into()
                .map_err(|_| anyhow::anyhow!("bad value"))?,
        ),
    );
    ch.queue_declare(
        QueueDeclareArguments::durable_client_named(queue)
            .arguments(arguments)
            .finish(),
    )
    .await
    .with_context(|| format!("declaring `{queue}`"))?;
    ch.queue_bind(QueueBindArguments::new(queue, exchange, key))
        .await
        .with_context(|| format!("binding `{queue}`"))?;
    let _ = ch.close().await;
    Ok(())
}

/// Empties `queue`; returns how many messages it held.
pub(crate) async fn purge(connection: &Connection, queue: &str) -> anyhow::Result<u64> {
    let ch = channel(connection).await?;
    let purged = ch
        .queue_purge(QueuePurgeArguments::new(queue))
        .await
        .with_context(|| format!("purging `{queue}`"))?;
    let _ = ch.close().await;
    Ok(purged.map_or(0, u64::from))
}

/// Deletes `queue`.
pub(crate) async fn delete(connection: &Connection, queue: &str) -> anyhow::Result<()> {
    let ch = channel(connection).await?;
    ch.queue_delete(QueueDeleteArguments::new(queue))
        .await
        .with_context(|| format!("deleting `{queue}`"))?;
    let _ = ch.close().await;
    Ok(())
}

/// How many messages `queue` holds ready (a passive declare).
pub(crate) async fn depth(connection: &Connection, queue: &str) -> anyhow::Result<u64> {
    let ch = channel(connection).await?;
    let declared = ch
        .queue_declare(QueueDeclareArguments::new(queue).passive(true).finish())
        .await
        .with_context(|| format!("reading the depth of `{queue}`"))?;
    let _ = ch.close().await;
    Ok(declared.map_or(0, |(_, messages, _)| u64::from(messages)))
}
