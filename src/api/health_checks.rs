//! `spec.healthChecks`: health checks users write, besides pallet's built-in rules. A check is
//! either CEL expressions for a kind (Flux's `healthCheckExprs`: `current`, `failed`,
//! `inProgress` over the live object) or an HTTP probe the agent runs.
//!
//! The schema refuses what it can (a check that is neither or both kinds, thresholds out of
//! range); whether a CEL expression compiles is checked by the agent (`health::cel`), since a
//! CRD validation rule cannot compile CEL text.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// One health check: CEL expressions for objects of a kind, or an HTTP probe.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("has(self.httpGet) != has(self.kind)").message("a health check is either CEL expressions for a kind (apiVersion, kind, current, …) or an HTTP probe (httpGet), exactly one of them"))]
#[x_kube(validation = Rule::new("has(self.httpGet) || (has(self.apiVersion) && has(self.current))").message("a CEL health check needs apiVersion, kind and current"))]
#[x_kube(validation = Rule::new("!has(self.httpGet) || !(has(self.apiVersion) || has(self.name) || has(self.selector) || has(self.current) || has(self.failed) || has(self.inProgress))").message("an httpGet check takes no apiVersion, name, selector or CEL expressions"))]
#[x_kube(validation = Rule::new("has(self.httpGet) || !(has(self.periodSeconds) || has(self.successThreshold) || has(self.failureThreshold))").message("periodSeconds, successThreshold and failureThreshold are only valid with httpGet"))]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    /// API version of the objects this CEL check is for (`group/version`, or `v1`).
    /// Required for a CEL check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub api_version: Option<String>,

    /// Kind of the objects this CEL check is for. It replaces the built-in rule for them.
    /// Required for a CEL check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub kind: Option<String>,

    /// Only the object(s) of this name (in any namespace). Default: every object of the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,

    /// Only the objects whose labels match this selector. Default: every object of the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// CEL: true when the object is healthy (Flux's `current`). Required for a CEL check.
    /// Every expression of a check is evaluated under a budget (cost, memory, time; see the
    /// security guide): one over it is `CelBudgetExceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub current: Option<String>,

    /// CEL: true when the object has failed; the revision then fails at once (no wait for the
    /// progress deadline) and rolls back as any failed revision does.
    /// Default: none (only the progress deadline fails the object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub failed: Option<String>,

    /// CEL: true while the object is still on its way (checked first).
    /// Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 4096))]
    pub in_progress: Option<String>,

    /// An HTTP GET the agent makes; the revision is healthy once it answered as expected
    /// `successThreshold` times in a row, failed after `failureThreshold` failures in a row.
    /// Required for an HTTP probe (which sets no kind or CEL expression).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HttpGetCheck>,

    /// Seconds between two probes. Default: 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub period_seconds: Option<i32>,

    /// Successes in a row that make the probe healthy. Default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub success_threshold: Option<i32>,

    /// Failures in a row that fail the probe (and the revision). Default: 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub failure_threshold: Option<i32>,
}

/// An HTTP GET request of a probe.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpGetCheck {
    /// The URL to GET (http:// or https://). Redirects are not followed.
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub url: String,

    /// Status codes that count as success. Default: any of 200-399, as Kubernetes probes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(range(min = 100, max = 599)))]
    pub expected_status: Vec<i32>,

    /// Seconds a request may take before it counts as a failure. Default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 600))]
    pub timeout_seconds: Option<i32>,
}

impl HealthCheck {
    /// Default seconds between probes.
    pub const DEFAULT_PERIOD_SECONDS: i32 = 10;
    /// Default successes in a row.
    pub const DEFAULT_SUCCESS_THRESHOLD: i32 = 1;
    /// Default failures in a row.
    pub const DEFAULT_FAILURE_THRESHOLD: i32 = 3;

    /// Seconds between probes in force.
    pub fn period_seconds(&self) -> i32 {
        self.period_seconds.unwrap_or(Self::DEFAULT_PERIOD_SECONDS)
    }

    /// Successes in a row in force.
    pub fn success_threshold(&self) -> i32 {
        self.success_threshold
            .unwrap_or(Self::DEFAULT_SUCCESS_THRESHOLD)
    }

    /// Failures in a row in force.
    pub fn failure_threshold(&self) -> i32 {
        self.failure_threshold
            .unwrap_or(Self::DEFAULT_FAILURE_THRESHOLD)
    }

    /// How the check is named in conditions and messages: `healthChecks[1] (httpGet
    /// http://app/healthz)`, `healthChecks[0] (example.com/v1 Widget)`.
    pub fn describe(&self, index: usize) -> String {
        let what = match &self.http_get {
            Some(http) => format!("httpGet {}", http.url),
            None => {
                let mut what = format!(
                    "{} {}",
                    self.api_version.as_deref().unwrap_or_default(),
                    self.kind.as_deref().unwrap_or_default()
                );
                if let Some(name) = &self.name {
                    what.push_str(&format!(" {name}"));
                }
                what
            }
        };
        format!("healthChecks[{index}] ({what})")
    }
}

impl HttpGetCheck {
    /// Default request timeout in seconds.
    pub const DEFAULT_TIMEOUT_SECONDS: i32 = 1;

    /// The request timeout in force.
    pub fn timeout_seconds(&self) -> i32 {
        self.timeout_seconds
            .unwrap_or(Self::DEFAULT_TIMEOUT_SECONDS)
    }

    /// Whether `status` counts as success.
    pub fn accepts(&self, status: u16) -> bool {
        if self.expected_status.is_empty() {
            (200..400).contains(&status)
        } else {
            self.expected_status.contains(&i32::from(status))
        }
    }
}
