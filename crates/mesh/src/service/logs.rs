//! The service's log subscriber: `tracing-subscriber`'s formatter on stderr, as text or JSON,
//! with colour only where it is asked for or shown on a terminal.

use std::io::IsTerminal as _;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

use crate::error::{Error, ErrorKind};

/// The form of log lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogFormat {
    /// Human-readable lines, coloured as [`LogColor`] says.
    #[default]
    Text,
    /// One JSON object per line, for a log collector (never coloured).
    Json,
}

impl FromStr for LogFormat {
    type Err = Error;

    /// `text` or `json`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(Error::options(format!(
                "log format `{}` is neither `text` nor `json`",
                other.escape_debug()
            ))),
        }
    }
}

/// When text log lines carry colour (ANSI escape codes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogColor {
    /// Only when stderr is a terminal and `NO_COLOR` is unset or empty: a file, a pipe,
    /// journald or a container's log never gets escape codes.
    #[default]
    Auto,
    /// Always, wherever stderr goes.
    Always,
    /// Never.
    Never,
}

impl FromStr for LogColor {
    type Err = Error;

    /// `auto`, `always` or `never`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(LogColor::Auto),
            "always" => Ok(LogColor::Always),
            "never" => Ok(LogColor::Never),
            other => Err(Error::options(format!(
                "log colour `{}` is none of `auto`, `always`, `never`",
                other.escape_debug()
            ))),
        }
    }
}

/// Parses a filter in `RUST_LOG`'s syntax.
pub(super) fn filter(filter: &str) -> Result<EnvFilter, Error> {
    EnvFilter::try_new(filter).map_err(|e| Error::with_source(ErrorKind::InvalidOptions, e))
}

/// Whether lines carry escape codes: text only, as `color` says, `Auto` on what stderr is and
/// `NO_COLOR` (<https://no-color.org>: set and not empty means no colour).
fn ansi(format: LogFormat, color: LogColor, terminal: bool, no_color: Option<&str>) -> bool {
    match (format, color) {
        (LogFormat::Json, _) | (LogFormat::Text, LogColor::Never) => false,
        (LogFormat::Text, LogColor::Always) => true,
        (LogFormat::Text, LogColor::Auto) => terminal && no_color.is_none_or(str::is_empty),
    }
}

/// Installs the process's subscriber; fails when one is installed already.
pub(super) fn install(format: LogFormat, color: LogColor, filter_text: &str) -> Result<(), Error> {
    let filter = filter(filter_text)?;
    let no_color = std::env::var_os("NO_COLOR");
    let ansi = ansi(
        format,
        color,
        std::io::stderr().is_terminal(),
        no_color.as_ref().map(|v| v.to_str().unwrap_or("set")),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.with_ansi(ansi).try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
    installed.map_err(|e| Error::with_source(ErrorKind::Service, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color_unless_asked() {
        use LogColor::{Always, Auto, Never};
        use LogFormat::{Json, Text};
        // Auto: a terminal, NO_COLOR unset or empty.
        assert!(ansi(Text, Auto, true, None));
        assert!(ansi(Text, Auto, true, Some("")));
        assert!(!ansi(Text, Auto, true, Some("1")));
        assert!(!ansi(Text, Auto, false, None));
        // Asked for: whatever stderr is, whatever NO_COLOR says.
        assert!(ansi(Text, Always, false, Some("1")));
        assert!(!ansi(Text, Never, true, None));
        // JSON never.
        for color in [Auto, Always, Never] {
            assert!(!ansi(Json, color, true, None));
        }
    }

    #[test]
    fn colours_parse_and_others_are_refused() {
        assert_eq!("auto".parse::<LogColor>().ok(), Some(LogColor::Auto));
        assert_eq!("always".parse::<LogColor>().ok(), Some(LogColor::Always));
        assert_eq!("never".parse::<LogColor>().ok(), Some(LogColor::Never));
        let error = "sometimes".parse::<LogColor>().err();
        assert_eq!(
            error.map(|e| e.kind().clone()),
            Some(ErrorKind::InvalidOptions)
        );
    }
}
