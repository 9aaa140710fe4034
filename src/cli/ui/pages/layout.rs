//! The frame every page shares: head, skip link, header with the user, the live region.

use maud::{html, Markup, DOCTYPE};

use crate::cli::ui::state::BundleState;

/// What the frame needs besides the page's body.
pub struct Frame<'a> {
    /// The page's title (after "pallet").
    pub title: &'a str,
    /// Who is looking, when known.
    pub user: Option<&'a str>,
    /// The CSRF token (for the sign-out form of the agent's view).
    pub csrf: Option<&'a str>,
    /// The address of the page's live stream: the body is refreshed when it says so.
    pub live: Option<String>,
    /// Whether the view is the agent's (it has a sign-out).
    pub agent_view: bool,
}

/// A whole page: `body` inside the frame.
pub fn page(frame: &Frame<'_>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="same-origin";
                title { (frame.title) " · pallet" }
                link rel="stylesheet" href="/assets/app.css";
                script src="/assets/app.js" defer {}
            }
            body {
                a.skip href="#content" { "Skip to content" }
                header.top {
                    a.brand href="/" { "pallet" }
                    nav aria-label="Main" {
                        a href="/" { "Overview" }
                    }
                    @if let Some(user) = frame.user {
                        span.user { "Signed in as " strong { (user) } }
                        @if frame.agent_view {
                            form.inline method="post" action="/logout" {
                                input type="hidden" name="csrf" value=(frame.csrf.unwrap_or_default());
                                button.link type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main id="content" tabindex="-1" data-live=[frame.live.as_deref()] {
                    (body)
                }
                p.live-status role="status" aria-live="polite" id="live-status" {}
            }
        }
    }
}

/// A state as a badge: a word (never colour alone) with the state's colour.
pub fn badge(state: BundleState) -> Markup {
    html! {
        span class={"badge state-" (state.name())} title=(state.meaning()) { (state.name()) }
    }
}

/// A health state (`Current`, `InProgress`, `Failed`, …) as a badge.
pub fn health_badge(state: &str) -> Markup {
    let class = match state {
        "Current" => "state-Ready",
        "Suspended" => "state-Paused",
        "InProgress" | "Terminating" => "state-Progressing",
        _ => "state-Failed",
    };
    html! { span class={"badge " (class)} { (state) } }
}

/// A message box: `notice` (role status) or `error` (role alert).
pub fn message(kind: &str, text: &str) -> Markup {
    let role = if kind == "error" { "alert" } else { "status" };
    html! { div class={"message " (kind)} role=(role) { (text) } }
}
