//! Server-rendered pages (maud templates, checked at compile time). Pure: view models in,
//! markup out.

pub mod bundle;
pub mod layout;
pub mod overview;

use maud::{html, Markup};

/// The sign-in page: the agent's view asks for a token, `pallet ui` for its login address.
pub fn login(agent_view: bool, why: &str, error: Option<&str>) -> Markup {
    html! {
        h1 { "Sign in" }
        @if let Some(error) = error { (layout::message("error", error)) }
        p { (why) }
        @if agent_view {
            form.login method="post" action="/login" {
                label for="token" { "Kubernetes bearer token" }
                p.hint #token-hint { "For example the output of " code { "kubectl create token NAME -n NAMESPACE" } " for a ServiceAccount, or your own token. It is checked with a TokenReview and kept in an HttpOnly cookie for eight hours; everything you see and do is then done as you." }
                textarea #token name="token" rows="4" required autocomplete="off" spellcheck="false" aria-describedby="token-hint" {}
                button type="submit" { "Sign in" }
            }
        }
    }
}

/// A page that says what went wrong.
pub fn problem(title: &str, text: &str) -> Markup {
    html! {
        nav.crumbs aria-label="Breadcrumb" { a href="/" { "Bundles" } }
        h1 { (title) }
        (layout::message("error", text))
    }
}
