//! What every action (re-drive, purge, replay) goes through: whether actions are offered,
//! the checks of a request that takes one, and the confirmation form that asks for a token.

use axum::http::HeaderMap;
use maud::{html, Markup};
use tracing::warn;

use crate::auth::{given_token, same_origin};
use crate::params::Params;
use crate::respond::{forbidden, Fail};
use crate::Console;

/// Form pairs that name the dead letters of an action again.
pub(crate) type Pairs = Vec<(String, String)>;

/// Why actions are not offered, if they are not.
pub(crate) fn actions_refused(c: &Console) -> Option<Fail> {
    if c.read_only {
        return Some(forbidden("the console is read-only: no action is offered"));
    }
    if c.tokens.is_empty() {
        return Some(forbidden(
            "no token is configured (--token-file or MESH_CONSOLE_TOKEN): actions are disabled",
        ));
    }
    None
}

/// The checks of every action: offered, from the console's own page, with a valid token.
/// Returns the token's name, who the action is logged as.
pub(crate) fn guard(
    c: &Console,
    action: &str,
    headers: &HeaderMap,
    form: &Params,
) -> Result<String, Fail> {
    if let Some(refused) = actions_refused(c) {
        warn!(action, "action refused: not offered");
        return Err(refused);
    }
    if !same_origin(headers, &c.origins) {
        warn!(action, "action refused: not from the console's own origin");
        return Err(forbidden(
            "refused: the request does not come from the console's own page (its Origin, \
             or Referer, is another site's or missing)",
        ));
    }
    let Some(given) = given_token(headers, form.get("token")) else {
        warn!(action, "action refused: no token");
        return Err(forbidden("refused: a token is required"));
    };
    match c.tokens.check(given) {
        Some(name) => Ok(name.to_owned()),
        None => {
            warn!(action, "action refused: the token is not valid");
            Err(forbidden("refused: the token is not valid"))
        }
    }
}

pub(crate) fn confirm_form(action: &str, pairs: &[(String, String)], button: &str) -> Markup {
    html! {
        form method="post" action=(action) {
            @for (name, value) in pairs {
                input type="hidden" name=(name) value=(value);
            }
            p {
                label { "Token " input type="password" name="token" autocomplete="current-password" required; }
                " "
                button.danger type="submit" { (button) }
            }
        }
    }
}
