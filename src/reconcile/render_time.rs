//! The clock of a render: what a helm chart's `now` returns (and Sprig's date functions read as
//! "the current time").
//!
//! A revision keeps the time it was first rendered (`status.revisions[].renderedAt`). Every
//! later render of the same inputs — the same spec (its digest, `valuesFrom` included) and the
//! same resolved sources — reads that time again: a drift check, a pass that holds a failed
//! revision, `pallet plan`, an agent restart. A chart that stamps its install time
//! (`install_time: {{ now | unixEpoch }}`, a CronJob schedule derived from it) renders the
//! same objects every time, so an unchanged spec makes no new revision, and the stamp means
//! what the chart meant: when this content was installed. New inputs get the current time.
//!
//! The time is chosen before the render: it is one of the render's inputs (and of the seed of
//! its generated values, see [`super::render_key`]).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::api::{BundleDeployment, BundleDeploymentStatus, ResolvedSource};

/// The time recorded for the inputs `spec_digest` and `sources`: the newest revision of
/// `status` rendered from them, `None` when there is none. A revision recorded before revisions
/// kept their time was rendered with the BundleDeployment's creation time (`created`, Unix
/// seconds), pallet's clock then.
pub fn recorded(
    status: Option<&BundleDeploymentStatus>,
    spec_digest: &str,
    sources: &[ResolvedSource],
    created: i64,
) -> Option<i64> {
    status?
        .revisions
        .iter()
        .find(|r| {
            r.spec_digest.as_deref() == Some(spec_digest) && same_sources(&r.sources, sources)
        })
        .map(|r| r.rendered_at.as_ref().map_or(created, |t| t.0.as_second()))
}

/// Whether two lists of resolved sources name the same content.
fn same_sources(a: &[ResolvedSource], b: &[ResolvedSource]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.kind == y.kind && x.resolved == y.resolved)
}

/// The BundleDeployment's creation time (Unix seconds), 0 without one.
pub fn created(bd: &BundleDeployment) -> i64 {
    bd.metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second())
}

/// `secs` (Unix seconds) as a status time.
pub fn as_time(secs: i64) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .ok()
        .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time)
}

/// The current time, Unix seconds.
pub fn current() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

/// The times chosen for inputs no revision has recorded yet, by BundleDeployment UID: a render
/// that makes no revision (while paused, refused, waiting for its dependencies) keeps its time
/// from one pass to the next, so it is not rendered again at every pass. Only the latest inputs
/// of each BundleDeployment are kept.
#[derive(Default)]
pub struct RenderTimes {
    chosen: Mutex<HashMap<String, (String, i64)>>,
}

impl RenderTimes {
    /// The clock for rendering `bd` from `spec_digest` and `sources`: the time a revision
    /// recorded for them, else the one chosen for them earlier, else `now`.
    pub fn choose(
        &self,
        bd: &BundleDeployment,
        spec_digest: &str,
        sources: &[ResolvedSource],
        now: i64,
    ) -> i64 {
        if let Some(time) = recorded(bd.status.as_ref(), spec_digest, sources, created(bd)) {
            return time;
        }
        let key = inputs_key(spec_digest, sources);
        let uid = bd.metadata.uid.clone().unwrap_or_default();
        let mut chosen = self.chosen.lock().unwrap_or_else(|e| e.into_inner());
        match chosen.get(&uid) {
            Some((kept, time)) if *kept == key => *time,
            _ => {
                chosen.insert(uid, (key, now));
                now
            }
        }
    }

    /// [`RenderTimes::choose`] with the current time.
    pub fn clock_for(
        &self,
        bd: &BundleDeployment,
        spec_digest: &str,
        sources: &[ResolvedSource],
    ) -> i64 {
        self.choose(bd, spec_digest, sources, current())
    }

    /// Forgets the time chosen for `uid` (it is being deleted).
    pub fn forget(&self, uid: &str) {
        self.chosen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
    }
}

/// The inputs as one text: the spec digest and each source's kind and immutable ref.
fn inputs_key(spec_digest: &str, sources: &[ResolvedSource]) -> String {
    let mut key = spec_digest.to_string();
    for s in sources {
        key.push_str(&format!("\n{:?} {}", s.kind, s.resolved));
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{RevisionPhase, RevisionStatus, SourceKind};

    fn source(resolved: &str) -> ResolvedSource {
        ResolvedSource {
            kind: SourceKind::Git,
            reference: "main".into(),
            resolved: resolved.into(),
            version: None,
            verified: None,
        }
    }

    fn revision(number: i64, spec: &str, sources: &[&str], at: Option<i64>) -> RevisionStatus {
        RevisionStatus {
            number,
            generation: number,
            spec_digest: Some(spec.into()),
            digest: format!("sha256:{number}"),
            sources: sources.iter().map(|s| source(s)).collect(),
            values_from: vec![],
            phase: RevisionPhase::Superseded,
            applied_at: None,
            healthy_at: None,
            rendered_at: at.and_then(as_time),
            objects: 1,
            reason: None,
            message: None,
            hooks: vec![],
        }
    }

    fn bd(uid: &str, revisions: Vec<RevisionStatus>) -> BundleDeployment {
        let mut bd: BundleDeployment = serde_json::from_value(serde_json::json!({
            "apiVersion": "pallet.dev/v1alpha1",
            "kind": "BundleDeployment",
            "metadata": {"name": "web", "uid": uid, "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"sources": [], "format": "plain"}
        }))
        .expect("a BundleDeployment");
        bd.status = Some(BundleDeploymentStatus {
            revisions,
            ..Default::default()
        });
        bd
    }

    #[test]
    fn the_same_inputs_read_the_time_their_revision_recorded() {
        let status = BundleDeploymentStatus {
            revisions: vec![
                revision(3, "spec-b", &["c2"], Some(3_000)),
                revision(2, "spec-a", &["c2"], Some(2_000)),
                revision(1, "spec-a", &["c1"], None),
            ],
            ..Default::default()
        };
        let at = |spec, src| recorded(Some(&status), spec, &[source(src)], 42);
        assert_eq!(at("spec-a", "c2"), Some(2_000));
        assert_eq!(at("spec-b", "c2"), Some(3_000));
        // Recorded before revisions kept their time: the creation time it was rendered with.
        assert_eq!(at("spec-a", "c1"), Some(42));
        assert_eq!(at("spec-c", "c2"), None);
        assert_eq!(at("spec-a", "c3"), None);
        assert_eq!(recorded(None, "spec-a", &[source("c2")], 42), None);
    }

    #[test]
    fn new_inputs_keep_the_time_first_chosen_for_them_until_others_come() {
        let times = RenderTimes::default();
        let bd = bd("u1", vec![revision(1, "spec-a", &["c1"], Some(1_000))]);
        // Recorded inputs: the revision's time, whatever the clock says.
        assert_eq!(times.choose(&bd, "spec-a", &[source("c1")], 9_000), 1_000);
        // New inputs: now, and the same time at the next pass.
        assert_eq!(times.choose(&bd, "spec-a", &[source("c2")], 9_000), 9_000);
        assert_eq!(times.choose(&bd, "spec-a", &[source("c2")], 9_500), 9_000);
        // Other new inputs: the clock again.
        assert_eq!(times.choose(&bd, "spec-b", &[source("c2")], 9_600), 9_600);
        times.forget("u1");
        assert_eq!(times.choose(&bd, "spec-b", &[source("c2")], 9_700), 9_700);
    }
}
