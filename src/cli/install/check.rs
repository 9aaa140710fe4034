//! `pallet check`: a preflight and health report of an installation. Each check says ok, warn
//! or FAIL and why: the Kubernetes version against the supported range, the CRD (present,
//! established, of this CLI's release), the agents (available, one of each leading), the
//! agent's RBAC (every permission it needs, asked of the API server), the registry-v1 webhook
//! certificates the agent issued (not expired), and the BundleDeployments that are stuck, with
//! their reason and message. Exit status 1 when a check fails.

use std::collections::BTreeMap;

use clap::Args;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

use super::manifests::{DEFAULT_NAMESPACE, DEPLOY_FILES};
use super::version::{self, AgentLease};
use crate::api::BundleDeployment;
use crate::cli::{print_data, KubeArgs, Output};
use crate::reconcile::webhook_certs::{CERTIFICATES_OF_LABEL, NOT_AFTER_ANNOTATION};

/// The Kubernetes versions pallet supports, as (major, minor): the admission policy needs
/// admissionregistration.k8s.io/v1 (1.30); the API types are those of 1.35.
pub const SUPPORTED_KUBERNETES: ((u32, u32), (u32, u32)) = ((1, 30), (1, 35));

/// A BundleDeployment whose Ready condition has been False this long is reported as stuck.
const STUCK_AFTER_SECONDS: i64 = 600;

/// A BundleDeployment being deleted this long is reported as stuck.
const DELETION_STUCK_AFTER_SECONDS: i64 = 120;

/// A certificate expiring within this is warned about.
const CERTIFICATE_WARNING_SECONDS: i64 = 30 * 24 * 3600;

/// Flags of `pallet check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The agents' namespace.
    #[arg(short = 'n', long, default_value = DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// The agent's ServiceAccount (in the agents' namespace) whose permissions are checked.
    #[arg(long, default_value = "pallet-agent")]
    pub service_account: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Output,
    /// Cluster.
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// Fine.
    Ok,
    /// Works, but needs a look.
    Warn,
    /// Broken.
    Fail,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        }
    }
}

/// One check's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What was checked.
    pub check: &'static str,
    /// How it came out.
    pub verdict: Verdict,
    /// One line.
    pub summary: String,
    /// Each problem, one per line.
    pub details: Vec<String>,
}

impl Finding {
    fn new(check: &'static str, verdict: Verdict, summary: impl Into<String>) -> Finding {
        Finding {
            check,
            verdict,
            summary: summary.into(),
            details: Vec::new(),
        }
    }
}

/// The Kubernetes version check.
pub fn kubernetes_finding(major: &str, minor: &str, git_version: &str) -> Finding {
    let number = |s: &str| s.trim_end_matches('+').parse::<u32>().ok();
    let ((low_major, low_minor), (high_major, high_minor)) = SUPPORTED_KUBERNETES;
    let range = format!("supported: {low_major}.{low_minor} to {high_major}.{high_minor}");
    match (number(major), number(minor)) {
        (Some(major), Some(minor)) if (major, minor) < (low_major, low_minor) => Finding::new(
            "Kubernetes",
            Verdict::Fail,
            format!("{git_version} is older than pallet supports ({range})"),
        ),
        (Some(major), Some(minor)) if (major, minor) > (high_major, high_minor) => Finding::new(
            "Kubernetes",
            Verdict::Warn,
            format!("{git_version} is newer than this release was tested with ({range})"),
        ),
        (Some(_), Some(_)) => Finding::new(
            "Kubernetes",
            Verdict::Ok,
            format!("{git_version} ({range})"),
        ),
        _ => Finding::new(
            "Kubernetes",
            Verdict::Warn,
            format!("version {git_version:?} not understood ({range})"),
        ),
    }
}

async fn crd_finding(client: &Client) -> anyhow::Result<Finding> {
    let Some((live, live_version)) = version::installed_crd(client).await? else {
        return Ok(Finding::new(
            "CRD",
            Verdict::Fail,
            format!("{} is not installed (`pallet install`)", version::CRD_NAME),
        ));
    };
    let live_value = serde_json::to_value(&live)?;
    let established = crate::health::assess(&live_value, &crate::health::HealthOptions::default());
    if !established.is_healthy() {
        return Ok(Finding::new(
            "CRD",
            Verdict::Fail,
            format!("not established: {}", established.message),
        ));
    }
    let ours = serde_json::to_value(crate::api::crd())?;
    let live_version = live_version.unwrap_or_else(|| "unknown".into());
    let same_schema = live_value["spec"]["versions"] == ours["spec"]["versions"];
    Ok(match (live_version == version::CLI_VERSION, same_schema) {
        (true, true) => Finding::new(
            "CRD",
            Verdict::Ok,
            format!("{} {live_version}, established, the schema of this CLI's release", version::CRD_NAME),
        ),
        (_, false) => Finding::new(
            "CRD",
            Verdict::Warn,
            format!(
                "{} {live_version} is established, but its schema differs from this CLI's ({}): `pallet install` of one release applies its CRD",
                version::CRD_NAME,
                version::CLI_VERSION
            ),
        ),
        (false, true) => Finding::new(
            "CRD",
            Verdict::Warn,
            format!("{} is labelled {live_version}, this CLI is {}; the schemas are equal", version::CRD_NAME, version::CLI_VERSION),
        ),
    })
}

/// The Lease an agent Deployment's leader holds: deploy/ names both alike (`pallet-agent`,
/// `pallet-agent-shard-KEY`).
fn lease_of(deployment: &str) -> String {
    deployment.to_string()
}

async fn agent_finding(client: &Client, namespace: &str) -> anyhow::Result<Finding> {
    let deployments = Api::<Deployment>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&format!("{}=pallet", super::PART_OF_LABEL)))
        .await?;
    if deployments.items.is_empty() {
        return Ok(Finding::new(
            "Agent",
            Verdict::Fail,
            format!("no agent Deployment in namespace {namespace} (`pallet install`)"),
        ));
    }
    let leases: BTreeMap<String, AgentLease> = version::agent_leases(client, namespace)
        .await?
        .into_iter()
        .map(|l| (l.lease.clone(), l))
        .collect();
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let mut finding = Finding::new("Agent", Verdict::Ok, String::new());
    let mut summaries = Vec::new();
    for deployment in &deployments.items {
        let name = deployment.metadata.name.clone().unwrap_or_default();
        let status = deployment.status.clone().unwrap_or_default();
        let wanted = deployment
            .spec
            .as_ref()
            .and_then(|s| s.replicas)
            .unwrap_or(1);
        let available = status.available_replicas.unwrap_or(0);
        if let Some(why) = super::deployment_not_ready(client, namespace, &name).await? {
            finding.verdict = finding.verdict.max(if available > 0 {
                Verdict::Warn
            } else {
                Verdict::Fail
            });
            finding.details.push(format!("Deployment {name}: {why}"));
        }
        let lease = leases.get(&lease_of(&name));
        let leader = match lease {
            Some(lease) if lease.is_held() => {
                let holder = lease.holder.clone().unwrap_or_default();
                if pods.get_opt(&holder).await?.is_none() {
                    finding.verdict = finding.verdict.max(Verdict::Warn);
                    finding.details.push(format!(
                        "{name}: the Lease {} is held by {holder}, which is not one of this namespace's Pods (an agent running elsewhere?)",
                        lease_of(&name)
                    ));
                }
                format!(
                    "leading: {holder} (renewed {}s ago)",
                    lease.renewed_ago.unwrap_or(0)
                )
            }
            Some(lease) => {
                finding.verdict = Verdict::Fail;
                finding.details.push(format!(
                    "{name}: no agent holds the Lease {} (last renewed {}s ago): nothing reconciles its BundleDeployments",
                    lease.lease,
                    lease.renewed_ago.unwrap_or(-1)
                ));
                "leading: none".to_string()
            }
            None => {
                finding.verdict = Verdict::Fail;
                finding.details.push(format!(
                    "{name}: no Lease {} in {namespace}: the agent never led (is it started with --leader-elect?)",
                    lease_of(&name)
                ));
                "leading: none".to_string()
            }
        };
        summaries.push(format!("{name} {available}/{wanted} available, {leader}"));
    }
    finding.summary = summaries.join("; ");
    Ok(finding)
}

/// Every (verb, group, resource) a Role or ClusterRole named `pallet-agent` in deploy/'s
/// rbac.yaml grants, and its non-resource URLs, with the namespace of a Role's.
fn needed_permissions(namespace: &str) -> Vec<(String, ResourceOrUrl)> {
    let text = DEPLOY_FILES
        .iter()
        .find(|(path, _)| *path == "rbac.yaml")
        .map(|(_, text)| *text)
        .unwrap_or_default();
    let mut needed = Vec::new();
    let Ok(objects) = pallet_formats::parse_manifests("rbac.yaml", text) else {
        return needed;
    };
    for object in objects {
        let body = object.body();
        if body["metadata"]["name"] != "pallet-agent" {
            continue;
        }
        let role_namespace = (object.kind() == "Role").then(|| namespace.to_string());
        if !matches!(object.kind(), "Role" | "ClusterRole") {
            continue;
        }
        for rule in body["rules"].as_array().into_iter().flatten() {
            let strings = |key: &str| -> Vec<String> {
                rule[key]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            for verb in strings("verbs") {
                for url in strings("nonResourceURLs") {
                    needed.push((verb.clone(), ResourceOrUrl::Url(url)));
                }
                for group in strings("apiGroups") {
                    for resource in strings("resources") {
                        needed.push((
                            verb.clone(),
                            ResourceOrUrl::Resource {
                                group: group.clone(),
                                resource,
                                namespace: role_namespace.clone(),
                            },
                        ));
                    }
                }
            }
        }
    }
    needed
}

/// What a permission is on.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ResourceOrUrl {
    Resource {
        group: String,
        resource: String,
        namespace: Option<String>,
    },
    Url(String),
}

async fn allowed(
    client: &Client,
    user: &str,
    verb: &str,
    on: &ResourceOrUrl,
) -> anyhow::Result<bool> {
    let mut spec = SubjectAccessReviewSpec {
        user: Some(user.to_string()),
        // The groups the API server gives a ServiceAccount's token.
        groups: Some(vec![
            "system:serviceaccounts".into(),
            format!(
                "system:serviceaccounts:{}",
                user.split(':').nth(2).unwrap_or_default()
            ),
            "system:authenticated".into(),
        ]),
        ..Default::default()
    };
    match on {
        ResourceOrUrl::Resource {
            group,
            resource,
            namespace,
        } => {
            let (resource, subresource) = match resource.split_once('/') {
                Some((r, s)) => (r.to_string(), Some(s.to_string())),
                None => (resource.clone(), None),
            };
            spec.resource_attributes = Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.clone()),
                resource: Some(resource),
                subresource,
                namespace: namespace.clone(),
                ..Default::default()
            });
        }
        ResourceOrUrl::Url(path) => {
            spec.non_resource_attributes = Some(NonResourceAttributes {
                verb: Some(verb.into()),
                path: Some(path.replace('*', "x")),
            });
        }
    }
    let review = SubjectAccessReview {
        spec,
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

async fn rbac_finding(
    client: &Client,
    namespace: &str,
    service_account: &str,
) -> anyhow::Result<Finding> {
    let user = format!("system:serviceaccount:{namespace}:{service_account}");
    let needed = needed_permissions(namespace);
    let mut missing = Vec::new();
    for (verb, on) in &needed {
        if !allowed(client, &user, verb, on).await? {
            missing.push(match on {
                ResourceOrUrl::Resource {
                    group,
                    resource,
                    namespace,
                } => {
                    let group = if group.is_empty() { "core" } else { group };
                    match namespace {
                        Some(ns) => format!("{verb} {resource} ({group}) in {ns}"),
                        None => format!("{verb} {resource} ({group})"),
                    }
                }
                ResourceOrUrl::Url(url) => format!("{verb} {url}"),
            });
        }
    }
    let everything = ResourceOrUrl::Resource {
        group: "*".into(),
        resource: "*".into(),
        namespace: None,
    };
    let broad = allowed(client, &user, "*", &everything).await?;
    let grant = if broad {
        "may install anything as itself (the broad grant)"
    } else {
        "installs only as each BundleDeployment's spec.serviceAccount (least privilege)"
    };
    if missing.is_empty() {
        return Ok(Finding::new(
            "RBAC",
            Verdict::Ok,
            format!(
                "{namespace}/{service_account} has the {} permissions the agent needs; {grant}",
                needed.len()
            ),
        ));
    }
    let mut finding = Finding::new(
        "RBAC",
        Verdict::Fail,
        format!(
            "{namespace}/{service_account} lacks {} of the {} permissions the agent needs",
            missing.len(),
            needed.len()
        ),
    );
    finding.details = missing;
    Ok(finding)
}

async fn certificate_finding(client: &Client) -> anyhow::Result<Finding> {
    let secrets = Api::<Secret>::all(client.clone())
        .list_metadata(&ListParams::default().labels(CERTIFICATES_OF_LABEL))
        .await?;
    if secrets.items.is_empty() {
        return Ok(Finding::new(
            "Certificates",
            Verdict::Ok,
            "none issued (no registry-v1 webhooks with the BuiltIn provider)",
        ));
    }
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let mut finding = Finding::new("Certificates", Verdict::Ok, String::new());
    let mut earliest: Option<i64> = None;
    for secret in &secrets.items {
        let name = format!(
            "{}/{}",
            secret.metadata.namespace.clone().unwrap_or_default(),
            secret.metadata.name.clone().unwrap_or_default()
        );
        let not_after = secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(NOT_AFTER_ANNOTATION))
            .and_then(|v| v.parse::<i64>().ok());
        match not_after {
            None => {
                finding.verdict = finding.verdict.max(Verdict::Warn);
                finding
                    .details
                    .push(format!("{name}: no {NOT_AFTER_ANNOTATION} annotation"));
            }
            Some(t) if t <= now => {
                finding.verdict = Verdict::Fail;
                finding.details.push(format!("{name}: expired {}s ago; the agent renews it at its next pass of the BundleDeployment", now - t));
            }
            Some(t) if t - now < CERTIFICATE_WARNING_SECONDS => {
                finding.verdict = finding.verdict.max(Verdict::Warn);
                finding
                    .details
                    .push(format!("{name}: expires in {} days", (t - now) / 86400));
            }
            Some(_) => {}
        }
        if let Some(t) = not_after {
            earliest = Some(earliest.map_or(t, |e| e.min(t)));
        }
    }
    finding.summary = format!(
        "{} webhook certificate Secrets; the first expires in {} days",
        secrets.items.len(),
        earliest.map(|t| (t - now) / 86400).unwrap_or(0)
    );
    Ok(finding)
}

/// Why `bd` is stuck, if it is; `now` in Unix seconds.
pub fn stuck_reason(bd: &BundleDeployment, now: i64) -> Option<String> {
    let status = bd.status.clone().unwrap_or_default();
    let find = |t: &str| crate::api::conditions::find(&status.conditions, t).cloned();
    if let Some(deleted) = &bd.metadata.deletion_timestamp {
        let ago = now - deleted.0.as_second();
        if ago >= DELETION_STUCK_AFTER_SECONDS {
            let why = find("Ready")
                .map(|c| format!("{}: {}", c.reason, c.message))
                .unwrap_or_default();
            return Some(format!(
                "being deleted for {}m, its finalizer still there: {why}",
                ago / 60
            ));
        }
    }
    if let Some(stalled) = find("Stalled").filter(|c| c.status == "True") {
        return Some(format!("Stalled {}: {}", stalled.reason, stalled.message));
    }
    match find("Ready") {
        Some(ready) if ready.status == "False" => {
            let ago = now - ready.last_transition_time.0.as_second();
            (ago >= STUCK_AFTER_SECONDS).then(|| {
                format!(
                    "not Ready for {}m, {}: {}",
                    ago / 60,
                    ready.reason,
                    ready.message
                )
            })
        }
        Some(_) => None,
        None => {
            let created = bd
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second())
                .unwrap_or(now);
            (now - created >= STUCK_AFTER_SECONDS).then(|| {
                format!(
                    "no status after {}m: no agent reconciles it (a shard label no agent serves, or no agent running)",
                    (now - created) / 60
                )
            })
        }
    }
}

async fn bundles_finding(client: &Client) -> anyhow::Result<Finding> {
    let list = Api::<BundleDeployment>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let total = list.items.len();
    let mut ready = 0;
    let mut paused = 0;
    let mut finding = Finding::new("Bundles", Verdict::Ok, String::new());
    for bd in &list.items {
        if bd.spec.paused {
            paused += 1;
        }
        let status = bd.status.clone().unwrap_or_default();
        if crate::api::conditions::find(&status.conditions, "Ready")
            .is_some_and(|c| c.status == "True")
        {
            ready += 1;
        }
        if let Some(why) = stuck_reason(bd, now) {
            finding.verdict = Verdict::Warn;
            finding.details.push(format!(
                "{}: {why}",
                bd.metadata.name.clone().unwrap_or_default()
            ));
        }
    }
    finding.summary = format!(
        "{total} BundleDeployments: {ready} Ready, {paused} paused, {} stuck",
        finding.details.len()
    );
    Ok(finding)
}

/// Every check, in order. A check that cannot be done (an API refused) fails with why.
pub async fn findings(client: &Client, args: &CheckArgs) -> Vec<Finding> {
    let mut out = Vec::new();
    match client.apiserver_version().await {
        Ok(info) => out.push(kubernetes_finding(
            &info.major,
            &info.minor,
            &info.git_version,
        )),
        Err(e) => {
            out.push(Finding::new(
                "Kubernetes",
                Verdict::Fail,
                format!("the API server did not answer: {e}"),
            ));
            return out;
        }
    }
    let failed = |check: &'static str| {
        move |e: anyhow::Error| Finding::new(check, Verdict::Fail, crate::cli::error_message(&e))
    };
    out.push(crd_finding(client).await.unwrap_or_else(failed("CRD")));
    out.push(
        agent_finding(client, &args.namespace)
            .await
            .unwrap_or_else(failed("Agent")),
    );
    out.push(
        rbac_finding(client, &args.namespace, &args.service_account)
            .await
            .unwrap_or_else(failed("RBAC")),
    );
    out.push(
        certificate_finding(client)
            .await
            .unwrap_or_else(failed("Certificates")),
    );
    out.push(
        bundles_finding(client)
            .await
            .unwrap_or_else(failed("Bundles")),
    );
    out
}

/// The report as text.
pub fn format_findings(findings: &[Finding]) -> String {
    let mut out = String::new();
    for f in findings {
        out.push_str(&format!(
            "{:<13}{:<5} {}\n",
            f.check,
            f.verdict.word(),
            f.summary
        ));
        for detail in &f.details {
            out.push_str(&format!("{:<19}- {detail}\n", ""));
        }
    }
    let worst = findings
        .iter()
        .map(|f| f.verdict)
        .max()
        .unwrap_or(Verdict::Ok);
    out.push_str(match worst {
        Verdict::Ok => "healthy\n",
        Verdict::Warn => "healthy, with warnings\n",
        Verdict::Fail => "NOT healthy\n",
    });
    out
}

/// Runs `pallet check`.
pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let findings = crate::cli::block_on(async {
        let client = args.kube.client().await?;
        Ok(findings(&client, &args).await)
    })?;
    let worst = findings
        .iter()
        .map(|f| f.verdict)
        .max()
        .unwrap_or(Verdict::Ok);
    if args.output != Output::Table {
        let list: Vec<Value> = findings
            .iter()
            .map(|f| json!({"check": f.check, "verdict": f.verdict.word().to_lowercase(), "summary": f.summary, "details": f.details}))
            .collect();
        print_data(
            args.output,
            &json!({"healthy": worst != Verdict::Fail, "checks": list}),
        )?;
    } else {
        tprint!("{}", format_findings(&findings));
    }
    if worst == Verdict::Fail {
        return Err(crate::cli::exit::ExitError::quiet(
            crate::cli::exit::Exit::Failed,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubernetes_version_is_held_against_the_supported_range() {
        assert_eq!(
            kubernetes_finding("1", "35", "v1.35.4").verdict,
            Verdict::Ok
        );
        assert_eq!(
            kubernetes_finding("1", "30+", "v1.30.1-eks").verdict,
            Verdict::Ok
        );
        assert_eq!(
            kubernetes_finding("1", "29", "v1.29.9").verdict,
            Verdict::Fail
        );
        assert_eq!(
            kubernetes_finding("1", "36", "v1.36.0").verdict,
            Verdict::Warn
        );
    }

    #[test]
    fn the_permissions_checked_are_those_of_deploys_rbac() {
        let needed = needed_permissions("ops");
        assert!(needed.contains(&(
            "watch".into(),
            ResourceOrUrl::Resource {
                group: "pallet.dev".into(),
                resource: "bundledeployments".into(),
                namespace: None
            }
        )));
        assert!(needed.contains(&(
            "create".into(),
            ResourceOrUrl::Resource {
                group: "".into(),
                resource: "secrets".into(),
                namespace: Some("ops".into())
            }
        )));
        assert!(needed.contains(&("get".into(), ResourceOrUrl::Url("/version".into()))));
        assert!(needed.len() > 20, "{needed:?}");
    }

    #[test]
    fn stuck_bundles_say_why() {
        let bd: BundleDeployment = serde_saphyr::from_str(r#"
apiVersion: pallet.dev/v1alpha1
kind: BundleDeployment
metadata: {name: web, creationTimestamp: "2026-01-01T00:00:00Z"}
spec: {format: plain, sources: [{kind: git, git: {repository: r, ref: {branch: main}}}]}
status:
  conditions:
  - {type: Ready, status: "False", reason: SourceUnavailable, message: "git: connection refused", lastTransitionTime: "2026-01-01T00:00:00Z"}
"#).unwrap();
        let start = 1_767_225_600; // 2026-01-01T00:00:00Z
        assert_eq!(stuck_reason(&bd, start + 60), None);
        assert_eq!(
            stuck_reason(&bd, start + 3600).as_deref(),
            Some("not Ready for 60m, SourceUnavailable: git: connection refused")
        );
        let mut fresh = bd.clone();
        fresh.status = None;
        assert!(stuck_reason(&fresh, start + 3600)
            .unwrap()
            .starts_with("no status after 60m"));
    }
}
