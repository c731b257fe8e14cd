//! How a difference's sign is painted and a difference printed on its own line.

use mesh_admin::topology::Difference;

use crate::output::{self, paint, BAD, DIM, GOOD, WARN};

pub(super) fn sign_style(sign: char) -> anstyle::Style {
    match sign {
        '+' => GOOD,
        '~' => WARN,
        '-' => BAD,
        _ => DIM,
    }
}

pub(super) fn print_difference(d: &Difference) -> anyhow::Result<()> {
    let sign = d.sign();
    output::line(format_args!(
        "{} {}",
        paint(sign_style(sign), sign),
        d.describe()
    ))?;
    Ok(())
}
