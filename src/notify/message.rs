//! Pure: the HTTP request each kind of target gets for one notification (URL, headers, body).
//! The bodies are the types below (`docs/reference/notifications.md` is generated from them);
//! tests here pin them.

use hmac::{Hmac, Mac};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use sha2::Sha256;

use crate::api::{
    CloudEventsMode, NotificationStatus, NotificationTarget, ResolvedSource, SourceKind,
    TransitionType,
};

/// The CloudEvents `type` prefix; the transition's type in lower case follows.
pub const CLOUD_EVENT_TYPE_PREFIX: &str = "dev.pallet.bundledeployment.";
/// Header with the body's HMAC-SHA256 (`sha256=<hex>`), when the target's Secret has `hmacKey`.
pub const SIGNATURE_HEADER: &str = "X-Pallet-Signature";
/// Header with the transition's id (webhook, Slack, commit status).
pub const ID_HEADER: &str = "X-Pallet-Id";
/// Header with the transition's type (webhook, Slack, commit status).
pub const EVENT_HEADER: &str = "X-Pallet-Event";

/// What a notification is about, besides its status entry.
#[derive(Clone, Debug)]
pub struct Subject<'a> {
    /// The BundleDeployment's name.
    pub name: &'a str,
    /// Its uid.
    pub uid: &'a str,
    /// The sources of the revision the entry is about, as resolved (empty when unknown).
    pub sources: &'a [ResolvedSource],
}

/// Values read from the target's Secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecretValues {
    /// `token`: sent as `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// `hmacKey`: signs the body.
    pub hmac_key: Option<Vec<u8>>,
    /// `address`: the URL (Slack's incoming webhook URL is itself a credential).
    pub address: Option<String>,
}

/// One HTTP POST, ready to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Where.
    pub url: String,
    /// Header names and values.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

/// Why a notification cannot be built (it is then Failed without an attempt).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct Unsendable(pub String);

fn time_text(time: &Time) -> String {
    serde_json::to_value(time)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The BundleDeployment a notification is about.
#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
pub struct BundleDeploymentRef {
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
}

/// The JSON body a webhook target receives; also the `data` of a CloudEvent.
#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NotificationBody {
    /// The transition's id: the same on every attempt (a receiver deduplicates by it); the
    /// CloudEvents `id`.
    pub id: String,
    /// The transition's type (also in the `X-Pallet-Event` header).
    #[serde(rename = "type")]
    pub type_: TransitionType,
    /// What happened, as a reader says it: `revision 4 Healthy`.
    pub transition: String,
    /// The BundleDeployment it is about.
    pub bundle_deployment: BundleDeploymentRef,
    /// When the transition was recorded (RFC 3339, UTC).
    pub time: String,
    /// The target's name (`spec.notifications[].name`).
    pub target: String,
    /// The revision it is about; absent for a BundleDeployment without revisions yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The detail: the condition or revision message (why it failed, what it waits for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The revision's sources as resolved (kind, ref as written, immutable ref, version);
    /// absent when unknown.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<ResolvedSource>,
}

/// A CloudEvent in structured mode (`mode: Structured`): the whole event is the body, sent as
/// `application/cloudevents+json`. In binary mode the same attributes are `ce-` headers and the
/// body is the `data` alone.
#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
pub struct CloudEvent {
    /// Always `1.0`.
    pub specversion: String,
    /// The transition's id.
    pub id: String,
    /// `/apis/pallet.dev/v1alpha1/bundledeployments/<name>`.
    pub source: String,
    /// `dev.pallet.bundledeployment.` followed by the transition's type in lower case
    /// (`dev.pallet.bundledeployment.healthy`).
    #[serde(rename = "type")]
    pub type_: String,
    /// When the transition was recorded (RFC 3339, UTC).
    pub time: String,
    /// `revision <N>`, when the transition is about a revision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Always `application/json`.
    pub datacontenttype: String,
    /// The same object a webhook receives.
    pub data: NotificationBody,
}

/// The body a Slack-compatible incoming webhook receives.
#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
pub struct SlackMessage {
    /// An emoji for the transition's type, the BundleDeployment's name and the transition,
    /// then the detail on a second line.
    pub text: String,
}

/// The body of a commit status (GitHub's API; Gitea and Forgejo accept the same).
#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
pub struct CommitStatus {
    /// `pending` (Progressing), `success` (Healthy), `failure` (Failed, RolledBack) or `error`
    /// (Stalled, Drifted).
    pub state: String,
    /// The target's `context`, default `pallet/<name>`.
    pub context: String,
    /// The transition and its detail, cut to 140 characters.
    pub description: String,
}

/// The generic body (also the CloudEvents `data`).
pub fn notification_body(subject: &Subject<'_>, entry: &NotificationStatus) -> NotificationBody {
    NotificationBody {
        id: entry.id.clone(),
        type_: entry.type_,
        transition: entry.transition.clone(),
        bundle_deployment: BundleDeploymentRef {
            name: subject.name.to_string(),
            uid: subject.uid.to_string(),
        },
        time: time_text(&entry.occurred_at),
        target: entry.name.clone(),
        revision: entry.revision,
        message: entry.detail.clone(),
        sources: subject.sources.to_vec(),
    }
}

/// The generic JSON body (also the CloudEvents `data`), as JSON.
pub fn json_body(subject: &Subject<'_>, entry: &NotificationStatus) -> Value {
    serde_json::to_value(notification_body(subject, entry)).unwrap_or_default()
}

/// The commit the revision's first git source resolved to.
pub fn git_commit(sources: &[ResolvedSource]) -> Option<&str> {
    sources
        .iter()
        .find(|s| s.kind == SourceKind::Git)
        .map(|s| s.resolved.as_str())
}

fn signed(headers: &mut Vec<(String, String)>, body: &[u8], secret: &SecretValues) {
    if let Some(key) = &secret.hmac_key {
        // HMAC accepts keys of any length: new_from_slice cannot fail for it.
        if let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) {
            mac.update(body);
            let hex: String = mac
                .finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            headers.push((SIGNATURE_HEADER.into(), format!("sha256={hex}")));
        }
    }
    if let Some(token) = &secret.token {
        headers.push(("Authorization".into(), format!("Bearer {token}")));
    }
}

fn slack_text(subject: &Subject<'_>, entry: &NotificationStatus) -> String {
    let mark = match entry.type_ {
        TransitionType::Progressing => ":hourglass_flowing_sand:",
        TransitionType::Healthy => ":white_check_mark:",
        TransitionType::Failed => ":x:",
        TransitionType::RolledBack => ":rewind:",
        TransitionType::Stalled | TransitionType::Drifted => ":warning:",
    };
    let mut text = format!("{mark} {}: {}", subject.name, entry.transition);
    if let Some(detail) = &entry.detail {
        text.push_str(&format!("\n{detail}"));
    }
    text
}

/// The commit status state for a transition.
pub fn commit_state(type_: TransitionType) -> &'static str {
    match type_ {
        TransitionType::Progressing => "pending",
        TransitionType::Healthy => "success",
        TransitionType::Failed | TransitionType::RolledBack => "failure",
        TransitionType::Stalled | TransitionType::Drifted => "error",
    }
}

/// The request for `entry` to `target`.
pub fn build(
    target: &NotificationTarget,
    subject: &Subject<'_>,
    entry: &NotificationStatus,
    secret: &SecretValues,
) -> Result<Request, Unsendable> {
    let mut headers = vec![("Content-Type".to_string(), "application/json".to_string())];
    let common = |headers: &mut Vec<(String, String)>| {
        headers.push((ID_HEADER.into(), entry.id.clone()));
        headers.push((EVENT_HEADER.into(), entry.type_.as_str().into()));
    };
    let (url, body) = if let Some(webhook) = &target.webhook {
        common(&mut headers);
        (
            webhook.url.clone(),
            to_json(&notification_body(subject, entry))?,
        )
    } else if let Some(ce) = &target.cloud_events {
        let data = notification_body(subject, entry);
        let source = format!(
            "/apis/{}/{}/bundledeployments/{}",
            crate::api::GROUP,
            crate::api::VERSION,
            subject.name
        );
        let type_ = format!(
            "{CLOUD_EVENT_TYPE_PREFIX}{}",
            entry.type_.as_str().to_ascii_lowercase()
        );
        let time = time_text(&entry.occurred_at);
        let subject_attr = entry.revision.map(|n| format!("revision {n}"));
        match ce.mode.unwrap_or_default() {
            CloudEventsMode::Binary => {
                headers.push(("ce-specversion".into(), "1.0".into()));
                headers.push(("ce-id".into(), entry.id.clone()));
                headers.push(("ce-source".into(), source));
                headers.push(("ce-type".into(), type_));
                headers.push(("ce-time".into(), time));
                if let Some(s) = subject_attr {
                    headers.push(("ce-subject".into(), s));
                }
                (ce.url.clone(), to_json(&data)?)
            }
            CloudEventsMode::Structured => {
                headers[0].1 = "application/cloudevents+json; charset=utf-8".into();
                let event = CloudEvent {
                    specversion: "1.0".into(),
                    id: entry.id.clone(),
                    source,
                    type_,
                    time,
                    subject: subject_attr,
                    datacontenttype: "application/json".into(),
                    data,
                };
                (ce.url.clone(), to_json(&event)?)
            }
        }
    } else if let Some(slack) = &target.slack {
        common(&mut headers);
        let url = secret
            .address
            .clone()
            .or_else(|| slack.url.clone())
            .ok_or_else(|| {
                Unsendable("slack has no url and its Secret has no key `address`".into())
            })?;
        let message = SlackMessage {
            text: slack_text(subject, entry),
        };
        (url, to_json(&message)?)
    } else if let Some(status) = &target.commit_status {
        common(&mut headers);
        headers.push(("Accept".into(), "application/json".into()));
        let sha = git_commit(subject.sources).ok_or_else(|| {
            Unsendable(match entry.revision {
                Some(n) => format!("revision {n} has no git source: a commit status needs the commit of the bundle's git source"),
                None => "no revision yet, so no commit to report on".into(),
            })
        })?;
        let mut description = entry.transition.clone();
        if let Some(detail) = &entry.detail {
            description.push_str(": ");
            description.push_str(detail);
        }
        // GitHub refuses descriptions over 140 characters.
        let description: String = description.chars().take(140).collect();
        let context = status
            .context
            .clone()
            .unwrap_or_else(|| format!("pallet/{}", subject.name));
        (
            format!(
                "{}/repos/{}/statuses/{sha}",
                status.api.trim_end_matches('/'),
                status.repository
            ),
            to_json(&CommitStatus {
                state: commit_state(entry.type_).into(),
                context,
                description,
            })?,
        )
    } else {
        return Err(Unsendable("the target has no kind".into()));
    };
    let body = serde_json::to_vec(&body).map_err(|e| Unsendable(e.to_string()))?;
    signed(&mut headers, &body, secret);
    Ok(Request { url, headers, body })
}

fn to_json<T: Serialize>(body: &T) -> Result<Value, Unsendable> {
    serde_json::to_value(body).map_err(|e| Unsendable(e.to_string()))
}

/// The text written where a secret value was.
pub const REDACTED: &str = "[redacted]";

/// The secret values an attempt's messages must not show: the Secret's token, HMAC key and
/// address, and a Slack target's URL wherever it comes from (the URL is the credential), whole
/// and as its path.
pub fn secret_texts(
    target: &NotificationTarget,
    secret: &SecretValues,
    request: &Request,
) -> Vec<String> {
    let mut texts: Vec<String> = Vec::new();
    texts.extend(secret.token.clone());
    texts.extend(secret.address.clone());
    if let Some(key) = &secret.hmac_key {
        texts.push(String::from_utf8_lossy(key).into_owned());
    }
    if target.slack.is_some() || secret.address.is_some() {
        texts.push(request.url.clone());
        if let Ok(url) = url::Url::parse(&request.url) {
            let path = url.path().trim_matches('/');
            if !path.is_empty() {
                texts.push(path.to_string());
            }
            if let Some(query) = url.query() {
                texts.push(query.to_string());
            }
        }
    }
    // Longest first, so a value containing another is replaced whole; values too short to be
    // secrets would only garble the message.
    texts.retain(|t| t.trim().len() >= 4);
    texts.sort_by_key(|t| std::cmp::Reverse(t.len()));
    texts.dedup();
    texts
}

/// `text` with every one of `secrets` replaced by [`REDACTED`].
pub fn redact(text: &str, secrets: &[String]) -> String {
    secrets.iter().fold(text.to_string(), |acc, secret| {
        acc.replace(secret.as_str(), REDACTED)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::DeliveryResult;
    use serde_json::json;

    fn entry(type_: TransitionType) -> NotificationStatus {
        let at = Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap());
        NotificationStatus {
            name: "t".into(),
            id: format!("uid-1:4:1700000000:{}", type_.as_str()),
            transition: format!("revision 4 {}", type_.as_str()),
            type_,
            revision: Some(4),
            detail: Some("revision 4 healthy: 3 objects installed".into()),
            occurred_at: at.clone(),
            result: DeliveryResult::Pending,
            attempts: 0,
            time: at,
            message: None,
        }
    }

    fn target(spec: Value) -> NotificationTarget {
        let mut value = json!({"name": "t", "on": ["Healthy"]});
        value
            .as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        serde_json::from_value(value).unwrap()
    }

    const SOURCES: &[ResolvedSource] = &[];

    fn subject(sources: &[ResolvedSource]) -> Subject<'_> {
        Subject {
            name: "app",
            uid: "uid-1",
            sources,
        }
    }

    fn header<'a>(request: &'a Request, name: &str) -> Option<&'a str> {
        request
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn webhook_body_and_signature() {
        let t = target(json!({"webhook": {"url": "http://h/hook"}}));
        let secret = SecretValues {
            hmac_key: Some(b"key".to_vec()),
            token: Some("tok".into()),
            address: None,
        };
        let request = build(
            &t,
            &subject(SOURCES),
            &entry(TransitionType::Healthy),
            &secret,
        )
        .unwrap();
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(
            body,
            json!({
                "id": "uid-1:4:1700000000:Healthy", "type": "Healthy",
                "transition": "revision 4 Healthy",
                "bundleDeployment": {"name": "app", "uid": "uid-1"},
                "time": "2023-11-14T22:13:20Z", "target": "t", "revision": 4,
                "message": "revision 4 healthy: 3 objects installed"
            })
        );
        let mut mac = Hmac::<Sha256>::new_from_slice(b"key").unwrap();
        mac.update(&request.body);
        let expected: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            header(&request, SIGNATURE_HEADER),
            Some(format!("sha256={expected}").as_str())
        );
        assert_eq!(header(&request, "Authorization"), Some("Bearer tok"));
        assert_eq!(
            header(&request, ID_HEADER),
            Some("uid-1:4:1700000000:Healthy")
        );
    }

    #[test]
    fn cloud_events_binary_and_structured() {
        let binary = build(
            &target(json!({"cloudEvents": {"url": "http://h/ce"}})),
            &subject(SOURCES),
            &entry(TransitionType::Failed),
            &SecretValues::default(),
        )
        .unwrap();
        assert_eq!(header(&binary, "ce-specversion"), Some("1.0"));
        assert_eq!(
            header(&binary, "ce-type"),
            Some("dev.pallet.bundledeployment.failed")
        );
        assert_eq!(
            header(&binary, "ce-source"),
            Some("/apis/pallet.dev/v1alpha1/bundledeployments/app")
        );
        assert_eq!(header(&binary, "ce-subject"), Some("revision 4"));
        assert_eq!(header(&binary, "Content-Type"), Some("application/json"));
        let structured = build(
            &target(json!({"cloudEvents": {"url": "http://h/ce", "mode": "Structured"}})),
            &subject(SOURCES),
            &entry(TransitionType::Failed),
            &SecretValues::default(),
        )
        .unwrap();
        let event: Value = serde_json::from_slice(&structured.body).unwrap();
        assert_eq!(event["specversion"], "1.0");
        assert_eq!(event["id"], "uid-1:4:1700000000:Failed");
        assert_eq!(event["data"]["type"], "Failed");
        assert!(header(&structured, "Content-Type")
            .unwrap()
            .starts_with("application/cloudevents+json"));
    }

    /// The CloudEvents SDK reads both modes back as valid events with the attributes set.
    #[test]
    fn cloud_events_are_valid_per_the_sdk() {
        use cloudevents::AttributesReader;
        for mode in ["Binary", "Structured"] {
            let request = build(
                &target(json!({"cloudEvents": {"url": "http://h/ce", "mode": mode}})),
                &subject(SOURCES),
                &entry(TransitionType::RolledBack),
                &SecretValues::default(),
            )
            .unwrap();
            let mut headers = http::HeaderMap::new();
            for (name, value) in &request.headers {
                headers.append(
                    http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    http::HeaderValue::from_str(value).unwrap(),
                );
            }
            let event = cloudevents::binding::http::to_event(&headers, request.body.clone())
                .unwrap_or_else(|e| panic!("{mode}: {e}"));
            assert_eq!(event.id(), "uid-1:4:1700000000:RolledBack", "{mode}");
            assert_eq!(event.ty(), "dev.pallet.bundledeployment.rolledback");
            assert_eq!(
                event.time().map(|t| t.timestamp()),
                Some(1_700_000_000),
                "{mode}"
            );
            assert_eq!(event.subject(), Some("revision 4"));
        }
    }

    #[test]
    fn slack_text_and_address_from_the_secret() {
        let t = target(json!({"slack": {"url": "http://h/slack"}}));
        let secret = SecretValues {
            address: Some("http://h/secret-hook".into()),
            ..Default::default()
        };
        let request = build(
            &t,
            &subject(SOURCES),
            &entry(TransitionType::Healthy),
            &secret,
        )
        .unwrap();
        assert_eq!(request.url, "http://h/secret-hook");
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(
            body["text"],
            ":white_check_mark: app: revision 4 Healthy\nrevision 4 healthy: 3 objects installed"
        );
    }

    #[test]
    fn secret_values_are_redacted_from_messages() {
        let t = target(json!({"slack": {"url": "https://hooks.example/services/T0/B0/XyZsecret"}}));
        let secret = SecretValues {
            token: Some("tok-123456".into()),
            ..Default::default()
        };
        let request = build(
            &t,
            &subject(SOURCES),
            &entry(TransitionType::Healthy),
            &secret,
        )
        .unwrap();
        let secrets = secret_texts(&t, &secret, &request);
        let text =
            "error sending request for url (https://hooks.example/services/T0/B0/XyZsecret): \
                    path services/T0/B0/XyZsecret, bearer tok-123456";
        let redacted = redact(text, &secrets);
        assert!(
            !redacted.contains("XyZsecret") && !redacted.contains("tok-123456"),
            "{redacted}"
        );
        assert!(redacted.contains(REDACTED), "{redacted}");
    }

    #[test]
    fn commit_status_on_the_git_commit() {
        let t =
            target(json!({"commitStatus": {"api": "http://h/api/v1/", "repository": "org/repo"}}));
        let sources = [ResolvedSource {
            kind: SourceKind::Git,
            reference: "main".into(),
            resolved: "abc123".into(),
            version: None,
            verified: None,
        }];
        let request = build(
            &t,
            &subject(&sources),
            &entry(TransitionType::Failed),
            &SecretValues::default(),
        )
        .unwrap();
        assert_eq!(
            request.url,
            "http://h/api/v1/repos/org/repo/statuses/abc123"
        );
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body["state"], "failure");
        assert_eq!(body["context"], "pallet/app");
        let refused = build(
            &t,
            &subject(SOURCES),
            &entry(TransitionType::Failed),
            &SecretValues::default(),
        )
        .unwrap_err();
        assert!(refused.0.contains("has no git source"), "{refused}");
    }
}
