//! `spec.notifications` and `status.notifications`: targets that are told when a revision changes
//! phase (a generic JSON webhook, CloudEvents over HTTP, a Slack-compatible incoming webhook, a
//! git forge commit status), and how the delivery of each went.
//!
//! The schema refuses what it can: a target with no kind or two, an unknown transition, a commit
//! status without a git source (rule on the spec). Delivery results are written by the agent only.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{SecretReference, DNS_LABEL_PATTERN};

/// A transition of a BundleDeployment that can trigger a notification.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum TransitionType {
    /// A revision started rolling out (a new revision, or an earlier one again after a rollback).
    Progressing,
    /// A revision became healthy.
    Healthy,
    /// A revision failed (an apply error, a failed health check, or its progress deadline).
    Failed,
    /// The active revision was replaced by an earlier one (after a failure, or on request).
    RolledBack,
    /// The BundleDeployment stalled: it cannot progress without a change (condition Stalled).
    Stalled,
    /// Drift was found while `spec.paused` (what resuming would revert); once per pause.
    Drifted,
}

impl TransitionType {
    /// The name as written in `on` and in bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            TransitionType::Progressing => "Progressing",
            TransitionType::Healthy => "Healthy",
            TransitionType::Failed => "Failed",
            TransitionType::RolledBack => "RolledBack",
            TransitionType::Stalled => "Stalled",
            TransitionType::Drifted => "Drifted",
        }
    }
}

/// One place notifications go, the transitions that trigger it and exactly one kind.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("(has(self.webhook) ? 1 : 0) + (has(self.cloudEvents) ? 1 : 0) + (has(self.slack) ? 1 : 0) + (has(self.commitStatus) ? 1 : 0) == 1").message("a notification target takes exactly one of webhook, cloudEvents, slack, commitStatus"))]
#[serde(rename_all = "camelCase")]
pub struct NotificationTarget {
    /// The target's name, unique in the list: `status.notifications` reports under it.
    #[schemars(length(min = 1, max = 63), regex(pattern = DNS_LABEL_PATTERN))]
    pub name: String,

    /// The transitions that trigger it.
    #[schemars(length(min = 1, max = 6))]
    pub on: Vec<TransitionType>,

    /// A generic JSON webhook: POST of pallet's JSON body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookTarget>,

    /// CloudEvents 1.0 over HTTP (binary or structured content mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_events: Option<CloudEventsTarget>,

    /// A Slack-compatible incoming webhook (`{"text": ...}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackTarget>,

    /// A git forge commit status (GitHub/Gitea API) on the commit of the bundle's git source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_status: Option<CommitStatusTarget>,
}

/// The kind of a target, for metrics, logs and messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// `webhook`.
    Webhook,
    /// `cloudEvents`.
    CloudEvents,
    /// `slack`.
    Slack,
    /// `commitStatus`.
    CommitStatus,
}

impl TargetKind {
    /// The field name, as in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Webhook => "webhook",
            TargetKind::CloudEvents => "cloudEvents",
            TargetKind::Slack => "slack",
            TargetKind::CommitStatus => "commitStatus",
        }
    }
}

impl NotificationTarget {
    /// Which kind it is (the schema makes sure exactly one is set; webhook when none is).
    pub fn kind(&self) -> TargetKind {
        if self.cloud_events.is_some() {
            TargetKind::CloudEvents
        } else if self.slack.is_some() {
            TargetKind::Slack
        } else if self.commit_status.is_some() {
            TargetKind::CommitStatus
        } else {
            TargetKind::Webhook
        }
    }

    /// The Secret it names, if any.
    pub fn secret(&self) -> Option<&SecretReference> {
        match (
            &self.webhook,
            &self.cloud_events,
            &self.slack,
            &self.commit_status,
        ) {
            (Some(t), _, _, _) => t.secret.as_ref(),
            (_, Some(t), _, _) => t.secret.as_ref(),
            (_, _, Some(t), _) => t.secret.as_ref(),
            (_, _, _, Some(t)) => t.secret.as_ref(),
            _ => None,
        }
    }

    /// Whether `transition` triggers it.
    pub fn wants(&self, transition: TransitionType) -> bool {
        self.on.contains(&transition)
    }
}

/// A generic JSON webhook.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookTarget {
    /// Where to POST.
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub url: String,
    /// Optional Secret: key `hmacKey` signs the body (header `X-Pallet-Signature: sha256=<hex>`),
    /// key `token` is sent as `Authorization: Bearer <token>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretReference>,
}

/// CloudEvents content mode of the HTTP binding. Default: Binary.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum CloudEventsMode {
    /// Attributes in `ce-*` headers, the data as the body (`application/json`).
    #[default]
    Binary,
    /// The whole event as one JSON document (`application/cloudevents+json`).
    Structured,
}

/// CloudEvents 1.0 over HTTP.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloudEventsTarget {
    /// Where to POST.
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub url: String,
    /// Binary (default) or Structured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<CloudEventsMode>,
    /// Optional Secret: key `hmacKey` signs the body (header `X-Pallet-Signature`), key `token`
    /// is sent as `Authorization: Bearer <token>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretReference>,
}

/// A Slack-compatible incoming webhook.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[x_kube(validation = Rule::new("has(self.url) || has(self.secret)").message("slack needs a url, or a secret whose key `address` holds it"))]
#[serde(rename_all = "camelCase")]
pub struct SlackTarget {
    /// The incoming webhook's URL. The Secret's key `address`, when present, takes its place (the
    /// URL of an incoming webhook is itself a credential). Required unless the Secret has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub url: Option<String>,
    /// Optional Secret with key `address` (the webhook URL) and/or `token` (bearer token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretReference>,
}

/// A commit status on a GitHub- or Gitea-style API:
/// `POST {api}/repos/{repository}/statuses/{sha}`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CommitStatusTarget {
    /// The API's base URL (`https://api.github.com`, `https://gitea.example/api/v1`).
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub api: String,
    /// `owner/repo`.
    #[schemars(length(min = 3, max = 512), regex(pattern = r"^[^/\s]+/[^/\s]+$"))]
    pub repository: String,
    /// The status's context (the name checks are listed under). Default: `pallet/<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub context: Option<String>,
    /// Secret whose key `token` is sent as `Authorization: Bearer <token>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretReference>,
}

/// Where the delivery of one notification is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DeliveryResult {
    /// Recorded with its transition; not sent yet.
    Pending,
    /// An attempt failed; it is tried again (with backoff) until its deadline.
    Retrying,
    /// The receiver answered 2xx.
    Delivered,
    /// Given up: the deadline passed, the receiver refused it for good (4xx), or it cannot be
    /// sent at all (see message).
    Failed,
}

impl DeliveryResult {
    /// Still to be sent.
    pub fn is_open(self) -> bool {
        matches!(self, DeliveryResult::Pending | DeliveryResult::Retrying)
    }
}

/// One notification for one target: the transition it reports and how its delivery went.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationStatus {
    /// The target (`spec.notifications[].name`).
    pub name: String,
    /// The transition's id: the deduplication key, and the CloudEvents `id`.
    pub id: String,
    /// What happened, as a reader says it: `revision 4 Healthy`.
    pub transition: String,
    /// The transition's type.
    #[serde(rename = "type")]
    pub type_: TransitionType,
    /// The revision it is about (none for a BundleDeployment without revisions yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The detail sent with it (the condition or revision message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// When the transition was recorded; the delivery deadline counts from here.
    pub occurred_at: Time,
    /// Where its delivery is.
    pub result: DeliveryResult,
    /// Attempts made so far.
    #[serde(default)]
    pub attempts: i32,
    /// When `result` was last written.
    pub time: Time,
    /// The last attempt's answer: HTTP status, or the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
