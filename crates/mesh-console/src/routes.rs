//! The console's routes: each path to the page that answers it, and the layers every
//! request goes through (the `Host` check, the security headers).

use std::sync::Arc;

use axum::routing::get;
use axum::Router;

use crate::console::Console;
use crate::{assets, contracts, dead_letters, headers, live, map, pages, redrive, search};

impl Console {
    /// The application.
    pub fn router(self) -> Router {
        let state = Arc::new(self);
        Router::new()
            .route("/", get(pages::overview))
            .route("/assets/console.css", get(assets::style))
            .route("/assets/console.js", get(assets::script))
            .route("/assets/live.js", get(assets::live_script))
            .route("/assets/redrive.js", get(assets::redrive_script))
            .route("/events", get(search::events))
            .route("/events/{id}", get(pages::event))
            .route("/dead", get(dead_letters::dead))
            .route(
                "/dead/redrive",
                get(redrive::redrive_confirm).post(redrive::redrive),
            )
            .route(
                "/dead/purge",
                get(dead_letters::purge_confirm).post(dead_letters::purge),
            )
            .route("/dead/{id}", get(dead_letters::dead_letter))
            .route("/live", get(live::live))
            .route("/live/stream", get(live::stream))
            .route("/map", get(map::map))
            .route("/contracts", get(contracts::contracts))
            .route("/modules/{queue}", get(map::module))
            .route("/replay", get(map::replay_confirm).post(map::replay))
            .fallback(pages::not_found)
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                pages::known_host,
            ))
            // Outermost: also on the refusals of `known_host`.
            .layer(axum::middleware::map_response(headers::secure))
            .with_state(state)
    }
}
