//! Opening a plain connection (no confirms) to the broker a mesh URL names, and declaring
//! `mesh.logs`.

use amqprs::channel::{Channel, ExchangeDeclareArguments};
use amqprs::connection::{Connection, OpenConnectionArguments};
use mesh_amqp::AmqpOptions;

use crate::error::{LogsError, LogsErrorKind};

/// Connects to the first node of `options` that answers, as `name`.
pub(crate) async fn connect(options: &AmqpOptions, name: &str) -> Result<Connection, LogsError> {
    let heartbeat = u16::try_from(options.get_heartbeat().as_secs()).unwrap_or(u16::MAX);
    let mut last = LogsError::new(LogsErrorKind::InvalidOptions, "no broker address");
    for address in options.get_addresses() {
        let args = OpenConnectionArguments::new(
            &address.host,
            address.port,
            options.get_user(),
            options.get_password(),
        )
        .virtual_host(options.get_vhost())
        .connection_name(name)
        .heartbeat(heartbeat)
        .finish();
        let context = format!("{}:{} as `{name}`", address.host, address.port);
        match tokio::time::timeout(options.get_connect_timeout(), Connection::open(&args)).await {
            Ok(Ok(connection)) => return Ok(connection),
            Ok(Err(e)) => {
                last = LogsError::new(LogsErrorKind::Connection, context).with_source(e);
            }
            Err(_) => {
                last = LogsError::new(LogsErrorKind::Connection, format!("{context}: timed out"));
            }
        }
    }
    Err(last)
}

/// Opens a channel (without confirms) and declares `mesh.logs`: topic, durable.
pub(crate) async fn channel(connection: &Connection) -> Result<Channel, LogsError> {
    let channel = connection.open_channel(None).await.map_err(|e| {
        LogsError::new(LogsErrorKind::Connection, "opening a channel").with_source(e)
    })?;
    let mut args = ExchangeDeclareArguments::new(crate::LOGS_EXCHANGE, "topic");
    args.durable = true;
    channel.exchange_declare(args).await.map_err(|e| {
        LogsError::new(
            LogsErrorKind::Broker,
            format!("declaring `{}`", crate::LOGS_EXCHANGE),
        )
        .with_source(e)
    })?;
    Ok(channel)
}

/// Parses a mesh broker URL.
pub(crate) fn parse(url: &str) -> Result<AmqpOptions, LogsError> {
    url.parse::<AmqpOptions>()
        .map_err(|e| LogsError::new(LogsErrorKind::InvalidOptions, "the broker URL").with_source(e))
}
