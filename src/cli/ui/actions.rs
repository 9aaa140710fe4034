//! The view's actions: each is the CLI's own request (`pallet pause`, `resume`, `rollback`,
//! `retry`, `reconcile`, `test`), sent with the viewer's client.

use kube::Client;

use crate::cli::ops::{self, Request};

/// One action a form posts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Pause with a reason.
    Pause(String),
    /// Resume.
    Resume,
    /// Roll back to a stored revision.
    Rollback(i64),
    /// Retry the failed revision.
    Retry,
    /// Reconcile now.
    Reconcile,
    /// Run a helm chart's tests.
    Test,
}

/// The fields an action form may post.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(default)]
pub struct ActionForm {
    /// The CSRF token.
    pub csrf: String,
    /// Pause: why.
    pub reason: String,
    /// Rollback: the revision.
    pub to: String,
}

/// The longest pause reason kept (it lands in an annotation and a condition message).
const MAX_REASON_CHARS: usize = 500;

impl Action {
    /// The action named `name` (the last segment of its address) with `form`'s fields.
    pub fn parse(name: &str, form: &ActionForm) -> Result<Action, String> {
        match name {
            "pause" => {
                let reason = form.reason.trim();
                if reason.is_empty() {
                    return Err("a pause needs a reason: say why, for whoever looks next".into());
                }
                Ok(Action::Pause(
                    reason.chars().take(MAX_REASON_CHARS).collect(),
                ))
            }
            "resume" => Ok(Action::Resume),
            "rollback" => form
                .to
                .trim()
                .parse::<i64>()
                .map(Action::Rollback)
                .map_err(|_| format!("{:?} is not a revision number", form.to)),
            "retry" => Ok(Action::Retry),
            "reconcile" => Ok(Action::Reconcile),
            "test" => Ok(Action::Test),
            other => Err(format!("there is no action {other:?}")),
        }
    }

    /// The action's name (the last segment of its address).
    pub fn name(&self) -> &'static str {
        match self {
            Action::Pause(_) => "pause",
            Action::Resume => "resume",
            Action::Rollback(_) => "rollback",
            Action::Retry => "retry",
            Action::Reconcile => "reconcile",
            Action::Test => "test",
        }
    }

    /// What the page says once the request is made.
    pub fn done(&self) -> String {
        match self {
            Action::Pause(reason) => format!("Paused: {reason}"),
            Action::Resume => "Resumed: the agent applies the bundle again.".into(),
            Action::Rollback(n) => {
                format!("Rollback to revision {n} requested: the agent acts on it at once.")
            }
            Action::Retry => "Retry requested.".into(),
            Action::Reconcile => "Reconcile requested.".into(),
            Action::Test => "Tests requested: the result appears under Revisions.".into(),
        }
    }

    /// Sends the request for `name` with `client`.
    pub async fn run(&self, client: &Client, name: &str) -> anyhow::Result<()> {
        match self {
            Action::Pause(reason) => ops::set_paused(client, name, Some(reason)).await,
            Action::Resume => ops::set_paused(client, name, None).await,
            Action::Rollback(to) => ops::request_rollback(client, name, *to).await.map(drop),
            Action::Retry => ops::request_now(client, name, Request::Retry)
                .await
                .map(drop),
            Action::Reconcile => ops::request_now(client, name, Request::Reconcile)
                .await
                .map(drop),
            Action::Test => crate::cli::test::request_tests(client, name)
                .await
                .map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_parse_from_their_forms() {
        let form = |reason: &str, to: &str| ActionForm {
            csrf: String::new(),
            reason: reason.into(),
            to: to.into(),
        };
        assert_eq!(
            Action::parse("pause", &form(" hotfix ", "")),
            Ok(Action::Pause("hotfix".into()))
        );
        assert!(Action::parse("pause", &form("  ", "")).is_err());
        let long = "x".repeat(2 * MAX_REASON_CHARS);
        assert_eq!(
            Action::parse("pause", &form(&long, "")),
            Ok(Action::Pause("x".repeat(MAX_REASON_CHARS)))
        );
        assert_eq!(
            Action::parse("rollback", &form("", "3")),
            Ok(Action::Rollback(3))
        );
        assert!(Action::parse("rollback", &form("", "three")).is_err());
        assert!(Action::parse("delete", &form("", "")).is_err());
        assert!(Action::Rollback(3).done().contains("revision 3"));
        for action in [
            Action::Resume,
            Action::Rollback(1),
            Action::Retry,
            Action::Reconcile,
            Action::Test,
        ] {
            assert_eq!(
                Action::parse(action.name(), &form("x", "1")).map(|a| a.name()),
                Ok(action.name())
            );
        }
    }
}
