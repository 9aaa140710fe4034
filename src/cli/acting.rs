//! As whom `plan`, `diff`, `fetch` and `resume --dry-run` read on a BundleDeployment's behalf.
//!
//! A BundleDeployment's file may come from anyone (a pull request a CI job plans), and what it
//! names (Secrets, `valuesFrom`, `varsFrom`, `lookup`s, a function's Secret) would otherwise be
//! read with the caller's credentials. These commands read it as the identity the agent would
//! act as, and only for a caller who could have created the BundleDeployment: the admission
//! policy's rule (deploy/admission-policy.yaml), asked with a SelfSubjectAccessReview.
//! - naming `spec.serviceAccount`: the caller may `impersonate` it, and every read and the
//!   server's dry run go through that ServiceAccount, so only what it may read is read;
//! - naming none: the caller may do everything (the agent would act as itself), and reads go
//!   with the caller's credentials, under the agent's reference rule.
//!
//! Otherwise the command reads nothing on the file's behalf and says why.

use anyhow::Context as _;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::{Client, Config};

use crate::api::BundleDeployment;
use crate::reconcile::fetch::SecretPolicy;

/// The identity reads are made as, once the caller was found allowed to act as it.
pub(super) struct Acting {
    /// The client to read and dry-run with: impersonating the ServiceAccount, or the caller's.
    pub client: Client,
    /// The reference rule for that client.
    pub policy: SecretPolicy,
}

/// What a caller must be allowed, for the identity `bd` names: (attributes to review, the
/// identity in words, the grant that would allow it).
fn required(bd: &BundleDeployment) -> (ResourceAttributes, String, String) {
    match &bd.spec.service_account {
        Some(sa) => (
            ResourceAttributes {
                group: Some(String::new()),
                resource: Some("serviceaccounts".into()),
                verb: Some("impersonate".into()),
                namespace: Some(sa.namespace.clone()),
                name: Some(sa.name.clone()),
                ..Default::default()
            },
            format!("spec.serviceAccount {}/{}", sa.namespace, sa.name),
            format!(
                "impersonate on serviceaccounts (resourceNames: [{}]) in namespace {}",
                sa.name, sa.namespace
            ),
        ),
        None => (
            ResourceAttributes {
                group: Some("*".into()),
                resource: Some("*".into()),
                verb: Some("*".into()),
                ..Default::default()
            },
            "no spec.serviceAccount (the agent would install it as itself)".into(),
            "every verb on every resource (a cluster administrator)".into(),
        ),
    }
}

/// Whether the caller behind `client` is allowed `attributes` (a SelfSubjectAccessReview, which
/// every authenticated user may ask).
async fn caller_may(client: &Client, attributes: ResourceAttributes) -> anyhow::Result<bool> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(attributes),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .context("asking the cluster what you may do (SelfSubjectAccessReview)")?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The identity to read `bd`'s references as (`what`: the file or name, for messages), after
/// checking that the caller may act as it; an error saying what was not read, and why, when
/// the caller may not.
pub(super) async fn acting_for(
    config: &Config,
    client: &Client,
    bd: &BundleDeployment,
    what: &str,
    agent_namespace: &str,
) -> anyhow::Result<Acting> {
    let (attributes, identity, grant) = required(bd);
    if !caller_may(client, attributes).await? {
        return Err(anyhow::anyhow!(
            "{what} names {identity}, and you may not act as it (the admission policy's rule: \
             you could not create this BundleDeployment either), so nothing it names was read: \
             no Secret, valuesFrom, varsFrom, lookup or function, and no object was compared \
             with the cluster; that takes {grant}. `pallet render` renders a bundle without \
             reading the cluster"
        ));
    }
    let policy = SecretPolicy {
        agent_namespace: agent_namespace.to_string(),
        reads_as_service_account: bd.spec.service_account.is_some(),
        ..Default::default()
    };
    let client = match &bd.spec.service_account {
        Some(sa) => Client::try_from(crate::reconcile::context::impersonating(config, sa))?,
        None => client.clone(),
    };
    Ok(Acting { client, policy })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_right_asked_for_is_the_admission_policys() {
        let bd = |spec: serde_json::Value| -> BundleDeployment {
            serde_json::from_value(json!({"apiVersion": "pallet.dev/v1alpha1",
                "kind": "BundleDeployment", "metadata": {"name": "web"}, "spec": spec}))
            .unwrap()
        };
        let named = bd(json!({"format": "plain", "sources": [],
            "serviceAccount": {"namespace": "team-a", "name": "installer"}}));
        let (attributes, identity, grant) = required(&named);
        assert_eq!(attributes.verb.as_deref(), Some("impersonate"));
        assert_eq!(attributes.resource.as_deref(), Some("serviceaccounts"));
        assert_eq!(attributes.namespace.as_deref(), Some("team-a"));
        assert_eq!(attributes.name.as_deref(), Some("installer"));
        assert_eq!(identity, "spec.serviceAccount team-a/installer");
        assert!(grant.contains("resourceNames: [installer]) in namespace team-a"));
        let (attributes, _, _) = required(&bd(json!({"format": "plain", "sources": []})));
        assert_eq!(
            (attributes.group, attributes.resource, attributes.verb),
            (Some("*".into()), Some("*".into()), Some("*".into()))
        );
        assert_eq!(attributes.namespace, None);
    }
}
